// Stage "records" (CPU twin: write_records in src/cpu/chunk_stages.h; lean:
// kernels/lean/lean_writer.cuh and lean_rows.cuh): every per-entry output, the sorted rows,
// the records and the tile indices, through the shared write_entry_outputs; and the walker
// masks that stage "pair sums" reads. The facts of an entry come from the scans' arrays
// in O(1), so the writes run in the order of the fields' index: the per-entry fields in entry
// order (one pass over the write entries, one over the read entries: no divergence between
// the kinds, coalesced stores), the sorted payloads and the rank table in sorted order, and
// the row fields either with the entry fields (in entry order: scattered over the row) or,
// where the records or kspa are requested, in a pass of their own in sorted order.
#ifndef SDM_P1_KERNELS_STAGE_RECORDS_CUH
#define SDM_P1_KERNELS_STAGE_RECORDS_CUH

#include "../../canon/field_members.h"
#include "../common/chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// Write entries (valid or padding) at or before position r.
template <class Arrays>
__device__ __forceinline__ uint32_t writes_through(const Arrays& arr, uint32_t r) {
    return arr.writes[r] + ((arr.payload[r] & kIsQ) ? 0u : 1u);
}

// The facts of the entry at sorted position r with payload word p (kLastK clear), lane `lane`
// of token t (a read entry if is_q), that write_entry_outputs needs for `which` of the
// outputs `out`; its log facts and value only where `logs`. Its slot, where the records need
// it: for the row fields alone (write_rows) `row_slot`, read from the slot array by the
// caller, else from the ids.
template <class Arrays>
__device__ __forceinline__ EntryFacts facts_at(const KernelArgs& a, const OutputBuffers& out, const Chunk& k,
                                               const Arrays& arr, uint32_t r, uint32_t p, int t, int lane, bool is_q,
                                               uint32_t valid_groups, EntryOutputs which, bool logs,
                                               uint32_t row_slot) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R;
    const bool rows = which != EntryOutputs::kEntryFields;
    const bool valid = !(p & kInvalid);
    const uint32_t end = arr.end[r];
    // In a group every entry is valid: its write entries are its valid writes.
    const uint32_t writes_after = writes_through(arr, end) - writes_through(arr, r);
    EntryFacts e;
    e.r = r;
    e.payload = p;
    e.before = arr.before[r];
    e.after = !valid ? 0u : is_q ? (end - r) - writes_after : writes_after;
    if (logs) {
        // A valid write with no valid write before it in its group has its own gate as log.
        const bool own_gate = arr.gate_exp && valid && !is_q && e.before == 0u;
        if (own_gate) e.exp_log = arr.gate_exp[t];
        const bool with_exp_rex = rows && out.krec != nullptr;
        if (arr.log.shift >= 0) {
            const int64_t log = static_cast<int64_t>(arr.log.low[r]);
            const int64_t rex = static_cast<int64_t>(arr.log.low[end] - arr.log.low[r]);   // exact: |rex| < 2^63
            set_log_facts_compact(e, log, rex, arr.log.shift, !is_q, with_exp_rex, own_gate);
        } else {
            const Fix log = arr.log.get(r);
            set_log_facts(e, log, fix_sub(arr.log.get(end), log), !is_q, with_exp_rex, own_gate);
        }
        e.value = valid ? arr.value[t * WR + (is_q ? s.W : 0) + lane] : 0.0f;
    } else {
        e.log_f32 = e.rex_f32 = e.value = 0.0f;
        e.exp_log = e.exp_total = e.exp_rex = 1.0;
    }
    const int64_t tok = k.c * s.C + t;
    // The slot only goes into the records.
    const bool slot_needed = rows && (is_q ? (out.qrec || out.qrec8) : out.krec != nullptr);
    e.slot_key = 0;
    if (valid && slot_needed) {
        e.slot_key = which == EntryOutputs::kRowFields ? static_cast<int64_t>(row_slot)
                                                       : (is_q ? load_id(a.q_idx, s.idx64, tok * s.R + lane)
                                                               : load_id(a.k_idx, s.idx64, tok * s.W + lane)) -
                                                             k.id_base;
    }
    e.row_index = is_q ? r - arr.writes[r] : arr.writes[r];
    e.groups_before = (!is_q && arr.firsts) ? static_cast<int32_t>(valid_groups - arr.firsts[r]) : 0;
    return e;
}

