// Lean stage "pairs" (the twin of the CPU's pair_sums in src/cpu/chunk_stages.h and the
// general kernel's stage "pair sums", kernels/general/stage_pairs.cuh): the cells of a and qk that have terms (stage "load" zeroed the rest). A unit is a
// row i of a (the writes of token i) or of qk (its reads); stage "groups" counted each
// walker's terms (the earlier writes of its group, a: of other tokens) and marked it in its
// unit's lane mask. place_units gives each unit its span of the term list; each walker then
// lists its terms (walker_terms, a thread a grouped entry: the exps lane-dense) at its place
// in the canonical order of pair_term_add (its unit's walkers in lane order, each one's terms
// nearest first), and one thread a unit stores each of its cells: the sum of the cell's
// terms in list order from +0.0 (unit_cells). A walk goes back through the walker's group,
// which lies at consecutive sorted positions and consecutive grouped-list indices.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_PAIRS_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_PAIRS_CUH

#include "lean_load.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// The units' terms to offsets (one warp); more terms than the room, or a unit with more
// than kLeanUnitTerms, send the chunk to the general kernel.
__device__ __forceinline__ void place_units(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh) {
    const int units = 2 * a.s.C;
    bool over = false;
    for (int u = static_cast<int>(threadIdx.x & 31u); u < units; u += 32) over |= arr.units[u] > kLeanUnitTerms;
    const uint32_t total = warp_exclusive_scan(arr.units, units);
    if ((threadIdx.x & 31u) == 0u) arr.units[units] = total;
    if (__any_sync(kFullWarp, over) || total > a.lean.term_capacity) {
        if ((threadIdx.x & 31u) == 0u) sh.overflow = 1u;
    }
}

// The terms of walker y (grouped-list index g, sorted position r, value v, compact log `log`)
// at its place in its unit's span: after the terms of the unit's walkers at lower lanes.
template <typename Value>
__device__ __forceinline__ void walker_terms(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                             const KeyEntry& y, uint32_t g, uint32_t r, float v, int64_t log, int s) {
    const KernelShape& sh = a.s;
    const int WR = sh.W + sh.R, base = y.t * WR + (y.is_q ? sh.W : 0);
    const uint32_t* const mask = arr.wmask + walk_mask_base(sh.W, sh.R, y.t, y.is_q);
    uint32_t at = arr.units[2 * y.t + (y.is_q ? 1 : 0)];
    for (int w = 0; w <= (y.lane >> 5); ++w) {
        uint32_t lower = mask[w];
        if (w == (y.lane >> 5)) lower &= (1u << (y.lane & 31)) - 1u;
        for (; lower != 0u; lower &= lower - 1u) {
            at += arr.gterms[arr.info[base + 32 * w + __ffs(lower) - 1] & 0x7FFFu];
        }
    }
    const Value* const k_vals = static_cast<const Value*>(a.k_val) + k.c * sh.C * sh.W;
    uint32_t q = r, x = g;
    while (!(arr.pay[q] & kHead)) {   // back to the group's head, nearest first
        --q;
        --x;
        const uint32_t p = arr.pay[q];
        if ((p & kIsQ) || (!y.is_q && payload_token(p) == y.t)) continue;
        const float vw = value_of(k_vals[payload_token(p) * sh.W + static_cast<int>(p & kLaneMask)]);
        arr.terms[at] = pair_term(v, vw, exp_compact(log - arr.glog[x], s));
        arr.cells[at] = static_cast<uint8_t>(payload_token(p));
        ++at;
    }
}

// Unit u's cells from its listed terms.
__device__ __forceinline__ void unit_cells(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, int u) {
    const int C = a.s.C;
    float* const row = ((u & 1) ? a.out.qk : a.out.a) + (k.c * C + (u >> 1)) * C;
    store_cell_sums(arr.terms, arr.cells, arr.units[u], arr.units[u + 1], row);
}

// Every unit with terms; unit u goes to lane u / warps of warp u % warps, so that the few
// units with terms spread over the warps.
__device__ __forceinline__ void pair_cells(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    const int warps = static_cast<int>(blockDim.x >> 5);
    const int me = static_cast<int>(threadIdx.x & 31u) * warps + static_cast<int>(threadIdx.x >> 5);
    for (int u = me; u < 2 * a.s.C; u += static_cast<int>(blockDim.x)) unit_cells(a, k, arr, u);
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_PAIRS_CUH
