// Lean stage "records" (the twin of the general kernel's row pass, write_rows in
// kernels/general/stage_records.cuh, and of the row fields of the CPU's write_records in
// src/cpu/chunk_stages.h): the row fields past the spay rows, for the plans that request them
// (a trainer's: krec, kspa, qrec, qrec8, the tile indices, dc_kpos and dc_bpre), a thread an
// entry in entry order: its value, id and gate load beside its neighbours' and its record
// lands at its row index (a 16-byte store each). In sorted order the loads scattered, two a
// record: S1 with det_fields 952 took that form's lean kernel 1.94 ms against 1.11 ms with the
// default fields (ncu, H100, session 25). An entry alone in its group is served from its value
// and its token's gate, as stage "entries" serves it (log = the gate, rex = 0: its krec value
// is the value itself, scaled_f32(v, 1.0)); a grouped entry reads what stage "groups" kept
// (rcpe, rscaled) and takes its krec and kspa exponentials from its compact log and its
// group's total (glog), so the records take no shared memory of their own. The bits are those
// of write_entry_outputs: the same functions of the same exact values. The policy gives
// plans asking for kspa and qrec together in the 256-thread form to the general kernel (every
// field on S1 3.07 against 2.21 ms, H100, stop 54; the qrec records' cost there is not yet
// profiled); the others' kspa words run here.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_RECORDS_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_RECORDS_CUH

#include "lean_rows.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Entries of 32-position block b (mask) before position r, with `before` of them in the
// blocks before b.
__device__ __forceinline__ uint32_t marked_before(const uint32_t* mask, const uint32_t* pre, uint32_t r) {
    return pre[r >> 5] + __popc(mask[r >> 5] & ((1u << (r & 31u)) - 1u));
}

// A write entry's record facts: its krec value word (k_val * exp(rex)), cpe as stored and
// kspa.
struct WriteRecord {
    float scaled, cpe, kspa;
};

// The log-cumsum at the end of the group of the grouped entry at sorted position r (grouped-list
// index g), in the compact form: the log of the group's last entry, whose index follows g by
// its distance in the row (a group's indices are consecutive; the next group starts at a head).
__device__ __forceinline__ int64_t group_total(const LeanArrays& arr, int n, uint32_t r, uint32_t g) {
    uint32_t end = r + 1u;
    while (end < static_cast<uint32_t>(n) && !(arr.pay[end] & kHead)) ++end;
    return arr.glog[g + (end - 1u - r)];
}

// The record facts of valid write entry y at sorted position r (with info word `info`); s: the
// compact logs' shift. A grouped entry's exponentials are taken again from its exact compact
// log and its group's total (stage "groups" kept them as floats only).
template <typename Value, bool PerWrite>
__device__ __forceinline__ WriteRecord write_record(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                                    const KeyEntry& y, uint32_t r, uint16_t info, int s) {
    const OutputBuffers& out = a.out;
    const float v = entry_value<Value>(a, k, y);
    const float beta = out.kspa ? a.beta[k.c * a.s.C + y.t] : 0.0f;
    WriteRecord w;
    if (info & kGrouped) {
        const uint32_t g = info & 0x7FFFu;
        const int64_t log = arr.glog[g];
        w.cpe = arr.rcpe[g];
        w.scaled = out.krec ? scaled_f32(v, exp_compact(group_total(arr, k.n, r, g) - log, s)) : 0.0f;
        w.kspa = out.kspa ? neg_beta_scaled_f32(beta, v, exp_compact(log, s)) : 0.0f;
        return w;
    }
    double gate_exp;
    if (PerWrite) {
        Fix f;
        gate_to_fix(a.g[(k.c * a.s.C + y.t) * a.s.W + y.lane], &f);   // checked in stage "load"
        gate_exp = exp_fix(f);
        w.cpe = to_f32(gate_exp);
    } else {
        gate_exp = arr.gate_exp[y.t];
        w.cpe = arr.gate_cpe[y.t];
    }
    w.scaled = scaled_f32(v, 1.0);   // exp(rex) with rex = 0
    w.kspa = out.kspa ? neg_beta_scaled_f32(beta, v, gate_exp) : 0.0f;
    return w;
}

// An entry's place in the sorted row: its position r and its peers of its kind before and
// after it (padding: r = e, none).
struct RowPlace {
    uint32_t r, before, after;
    uint16_t info;
};

__device__ __forceinline__ RowPlace row_place(const LeanArrays& arr, int e, bool valid) {
    RowPlace x{static_cast<uint32_t>(e), 0u, 0u, 0u};
    if (!valid) return x;
    x.info = arr.info[e];
    if (x.info & kGrouped) {
        const uint32_t pos = arr.rpos[x.info & 0x7FFFu];
        x.r = pos & kPosMask;
        x.after = packed_after(pos);
        x.before = packed_before(pos);
    } else {
        x.r = x.info;
    }
    return x;
}