// The facts of lane `lane` of token t (a read entry if is_q) for `which` of its outputs.
template <class Arrays>
__device__ __forceinline__ EntryFacts entry_facts(const KernelArgs& a, const OutputBuffers& out, const Chunk& k,
                                                  const Arrays& arr, int t, int lane, bool is_q, uint32_t valid_groups,
                                                  EntryOutputs which) {
    const uint32_t r = arr.position[t * (a.s.W + a.s.R) + (is_q ? a.s.W : 0) + lane];
    const uint32_t p = arr.payload[r] & ~kLastK;   // EntryFacts::payload has it clear
    return facts_at(a, out, k, arr, r, p, t, lane, is_q, valid_groups, which, true, 0u);
}

// The outputs of a plan whose fields are within SDM_P1_DET_SHIPPED's set (KernelShape::
// shipped_fields), with the others' pointers null as constants (canon/field_sets.h).
__device__ __forceinline__ OutputBuffers shipped_fields_of(const OutputBuffers& all) {
    OutputBuffers o = all;
    for_each_output(o, [](int f, auto& p) {
        if (!shipped_field(f)) p = nullptr;
    });
    return o;
}

// Marks the entry with payload p (lane `lane` of token t) in its unit's mask if it is a
// walker. Stage "pair sums" reads these masks.
template <class Arrays>
__device__ __forceinline__ void mark_walker(const KernelArgs& a, const Arrays& arr, int t, int lane, bool is_q,
                                            uint32_t p) {
    if (!is_walker(p)) return;
    const int word = walk_mask_base(a.s.W, a.s.R, t, is_q) + (lane >> 5);
    // One atomic per mask word and warp: the walkers of a warp mostly share a word.
    const uint32_t peers = __match_any_sync(__activemask(), word);
    const uint32_t bits = __reduce_or_sync(peers, 1u << (lane & 31));
    if (static_cast<int>(threadIdx.x & 31u) == __ffs(peers) - 1) atomicOr(&arr.walk_mask[word], bits);
}

// The sorted payloads (with kLastK: stage "scans" marked each group's last valid write),
// the row's padding, and per 32 positions the rank table. Four positions a thread (the row
// is a multiple of kRowAlign = 16 words), stored by one 16-byte store where the output is
// so aligned; eight threads hold a rank block and merge their bits by shuffles.
template <class Arrays>
__device__ __forceinline__ void write_sorted_payloads(const KernelArgs& a, const Chunk& k, const Arrays& arr) {
    static_assert(kRowAlign % 4 == 0, "rows of whole four-position groups");
    const int n = k.n;
    const int row = (n + kRowAlign - 1) / kRowAlign * kRowAlign;
    int32_t* const pay_out = a.out.payload + k.c * row;
    const bool aligned = (reinterpret_cast<uintptr_t>(pay_out) & 15u) == 0u;
    const int rank_blocks = (n + 31) / 32;
    const uint32_t lane = threadIdx.x & 31u;
    for (int base = 0; base < row; base += 4 * static_cast<int>(blockDim.x)) {
        const int r0 = base + 4 * static_cast<int>(threadIdx.x);
        uint32_t p[4], bits = 0;   // bits: the write entries among the four
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            p[i] = r0 + i < n ? arr.payload[r0 + i] : kTailPayload;
            if (r0 + i < n && !(p[i] & kIsQ)) bits |= 1u << i;
        }
        if (r0 < row && aligned) {
            *reinterpret_cast<int4*>(pay_out + r0) = make_int4(static_cast<int32_t>(p[0]), static_cast<int32_t>(p[1]),
                                                               static_cast<int32_t>(p[2]), static_cast<int32_t>(p[3]));
        } else if (r0 < row) {
#pragma unroll
            for (int i = 0; i < 4; ++i) pay_out[r0 + i] = static_cast<int32_t>(p[i]);
        }
        if (a.out.spay_rank) {
            uint32_t mask = bits << (4u * (lane & 7u));
#pragma unroll
            for (int d = 1; d < 8; d <<= 1) mask |= __shfl_xor_sync(0xFFFFFFFFu, mask, d);
            if ((lane & 7u) == 0u && r0 < n) write_rank(a.out, k.c, rank_blocks, r0 / 32, arr.writes[r0], mask);
        }
    }
}

