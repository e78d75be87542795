// The lean kernel: one thread block a chunk (a persistent grid), from the ids to the last
// output, for chunks whose slots are mostly distinct (kernels/lean/README.md). Twins:
// phase1_kernel in kernels/general/phase1_kernel.cuh (the general kernel), compute_chunk in
// src/cpu/chunk.cpp. Its stages, each in a file of its own, are the CPU backend's in lean form; a chunk it cannot take (a
// bucket of more than kLeanBucketLimit keys, more grouped entries or pair terms than its
// room) it leaves to the main kernel (list_general_chunk), and one whose gates need the wide
// log form to the wide-log kernel, both launched after it.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_KERNEL_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_KERNEL_CUH

#include "lean_groups.cuh"
#include "lean_load.cuh"
#include "lean_pairs.cuh"
#include "lean_records.cuh"
#include "lean_rows.cuh"
#include "lean_sort.cuh"
#include "lean_writer.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Chunks a block leaves in a row to the main kernel before it leaves it all the rest.
constexpr int kLeanGiveUp = 2;

// After a barrier: whether chunk c is past the lean kernel's limits (sh.overflow), then left
// to the main kernel. Every thread gets the same answer, and a barrier lets sh be reset after.
__device__ __forceinline__ bool leave_chunk(const KernelArgs& a, int64_t c, const LeanShared& sh, int* left_in_row) {
    if (!sh.overflow) return false;
    if (threadIdx.x == 0) list_general_chunk(a, c);
    ++*left_in_row;
    __syncthreads();
    return true;
}

// Id: int32_t or int64_t ids; Value: uint16_t (bfloat16) or float values; PerWrite: gates
// per write lane (else per token). The plan's form alone is compiled in. MaxThreads: the
// block size at most, kLeanSmallBlock (three blocks an SM: 80 registers a thread, which its
// 16 keys a thread need without spills) or kLeanMaxThreads (64 registers). RowFields: the
// plan requests fields past the shipped set (LeanLayout::row_fields), written by stage
// "records"; the other plans' kernels carry none of its code (compiled in, unrun, it cost
// them 3-6 %: S1, S3, S5 on an H100). Vectors: ids loaded 16 bytes at a time and entries
// written four lanes at a time (plans whose W and R are multiples of 4, arrays 16-byte
// aligned), else one at a time; one width an instantiation, as the scalar copy compiled
// beside the vector one cost the vector kernels' instruction cache (docs/performance.md).
template <typename Id, typename Value, bool PerWrite, int MaxThreads, bool RowFields = false, bool Vectors = true>
__global__ void __launch_bounds__(MaxThreads, MaxThreads == kLeanSmallBlock ? 3 : 1)
    lean_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
    __shared__ LeanShared sh;
    const KernelShape& s = a.s;
    const LeanArrays arr = bind_lean_arrays(smem, a.lean);
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // Chunks this block left in a row to the main kernel for their slot groups: after
    // kLeanGiveUp of them (skewed or hot data), the block leaves it the rest without loading
    // them (the bits are the same either way; only the time differs).
    int left_in_row = 0;
    for (int64_t c = blockIdx.x; c < s.N; c += gridDim.x) {
        if (left_in_row >= kLeanGiveUp) {
            if (threadIdx.x == 0) list_general_chunk(a, c);
            continue;
        }
        const Chunk k{c, valid_tokens(a, c), s.C * (s.W + s.R), (c % s.P) * s.stream_offset};
        begin_chunk(a, arr, sh);
        // The gates first: their exponentials' registers are free again before the keys
        // take theirs.
        load_gates<PerWrite>(a, k, arr, sh);
        ThreadKeys keys;
        load_keys<Id, Vectors>(a, k, sh, keys);
        prefetch_chunk(a, c + gridDim.x);
        __syncthreads();
        if (sh.bad_ids) {   // bad ids: recorded from memory, so the keys are not live here
            record_bad_ids(a, k, sh);
            __syncthreads();
            report_chunk_error(a, k, sh.base);
            __syncthreads();
            continue;
        }
        report_chunk_error(a, k, sh.base);
        const int shift = log_shift(sh.base.gate_lowest_bit, sh.base.gate_bits, s.C);
        if (sh.base.error_code != kNoError || shift < 0) {   // bad data, or the wide form
            if (threadIdx.x == 0 && sh.base.error_code == kNoError) list_wide_chunk(a, c);
            __syncthreads();
            continue;
        }
        if (threadIdx.x == 0) sh.shift = shift;
        count_buckets(a, arr, sh, keys);
        __syncthreads();
        if (leave_chunk(a, c, sh, &left_in_row)) continue;
        zero_pair_rows(a, k);   // not before: a chunk left to the main kernel gets its rows there
        scan_buckets(arr, sh, a.lean.sized_room);
        __syncthreads();
        if (leave_chunk(a, c, sh, &left_in_row)) continue;
        scatter_keys(a, arr, keys);
        __syncthreads();
        order_buckets(a, arr, sh);
        __syncthreads();
        sum_groups<PerWrite>(a, k, arr, sh);
        __syncthreads();
        if (threadIdx.x < 32) place_units(a, arr, sh);
        mark_writes<RowFields>(a, k, arr);
        __syncthreads();
        if (leave_chunk(a, c, sh, &left_in_row)) continue;   // grouped entries or pair terms past the room
        left_in_row = 0;
        if (threadIdx.x < 32) count_writes<RowFields>(a, k, arr);
        grouped_records<Value>(a, k, arr, sh);
        __syncthreads();
        pair_cells(a, k, arr);
        write_rows(a, k, arr);
        write_entries<Value, PerWrite, Vectors>(a, k, arr);
        if constexpr (RowFields) write_records<Id, Value, PerWrite>(a, k, arr, sh.shift);
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
