// Lean stage "groups" (the twin of the CPU's decode, scan_forward and scan_backward in
// src/cpu/chunk_stages.h, and of the general kernel's kernels/general/stage_scans.cuh and, for grouped
// entries, kernels/general/stage_records.cuh), in two lane-dense passes over
// the groups of several entries that stage "sort" listed (their grouped-list indices
// consecutive, in sorted order):
//  * sum_groups, a thread a listed group: its inclusive log-cumsum (a write repeating its
//    token's slot adds no gate), the peers before and after each entry, packed positions and
//    payload words, and each walker's pair terms counted for its unit (stage "pairs");
//  * grouped_records, a thread a grouped entry: the exact log facts through the same
//    canon/phase1_shared.h functions as the CPU backend (set_log_facts_compact), as the records the
//    entry writer reads (log, rex, cpe and the scaled value, as floats), and its pair terms.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_GROUPS_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_GROUPS_CUH

#include "lean_pairs.cuh"
#include "lean_sort.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// The gate entry x adds to its group's log-cumsum, in the compact form of shift s.
template <bool PerWrite>
__device__ __forceinline__ int64_t compact_gate(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                                const KeyEntry& x, int s) {
    if (!PerWrite) return static_cast<int64_t>(fix_shift_down(arr.gate_fix[x.t], s));
    Fix f;
    gate_to_fix(a.g[(k.c * a.s.C + x.t) * a.s.W + x.lane], &f);   // checked in stage "load"
    return static_cast<int64_t>(fix_shift_down(f, s));
}

// Every listed group: sums, peers, packed positions, payload words, walkers' terms counted.
template <bool PerWrite>
__device__ __forceinline__ void sum_groups(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, LeanShared& sh) {
    const int s = sh.shift;
    uint32_t repeats = 0;
    for (uint32_t i = threadIdx.x; i < sh.groups; i += blockDim.x) {
        const uint2 d = arr.glist[i];
        const uint32_t g0 = d.x & 0xFFFFu, m = d.x >> 16, first = d.y;
        // Forward: the log-cumsum and the peers before each entry (kept in rpos for now).
        int64_t run = 0;
        uint32_t kb = 0, qb = 0;
        int prev_t = -1;
        bool prev_k = false;
        for (uint32_t x = 0; x < m; ++x) {
            const KeyEntry y = key_entry(a, arr.pay[g0 + x]);
            if (!y.is_q) {
                if (prev_k && prev_t == y.t) {
                    ++repeats;
                } else {
                    run += compact_gate<PerWrite>(a, k, arr, y, s);
                }
            }
            arr.glog[first + x] = run;
            arr.rpos[first + x] = y.is_q ? qb : kb;
            kb += y.is_q ? 0u : 1u;
            qb += y.is_q ? 1u : 0u;
            prev_t = y.t;
            prev_k = !y.is_q;
        }
        // Then each entry's position and payload word, and its pair terms: the earlier
        // writes of its group, but for a write those of its own token (right before it).
        uint32_t writes = 0, own = 0;
        prev_t = -1;
        prev_k = false;
        for (uint32_t x = 0; x < m; ++x) {
            const uint32_t g = first + x;
            const KeyEntry y = key_entry(a, arr.pay[g0 + x]);
            const uint32_t before = arr.rpos[g], after = (y.is_q ? qb : kb) - before - 1u;
            arr.rpos[g] = static_cast<uint32_t>(pack_position(g0 + x, before, after, true));
            arr.pay[g0 + x] = payload_word(y.t, y.lane, y.is_q, true) | (x == 0 ? kHead : 0u) |
                              (!y.is_q && after == 0u ? kLastK : 0u) | before << kPayBeforeShift |
                              after << kPayAfterShift;
            arr.info[y.e] = static_cast<uint16_t>(kGrouped | g);
            arr.gtotal_lo[g] = static_cast<uint32_t>(static_cast<uint64_t>(run));
            arr.gtotal_hi[g] = static_cast<uint32_t>(static_cast<uint64_t>(run) >> 32);
            own = !y.is_q && prev_k && prev_t == y.t ? own + 1u : 0u;
            const uint32_t terms = writes - (y.is_q ? 0u : own);
            arr.gterms[g] = static_cast<uint8_t>(terms);   // < kLeanBucketLimit
            if (terms != 0u) {
                atomicOr(&arr.wmask[walk_mask_base(a.s.W, a.s.R, y.t, y.is_q) + (y.lane >> 5)], 1u << (y.lane & 31));
                atomicAdd(&arr.units[2 * y.t + (y.is_q ? 1 : 0)], terms);
            }
            writes += y.is_q ? 0u : 1u;
            prev_t = y.t;
            prev_k = !y.is_q;
        }
    }
    if (repeats != 0u) atomicAdd(&sh.base.repeats, repeats);
}

// Every grouped entry's records and pair terms (after place_units has placed the units).
template <typename Value>
__device__ __forceinline__ void grouped_records(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                                const LeanShared& sh) {
    const int s = sh.shift;
    for (uint32_t g = threadIdx.x; g < sh.grouped; g += blockDim.x) {
        const uint32_t r = arr.rpos[g] & kPosMask, p = arr.pay[r];
        const KeyEntry y = payload_entry(a, p);
        const int64_t log = arr.glog[g];
        const int64_t total = static_cast<int64_t>(static_cast<uint64_t>(arr.gtotal_hi[g]) << 32 | arr.gtotal_lo[g]);
        const float v = entry_value<Value>(a, k, y);
        EntryFacts f;
        set_log_facts_compact(f, log, total - log, s, !y.is_q, false, false);
        arr.rlog[g] = f.log_f32;
        arr.rscaled[g] = scaled_f32(v, f.exp_log);
        if (!y.is_q) {
            arr.rrex[g] = f.rex_f32;
            arr.rcpe[g] = to_f32(f.exp_total);
        }
        if (arr.gterms[g] != 0u) walker_terms<Value>(a, k, arr, y, g, r, v, log, s);
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_GROUPS_CUH
