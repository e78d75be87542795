// The CUDA backend's kernel: one thread block per chunk, from the ids to the last output,
// with the chunk's arrays on chip where they fit. The stages are those of the CPU backend
// (src/cpu/chunk.cpp), under the same names, each in its own header.
#include <cuda_runtime.h>

#include <algorithm>

#include "chunk_context.cuh"
#include "launch.h"
#include "stage_decode.cuh"
#include "stage_load.cuh"
#include "stage_pairs.cuh"
#include "stage_records.cuh"
#include "stage_scans.cuh"
#include "stage_sort.cuh"

namespace sdm_p1 {
namespace cuda {

namespace {

// The stage temporaries that need room of their own: the sort's and the pair sums'. (The
// scans' are small and static.) They share bytes with the arrays that are dead meanwhile
// where those are in shared memory (ArrayLayout::stage).
template <int Threads>
size_t stage_bytes() {
    const size_t sort = sizeof(SortTemp<Threads>), pairs = pair_temp_bytes(Threads);
    return align16(sort > pairs ? sort : pairs);
}

// Whether the chunk's counts and positions fit 16 bits (they run up to n = C * (W + R)). The
// layout and the kernel's Count type both follow this one rule.
bool narrow_counts(const KernelShape& s) { return s.C * (s.W + s.R) < 65536; }

// The layout of a chunk's arrays for blocks of `threads` (a full block per chunk, or a
// half-size one, two to an SM) with `smem_limit` bytes of shared memory a block.
ArrayLayout chunk_layout(const KernelShape& s, int threads, size_t smem_limit) {
    const int count_bytes = narrow_counts(s) ? 2 : 4;
    const size_t stage = threads == kMaxThreads ? stage_bytes<kMaxThreads>() : stage_bytes<kMaxThreads / 2>();
    return array_layout(s.C, s.W, s.R, s.gate_width, s.group_counts, count_bytes, stage, smem_limit);
}

union ScanTemp {
    ForwardScanTemp forward;
    BlockScanTemp<BackwardItem> backward;
    BlockScanTemp<uint32_t> pairs;
};

// One block per chunk (a persistent grid), Threads threads, counts and positions as Count;
// OnChip: the layout keeps the core arrays in shared memory (core_arrays_in_smem).
template <int Threads, typename Count, bool OnChip>
__global__ void __launch_bounds__(Threads, kMaxThreads / Threads)
    phase1_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
    __shared__ ChunkShared sh;
    __shared__ ScanTemp scan_temp;
    const KernelShape& s = a.s;
    char* const global = a.scratch != nullptr
                             ? a.scratch + static_cast<size_t>(blockIdx.x) * a.scratch_per_block
                             : nullptr;
    char* const stage = smem + a.layout.stage;
    const size_t stage_room = a.layout.stage_room;
    ChunkArrays<Count> arr = bind_arrays<Count, OnChip>(smem, global, a.layout);
    auto& sort_temp = *reinterpret_cast<SortTemp<Threads>*>(stage);
    // Room on chip for the merge rounds' searches, where a key buffer is in global scratch.
    const bool stage_keys = !(a.layout.log_low.in_smem && a.layout.log_high.in_smem) &&
                            stage_room >= 8 * sizeof(uint64_t) * a.layout.stride;
    const InterleavedKeys staged{stage_keys ? reinterpret_cast<uint64_t*>(stage) : nullptr, a.layout.stride};
    const int n = s.C * (s.W + s.R);
    for (int64_t c = blockIdx.x; c < s.N; c += gridDim.x) {
        const Chunk k{c, c >= s.N - s.P ? s.valid_last : s.C, n, (c % s.P) * s.stream_offset};
        if (threadIdx.x == 0) {
            sh.error_code = kNoError;
            sh.repeats = 0;
            sh.valid_groups = 0;
            sh.walkers = 0;
            sh.gate_lowest_bit = 128;
            sh.gate_bits = 0;
        }
        __syncthreads();
        load_and_check(a, k, arr, sh);
        prefetch_chunk(a, c + gridDim.x);
        __syncthreads();
        report_chunk_error(a, k, sh);
        arr.log.shift = log_shift(sh.gate_lowest_bit, sh.gate_bits, s.C);
        const InterleavedKeys sorted = sort_entries<Threads>(a, k, arr.keys, arr.keys_alt, staged, sort_temp);
        decode(a, k, sorted, arr);
        __syncthreads();
        scan_forward(a, k, arr, sh, scan_temp.forward);
        scan_backward(a, k, arr, sh, scan_temp.backward);
        write_records(a, k, arr, sh);
        pair_sums(a, k, arr, sh, stage, stage_room, scan_temp.pairs);
        if (threadIdx.x == 0 && sh.repeats != 0u) {
            atomicAdd(reinterpret_cast<unsigned long long*>(a.out.repeats),
                      static_cast<unsigned long long>(sh.repeats));
        }
        __syncthreads();
    }
}

using KernelFn = void (*)(KernelArgs);

// The half-size block always has its core arrays on chip (configure); 32-bit counts mean a
// chunk too large for shared memory.
KernelFn kernel_for(const LaunchConfig& c) {
    if (c.threads != kMaxThreads) return phase1_kernel<kMaxThreads / 2, uint16_t, true>;
    if (!c.narrow_counts) return phase1_kernel<kMaxThreads, uint32_t, false>;
    return c.on_chip ? phase1_kernel<kMaxThreads, uint16_t, true> : phase1_kernel<kMaxThreads, uint16_t, false>;
}

// The most dynamic shared memory a block of `kernel` may use with `blocks` blocks an SM,
// after setting the kernel's limit to the device's maximum.
cudaError_t smem_room(KernelFn kernel, int device, int blocks, size_t* room) {
    int optin = 0, per_sm = 0, reserved = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
    cudaFuncAttributes attr{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, kernel);
    if (e != cudaSuccess) return e;
    // Every plan on the device may then launch with any amount up to the device's limit.
    const size_t limit = static_cast<size_t>(optin) - attr.sharedSizeBytes;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit));
    if (e != cudaSuccess) return e;
    const size_t share = static_cast<size_t>(per_sm) / blocks - reserved - attr.sharedSizeBytes;
    *room = std::min(limit, share) / 16 * 16;
    return cudaSuccess;
}

}  // namespace