// The row fields of every sorted position, in sorted order: a warp's stores to a row are
// then mostly contiguous (in entry order they scatter over the row).
template <class Arrays>
__device__ __forceinline__ void write_rows(const KernelArgs& a, const Chunk& k, const Arrays& arr, const ChunkFacts& f,
                                           uint32_t valid_groups) {
    // Of the row fields, the records and kspa alone read the log facts and the value.
    const bool k_logs = a.out.krec || a.out.kspa, q_logs = a.out.qrec || a.out.qrec8;
    const uint32_t* const slots = slot_array(a);
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        // The slot array is in global scratch where the chunk fills shared memory: its load
        // goes first, to be waited on after the facts (measured: 20 % of the pass's stall
        // samples when loaded where used).
        const uint32_t slot = slots ? slots[r] : 0u;
        const uint32_t p = arr.payload[r] & ~kLastK;
        const bool is_q = (p & kIsQ) != 0u;
        const EntryFacts e =
            facts_at(a, a.out, k, arr, static_cast<uint32_t>(r), p, payload_token(p), static_cast<int>(p & kLaneMask),
                     is_q, valid_groups, EntryOutputs::kRowFields, is_q ? q_logs : k_logs, slot);
        write_entry_outputs(a.out, f, e, EntryOutputs::kRowFields);
    }
}

// SortedRows: the row fields in a pass of their own, in sorted order (write_rows), for plans
// that request the records or kspa (KernelShape::sorted_rows). A kernel of its own: compiled
// into the kernel of the other plans, the pass cost them registers and instruction-cache
// room (2-24 % slower).
// `out`: a.out, or for the shipped-fields kernels shipped_fields_of(a.out), with which the
// compiler drops the other fields' code (about 6 % of the kernel's instructions; S1 to S5
// 3-6 % faster on an H200: docs/performance.md, general kernel).
template <bool SortedRows, class Arrays>
__device__ __forceinline__ void write_records(const KernelArgs& a, const OutputBuffers& out, const Chunk& k,
                                              const Arrays& arr, const ChunkShared& sh) {
    const KernelShape& s = a.s;
    const ChunkFacts f{k.c, s.C, s.W, s.R, s.rec_tile, k.id_base, s.bf16, out.kspa ? a.beta : nullptr, a.div.tile};
    const EntryOutputs which = SortedRows ? EntryOutputs::kEntryFields : EntryOutputs::kAll;
    for (int x = threadIdx.x; x < s.C * s.W; x += blockDim.x) {
        const int t = a.div.W.div(x), lane = x - t * s.W;
        const EntryFacts e = entry_facts(a, out, k, arr, t, lane, false, sh.valid_groups, which);
        write_entry_outputs(out, f, e, which);
        mark_walker(a, arr, t, lane, false, e.payload);
    }
    for (int x = threadIdx.x; x < s.C * s.R; x += blockDim.x) {
        const int t = a.div.R.div(x), lane = x - t * s.R;
        const EntryFacts e = entry_facts(a, out, k, arr, t, lane, true, sh.valid_groups, which);
        write_entry_outputs(out, f, e, which);
        mark_walker(a, arr, t, lane, true, e.payload);
    }
    if (threadIdx.x == 0) write_chunk_tails(out, f, static_cast<int32_t>(sh.valid_groups));
    if (SortedRows) write_rows(a, k, arr, f, sh.valid_groups);
    write_sorted_payloads(a, k, arr);
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_RECORDS_CUH
