// The lean kernel: one thread block a chunk (a persistent grid), from the ids to the last
// output, for chunks whose slots are mostly distinct (kernels/lean/README.md). Twins:
// phase1_kernel in kernels/phase1_kernel.cuh (the general kernel), compute_chunk in
// src/cpu/chunk.cpp. Its stages, each in a file of its own, are the CPU backend's in lean form; a chunk it cannot take (a
// bucket of more than kLeanBucketLimit keys, more grouped entries or pair terms than its
// room) it leaves to the main kernel (list_general_chunk), and one whose gates need the wide
// log form to the wide-log kernel, both launched after it.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_KERNEL_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_KERNEL_CUH

#include "lean_groups.cuh"
#include "lean_hot.cuh"
#include "lean_hot_sort.cuh"
#include "lean_load.cuh"
#include "lean_pairs.cuh"
#include "lean_rows.cuh"
#include "lean_sort.cuh"
#include "lean_writer.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Chunks a block leaves in a row to the main kernel before it leaves it all the rest.
constexpr int kLeanGiveUp = 2;

// The lean kernel leaves chunk c to the hot pass where the plan has one, else to the main
// kernel; the hot pass leaves it to the main kernel (one thread of the block).
template <bool Hot>
__device__ __forceinline__ void leave_to_next(const KernelArgs& a, int64_t c) {
    if (!Hot && a.lean_hot.threads != 0) {
        const unsigned long long left = atomicAdd(&a.status->hot_left, ~0ull);   // minus one
        a.hot_chunks[~left] = static_cast<unsigned long long>(c);
    } else {
        list_general_chunk(a, c);
    }
}

// After a barrier: whether chunk c is past the pass's limits (sh.overflow), then left to the
// next pass. Every thread gets the same answer, and a barrier lets sh be reset after.
template <bool Hot>
__device__ __forceinline__ bool leave_chunk(const KernelArgs& a, int64_t c, const LeanShared& sh, int* left_in_row) {
    if (!sh.overflow) return false;
    if (threadIdx.x == 0) leave_to_next<Hot>(a, c);
    ++*left_in_row;
    __syncthreads();
    return true;
}

// Id: int32_t or int64_t ids; Value: uint16_t (bfloat16) or float values; PerWrite: gates
// per write lane (else per token). The plan's form alone is compiled in. MaxThreads: the
// block size at most, kLeanSmallBlock (three blocks an SM: 80 registers a thread, which its
// 16 keys a thread need without spills) or kLeanMaxThreads (64 registers). Hot: the hot pass
// (kernels/lean/README.md), over the chunks the first pass left it, with the layout
// KernelArgs::lean_hot: buckets of any size up to kLeanHotBucketLimit, grouped entries up to
// its room, pair sums on chip without a term list (lean_hot.cuh); no repeats.
template <typename Id, typename Value, bool PerWrite, int MaxThreads, bool Hot = false>
__global__ void __launch_bounds__(MaxThreads, MaxThreads == kLeanSmallBlock ? 3 : 1)
    lean_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
    __shared__ LeanShared sh;
    const KernelShape& s = a.s;
    const LeanArrays arr = bind_lean_arrays(smem, Hot ? a.lean_hot : a.lean);
#if __CUDA_ARCH__ >= 900
    // The hot pass runs as a programmatic dependent of the first: its list and count are
    // complete once the first pass has ended.
    if (Hot) asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (Hot) clear_hot_rows(a, arr);
    // Chunks this block left in a row to the next pass for their slot groups: after
    // kLeanGiveUp of them (skewed or hot data), the first pass leaves it the rest without
    // loading them (the bits are the same either way; only the time differs).
    int left_in_row = 0;
    const int64_t chunks = Hot ? static_cast<int64_t>(~a.status->hot_left) : s.N;
    for (int64_t i = blockIdx.x; i < chunks; i += gridDim.x) {
        const int64_t c = Hot ? static_cast<int64_t>(a.hot_chunks[i]) : i;
        if (!Hot && left_in_row >= kLeanGiveUp) {
            if (threadIdx.x == 0) leave_to_next<Hot>(a, c);
            continue;
        }
        const Chunk k{c, valid_tokens(a, c), s.C * (s.W + s.R), (c % s.P) * s.stream_offset};
        begin_chunk<Hot>(a, arr, sh);
        // The gates first: their exponentials' registers are free again before the keys
        // take theirs.
        load_gates<PerWrite>(a, k, arr, sh);
        ThreadKeys keys;
        load_keys<Id>(a, k, sh, keys);
        if (Hot) {
            prefetch_chunk(a, i + gridDim.x < chunks ? static_cast<int64_t>(a.hot_chunks[i + gridDim.x]) : s.N);
        } else {
            prefetch_chunk(a, c + gridDim.x);
        }
        __syncthreads();
        report_chunk_error(a, k, sh.base);
        const int shift = log_shift(sh.base.gate_lowest_bit, sh.base.gate_bits, s.C);
        if (sh.base.error_code != kNoError || shift < 0) {   // bad data, or the wide form
            if (threadIdx.x == 0 && sh.base.error_code == kNoError) list_wide_chunk(a, c);
            __syncthreads();
            continue;
        }
        if (threadIdx.x == 0) sh.shift = shift;
        if (Hot) {
            hot_sort(a, k, arr, sh, keys);
            __syncthreads();
            if (leave_chunk<Hot>(a, c, sh, &left_in_row)) continue;   // grouped entries past the room
            zero_pair_rows(a, k);
        } else {
            count_buckets(a, arr, sh, keys);
            __syncthreads();
            if (leave_chunk<Hot>(a, c, sh, &left_in_row)) continue;
            zero_pair_rows(a, k);   // not before: a chunk left to the next pass gets its rows there
            scan_buckets(arr, sh, a.lean.sized_room);
            __syncthreads();
            if (leave_chunk<Hot>(a, c, sh, &left_in_row)) continue;
            scatter_keys(a, arr, keys);
            __syncthreads();
            order_buckets(a, arr, sh);
            __syncthreads();
        }
        sum_groups<PerWrite, Hot>(a, k, arr, sh);
        __syncthreads();
        if (Hot) clear_big_groups(arr, sh);   // the rows they lay in
        if (!Hot && threadIdx.x < 32) place_units(a, arr, sh);
        mark_writes(k, arr);
        __syncthreads();
        // grouped entries or pair terms past the room, or (the hot pass) repeats
        if (leave_chunk<Hot>(a, c, sh, &left_in_row)) continue;
        left_in_row = 0;
        if (threadIdx.x < 32) count_writes(k, arr);
        grouped_records<Value, Hot>(a, k, arr, sh);
        __syncthreads();
        if (Hot) {
            hot_pair_cells<Value>(a, k, arr, sh.shift);
        } else {
            pair_cells(a, k, arr);
        }
        write_rows<Hot>(a, k, arr);
        write_entries<Value, PerWrite>(a, k, arr);
        if (threadIdx.x == 0 && sh.base.repeats != 0u) {
            atomicAdd(reinterpret_cast<unsigned long long*>(a.out.repeats),
                      static_cast<unsigned long long>(sh.base.repeats));
        }
        __syncthreads();
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_KERNEL_CUH