int configure(const KernelShape& s, int device, size_t output_bytes, LaunchConfig* config) {
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    LaunchConfig c{};
    c.narrow_counts = narrow_counts(s);
    // Sets c.threads and c.smem_limit for `blocks` blocks an SM of `threads`, and per_sm;
    // *fits: the core arrays are on chip and the device holds that many such blocks.
    int per_sm = 0;
    const auto size_for = [&](int threads, int blocks, bool* fits) {
        c.threads = threads;
        cudaError_t err = smem_room(kernel_for(c), device, blocks, &c.smem_limit);
        const ArrayLayout l = chunk_layout(s, threads, c.smem_limit);
        if (err == cudaSuccess) {
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(c), threads, l.smem_bytes);
        }
        *fits = core_arrays_in_smem(l) && per_sm >= blocks;
        return err;
    };
    // Two half-size blocks an SM run two chunks at once, each overlapping the other's
    // barriers and memory waits (measured: S1 1.05x, S4 1.08x faster than one full block),
    // where every SM gets two chunks and both blocks keep their core arrays on chip.
    bool half = false;
    if (c.narrow_counts && s.N >= 2 * static_cast<int64_t>(sms)) {
        c.on_chip = true;
        e = size_for(kMaxThreads / 2, 2, &half);
        if (e != cudaSuccess) return e;
    }
    if (!half) {
        bool on_chip;   // the full-size block runs whether or not its arrays fit on chip
        c.on_chip = false;
        e = size_for(kMaxThreads, 1, &on_chip);
        if (e != cudaSuccess) return e;
        if (on_chip && c.narrow_counts) {
            // The kernel that knows its core arrays are on chip, where its own limits (its
            // static shared memory) still hold them.
            const LaunchConfig generic = c;
            const int generic_per_sm = per_sm;
            c.on_chip = true;
            e = size_for(kMaxThreads, 1, &on_chip);
            if (e != cudaSuccess) return e;
            if (!on_chip) {
                c = generic;
                per_sm = generic_per_sm;
            }
        }
    }
    const ArrayLayout layout = chunk_layout(s, c.threads, c.smem_limit);
    c.smem_bytes = layout.smem_bytes;
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    int64_t grid = std::min<int64_t>(s.N, resident);
    if (layout.global_bytes != 0) {
        // Each resident block gets its slice of global scratch, which stays no larger than
        // the outputs.
        c.scratch_per_block = (layout.global_bytes + 255) / 256 * 256;
        grid = std::min<int64_t>(grid, std::max<int64_t>(1, output_bytes / c.scratch_per_block));
    }
    c.grid = static_cast<int>(grid);
    *config = c;
    return cudaSuccess;
}

int launch(const KernelShape& s, const LaunchConfig& config, const void* k_idx, const void* q_idx,
           const void* k_val, const void* q_val, const float* g, const float* beta,
           const OutputBuffers& out, void* scratch, DeviceStatus* status, uint64_t* chunk_value,
           void* stream) {
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(out.repeats, 0, sizeof(int64_t), st);
    if (e != cudaSuccess) return e;
    const int n = s.C * (s.W + s.R);
    KernelArgs a{};
    a.s = s;
    a.k_idx = k_idx;
    a.q_idx = q_idx;
    a.k_val = k_val;
    a.q_val = q_val;
    a.g = g;
    a.beta = beta;
    a.out = out;
    a.scratch = config.scratch_per_block != 0 ? static_cast<char*>(scratch) : nullptr;
    a.scratch_per_block = config.scratch_per_block;
    a.layout = chunk_layout(s, config.threads, config.smem_limit);
    a.entry_bits = std::max(1, bit_width(static_cast<uint64_t>(n - 1)));
    // Slots run to num_keys - 1; padding entries take the largest slot these bits hold
    // (stage "load"), which sorts them last all the same: a padding entry's index is above
    // every valid entry's. One bit less where num_keys is a power of two (S6: 32-bit keys).
    a.key_bits = a.entry_bits + bit_width(static_cast<uint64_t>(s.num_keys - 1));
    a.div = Dividers{make_divider(s.W), make_divider(s.R), make_divider(s.W + s.R),
                     make_divider(s.C), make_divider(s.gate_width), make_divider(s.rec_tile)};
    a.status = status;
    a.chunk_value = chunk_value;
    kernel_for(config)<<<config.grid, config.threads, config.smem_bytes, st>>>(a);
    return cudaGetLastError();
}

}  // namespace cuda
}  // namespace sdm_p1
