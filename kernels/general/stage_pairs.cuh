// Stage "pair sums" (CPU twin: pair_sums in src/cpu/chunk_stages.h; lean:
// kernels/lean/lean_pairs.cuh): a and qk (pair_common.cuh says what a unit, a walker, its
// terms and the runs are). Two paths, each linear in the terms:
//  * pair_one_batch.cuh: a chunk with at most a walker or two a thread and few terms a unit
//    (the usual case with uniform slots): every unit in one batch, without rows;
//  * else the warp path (pair_windows.cuh): the stage lists the write row (the sorted
//    position of each write entry) and, where writes repeat slots of their tokens, its runs;
//    then a warp a unit, its run-terms in windows of 32, one a lane (hot and skewed slots, up
//    to a chunk on one slot); a chunk of many terms there hands its units to the spread
//    kernel instead (kernels/spread/), whose warps on every SM take them.
// Each cell has one writer, which adds its terms in the canonical order, so both paths give
// the CPU backend's bits.
#ifndef SDM_P1_KERNELS_STAGE_PAIRS_CUH
#define SDM_P1_KERNELS_STAGE_PAIRS_CUH

#include "../common/block_scan.cuh"
#include "../common/chunk_context.cuh"
#include "../common/pair_common.cuh"
#include "pair_one_batch.cuh"
#include "pair_windows.cuh"
#include "../spread/spread_export.cuh"

