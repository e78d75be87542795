#include "chunk.h"

#include <algorithm>
#include <cstring>

namespace sdm_p1 {
namespace cpu {

namespace {

constexpr int kEntryBits = 17;   // entries of a chunk: < 2^17
constexpr uint64_t kEntryMask = (uint64_t{1} << kEntryBits) - 1u;
// Sort key of a padding entry: above every valid key (< 2^32), so padding sorts last.
constexpr uint64_t kPaddingKey = uint64_t{1} << 32;

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

template <typename T>
T* take(char*& p, size_t count) {
    T* r = reinterpret_cast<T*>(p);
    p += align64(count * sizeof(T));
    return r;
}

int64_t load_id(const void* ids, bool idx64, int64_t i) {
    return idx64 ? static_cast<const int64_t*>(ids)[i]
                 : static_cast<int64_t>(static_cast<const int32_t*>(ids)[i]);
}

float load_value(const void* vals, bool bf16, int64_t i) {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(vals)[i])
                : static_cast<const float*>(vals)[i];
}

// Stores a float32 result in the value dtype; returns the stored value widened to float.
float store_value(void* vals, bool bf16, int64_t i, float v) {
    if (bf16) {
        const uint16_t b = bf16_from_f32(v);
        static_cast<uint16_t*>(vals)[i] = b;
        return bf16_to_f32(b);
    }
    static_cast<float*>(vals)[i] = v;
    return v;
}

void put_record4(int32_t* rec, int64_t j, int32_t w0, int32_t w1, float w2, float w3) {
    int32_t* r = rec + 4 * j;
    r[0] = w0;
    r[1] = w1;
    r[2] = static_cast<int32_t>(f32_bits(w2));
    r[3] = static_cast<int32_t>(f32_bits(w3));
}

// Reads and checks the chunk's ids and gates; fills the sort keys and the fixed-point gates.
// Entry e = t * (W + R) + j is write lane j (j < W) or read lane j - W of token t.
InputError load_keys(const Options& o, const sdm_p1_inputs& in, int64_t chunk, int t_valid,
                     uint64_t* sort_keys, Fix* gates) {
    const int W = o.W, R = o.R, WR = W + R;
    const int64_t id_base = (chunk % o.P) * o.stream_offset;
    InputError err{};
    for (int t = 0; t < o.C; ++t) {
        const bool valid = t < t_valid;
        const int64_t tok = chunk * o.C + t;
        for (int j = 0; j < WR; ++j) {
            const uint64_t e = static_cast<uint64_t>(t * WR + j);
            if (!valid) {
                sort_keys[e] = kPaddingKey << kEntryBits | e;
                continue;
            }
            const bool is_q = j >= W;
            const int lane = is_q ? j - W : j;
            const int64_t id = is_q ? load_id(in.q_idx, o.idx64, tok * R + lane)
                                    : load_id(in.k_idx, o.idx64, tok * W + lane);
            // id - id_base only once id >= id_base: it cannot overflow then.
            if (id < id_base || id - id_base >= o.num_keys) {
                err = InputError{true, false, t, lane, is_q, id, 0.0f};
                return err;
            }
            sort_keys[e] = static_cast<uint64_t>(id - id_base) << kEntryBits | e;
        }
        if (!valid) continue;
        for (int lane = 0; lane < o.gate_width; ++lane) {
            const float g = in.g[tok * o.gate_width + lane];
            if (!gate_to_fix(g, &gates[t * o.gate_width + lane])) {
                err = InputError{true, true, t, lane, false, 0, g};
                return err;
            }
        }
    }
    return err;
}

}  // namespace

size_t ChunkScratch::bytes(const Options& o) {
    const size_t n = static_cast<size_t>(o.n());
    return align64(n * sizeof(uint64_t)) + align64(n * sizeof(uint32_t)) +
           2 * align64(n * sizeof(Fix)) + 3 * align64(n * sizeof(uint32_t)) +
           2 * align64(n * sizeof(int32_t)) + align64(n * sizeof(float)) +
           align64(static_cast<size_t>(o.C) * o.gate_width * sizeof(Fix)) +
           align64(2 * static_cast<size_t>(o.C) * sizeof(double));
}

void ChunkScratch::bind(void* base, const Options& o) {
    const size_t n = static_cast<size_t>(o.n());
    char* p = static_cast<char*>(base);
    sort_keys = take<uint64_t>(p, n);
    payload = take<uint32_t>(p, n);
    log = take<Fix>(p, n);
    rex = take<Fix>(p, n);
    k_before = take<uint32_t>(p, n);
    before = take<uint32_t>(p, n);
    after = take<uint32_t>(p, n);
    head = take<int32_t>(p, n);
    position = take<int32_t>(p, n);
    value = take<float>(p, n);
    gate = take<Fix>(p, static_cast<size_t>(o.C) * o.gate_width);
    row_sums = take<double>(p, 2 * static_cast<size_t>(o.C));
}

ChunkResult compute_chunk(const Options& o, const sdm_p1_inputs& in, const OutputBuffers& out,
                          int64_t c, const ChunkScratch& s) {
    const int C = o.C, W = o.W, R = o.R, WR = W + R, n = o.n();
    const int nk = C * W, nq = C * R;
    const int L = o.rec_tile;
    const int t_valid = c >= o.N - o.P ? o.valid_last : C;
    const int64_t id_base = (c % o.P) * o.stream_offset;
    const int64_t cw = c * nk, cr = c * nq;
    ChunkResult result{};

    result.error = load_keys(o, in, c, t_valid, s.sort_keys, s.gate);
    if (result.error.found) return result;
    // The entries' (key, entry) pairs are distinct, so this sort is the stable sort by slot.
    std::sort(s.sort_keys, s.sort_keys + n);

    // Decode the sorted row: payload words, group heads, values, each entry's position.
    uint64_t prev_key = 0;
    bool prev_valid = false;
    for (int r = 0; r < n; ++r) {
        const uint64_t key = s.sort_keys[r] >> kEntryBits;
        const int e = static_cast<int>(s.sort_keys[r] & kEntryMask);
        const int t = e / WR, j = e - t * WR;
        const bool is_q = j >= W;
        const int lane = is_q ? j - W : j;
        const bool valid = t < t_valid;
        uint32_t p = payload_word(t, lane, is_q, valid);
        if (r == 0 || !valid || !prev_valid || key != prev_key) p |= kHead;
        s.payload[r] = p;
        s.position[e] = r;
        const int64_t tok = c * C + t;
        s.value[r] = !valid ? 0.0f
                     : is_q ? load_value(in.q_val, o.bf16, tok * R + lane)
                            : load_value(in.k_val, o.bf16, tok * W + lane);
        prev_key = key;
        prev_valid = valid;
    }

    // Forward through each group: the inclusive log-cumsum and the peers before each entry.
    // A write that repeats a slot its token already wrote adds no gate.
    {
        Fix run = fix_zero();
        uint32_t kb = 0, qb = 0;
        int h = 0;
        for (int r = 0; r < n; ++r) {
            const uint32_t p = s.payload[r];
            if (p & kHead) {
                run = fix_zero();
                kb = qb = 0;
                h = r;
            }
            const bool valid = !(p & kInvalid);
            const bool is_k = valid && !(p & kIsQ);
            const bool is_q = valid && (p & kIsQ);
            const int t = static_cast<int>((p >> kTokenShift) & kTokenMask);
            if (is_k) {
                const uint32_t pp = r > 0 ? s.payload[r - 1] : 0u;
                const bool repeat = !(p & kHead) && !(pp & kIsQ) &&
                                    static_cast<int>((pp >> kTokenShift) & kTokenMask) == t;
                if (repeat) {
                    ++result.repeats;
                } else {
                    const int lane = o.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
                    run = fix_add(run, s.gate[t * o.gate_width + lane]);
                }
            }
            s.log[r] = run;
            s.k_before[r] = kb;
            s.before[r] = is_k ? kb : is_q ? qb : 0u;
            s.head[r] = h;
            kb += is_k ? 1u : 0u;
            qb += is_q ? 1u : 0u;
        }
    }
    // Backward through each group: the peers after each entry, rex, the LAST flag.
    {
        Fix total = fix_zero();
        uint32_t ka = 0, qa = 0;
        for (int r = n - 1; r >= 0; --r) {
            if (r == n - 1 || (s.payload[r + 1] & kHead)) {
                total = s.log[r];
                ka = qa = 0;
            }
            const uint32_t p = s.payload[r];
            const bool valid = !(p & kInvalid);
            const bool is_k = valid && !(p & kIsQ);
            const bool is_q = valid && (p & kIsQ);
            s.after[r] = is_k ? ka : is_q ? qa : 0u;
            s.rex[r] = fix_sub(total, s.log[r]);
            if (is_k && ka == 0) s.payload[r] = p | kLastK;
            ka += is_k ? 1u : 0u;
            qa += is_q ? 1u : 0u;
        }
    }

    // Per-entry outputs, the sorted rows, records and indices, in sorted order.
    {
        uint32_t jk = 0, jq = 0;   // index in the write / read row
        int valid_groups = 0;      // valid groups that ended before (valid LAST writes)
        const int ntk = (nk + L - 1) / L, ntq = (nq + L - 1) / L;
        const int nwk = (nk + 31) / 32;
        for (int r = 0; r < n; ++r) {
            const uint32_t p = s.payload[r];
            const bool valid = !(p & kInvalid);
            const bool is_q = (p & kIsQ) != 0u;
            const int t = static_cast<int>((p >> kTokenShift) & kTokenMask);
            const int lane = static_cast<int>(p & kLaneMask);
            const uint32_t before = s.before[r], after = s.after[r];
            const float v = s.value[r];
            const int32_t packed = pack_position(static_cast<uint32_t>(r), before, after, valid);
            const int32_t elem = sorted_element(p, before, after, valid);
            const bool first = (static_cast<uint32_t>(elem) & kSortedFirst) != 0u;
            const int32_t slot = valid ? static_cast<int32_t>(static_cast<int64_t>(
                                             s.sort_keys[r] >> kEntryBits) + id_base)
                                       : 0;
            // exp of the entry's log-cumsum (padding: its log is 0, its value 0).
            const double e_log = exp_fix(s.log[r]);
            if (!is_q) {
                const int64_t o_ = cw + t * W + lane;
                // cpe = exp(log + rex): the same argument as e_log when rex is 0.
                const double e_total = fix_is_zero(s.rex[r]) ? e_log : exp_fix(fix_add(s.log[r], s.rex[r]));
                const float cpe_stored = store_value(out.cpe, o.bf16, o_, to_f32(e_total));
                out.log_k[o_] = fix_to_f32(s.log[r]);
                out.rex[o_] = fix_to_f32(s.rex[r]);
                store_value(out.k_eff, o.bf16, o_, scaled_f32(v, e_log));
                const bool last = (p & kLastK) != 0u;
                if (out.is_last) {
                    out.is_last[o_] = last ? 1 : 0;
                    out.is_only[o_] = (last && before == 0u) ? 1 : 0;
                }
                if (out.pos_k) out.pos_k[o_] = packed;
                if (out.spay_k) out.spay_k[cw + jk] = elem;
                if (out.krec) {
                    put_record4(out.krec, cw + jk, elem, slot, scaled_f32(v, exp_fix(s.rex[r])), cpe_stored);
                }
                if (out.kspa) {
                    out.kspa[cw + jk] = valid ? neg_beta_scaled_f32(in.beta[c * C + t], v, e_log) : 0.0f;
                }
                // Valid groups started before this entry, counting its own when it started
                // earlier (then the entry is a valid write that is not its group's first).
                const int g = valid_groups + ((valid && before != 0u) ? 1 : 0);
                if (jk % static_cast<uint32_t>(L) == 0u) {
                    const int tile = static_cast<int>(jk / static_cast<uint32_t>(L));
                    if (out.tiles_k) {
                        out.tiles_k[c * (ntk + 1) + tile] =
                            first ? static_cast<int32_t>(jk)
                                  : std::min(static_cast<int>(jk + after + 1u), nk);
                    }
                    if (out.segb_k) out.segb_k[c * (ntk + 1) + tile] = g;
                }
                if (out.dc_kpos) out.dc_kpos[o_] = (valid && before == 0u) ? g : -1;
                if (out.dc_bpre && jk % 32u == 0u) out.dc_bpre[c * (nwk + 1) + jk / 32u] = g;
                if (valid && last) ++valid_groups;
                ++jk;
            } else {
                const int64_t o_ = cr + t * R + lane;
                out.log_q[o_] = fix_to_f32(s.log[r]);
                const float qw = scaled_f32(v, e_log);
                store_value(out.q_w, o.bf16, o_, qw);
                if (out.pos_q) out.pos_q[o_] = packed;
                if (out.q_last) {
                    const bool last = valid && after == 0u;
                    out.q_last[o_] = last ? 1 : 0;
                    out.q_only[o_] = (last && before == 0u) ? 1 : 0;
                }
                if (out.spay_q) out.spay_q[cr + jq] = elem;
                if (out.qrec) put_record4(out.qrec, cr + jq, elem, slot, qw, 0.0f);
                if (out.qrec8) {
                    out.qrec8[2 * (cr + jq)] = slot;
                    out.qrec8[2 * (cr + jq) + 1] = static_cast<int32_t>(f32_bits(qw));
                }
                if (out.tiles_q && jq % static_cast<uint32_t>(L) == 0u) {
                    out.tiles_q[c * (ntq + 1) + jq / static_cast<uint32_t>(L)] =
                        first ? static_cast<int32_t>(jq)
                              : std::min(static_cast<int>(jq + after + 1u), nq);
                }
                ++jq;
            }
        }
        if (out.tiles_k) out.tiles_k[c * (ntk + 1) + ntk] = nk;
        if (out.segb_k) out.segb_k[c * (ntk + 1) + ntk] = valid_groups;
        if (out.tiles_q) out.tiles_q[c * (ntq + 1) + ntq] = nq;
        if (out.dc_bpre) out.dc_bpre[c * (nwk + 1) + nwk] = valid_groups;
    }

    // The sorted payloads, then the row's padding.
    const int row = o.row();
    int32_t* pay_out = out.payload + c * row;
    for (int r = 0; r < n; ++r) pay_out[r] = static_cast<int32_t>(s.payload[r]);
    for (int r = n; r < row; ++r) pay_out[r] = static_cast<int32_t>(kTailPayload);

    // Rank table: per 32 sorted positions, the write entries before them and their bit mask.
    if (out.spay_rank) {
        const int blocks = (n + 31) / 32;
        int32_t writes = 0;
        for (int b = 0; b < blocks; ++b) {
            uint32_t mask = 0;
            for (int k = 0; k < 32 && 32 * b + k < n; ++k) {
                if (!(s.payload[32 * b + k] & kIsQ)) mask |= 1u << k;
            }
            int32_t* w = out.spay_rank + 2 * (c * blocks + b);
            w[0] = writes;
            w[1] = static_cast<int32_t>(mask);
            writes += __builtin_popcount(mask);
        }
    }

    // a and qk, one row (token i) at a time: each entry of token i walks its group from the
    // nearest earlier entry towards the head, adding one term per valid write met (a: of
    // another token; qk: of any token), in the canonical order of pair_term_add.
    double* row_a = s.row_sums;
    double* row_qk = s.row_sums + C;
    float* a = out.a + c * C * C;
    float* qk = out.qk + c * C * C;
    for (int i = 0; i < C; ++i) {
        std::fill(row_a, row_a + 2 * C, 0.0);
        if (i < t_valid) {
            for (int j = 0; j < WR; ++j) {
                const int r = s.position[i * WR + j];
                const bool is_q = j >= W;
                uint32_t need = s.k_before[r];   // valid writes before it in its group
                for (int q = r - 1; need > 0u && q >= s.head[r]; --q) {
                    const uint32_t pq = s.payload[q];
                    if (pq & kIsQ) continue;   // in a group, every entry is valid
                    --need;
                    const int tj = static_cast<int>((pq >> kTokenShift) & kTokenMask);
                    if (is_q) {
                        row_qk[tj] = pair_term_add(row_qk[tj], s.value[r], s.value[q], s.log[r], s.log[q]);
                    } else if (tj != i) {
                        row_a[tj] = pair_term_add(row_a[tj], s.value[r], s.value[q], s.log[r], s.log[q]);
                    }
                }
            }
        }
        for (int j = 0; j < C; ++j) {
            a[i * C + j] = j < i ? to_f32(row_a[j]) : 0.0f;
            qk[i * C + j] = j <= i ? to_f32(row_qk[j]) : 0.0f;
        }
    }
    return result;
}

}  // namespace cpu
}  // namespace sdm_p1
