// The per-entry outputs: the one function that decides every bit of the per-entry fields, sorted
// rows, records and tile indices.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_ENTRY_OUTPUTS_H
#define SDM_P1_CANON_ENTRY_OUTPUTS_H

#include "bit_layouts.h"
#include "divider.h"
#include "elements.h"
#include "exp.h"
#include "output_buffers.h"
#include "pair_terms.h"

namespace sdm_p1 {

// Per-entry outputs. Both backends find, for every sorted entry of a chunk, the facts below
// (by a sequential walk on the CPU, by block-wide scans on the GPU) and hand them to
// write_entry_outputs, which alone decides every bit of the per-entry fields, the sorted
// rows, the records and the tile indices.

// Constants of one chunk.
struct ChunkFacts {
    int64_t c;   // chunk index
    int C, W, R;
    int L;               // rec_tile
    int64_t id_base;     // first slot id of the chunk's stream
    bool bf16;           // value dtype
    const float* beta;   // [N, C] (kspa), or null when not requested
    Divider tile;        // make_divider(L)
};

// One entry at sorted position r.
struct EntryFacts {
    uint32_t r;
    uint32_t payload;         // its payload word, head bit set, LastK bit not
    uint32_t before, after;   // peers (valid entries of its kind) before / after it in its group
    // Of the group's inclusive log-cumsum at r (log) and the sum of its gates after r (rex),
    // each exact in fixed point: log and rex rounded to float32 (fix_to_f32), exp_fix(log),
    // exp_fix(log + rex) (write entries), exp_fix(rex) (write entries when krec is
    // requested; else unused).
    float log_f32, rex_f32;
    double exp_log, exp_total, exp_rex;
    float value;             // k_val / q_val (0 for padding)
    int64_t slot_key;        // slot id - id_base (valid entries)
    uint32_t row_index;      // its index in the write (K) or read (Q) row
    int32_t groups_before;   // K entries: valid groups started before it (see below)
};

// groups_before of a K entry: the valid slot groups whose first K entry lies before it in the
// sorted row (for a valid K entry that is not its group's first, its own group counts).

// Which of an entry's outputs write_entry_outputs writes: all, or one of the two kinds
// (a backend may write the kinds in different orders).
//   entry fields, indexed by entry (token and lane): cpe, log_k, rex, k_eff, the flags,
//     pos_k, dc_kpos; log_q, q_w, pos_q, the read flags. They read r, payload, before,
//     after, the log facts but exp_rex, value and groups_before.
//   row fields, indexed by the entry's place in the sorted write (K) or read (Q) row,
//     e.row_index: spay_k, krec, kspa, the K tile indices, dc_bpre; spay_q, qrec, qrec8,
//     the Q tile indices. They read r, payload, before, after, row_index, slot_key,
//     groups_before and, where the records or kspa are requested, the log facts and value.
enum class EntryOutputs { kAll, kEntryFields, kRowFields };

SDM_HD void write_entry_outputs(const OutputBuffers& out, const ChunkFacts& f, const EntryFacts& e,
                                EntryOutputs which = EntryOutputs::kAll) {
    const bool entry = which != EntryOutputs::kRowFields, row = which != EntryOutputs::kEntryFields;
    const uint32_t p = e.payload;
    const bool valid = !(p & kInvalid);
    const bool is_q = (p & kIsQ) != 0u;
    const int t = payload_token(p);
    const int lane = static_cast<int>(p & kLaneMask);
    const int32_t packed = pack_position(e.r, e.before, e.after, valid);
    const int32_t elem = sorted_element(p, e.before, e.after, valid);
    const bool first = (static_cast<uint32_t>(elem) & kSortedFirst) != 0u;
    const int32_t slot = valid ? static_cast<int32_t>(e.slot_key + f.id_base) : 0;
    const int64_t j = e.row_index;
    const double e_log = e.exp_log;
    if (!is_q) {
        const int nk = f.C * f.W, nwk = (nk + 31) / 32;
        const int64_t cw = f.c * nk;
        const int64_t o = cw + t * f.W + lane;
        float cpe_stored = 0.0f;   // cpe as stored (krec repeats it)
        if (entry) cpe_stored = store_value(out.cpe, f.bf16, o, to_f32(e.exp_total));
        const bool last = valid && e.after == 0u;
        if (entry) {
            out.log_k[o] = e.log_f32;
            out.rex[o] = e.rex_f32;
            store_value(out.k_eff, f.bf16, o, scaled_f32(e.value, e_log));
            if (out.is_last) {
                out.is_last[o] = last ? 1 : 0;
                out.is_only[o] = (last && e.before == 0u) ? 1 : 0;
            }
            if (out.pos_k) out.pos_k[o] = packed;
        }
        if (row && out.spay_k) out.spay_k[cw + j] = elem;
        if (row && out.krec) {
            if (!entry) cpe_stored = value_rounded(f.bf16, to_f32(e.exp_total));
            put_record4(out.krec, cw + j, elem, slot, scaled_f32(e.value, e.exp_rex), cpe_stored);
        }
        if (row && out.kspa) {
            out.kspa[cw + j] = valid ? neg_beta_scaled_f32(f.beta[f.c * f.C + t], e.value, e_log) : 0.0f;
        }
        if (row && (out.tiles_k || out.segb_k) && f.tile.mod(e.row_index) == 0u) {
            const int ntk = (nk + f.L - 1) / f.L;
            const int64_t tile = f.c * (ntk + 1) + static_cast<int64_t>(f.tile.div(e.row_index));
            if (out.tiles_k) out.tiles_k[tile] = tile_start(first, j, e.after, nk);
            if (out.segb_k) out.segb_k[tile] = e.groups_before;
        }
        if (entry && out.dc_kpos) out.dc_kpos[o] = (valid && e.before == 0u) ? e.groups_before : -1;
        if (row && out.dc_bpre && j % 32u == 0u) out.dc_bpre[f.c * (nwk + 1) + j / 32u] = e.groups_before;
    } else {
        const int nq = f.C * f.R;
        const int64_t cr = f.c * nq;
        const int64_t o = cr + t * f.R + lane;
        if (entry) out.log_q[o] = e.log_f32;
        const float qw = scaled_f32(e.value, e_log);
        if (entry) {
            store_value(out.q_w, f.bf16, o, qw);
            if (out.pos_q) out.pos_q[o] = packed;
            if (out.q_last) {
                const bool last = valid && e.after == 0u;
                out.q_last[o] = last ? 1 : 0;
                out.q_only[o] = (last && e.before == 0u) ? 1 : 0;
            }
        }
        if (row && out.spay_q) out.spay_q[cr + j] = elem;
        if (row && out.qrec) put_record4(out.qrec, cr + j, elem, slot, qw, 0.0f);
        if (row && out.qrec8) put_record2(out.qrec8, cr + j, slot, qw);
        if (row && out.tiles_q && f.tile.mod(e.row_index) == 0u) {
            const int ntq = (nq + f.L - 1) / f.L;
            out.tiles_q[f.c * (ntq + 1) + static_cast<int64_t>(f.tile.div(e.row_index))] =
                tile_start(first, j, e.after, nq);
        }
    }
}

// The log facts of entry e (EntryFacts) from its exact log and rex; e.exp_log is taken as
// given where exp_log_known (a backend may know it: a write with no earlier write in its
// group has its own gate as log). exp_rex only with_exp_rex (krec requested).
SDM_HD void set_log_facts(EntryFacts& e, Fix log, Fix rex, bool is_write, bool with_exp_rex, bool exp_log_known) {
    e.log_f32 = fix_to_f32(log);
    if (!exp_log_known) e.exp_log = exp_fix(log);
    if (!is_write) return;
    // cpe = exp(log + rex): the same argument as exp_log when rex is 0.
    e.rex_f32 = fix_to_f32(rex);
    e.exp_total = fix_is_zero(rex) ? e.exp_log : exp_fix(fix_add(log, rex));
    if (with_exp_rex) e.exp_rex = exp_fix(rex);
}

// The same from log and rex in the kernels' compact form with shift s (compact_to_f64): the
// same bits.
SDM_HD void set_log_facts_compact(EntryFacts& e, int64_t log, int64_t rex, int s, bool is_write, bool with_exp_rex,
                                  bool exp_log_known) {
    e.log_f32 = compact_to_f32(log, s);
    if (!exp_log_known) e.exp_log = exp_compact(log, s);
    if (!is_write) return;
    e.rex_f32 = compact_to_f32(rex, s);
    e.exp_total = rex == 0 ? e.exp_log : exp_compact(log + rex, s);
    if (with_exp_rex) e.exp_rex = exp_compact(rex, s);
}

// The last element of each tile index of a chunk, once its valid groups are counted.
SDM_HD void write_chunk_tails(const OutputBuffers& out, const ChunkFacts& f, int32_t valid_groups) {
    const int nk = f.C * f.W, nq = f.C * f.R;
    const int ntk = (nk + f.L - 1) / f.L, ntq = (nq + f.L - 1) / f.L, nwk = (nk + 31) / 32;
    if (out.tiles_k) out.tiles_k[f.c * (ntk + 1) + ntk] = nk;
    if (out.segb_k) out.segb_k[f.c * (ntk + 1) + ntk] = valid_groups;
    if (out.tiles_q) out.tiles_q[f.c * (ntq + 1) + ntq] = nq;
    if (out.dc_bpre) out.dc_bpre[f.c * (nwk + 1) + nwk] = valid_groups;
}

// One element of spay_rank: the write entries before 32-position block b of chunk c's sorted
// row, and the bit mask of the write entries in it.
SDM_HD void write_rank(const OutputBuffers& out, int64_t c, int blocks, int b, int32_t writes_before, uint32_t mask) {
    int32_t* w = out.spay_rank + 2 * (c * blocks + b);
    w[0] = writes_before;
    w[1] = static_cast<int32_t>(mask);
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_ENTRY_OUTPUTS_H
