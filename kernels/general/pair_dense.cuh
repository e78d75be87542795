// Stage "pair sums", the warp path's dense batches (pair_windows.cuh calls them in the spread
// kernel, kernels/spread/): 32 walkers of
// a unit whose terms reach every cell of the unit's row, as in the worst chunks (every id on
// one slot; every read on one slot of a bank every token writes) and in the first rows of hot
// slots. A walker is full when its range holds a run of every token that can have a cell in
// its row: tokens 0 .. i - 1 in a (its own token's run is never a term there), 0 .. i in qk.
// The runs of a group are one a token, in token order, so a full walker's run of token j is
// the j-th of its range: no search, no window, no ranking. Lanes then own cells (lane j cells
// j, j + 32, ...), each keeping its cell's sum in a register while the batch's walkers go by in
// lane order, each one's terms nearest first: the canonical order of pair_term_add, cell by
// cell. A cell's exp is taken again only where its exact argument changes (the compact log
// difference, kept with the exp); where gates are per token, as in the worst chunks, a row's
// exps are taken once for all its walkers. A pass takes kDenseCells cells, the width of the
// parts the spread kernel splits a unit of the worst chunks into (its warps on every SM).
#ifndef SDM_P1_KERNELS_PAIR_DENSE_CUH
#define SDM_P1_KERNELS_PAIR_DENSE_CUH

#include "../common/pair_common.cuh"

