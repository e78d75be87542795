// Stage "pair sums", the warp path (CPU twin: pair_sums in src/cpu/chunk_stages.h, whose walk,
// walk_earlier_writes, takes a walker's terms a run at a time as here): one warp does one
// unit, its lanes 32 at a time. Each lane
// finds its walker's runs in O(1) (pair_common.cuh), a warp scan lays the unit's run-terms
// (a walker with one run) out in canonical order, and the warp takes them in windows of 32,
// one a lane: each lane finds the walker its run-term belongs to by a binary search over the
// scan, takes the exp of the run (the exps in parallel), and adds the run's terms, nearest
// first, to its cell of the unit's double row in shared memory. A walker's runs have
// distinct cells, so the run-terms of one window that share a cell are of distinct walkers:
// they go in list order, ranked by __match_any_sync, the others at once. The work is linear
// in the terms: a window takes one step per walker it holds at most. In the spread kernel
// (Dense), 32 walkers whose terms reach every cell of the row (the worst chunks) go to
// pair_dense.cuh instead, lanes by cell; and a unit may be summed in parts, a cell range a
// warp, each part adding the terms of its cells only (SpreadHeader::parts).
#ifndef SDM_P1_KERNELS_PAIR_WINDOWS_CUH
#define SDM_P1_KERNELS_PAIR_WINDOWS_CUH

#include "../common/pair_common.cuh"
#include "../common/warp_scan.cuh"
#include "pair_dense.cuh"

namespace sdm_p1 {
namespace cuda {

// One run-term: its run's first write-row index and length, its cell, the run's exp.
struct RunTerm {
    uint32_t j0, len;
    int cell;
    double e;
};

// Adds the terms of run-term t of walker value v to `row`, nearest (last) first.
__device__ __forceinline__ void add_run(const float* run_value, float v, const RunTerm& t, double* row) {
    double sum = row[t.cell];
#pragma unroll 8
    for (uint32_t k = t.len; k > 0; --k) sum = pair_term_add(sum, pair_term(v, run_value[t.j0 + k - 1u], t.e));
    row[t.cell] = sum;
}

// Unit (i, qk) by the calling warp, the terms of the cells in `part` added to `row` (the
// unit's C cells). Repeats: the chunk has writes repeating slots of their tokens (runs
// listed); without, each run is one write, and the path is compiled for that. Spread: the
// spread kernel's, with the dense batches and the parts compiled in (the main kernel's warp
// path, whose part is the whole row, went 1 % slower on S4 and S7 with the dense test).
template <bool Repeats, bool Spread, class Arrays>
__device__ __forceinline__ void warp_unit_windows(const KernelArgs& a, const Arrays& arr,
                                                  const ChunkRuns<typename Arrays::Count>& runs, int i, bool qk,
                                                  CellRange part, double* row) {
    const int lanes = qk ? a.s.R : a.s.W;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const uint32_t earlier = (1u << lane) - 1u;
    const bool wide = arr.log.shift < 0;
    for (int l0 = 0; l0 < lanes; l0 += 32) {
        Walker w{};
        w.i = i;
        w.qk = qk;
        uint32_t m = 0;
        if (l0 + lane < lanes && is_walker(arr.payload[arr.position[unit_entry(a, i, qk, l0 + lane)]])) {
            w = unit_walker(a, arr, i, qk, l0 + lane);
            set_walker_runs(arr, runs, w);
            m = w.hi - w.lo;
        }
        // 32 full walkers (or none with terms) reach every cell: lanes take cells instead.
        if (Spread && __all_sync(kFullWarp, dense_walker(i, qk, m))) {
            const uint32_t walkers = __ballot_sync(kFullWarp, m != 0u);
            if (walkers != 0u) dense_batch<Repeats>(a, arr, runs, w, walkers, part, row);
            continue;
        }
        const uint32_t incl = warp_inclusive_sum(m, lane);   // my run-terms' place in the list
        const uint32_t total = __shfl_sync(kFullWarp, incl, 31);
        for (uint32_t w0 = 0; w0 < total; w0 += 32) {
            const uint32_t t = w0 + static_cast<uint32_t>(lane);
            // The lane whose walker has run-term t: the number of lanes whose run-terms end
            // at or before t (incl is nondecreasing; t < total keeps it below 32).
            int owner = 0;
#pragma unroll
            for (int b = 16; b != 0; b >>= 1) {
                if (__shfl_sync(kFullWarp, incl, owner + b - 1) <= t) owner += b;
            }
            const Walker o = shfl_walker(w, owner, wide);
            const uint32_t first = __shfl_sync(kFullWarp, incl - m, owner);
            bool has = t < total;
            RunTerm rt{0u, 0u, 0, 0.0};
            WriteFacts f{0, 0.0f, Fix{0u, 0u}};   // of the run's first write
            if (has) {
                const uint32_t run = o.hi - 1u - (t - first);   // nearest first
                rt.j0 = Repeats ? runs.first(run) : run;
                rt.len = Repeats ? runs.first(run + 1u) - rt.j0 : 1u;
                f = write_facts(a, arr, rt.j0);
                rt.cell = f.cell;
                if (Spread) has = part.holds(rt.cell);
                if (has) rt.e = arr.log.exp_diff(o.lr, f.log);
            }
            const uint32_t key = has ? static_cast<uint32_t>(rt.cell) : 256u + static_cast<uint32_t>(lane);
            const uint32_t rank = __popc(__match_any_sync(kFullWarp, key) & earlier);
            const uint32_t steps = __reduce_max_sync(kFullWarp, rank);
            // A single write's term is known: one fused multiply-add.
            const PairTerm single = pair_term(o.v, f.value, rt.e);
            for (uint32_t s = 0; s <= steps; ++s) {
                if (has && rank == s) {
                    if (Repeats) {
                        add_run(runs.value, o.v, rt, row);
                    } else {
                        row[rt.cell] = pair_term_add(row[rt.cell], single);
                    }
                }
                __syncwarp();
            }
        }
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PAIR_WINDOWS_CUH
