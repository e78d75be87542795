// The CPU backend's backward of one chunk (docs/backward.md; no kernel twin yet): its first
// stages are the forward's (chunk_stages.h), its own are below.
#include "chunk_backward.h"

#include <algorithm>

#include "chunk_stages.h"

namespace sdm_p1 {
namespace cpu {

size_t BackwardScratch::bytes(const Options& o) {
    const size_t n = static_cast<size_t>(o.n());
    return ChunkScratch::bytes(o) + 3 * align64(n * sizeof(double)) +
           align64(static_cast<size_t>(o.C) * o.W * sizeof(double)) + align64((n + 63) / 64 * sizeof(uint64_t));
}

void BackwardScratch::bind(void* base, const Options& o) {
    const size_t n = static_cast<size_t>(o.n());
    fwd.bind(base, o);
    char* p = static_cast<char*>(base) + ChunkScratch::bytes(o);
    e_log = take<double>(p, n);
    gbar = take<double>(p, n);
    rbar_before = take<double>(p, n);
    xbar = take<double>(p, static_cast<size_t>(o.C) * o.W);
    seen = take<uint64_t>(p, (n + 63) / 64);
}

namespace {

// Stage "payload check": the chunk's row must name each of its entries once, with the padding
// bit exactly on padding tokens' entries, padding last and a group head first.
PayloadError check_payload(const Chunk& k, const int32_t* row, uint64_t* seen) {
    const int W = k.o.W, R = k.o.R, WR = W + R;
    const int valid_entries = k.t_valid * WR;
    std::fill(seen, seen + (k.n + 63) / 64, uint64_t{0});
    for (int r = 0; r < k.n; ++r) {
        const uint32_t w = static_cast<uint32_t>(row[r]);
        PayloadError err{true, PayloadError::kNoEntry, r, w, k.t_valid};
        const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
        const bool is_q = (w & kIsQ) != 0u, padding = (w & kInvalid) != 0u;
        if (t >= k.o.C || lane >= (is_q ? R : W)) return err;
        if (padding != (t >= k.t_valid)) {
            err.problem = PayloadError::kPaddingBit;
            return err;
        }
        const int e = t * WR + (is_q ? W + lane : lane);
        const uint64_t bit = uint64_t{1} << (e % 64);
        if (seen[e / 64] & bit) {
            err.problem = PayloadError::kTwice;
            return err;
        }
        seen[e / 64] |= bit;
        if (padding && r < valid_entries) {
            err.problem = PayloadError::kPaddingFirst;
            return err;
        }
        if (r == 0 && !padding && !(w & kHead)) {
            err.problem = PayloadError::kNoHead;
            return err;
        }
    }
    return PayloadError{};
}

// Stage "payload check", with the ids given: the row (which check_payload passed) must be the
// sort of the chunk's keys, which load_and_check made from the ids (by entry: slot <<
// entry_bits | entry): each word's key above the previous word's, and each valid entry's head
// bit set exactly where its slot differs from the previous word's (or at r = 0). A payload of
// other ids, or of these ids in another order, is found here, in O(n).
PayloadError check_payload_order(const Chunk& k, const int32_t* row, const uint64_t* keys) {
    const int W = k.o.W, WR = W + k.o.R;
    const int valid_entries = k.t_valid * WR;
    uint64_t before = 0;
    for (int r = 0; r < k.n; ++r) {
        const uint32_t w = static_cast<uint32_t>(row[r]);
        const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
        const uint64_t key = keys[t * WR + ((w & kIsQ) ? W + lane : lane)];
        if (r > 0 && key <= before) return PayloadError{true, PayloadError::kOrder, r, w, k.t_valid};
        const bool starts = r == 0 || (key >> k.entry_bits) != (before >> k.entry_bits);
        if (r < valid_entries && ((w & kHead) != 0u) != starts) {
            return PayloadError{true, PayloadError::kGroupHead, r, w, k.t_valid};
        }
        before = key;
    }
    return PayloadError{};
}

// Stage "payload decode" (in place of the forward's sort and decode, and of load's values):
// the sorted row's payload words with the payload's group heads (every padding entry a head of
// its own, as the forward's), each entry's position and value (by entry, as load writes them).
// Bits the backward does not use are dropped.
void decode_payload(const Chunk& k, const InputRecord& in, const int32_t* row, const ChunkScratch& s) {
    const int W = k.o.W, WR = W + k.o.R;
    for (int r = 0; r < k.n; ++r) {
        const uint32_t w = static_cast<uint32_t>(row[r]);
        const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
        const bool is_q = (w & kIsQ) != 0u, valid = !(w & kInvalid);
        const int e = t * WR + (is_q ? W + lane : lane);
        s.payload[r] = payload_word(t, lane, is_q, valid) | ((w & kHead) || !valid ? kHead : 0u);
        s.position[e] = static_cast<uint32_t>(r);
        s.value[e] = input_value(k, in, t, lane, is_q);
    }
}

// Stage "pair sums", row side: rho of the entry at r, the forward's walk over the earlier
// writes of its group that pair with it, nearest first; delta is the upstream a (K entry) or
// qk (Q entry) cell of its token and the write's. Its exps are the forward's, kept for reuse
// as the forward keeps them (exps: by run within its token's row, by the run's token).
double row_sum(const Chunk& k, const UpstreamGrads& up, const ChunkScratch& s, const RowExps& exps, int r) {
    const uint32_t p = s.payload[r];
    const float* delta = (p & kIsQ) ? up.qk : up.a;
    const int i = payload_token(p);
    const int64_t cells = (k.c * k.o.C + i) * k.o.C;   // its token's row
    double acc = 0.0;
    walk_earlier_writes(
        s, r,
        [&](int tj, double e, uint32_t bottom, uint32_t top) {
            const float d = upstream_f32(delta, cells + tj);
            for (uint32_t x = top; x > bottom; --x) {
                acc = walk_term_add(acc, d, entry_value(k, s, s.payload[s.write_row[x - 1]]), e);
            }
        },
        [&](uint32_t top, int tj) { return exps.get(i, r, top, tj); });
    return acc;
}

// Stage "pair sums", column side: gamma of the K entry at r, over the later entries of its
// group, [r + 1, end), that pair with it (all but its own token's K entries), nearest first.
// Consecutive entries of one log-cumsum share their exp.
double column_sum(const Chunk& k, const UpstreamGrads& up, const ChunkScratch& s, int r, int end) {
    const int C = k.o.C, t = payload_token(s.payload[r]);
    const int64_t cells = k.c * C * C;
    double acc = 0.0, e = 1.0;
    Fix e_arg = fix_zero();
    for (int x = r + 1; x < end; ++x) {
        const uint32_t p = s.payload[x];
        const bool is_q = (p & kIsQ) != 0u;
        const int te = payload_token(p);
        if (!is_q && te == t) continue;   // its token's repeats of the slot: no pair
        const Fix d = fix_sub(s.log[x], s.log[r]);
        if (!fix_equal(d, e_arg)) {
            e = exp_fix(d);
            e_arg = d;
        }
        acc = walk_term_add(acc, upstream_f32(is_q ? up.qk : up.a, cells + te * C + t), entry_value(k, s, p), e);
    }
    return acc;
}

// Stages "combine" and "adjoint scans" of the group at sorted positions [h, end): in
// ascending order each entry's sums, its combine (writing its value's gradient), the prefix
// of rbar and the total's adjoint; then, descending, the suffix of gbar and each non-repeat
// K entry's gate adjoint.
void group_adjoints(const Chunk& k, const BackwardRecord& b, const BackwardScratch& bs, const RowExps& exps, int h,
                    int end) {
    const Options& o = k.o;
    const ChunkScratch& s = bs.fwd;
    const UpstreamGrads& up = b.up;
    const double e_total = exp_fix(fix_add(s.log[h], rex_at(s, h)));
    double total_adjoint = 0.0, rbar_sum = 0.0;
    for (int r = h; r < end; ++r) {
        const uint32_t p = s.payload[r];
        const int t = payload_token(p), lane = static_cast<int>(p & kLaneMask);
        const float v = entry_value(k, s, p);
        const double e_log = exp_fix(s.log[r]);
        const double rho = row_sum(k, up, s, exps, r);
        bs.e_log[r] = e_log;
        if (p & kIsQ) {
            const int64_t i = (k.c * o.C + t) * o.R + lane;
            const int64_t q_row = k.c * o.C * o.R + (r - static_cast<int64_t>(s.writes[r]));
            const QEntryUpstream u = q_entry_upstream(up, o.bf16, i, q_row);
            const QEntryAdjoints a = q_entry_adjoints(rho, v, e_log, u);
            if (b.grads.q_val != nullptr) store_grad(b.grads.q_val, o.grad_bf16, i, a.dv);
            bs.gbar[r] = a.gbar;
            continue;
        }
        const int64_t i = (k.c * o.C + t) * o.W + lane;
        const int64_t k_row = k.c * o.C * o.W + s.writes[r];
        const KEntryUpstream u = k_entry_upstream(up, o.bf16, i, k_row);
        const double coefficient = k_entry_coefficient(up, b.in.beta, k.c * o.C + t, k_row);
        const KEntryAdjoints a =
            k_entry_adjoints(rho, column_sum(k, up, s, r, end), v, e_log, exp_fix(rex_at(s, r)), coefficient, u);
        if (b.grads.k_val != nullptr) store_grad(b.grads.k_val, o.grad_bf16, i, a.dv);
        bs.gbar[r] = a.gbar;
        bs.rbar_before[r] = rbar_sum;
        rbar_sum = dadd(rbar_sum, a.rbar);
        total_adjoint = total_term_add(total_adjoint, a.cbar, e_total);
    }
    double suffix = 0.0;
    for (int r = end - 1; r >= h; --r) {
        suffix = dadd(suffix, bs.gbar[r]);
        const uint32_t p = s.payload[r];
        // Q entries and repeats add no gate.
        if ((p & kIsQ) || repeats_slot(p, r > 0 ? s.payload[r - 1] : 0u)) continue;
        bs.xbar[payload_token(p) * o.W + static_cast<int>(p & kLaneMask)] =
            gate_adjoint(suffix, bs.rbar_before[r], total_adjoint);
    }
}

// The valid entries' groups in sorted order (the valid entries come first).
void chunk_adjoints(const Chunk& k, const BackwardRecord& b, const BackwardScratch& bs) {
    const int valid_entries = k.t_valid * (k.o.W + k.o.R);
    const RowExps exps(bs.fwd, k.o.C, k.o.W);
    for (int h = 0; h < valid_entries;) {
        int end = h + 1;
        while (end < valid_entries && !(bs.fwd.payload[end] & kHead)) ++end;
        group_adjoints(k, b, bs, exps, h, end);
        h = end;
    }
}

// Stage "token sums": per token, lanes in increasing order, its gates' gradients (per write:
// each non-repeat lane's adjoint; per token: their sum) and beta's; padding tokens get +0.0
// in every gradient, values included.
void write_token_grads(const Chunk& k, const BackwardRecord& b, const BackwardScratch& bs) {
    const Options& o = k.o;
    const ChunkScratch& s = bs.fwd;
    const InputGradBuffers& out = b.grads;
    const int W = o.W, R = o.R, WR = W + R, gw = o.gate_width;
    for (int t = 0; t < o.C; ++t) {
        const int64_t tok = k.c * o.C + t;
        if (t >= k.t_valid) {
            for (int l = 0; out.k_val != nullptr && l < W; ++l) store_grad(out.k_val, o.grad_bf16, tok * W + l, 0.0);
            for (int l = 0; out.q_val != nullptr && l < R; ++l) store_grad(out.q_val, o.grad_bf16, tok * R + l, 0.0);
            for (int l = 0; out.g != nullptr && l < gw; ++l) out.g[tok * gw + l] = 0.0f;
            if (out.beta != nullptr) out.beta[tok] = 0.0f;
            continue;
        }
        double token_gate = 0.0, beta = 0.0;
        for (int l = 0; l < W; ++l) {
            const int r = static_cast<int>(s.position[t * WR + l]);
            const bool repeat = repeats_slot(s.payload[r], r > 0 ? s.payload[r - 1] : 0u);
            const double x = bs.xbar[t * W + l];
            if (gw != 1 && out.g != nullptr) out.g[tok * W + l] = repeat ? 0.0f : to_f32(x);
            if (!repeat) token_gate = dadd(token_gate, x);
            if (b.up.kspa != nullptr) {
                const float dkspa = b.up.kspa[k.c * o.C * W + s.writes[r]];
                beta = beta_term_add(beta, dkspa, s.value[t * WR + l], bs.e_log[r]);
            }
        }
        if (gw == 1 && out.g != nullptr) out.g[tok] = to_f32(token_gate);
        if (out.beta != nullptr) out.beta[tok] = to_f32(beta);
    }
}

}   // namespace

BackwardCheck check_chunk_backward(const Options& o, const BackwardRecord& b, int64_t c, const BackwardScratch& s) {
    const Chunk k = chunk_of(o, b.in, c);
    BackwardCheck result{};
    if (b.payload == nullptr) {
        result.input = load_and_check(k, b.in, s.fwd);
        return result;
    }
    const int32_t* const row = b.payload + c * o.row();
    result.payload = check_payload(k, row, s.seen);
    if (result.payload.found) return result;
    if (b.in.k_idx == nullptr) {   // the ids not given: the payload is trusted beyond that
        result.input = load_gates(k, b.in, s.fwd);
        return result;
    }
    result.input = load_and_check(k, b.in, s.fwd);   // the ids and gates, as the forward checks them
    if (!result.input.found) result.payload = check_payload_order(k, row, s.fwd.keys);
    return result;
}

// The stages in order (the forward's names where they are the forward's stages).
__attribute__((flatten SDM_P1_FMA_CLONE)) void backward_chunk(const Options& o, const BackwardRecord& b, int64_t c,
                                                              const BackwardScratch& bs) {
    const Chunk k = chunk_of(o, b.in, c);
    const ChunkScratch& s = bs.fwd;
    if (b.payload != nullptr) {
        load_gates(k, b.in, s);
        decode_payload(k, b.in, b.payload + c * o.row(), s);
    } else {
        load_and_check(k, b.in, s);
        sort_entries(k, s);
        decode(k, s);
    }
    ChunkCounts counts{};
    scan_forward(k, s, counts);
    scan_backward(k, s, counts);
    list_writes(k, s);
    chunk_adjoints(k, b, bs);
    write_token_grads(k, b, bs);
}

}   // namespace cpu
}   // namespace sdm_p1