namespace sdm_p1 {
namespace cuda {

// Cells a lane sums at once (its registers: a sum, an exp and its argument a cell).
constexpr int kDenseCellsPerLane = 1;

// The cells a warp's pass takes: the width of a part of a split unit (kernels/spread/).
constexpr int kDenseCells = 32 * kDenseCellsPerLane;

// The cells of row i that can have terms: i in a, i + 1 in qk (the diagonal).
__device__ __forceinline__ int row_cells(int i, bool qk) { return qk ? i + 1 : i; }

// Whether the lane's walker, with m runs in its range, leaves its batch dense: it has no terms,
// or a run of every token with a cell in its row.
__device__ __forceinline__ bool dense_walker(int i, bool qk, uint32_t m) {
    return m == 0u || m == static_cast<uint32_t>(row_cells(i, qk));
}

// A lane's cell in a pass: the run of its token in the walkers' group (its first write-row
// index and length) and the facts of the run's first write (one cell, log and exp a run).
struct DenseCell {
    uint32_t first, len;
    WriteFacts f;
};

// sum plus the terms v * value[j] * e of the run's values value[first .. first + len),
// nearest (last) first. value is 16-byte aligned (a slot's runs array), so the run is read
// 4 values a load from its last multiple of 4 down: a lane's loads are its own lines, and
// the warp's lanes read 32 runs at once.
__device__ __forceinline__ double dense_run(const float* value, uint32_t first, uint32_t len, float v, double e,
                                            double sum) {
    uint32_t k = len;   // the terms left: value[first .. first + k)
    for (; k != 0u && ((first + k) & 3u) != 0u; --k) sum = pair_term_add(sum, pair_term(v, value[first + k - 1u], e));
    for (; k >= 4u; k -= 4u) {
        const float4 q = *reinterpret_cast<const float4*>(value + first + k - 4u);
        sum = pair_term_add(sum, pair_term(v, q.w, e));
        sum = pair_term_add(sum, pair_term(v, q.z, e));
        sum = pair_term_add(sum, pair_term(v, q.y, e));
        sum = pair_term_add(sum, pair_term(v, q.x, e));
    }
    for (; k != 0u; --k) sum = pair_term_add(sum, pair_term(v, value[first + k - 1u], e));
    return sum;
}

// Adds the terms of the batch's walkers (the lanes in `walkers`, each w of its lane) to the
// cells of `part` in row (the unit's C double cells). Every walker in `walkers` is full
// (dense_walker).
template <bool Repeats, class Arrays>
__device__ __forceinline__ void dense_batch(const KernelArgs& a, const Arrays& arr,
                                            const ChunkRuns<typename Arrays::Count>& runs, const Walker& w,
                                            uint32_t walkers, CellRange part, double* row) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const int cells = min(row_cells(w.i, w.qk), part.hi);
    const bool compact = arr.log.shift >= 0;
    for (int j0 = part.lo; j0 < cells; j0 += kDenseCells) {
        double sum[kDenseCellsPerLane], e[kDenseCellsPerLane];
        int64_t arg[kDenseCellsPerLane];   // e's compact log difference (kept while `cached`)
        DenseCell cell[kDenseCellsPerLane];
        uint32_t cached = 0;    // bit b: e[b] is exp of arg[b]
        uint32_t group = ~0u;   // the first run of the group whose runs `cell` holds
#pragma unroll
        for (int b = 0; b < kDenseCellsPerLane; ++b) {
            const int j = j0 + 32 * b + lane;
            sum[b] = j < cells ? row[j] : 0.0;
            e[b] = 0.0;
            arg[b] = 0;
            cell[b] = DenseCell{0u, 0u, WriteFacts{0, 0.0f, Fix{0u, 0u}}};
        }
        for (uint32_t left = walkers; left != 0u; left &= left - 1u) {
            const int l = __ffs(left) - 1;
            const float v = __shfl_sync(kFullWarp, w.v, l);
            const uint32_t lo = __shfl_sync(kFullWarp, w.lo, l);
            Fix lr;
            lr.lo = static_cast<uint64_t>(__shfl_sync(kFullWarp, static_cast<uint32_t>(w.lr.lo), l)) |
                    static_cast<uint64_t>(__shfl_sync(kFullWarp, static_cast<uint32_t>(w.lr.lo >> 32), l)) << 32;
            lr.hi = 0u;
            if (!compact) {
                lr.hi = static_cast<uint64_t>(__shfl_sync(kFullWarp, static_cast<uint32_t>(w.lr.hi), l)) |
                        static_cast<uint64_t>(__shfl_sync(kFullWarp, static_cast<uint32_t>(w.lr.hi >> 32), l)) << 32;
            }
            if (lo != group) {   // the walkers of a unit are mostly of one group: runs read once
                group = lo;
#pragma unroll
                for (int b = 0; b < kDenseCellsPerLane; ++b) {
                    const int j = j0 + 32 * b + lane;
                    if (j >= cells) continue;
                    const uint32_t run = lo + static_cast<uint32_t>(j);   // token j's run
                    cell[b].first = Repeats ? runs.first(run) : run;
                    cell[b].len = Repeats ? runs.first(run + 1u) - cell[b].first : 1u;
                    cell[b].f = write_facts(a, arr, cell[b].first);
                }
            }
#pragma unroll
            for (int b = 0; b < kDenseCellsPerLane; ++b) {
                const int j = j0 + 32 * b + lane;
                if (j >= cells) continue;
                const int64_t d = static_cast<int64_t>(lr.lo - cell[b].f.log.lo);
                if (!compact || !(cached >> b & 1u) || arg[b] != d) {
                    e[b] = arr.log.exp_diff(lr, cell[b].f.log);
                    arg[b] = d;
                    cached = compact ? cached | 1u << b : 0u;
                }
                if (Repeats) {
                    sum[b] = dense_run(runs.value, cell[b].first, cell[b].len, v, e[b], sum[b]);
                } else {
                    sum[b] = pair_term_add(sum[b], pair_term(v, cell[b].f.value, e[b]));
                }
            }
        }
#pragma unroll
        for (int b = 0; b < kDenseCellsPerLane; ++b) {
            const int j = j0 + 32 * b + lane;
            if (j < cells) row[j] = sum[b];
        }
    }
    __syncwarp();
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PAIR_DENSE_CUH