namespace sdm_p1 {
namespace cuda {

// The one-batch path pays while walkers are few a unit: past this many, the warps.
constexpr uint32_t kWarpPathWalkers = 16;

// A warp's room on the warp path: the unit's double row (C cells).
SDM_HD size_t warp_room_bytes(int C) { return align16(8 * static_cast<size_t>(C)); }

// The least room of the stage's temporaries (past ArrayLayout::pair_rows): the one-batch
// path's, which holds a warp's room at the largest C too.
SDM_HD size_t pair_temp_bytes() { return one_batch_room_bytes(); }
static_assert(128 * (sizeof(PairTerm) + 1) >= 8 * kMaxC, "a warp's room fits the least stage");

// The write row, and where writes repeat slots of their tokens its runs (ChunkRuns): a run
// starts at the first write of a group (no valid write before it there) and where the token
// changes; one block scan of the run starts numbers them. The runs' values are listed by
// write-row index too, so a run's terms read consecutive words (ArrayLayout::runs).
template <class Arrays>
__device__ __forceinline__ ChunkRuns<typename Arrays::Count> list_writes(const KernelArgs& a, const Chunk& k,
                                                                         const Arrays& arr, const ChunkShared& sh,
                                                                         BlockScanTemp<uint32_t>& scan) {
    using Count = typename Arrays::Count;
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        if (!(arr.payload[r] & kIsQ)) arr.write_row[arr.writes[r]] = static_cast<Count>(r);
    }
    __syncthreads();
    if (sh.repeats == 0u) return ChunkRuns<Count>{nullptr, nullptr, nullptr};
    __shared__ uint32_t run_count;
    const uint32_t nk = static_cast<uint32_t>(a.s.C * a.s.W);
    float* const run_value = runs_array<float>(a);
    Count* const run_id =
        reinterpret_cast<Count*>(reinterpret_cast<char*>(run_value) + align16(4 * static_cast<size_t>(nk)));
    Count* const run_start = run_id + nk;
    block_scan_begin(scan);
    for (uint32_t base = 0; base < nk; base += blockDim.x * kScanItems) {
        const uint32_t j0 = base + threadIdx.x * kScanItems;
        uint32_t item[kScanItems];
#pragma unroll
        for (int x = 0; x < kScanItems; ++x) {
            const uint32_t j = j0 + x;
            item[x] = j < nk && (j == 0u || write_token(arr, j) != write_token(arr, j - 1u) ||
                                 arr.before[arr.write_row[j]] == 0u)
                          ? 1u
                          : 0u;
        }
        bool starts[kScanItems];
#pragma unroll
        for (int x = 0; x < kScanItems; ++x) starts[x] = item[x] != 0u;
        block_scan_tile(item, scan, Sum());
#pragma unroll
        for (int x = 0; x < kScanItems; ++x) {
            const uint32_t j = j0 + x;
            if (j < nk) {
                run_value[j] = entry_value(a, arr, arr.payload[arr.write_row[j]]);
                run_id[j] = static_cast<Count>(item[x] - 1u);
                if (starts[x]) run_start[item[x] - 1u] = static_cast<Count>(j);
            }
        }
        if (threadIdx.x == blockDim.x - 1) run_count = item[kScanItems - 1];
        __syncthreads();   // scan is reused by the next tile
    }
    if (threadIdx.x == 0) run_start[run_count] = static_cast<Count>(nk);
    __syncthreads();
    return ChunkRuns<Count>{run_value, run_id, run_start};
}

// Unit u of chunk c (row u / 2 of a, u even, or of qk) by the calling warp: the cells of
// `part` summed in `row` (C doubles, zero before and after) and stored, the cells without
// terms as zeros. The spread kernel (kernels/spread/) calls it too (Spread), on a slot's copy
// of the arrays, a part of the row at a time where it splits the unit.
template <bool Spread, class Arrays>
__device__ __forceinline__ void warp_unit(const KernelArgs& a, int64_t c, const Arrays& arr,
                                          const ChunkRuns<typename Arrays::Count>& runs, uint32_t u, CellRange part,
                                          double* row) {
    const int C = a.s.C, lane = static_cast<int>(threadIdx.x & 31u);
    const int i = static_cast<int>(u >> 1);
    const bool qk = (u & 1u) != 0u;
    if (runs.id) {
        warp_unit_windows<true, Spread>(a, arr, runs, i, qk, part, row);
    } else {
        warp_unit_windows<false, Spread>(a, arr, runs, i, qk, part, row);
    }
    float* const out_row = (qk ? a.out.qk : a.out.a) + (c * C + i) * C;
    const int lo = Spread ? part.lo : 0, hi = Spread ? part.hi : C;   // the main kernel's: the row
    for (int j = lo + lane; j < hi; j += 32) {
        const bool kept = qk ? j <= i : j < i;
        out_row[j] = kept ? to_f32(row[j]) : 0.0f;
        row[j] = 0.0;
    }
    __syncwarp();
}

// Every unit by the warps, a unit at a time, as far as `room` bytes at base hold their rows.
template <class Arrays>
__device__ __forceinline__ void warp_units(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                           const ChunkRuns<typename Arrays::Count>& runs, char* base, size_t room) {
    __shared__ uint32_t next_unit;
    const int C = a.s.C;
    const uint32_t units = 2 * static_cast<uint32_t>(C);
    if (threadIdx.x == 0) next_unit = 0;
    __syncthreads();
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31u);
    if (static_cast<size_t>(warp) >= room / warp_room_bytes(C)) return;
    double* const row = reinterpret_cast<double*>(base + warp * warp_room_bytes(C));
    for (int j = lane; j < C; j += 32) row[j] = 0.0;
    __syncwarp();
    for (;;) {
        uint32_t u = 0;
        if (lane == 0) u = atomicAdd(&next_unit, 1u);
        u = __shfl_sync(kFullWarp, u, 0);
        if (u >= units) break;
        warp_unit<false>(a, k.c, arr, runs, u, CellRange{0, C}, row);
    }
}

// The stage, in the stage room (`stage_room` bytes at stage): from ArrayLayout::pair on for
// the one-batch path, from pair_rows on for the warp path.
// Spread: the main kernel of a plan with spread slots, which hands a chunk of many terms to
// the spread kernel where a slot is free (kernels/spread/spread_export.cuh).
template <int Threads, bool SortedRows, bool Spread, class Arrays>
__device__ __forceinline__ void pair_sums(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh,
                                          char* stage, size_t stage_room, BlockScanTemp<uint32_t>& scan) {
    const uint32_t units = 2 * static_cast<uint32_t>(a.s.C);
    const size_t pair = a.layout.pair, rows = a.layout.pair_rows;
    __syncthreads();   // stage "records" has marked the walkers and read end for the last time
    constexpr int walkers = one_batch_walkers<Threads, SortedRows>();
    if (sh.walkers <= walkers * blockDim.x && sh.walkers < kWarpPathWalkers * units &&
        one_batch_units<walkers>(a, k, arr, stage + pair, stage_room - pair, scan)) {
        return;
    }
    const ChunkRuns<typename Arrays::Count> runs = list_writes(a, k, arr, sh, scan);
    if (Spread && hand_over_chunk(a, k, arr, runs, sh)) return;
    warp_units(a, k, arr, runs, stage + rows, stage_room - rows);
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_PAIRS_CUH
