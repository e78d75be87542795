// The backward's kernel and its host functions (backward_launch.h). One block computes one
// chunk at a time, in its own slice of the plan's workspace, looping over the chunks
// blockIdx.x, + gridDim.x, ...; the stages are the CPU backend's backward_chunk
// (src/cpu/chunk_backward.cpp), under the same names, one file each:
//   bwd_payload.cuh  payload check, gates, payload decode   (payload given)
//   bwd_sort.cuh     the forward's load and check, sort, decode   (payload NULL)
//   bwd_scans.cuh    scans: write counts, log-cumsums, repeats, rex
//   bwd_walks.cuh    pair sums: rho and gamma, a thread an entry
//   bwd_groups.cuh   combine and adjoint scans, a thread a group
//   bwd_tokens.cuh   token sums: dg, dbeta, padding tokens
// Every double sum has one writer and the CPU's order (docs/backward.md), so the bits are the
// CPU backend's; atomics touch integers only (the data check's first offender).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "bwd_context.cuh"
#include "bwd_groups.cuh"
#include "bwd_payload.cuh"
#include "bwd_scans.cuh"
#include "bwd_sort.cuh"
#include "bwd_tokens.cuh"
#include "bwd_walks.cuh"

namespace sdm_p1 {
namespace cuda {

namespace {

static_assert(sizeof(BackwardArgs) <= 4000, "the backward's arguments fit a kernel's parameter space");

// The stage temporaries in shared memory (the sort's only where the kernel sorts).
template <bool Sort>
union BackwardTemp {
    bwd::CountScan::TempStorage scan;
    typename std::conditional<Sort, SortTemp<kBackwardThreads>, char>::type sort;
};

// Sort: the payload is NULL and the kernel sorts each chunk again from its ids.
template <bool Sort>
__global__ void __launch_bounds__(kBackwardThreads) backward_kernel(const __grid_constant__ BackwardArgs b) {
    __shared__ ChunkShared sh;
    __shared__ bwd::BackwardShared bsh;
    __shared__ BackwardTemp<Sort> temp;
    const KernelArgs& a = b.k;
    const KernelShape& s = a.s;
    const bwd::Arrays arr = bwd::bind_arrays(b);
    const int n = s.C * (s.W + s.R);
    // After the lean backward (k.general_chunks set), the chunks it left: its end and memory are
    // waited for here (it launched this kernel as a programmatic dependent); else every chunk.
    const unsigned long long* const list = a.general_chunks;
#if __CUDA_ARCH__ >= 900
    if (list != nullptr) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int64_t chunks = list != nullptr ? static_cast<int64_t>(general_chunk_count(*a.status)) : s.N;
    for (int64_t i = blockIdx.x; i < chunks; i += gridDim.x) {
        const int64_t c = list != nullptr ? static_cast<int64_t>(list[i]) : i;
        const Chunk k{c, valid_tokens(a, c), n, (c % s.P) * s.stream_offset};
        if (threadIdx.x == 0) {
            sh.error_code = kNoError;
            sh.gate_lowest_bit = 128;
            sh.gate_bits = 0;
            bsh.payload_error = bwd::kNoPayloadError;
        }
        __syncthreads();
        // The data check: ids and gates (Sort), or the payload and the gates.
        if constexpr (Sort) {
            bwd::load_ids(a, k, arr, sh);
        } else {
            bwd::load_gates(a, k, arr, sh);
            bwd::check_payload(b, k, arr, bsh);
        }
        report_chunk_error(a, k, sh);
        const bool bad = sh.error_code != kNoError || bsh.payload_error != bwd::kNoPayloadError;
        if (!bad && b.compute) {
            if constexpr (Sort) {
                bwd::sort_and_decode(a, k, arr, temp.sort);
            } else {
                bwd::decode_payload(b, k, arr);
                __syncthreads();
            }
            bwd::scan_writes(k, arr, temp.scan);
            bwd::scan_groups(s, k, arr);
            bwd::pair_sums(b, k, arr);
            bwd::group_sums(b, k, arr);
            bwd::token_sums(b, k, arr);
        }
        __syncthreads();   // sh and bsh are reset for the next chunk
    }
}

// Arrays of a slice at multiples of 128 bytes.
size_t take(size_t& at, size_t bytes) {
    const size_t offset = at;
    at += (bytes + 127) / 128 * 128;
    return offset;
}

BackwardSlice slice_layout(const KernelShape& s) {
    const size_t n = static_cast<size_t>(s.C) * (s.W + s.R), nw = static_cast<size_t>(s.C) * s.W;
    const size_t keys = 8 * static_cast<size_t>(interleave_stride(static_cast<int>(n)));
    BackwardSlice l{};
    size_t at = 0;
    l.payload = take(at, 4 * n);
    l.value = take(at, 4 * n);
    l.position = take(at, 4 * n);
    l.log = take(at, sizeof(Fix) * n);
    l.rex = take(at, sizeof(Fix) * n);
    l.writes_before = take(at, 4 * n);
    l.own_writes = take(at, 4 * n);
    l.head = take(at, 4 * n);
    l.write_row = take(at, 4 * nw);
    l.gate = take(at, sizeof(Fix) * s.C * s.gate_width);
    l.rho = take(at, 8 * n);
    l.gamma = take(at, 8 * n);
    l.e_log = take(at, 8 * n);
    l.gbar = take(at, 8 * n);
    l.rbar_before = take(at, 8 * n);
    l.xbar = take(at, 8 * nw);
    l.keys = take(at, 8 * keys);
    l.keys_alt = take(at, 8 * keys);
    l.entry_value = take(at, 4 * n);
    l.walk_mask = take(at, 4 * static_cast<size_t>(s.C) * (mask_words(s.W) + mask_words(s.R)));
    l.bytes = (at + 255) / 256 * 256;
    return l;
}

}   // namespace

int backward_configure(const KernelShape& s, int device, size_t slice_budget, BackwardConfig* config) {
    int sms = 0, per_sm = 0, per_sm_sort = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, backward_kernel<false>, kBackwardThreads, 0);
    }
    if (e == cudaSuccess) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_sort, backward_kernel<true>, kBackwardThreads, 0);
    }
    if (e != cudaSuccess) return e;
    BackwardConfig c{};
    int major = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess) e = static_cast<cudaError_t>(lean_backward_configure(s, device, sms, &c.lean));
    if (e != cudaSuccess) return e;
    c.dependent_launch = major >= 9;
    c.layout = slice_layout(s);
    const int64_t affordable = std::max<int64_t>(1, static_cast<int64_t>(slice_budget / c.layout.bytes));
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    const int64_t grid = std::min<int64_t>(std::min<int64_t>(s.N, resident), affordable);
    c.grid = static_cast<int>(grid);
    c.grid_sort = static_cast<int>(std::min<int64_t>(grid, static_cast<int64_t>(sms) * std::max(per_sm_sort, 1)));
    *config = c;
    return cudaSuccess;
}

