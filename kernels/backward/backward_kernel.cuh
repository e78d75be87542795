// The general backward's kernel (backward_args.h has its arguments). One block computes one
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
// CPU backend's; atomics touch integers only (the data check's first offender). Instantiated
// by kernels/instantiations.txt (group backward).
#ifndef SDM_P1_KERNELS_BACKWARD_BACKWARD_KERNEL_CUH
#define SDM_P1_KERNELS_BACKWARD_BACKWARD_KERNEL_CUH

#include <cuda_runtime.h>

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

// Each translation unit has its own instantiations.
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
        // The data check: ids and gates (Sort), or the payload, the gates and where the ids are
        // given the ids and the payload's order against them (the CPU's order of checks:
        // check_chunk_backward).
        if constexpr (Sort) {
            bwd::load_ids(a, k, arr, sh);
        } else if (a.k_idx == nullptr) {
            bwd::load_gates(a, k, arr, sh);
            bwd::check_payload(b, k, arr, bsh);
        } else {
            bwd::load_ids(a, k, arr, sh);
            bwd::check_payload(b, k, arr, bsh);
            if (bsh.payload_error == bwd::kNoPayloadError && sh.error_code == kNoError) {
                bwd::check_payload_order(b, k, arr, bsh);
            }
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

}   // namespace

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BACKWARD_KERNEL_CUH