// Write entry y (valid or padding): krec, kspa, the K tile indices, dc_kpos and dc_bpre at
// its K-row index.
template <typename Id, typename Value, bool PerWrite>
__device__ __forceinline__ void write_k_row(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                            const KeyEntry& y, bool valid, int shift) {
    const KernelShape& s = a.s;
    const OutputBuffers& out = a.out;
    const RowPlace x = row_place(arr, y.e, valid);
    const uint32_t j = marked_before(arr.kmask, arr.kpre, x.r);
    const int32_t elem = sorted_element(payload_word(y.t, y.lane, false, valid), x.before, x.after, valid);
    const int64_t nk = static_cast<int64_t>(s.C) * s.W, at = k.c * nk + j;
    if (out.krec || out.kspa) {
        WriteRecord w{scaled_f32(0.0f, 1.0), to_f32(1.0), 0.0f};   // padding: log 0, value 0
        int32_t slot = 0;
        if (valid) {
            w = write_record<Value, PerWrite>(a, k, arr, y, x.r, x.info, shift);
            slot = static_cast<int32_t>(static_cast<const Id*>(a.k_idx)[(k.c * s.C + y.t) * s.W + y.lane]);
        }
        if (out.krec) put_record4(out.krec, at, elem, slot, w.scaled, value_rounded(s.bf16, w.cpe));
        if (out.kspa) out.kspa[at] = w.kspa;
    }
    if (!out.tiles_k && !out.dc_kpos) return;   // no group counts asked
    const int32_t groups_before = static_cast<int32_t>(marked_before(arr.fmask, arr.fpre, x.r));
    if (out.tiles_k && a.div.tile.mod(j) == 0u) {
        const int64_t tile = k.c * ((nk + s.rec_tile - 1) / s.rec_tile + 1) + a.div.tile.div(j);
        out.tiles_k[tile] = tile_start((elem & kSortedFirst) != 0, j, x.after, nk);
        if (out.segb_k) out.segb_k[tile] = groups_before;
    }
    if (out.dc_kpos) out.dc_kpos[(k.c * s.C + y.t) * s.W + y.lane] = valid && x.before == 0u ? groups_before : -1;
    if (out.dc_bpre && j % 32u == 0u) out.dc_bpre[k.c * ((nk + 31) / 32 + 1) + j / 32u] = groups_before;
}

// Read entry y (valid or padding): qrec, qrec8 and the Q tile indices at its Q-row index.
template <typename Id, typename Value>
__device__ __forceinline__ void write_q_row(const KernelArgs& a, const Chunk& k, const LeanArrays& arr,
                                            const KeyEntry& y, bool valid) {
    const KernelShape& s = a.s;
    const OutputBuffers& out = a.out;
    const RowPlace x = row_place(arr, y.e, valid);
    const uint32_t j = x.r - marked_before(arr.kmask, arr.kpre, x.r);
    const int32_t elem = sorted_element(payload_word(y.t, y.lane, true, valid), x.before, x.after, valid);
    const int64_t nq = static_cast<int64_t>(s.C) * s.R, at = k.c * nq + j;
    if (out.qrec || out.qrec8) {
        float q_w = scaled_f32(0.0f, 1.0);   // padding: log 0, value 0
        int32_t slot = 0;
        if (valid) {
            q_w = (x.info & kGrouped) ? arr.rscaled[x.info & 0x7FFFu] : scaled_f32(entry_value<Value>(a, k, y), 1.0);
            slot = static_cast<int32_t>(static_cast<const Id*>(a.q_idx)[(k.c * s.C + y.t) * s.R + y.lane]);
        }
        if (out.qrec) put_record4(out.qrec, at, elem, slot, q_w, 0.0f);
        if (out.qrec8) put_record2(out.qrec8, at, slot, q_w);
    }
    if (out.tiles_q && a.div.tile.mod(j) == 0u) {
        out.tiles_q[k.c * ((nq + s.rec_tile - 1) / s.rec_tile + 1) + a.div.tile.div(j)] =
            tile_start((elem & kSortedFirst) != 0, j, x.after, nq);
    }
}

// Every entry's row fields, the write entries then the read entries, a thread an entry; shift:
// the compact logs' (LeanShared::shift).
template <typename Id, typename Value, bool PerWrite>
__device__ __forceinline__ void write_records(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, int shift) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R;
    for (int x = threadIdx.x; x < s.C * s.W; x += blockDim.x) {
        const int t = static_cast<int>(a.div.W.div(x)), lane = x - t * s.W;
        write_k_row<Id, Value, PerWrite>(a, k, arr, KeyEntry{t * WR + lane, t, lane, false}, t < k.t_valid, shift);
    }
    for (int x = threadIdx.x; x < s.C * s.R; x += blockDim.x) {
        const int t = static_cast<int>(a.div.R.div(x)), lane = x - t * s.R;
        write_q_row<Id, Value>(a, k, arr, KeyEntry{t * WR + s.W + lane, t, lane, true}, t < k.t_valid);
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_RECORDS_CUH