int backward_launch(const BackwardConfig& c, const BackwardArgs& b, void* stream) {
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    DeviceStatus* const status = b.k.status;
    cudaError_t e = cudaMemsetAsync(status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(&status->backward, 0, sizeof(status->backward), st);
    if (e != cudaSuccess) return e;
    if (b.payload == nullptr) {
        BackwardArgs all = b;
        all.k.general_chunks = nullptr;
        backward_kernel<true><<<c.grid_sort, kBackwardThreads, 0, st>>>(all);
        return cudaGetLastError();
    }
    if (c.lean.threads == 0 || b.k.general_chunks == nullptr) {
        BackwardArgs all = b;
        all.k.general_chunks = nullptr;
        backward_kernel<false><<<c.grid, kBackwardThreads, 0, st>>>(all);
        return cudaGetLastError();
    }
    // The lean backward, then the general backward on the chunks it left, launched while the
    // lean one runs (its blocks wait for it in griddepcontrol.wait).
    e = static_cast<cudaError_t>(lean_backward_launch(b, stream));
    if (e != cudaSuccess) return e;
    cudaLaunchAttribute after_previous{};
    after_previous.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    after_previous.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch{};
    launch.gridDim = dim3(static_cast<unsigned>(c.grid));
    launch.blockDim = dim3(static_cast<unsigned>(kBackwardThreads));
    launch.stream = st;
    launch.attrs = &after_previous;
    launch.numAttrs = c.dependent_launch ? 1 : 0;
    return cudaLaunchKernelEx(&launch, backward_kernel<false>, b);
}

}   // namespace cuda
}   // namespace sdm_p1
