// Lean stage "pairs" of the hot pass (the twin of lean_pairs.cuh for chunks of hot or many
// groups; of the CPU's pair_sums in src/cpu/chunk_stages.h): every cell summed on chip, with no
// term list and no limit on a unit's terms. A warp a unit (row i of a: the writes of token i;
// of qk: its reads) at a time; the warp keeps the row's C double sums in shared memory
// (hrows) and marks the cells that got a term (htouched).
//
// The canonical order of a cell's terms is its unit's walkers in lane order, each walker's
// terms nearest first. A walker's terms are the writes before it in its group (hwlist holds
// each group's writes in order; hwb, where the walker's group starts there and how many of
// them come before it). The hot pass takes no chunk with repeats (sum_groups leaves those to
// the general kernel), so a walker's terms lie in distinct cells and only walkers' order
// matters: the warp lists a batch of up to 32 walkers' terms in order (walker, then nearest
// first), takes 32 of them at a time, a lane each (its exp, its product), and adds them to
// their cells; lanes of one cell in the same 32 add in lane order, each after the lane before
// it (ordered_add). The sums are those of pair_term_add in that order from +0.0, as the CPU's.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_HOT_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_HOT_CUH

#include "lean_load.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Adds `term` (active lanes) to row[cell]: lanes of one cell in lane order, the lowest first
// from the row's sum so far, each later one from the sum of the lane before it; the last lane of
// each cell stores the sum and marks the cell.
__device__ __forceinline__ void ordered_add(double* row, uint32_t* touched, bool active, int cell, PairTerm term) {
    const uint32_t lane = threadIdx.x & 31u, below = (1u << lane) - 1u;
    const uint32_t same = __match_any_sync(kFullWarp, active ? cell : -1 - static_cast<int>(lane));
    const uint32_t lower = same & below;
    const int rank = __popc(lower);
    const int from = lower != 0u ? 31 - __clz(lower) : static_cast<int>(lane);   // the lane before, of this cell
    const int rounds = static_cast<int>(__reduce_max_sync(kFullWarp, static_cast<uint32_t>(rank)));
    double sum = active && rank == 0 ? row[cell] : 0.0;
    if (active && rank == 0) sum = pair_term_add(sum, term);
    for (int r = 1; r <= rounds; ++r) {
        const double before = __shfl_sync(kFullWarp, sum, from);
        if (active && rank == r) sum = pair_term_add(before, term);
    }
    if (active && (same & ~below & ~(1u << lane)) == 0u) {   // the cell's last lane in these 32
        row[cell] = sum;
        atomicOr(&touched[cell >> 5], 1u << (cell & 31));
    }
    __syncwarp();
}

// The terms of up to 32 walkers of unit (t, is_q), lanes l0 .. l0 + 31, into the warp's row.
template <typename Value>
__device__ __forceinline__ void walker_batch(const KernelArgs& a, const LeanArrays& arr, int t, bool is_q, int l0,
                                             double* row, uint32_t* touched, int s) {
    const uint32_t lane = threadIdx.x & 31u;
    const int lanes = is_q ? a.s.R : a.s.W, l = l0 + static_cast<int>(lane);
    uint32_t g = 0, count = 0;
    if (l < lanes) {
        const uint16_t info = arr.info[t * (a.s.W + a.s.R) + (is_q ? a.s.W : 0) + l];
        if (info & kGrouped) {
            g = info & 0x7FFFu;
            count = arr.hwb[g] >> 16;   // the writes before it in its group: its terms
        }
    }
    uint32_t incl = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const uint32_t lower = __shfl_up_sync(kFullWarp, incl, d);
        if (lane >= static_cast<uint32_t>(d)) incl += lower;
    }
    const uint32_t total = __shfl_sync(kFullWarp, incl, 31), first = incl - count;
    if (total == 0u) return;
    const int64_t log = count != 0u ? arr.glog[g] : 0;
    const float v = count != 0u ? arr.hval[g] : 0.0f;
    const uint32_t last = count != 0u ? (arr.hwb[g] & 0xFFFFu) + count - 1u : 0u;   // its nearest term in hwlist
    for (uint32_t base = 0; base < total; base += 32u) {
        const uint32_t x = base + lane;   // this lane's term in the batch's order
        // Its walker: the last lane whose first term is at or before x.
        int w = 0;
#pragma unroll
        for (int step = 16; step > 0; step >>= 1) {
            const uint32_t f = __shfl_sync(kFullWarp, first, w + step);
            if (f <= x) w += step;
        }
        const uint32_t w_first = __shfl_sync(kFullWarp, first, w), w_last = __shfl_sync(kFullWarp, last, w);
        const int64_t w_log = __shfl_sync(kFullWarp, log, w);
        const float w_v = __shfl_sync(kFullWarp, v, w);
        const bool active = x < total;
        int cell = 0;
        PairTerm term{0.0, 0.0};
        if (active) {
            const uint32_t f = arr.hwlist[w_last - (x - w_first)];   // nearest first
            cell = payload_token(arr.pay[arr.rpos[f] & kPosMask]);
            term = pair_term(w_v, arr.hval[f], exp_compact(w_log - arr.glog[f], s));
        }
        ordered_add(row, touched, active, cell, term);
    }
}

// Every unit's cells: a warp a unit, its walkers 32 at a time in lane order, then the cells
// with terms stored (the others stay as stage "load" zeroed them) and the row cleared.
template <typename Value>
__device__ __forceinline__ void hot_pair_cells(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, int s) {
    const int C = a.s.C, words = (C + 31) / 32, warp = static_cast<int>(threadIdx.x >> 5);
    const uint32_t lane = threadIdx.x & 31u;
    double* const row = arr.hrows + warp * C;
    uint32_t* const touched = arr.htouched + warp * words;
    for (int u = warp; u < 2 * k.t_valid; u += static_cast<int>(blockDim.x >> 5)) {
        const int t = u >> 1;
        const bool is_q = (u & 1) != 0;
        const int lanes = is_q ? a.s.R : a.s.W;
        for (int l0 = 0; l0 < lanes; l0 += 32) walker_batch<Value>(a, arr, t, is_q, l0, row, touched, s);
        float* const out = (is_q ? a.out.qk : a.out.a) + (k.c * C + t) * C;
        for (int c = static_cast<int>(lane); c < C; c += 32) {
            if (touched[c >> 5] >> (c & 31) & 1u) {
                out[c] = to_f32(row[c]);
                row[c] = 0.0;
            }
        }
        __syncwarp();
        if (static_cast<int>(lane) < words) touched[lane] = 0u;
        __syncwarp();
    }
}

// The list of large groups (stage "groups") cleared from the rows' bytes it took.
__device__ __forceinline__ void clear_big_groups(const LeanArrays& arr, const LeanShared& sh) {
    for (uint32_t x = threadIdx.x; x < sh.hbig; x += blockDim.x) arr.hrows[x] = 0.0;
}

// The warps' rows and marks cleared (once a kernel: hot_pair_cells leaves them so).
__device__ __forceinline__ void clear_hot_rows(const KernelArgs& a, const LeanArrays& arr) {
    const int C = a.s.C, warps = static_cast<int>(blockDim.x >> 5);
    for (int x = threadIdx.x; x < warps * C; x += blockDim.x) arr.hrows[x] = 0.0;
    for (int x = threadIdx.x; x < warps * ((C + 31) / 32); x += blockDim.x) arr.htouched[x] = 0u;
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_HOT_CUH
