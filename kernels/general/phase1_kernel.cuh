// The CUDA backend's kernel: one thread block per chunk, from the ids to the last output,
// with the chunk's arrays on chip where they fit. CPU twin: compute_chunk in
// src/cpu/chunk.cpp, whose stages (src/cpu/chunk_stages.h) are these, under the same names,
// writing the same arrays (each stage here in its own header). It comes in two paths
// by the form of a chunk's log-cumsums (LogArray::shift): the main kernel computes the
// chunks of the compact form (all but chunks whose gates span more than about 57 bits) and
// lists the others, which a second launch of the wide-log kernel computes. Each then
// carries only its form's code: with both in one kernel the wide form's 128-bit paths cost
// the compact chunks registers and instruction-cache room (2-9 % of their time, measured).
// Plans with no field beyond the spec's default set (most plans) get a main kernel with no
// code for the other fields (ShippedFields), which also carries the match-ranked sort.
// The instantiations are listed in kernels/instantiations.txt, in four groups compiled in
// parallel: general (the main kernels, with and without ShippedFields), general_sorted_rows
// (the rows in sorted order), general_wide_log (the wide-log kernels) and spread (the main
// kernels of plans with spread slots, and the spread kernel); kernels/policy/ chooses one.
#ifndef SDM_P1_KERNELS_PHASE1_KERNEL_CUH
#define SDM_P1_KERNELS_PHASE1_KERNEL_CUH

#include <cuda_runtime.h>

#include "../common/chunk_context.cuh"
#include "../common/stage_decode.cuh"
#include "../common/stage_load.cuh"
#include "stage_pairs.cuh"
#include "stage_records.cuh"
#include "stage_scans.cuh"
#include "../common/stage_sort.cuh"

namespace sdm_p1 {
namespace cuda {

// Each translation unit has its own instantiations.
namespace {

union ScanTemp {
    ForwardScanTemp forward;
    BlockScanTemp<BackwardItem> backward;
    BlockScanTemp<uint32_t> pairs;
};

// One block per chunk (a persistent grid), Threads threads, counts and positions as Count;
// OnChip: the layout keeps the core arrays in shared memory (core_arrays_in_smem);
// SortedRows: the row fields in sorted order (stage "records", KernelShape::sorted_rows).
// WideLog: the wide-log kernel, which computes the chunks the main kernel listed in
// KernelArgs::wide_chunks; else the main kernel, over every chunk. ShippedFields: the plan
// requests no field beyond SDM_P1_DET_SHIPPED's set (KernelShape::shipped_fields), and the
// kernel carries no code for the others.
// Spread: the main kernel of a plan with spread slots (kernels/spread/), which hands the pair
// sums of chunks of many terms to the spread kernel.
template <int Threads, typename Count, bool OnChip, bool SortedRows, bool WideLog, bool ShippedFields,
          bool Spread = false>
__global__ void __launch_bounds__(Threads, kMaxThreads / Threads) phase1_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
    __shared__ ChunkShared sh;
    __shared__ ScanTemp scan_temp;
    const KernelShape& s = a.s;
    char* const global =
        a.scratch != nullptr ? a.scratch + static_cast<size_t>(blockIdx.x) * a.scratch_per_block : nullptr;
    char* const stage = smem + a.layout.stage;
    const size_t stage_room = a.layout.stage_room;
    ChunkArrays<Count> arr = bind_arrays<Count, OnChip>(smem, global, a.layout);
    if (ShippedFields) arr.firsts.base = nullptr;   // the group counts serve the tiles and dc fields alone
    auto& sort_temp = *reinterpret_cast<SortTemp<Threads>*>(stage);
    // Room on chip for the merge rounds' runs, where a key buffer is in global scratch.
    const bool stage_keys = !(a.layout.log_low.in_smem && a.layout.log_high.in_smem) &&
                            stage_room >= 8 * sizeof(uint64_t) * a.layout.stride;
    const InterleavedKeys staged{stage_keys ? reinterpret_cast<uint64_t*>(stage) : nullptr, a.layout.stride};
    const int n = s.C * (s.W + s.R);
    // The chunks the lean kernel left (plans with a lean kernel), read once it has ended.
    const unsigned long long* const general_list = WideLog ? nullptr : a.general_chunks;
#if __CUDA_ARCH__ >= 900
    // The wide-log kernel is launched as a programmatic dependent of the main kernel
    // (launch): it waits here for the main kernel's end and memory, its list and count.
    // The main kernel's blocks let it be launched at once; it starts only once every one of
    // them has done so (or exited), so its waiting blocks never hold room a main block needs.
    // Likewise the main kernel after a lean kernel (the wait is a no-op unless launched as a
    // programmatic dependent: stream order already waits).
    // The wide-log kernel lets the spread kernel (kernels/spread/) be launched likewise.
    if (WideLog || general_list != nullptr) asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // The wide-log kernel's chunks, the lean kernel's leftovers (plans with a lean kernel), or
    // every chunk.
    const unsigned long long* const list = WideLog ? a.wide_chunks : general_list;
    const int64_t chunks = WideLog           ? static_cast<int64_t>(wide_chunk_count(*a.status))
                           : list != nullptr ? static_cast<int64_t>(general_chunk_count(*a.status))
                                             : s.N;
    for (int64_t i = blockIdx.x; i < chunks; i += gridDim.x) {
        const int64_t c = list != nullptr ? static_cast<int64_t>(list[i]) : i;
        const Chunk k{c, valid_tokens(a, c), n, (c % s.P) * s.stream_offset};
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
        if (!WideLog) {
            const int64_t next = i + gridDim.x;
            prefetch_chunk(a, list == nullptr ? next : next < chunks ? static_cast<int64_t>(list[next]) : s.N);
        }
        __syncthreads();
        report_chunk_error(a, k, sh);   // the wide-log kernel reports the same again
        arr.log.shift = log_shift(sh.gate_lowest_bit, sh.gate_bits, s.C);
        if (!WideLog && arr.log.shift < 0) {
            if (threadIdx.x == 0) list_wide_chunk(a, c);
            __syncthreads();   // sh is reset for the next chunk
            continue;
        }
        const InterleavedKeys sorted =
            sort_entries<Threads, ShippedFields>(a, k, arr.keys, arr.keys_alt, staged, sort_temp);
        // The kernel's form (the wide-log kernel's chunks were listed for it): the compiler
        // drops the other form's code. After the sort: placed before its barriers, the
        // assumption went unused.
        __builtin_assume(WideLog ? arr.log.shift < 0 : arr.log.shift >= 0);
        decode<SortedRows>(a, k, sorted, arr);
        __syncthreads();
        scan_forward(a, k, arr, sh, scan_temp.forward);
        scan_backward(a, k, arr, sh, scan_temp.backward);
        if constexpr (ShippedFields) {
            write_records<SortedRows>(a, shipped_fields_of(a.out), k, arr, sh);
        } else {
            write_records<SortedRows>(a, a.out, k, arr, sh);
        }
        pair_sums<Threads, SortedRows, Spread>(a, k, arr, sh, stage, stage_room, scan_temp.pairs);
        if (threadIdx.x == 0 && sh.repeats != 0u) {
            atomicAdd(reinterpret_cast<unsigned long long*>(a.out.repeats),
                      static_cast<unsigned long long>(sh.repeats));
        }
        __syncthreads();
    }
}

}   // namespace

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PHASE1_KERNEL_CUH
