// The stages of one chunk that the CPU forward (chunk.cpp) and backward (chunk_backward.cpp)
// share: load and check, sort, decode, the group scans, the walk of an entry's earlier writes.
// Inline, so each caller's compute_chunk inlines them whole (its flatten attribute).
#ifndef SDM_P1_CPU_CHUNK_STAGES_H
#define SDM_P1_CPU_CHUNK_STAGES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "chunk.h"

namespace sdm_p1 {
namespace cpu {

// With GCC, a chunk's entry function (compute_chunk, backward_chunk: every stage inlined) is
// compiled twice, the copy for processors with FMA chosen at load time: there the canonical
// fused multiply-adds (exp_double, the pair sums) are one instruction each instead of a call
// to the C library's fma, with the same bits. Not with clang, which refuses the two attributes together, nor under
// ThreadSanitizer: the choice is an ifunc, whose resolver runs before TSan's runtime is set
// up (a crash at load).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define SDM_P1_FMA_CLONE , target_clones("fma", "default")
#else
#define SDM_P1_FMA_CLONE
#endif

constexpr int kEntryBits = 17;   // entries of a chunk: < 2^17
constexpr uint64_t kEntryMask = (uint64_t{1} << kEntryBits) - 1u;
// Sort key of a padding entry: above every valid key (< 2^32), so padding sorts last.
constexpr uint64_t kPaddingKey = uint64_t{1} << 32;

// Scratch layout: each array at a multiple of 64 bytes.
inline size_t align64(size_t b) { return (b + 63) / 64 * 64; }

template <typename T>
T* take(char*& p, size_t count) {
    T* r = reinterpret_cast<T*>(p);
    p += align64(count * sizeof(T));
    return r;
}

// The chunk's constants for the stages below.
struct Chunk {
    const Options& o;
    int64_t c;
    int t_valid;   // valid tokens
    int n;         // entries
};

// Chunk c's valid tokens: by its stream's length (checked by execute) where the inputs have
// lengths, else all but in the streams' last chunks, which have valid_last.
inline int valid_tokens(const Options& o, const InputRecord& in, int64_t c) {
    if (in.stream_lengths == nullptr) return c >= o.N - o.P ? o.valid_last : o.C;
    const int64_t length = load_id(in.stream_lengths, in.lengths64, c % o.P);
    return chunk_valid_tokens(length, c / o.P, o.C);
}

// Token t's gates (global token tok) in fixed point; false, with *err set, at the first bad one.
inline bool load_token_gates(const Options& o, const InputRecord& in, int64_t tok, int t, Fix* gates, InputError* err) {
    for (int lane = 0; lane < o.gate_width; ++lane) {
        const float g = in.g[tok * o.gate_width + lane];
        if (!gate_to_fix(g, &gates[t * o.gate_width + lane])) {
            *err = InputError{true, true, t, lane, false, 0, g};
            return false;
        }
    }
    return true;
}

// Stage "load and check": reads and checks the chunk's ids and gates; fills the sort keys
// and the fixed-point gates.
// Entry e = t * (W + R) + j is write lane j (j < W) or read lane j - W of token t.
inline InputError load_and_check(const Options& o, const InputRecord& in, int64_t chunk, int t_valid,
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
            const int64_t id =
                is_q ? load_id(in.q_idx, o.idx64, tok * R + lane) : load_id(in.k_idx, o.idx64, tok * W + lane);
            // id - id_base only once id >= id_base: it cannot overflow then.
            if (id < id_base || id - id_base >= o.num_keys) {
                err = InputError{true, false, t, lane, is_q, id, 0.0f};
                return err;
            }
            sort_keys[e] = static_cast<uint64_t>(id - id_base) << kEntryBits | e;
        }
        if (valid && !load_token_gates(o, in, tok, t, gates, &err)) return err;
    }
    return err;
}

// Stage "load" without ids (the backward given a payload): the valid tokens' gates.
inline InputError load_gates(const Options& o, const InputRecord& in, int64_t chunk, int t_valid, Fix* gates) {
    InputError err{};
    for (int t = 0; t < t_valid; ++t) {
        if (!load_token_gates(o, in, chunk * o.C + t, t, gates, &err)) break;
    }
    return err;
}

// Stage "sort": the entries' (key, entry) pairs are distinct, so this sort is the stable
// sort by slot.
inline void sort_entries(const Chunk& k, const ChunkScratch& s) { std::sort(s.sort_keys, s.sort_keys + k.n); }

// The value of an entry of token t (0 for padding).
inline float entry_value(const Chunk& k, const InputRecord& in, int t, int lane, bool is_q) {
    const Options& o = k.o;
    if (t >= k.t_valid) return 0.0f;
    const int64_t tok = k.c * o.C + t;
    return is_q ? load_value(in.q_val, o.bf16, tok * o.R + lane) : load_value(in.k_val, o.bf16, tok * o.W + lane);
}

// Stage "decode": the sorted row's payload words (with group heads), values, each entry's
// position.
inline void decode(const Chunk& k, const InputRecord& in, const ChunkScratch& s) {
    const Options& o = k.o;
    const int W = o.W, WR = W + o.R;
    uint64_t prev_key = 0;
    bool prev_valid = false;
    for (int r = 0; r < k.n; ++r) {
        const uint64_t key = s.sort_keys[r] >> kEntryBits;
        const int e = static_cast<int>(s.sort_keys[r] & kEntryMask);
        const int t = e / WR, j = e - t * WR;
        const bool is_q = j >= W;
        const int lane = is_q ? j - W : j;
        const bool valid = t < k.t_valid;
        uint32_t p = payload_word(t, lane, is_q, valid);
        if (r == 0 || !valid || !prev_valid || key != prev_key) p |= kHead;
        s.payload[r] = p;
        s.position[e] = r;
        s.value[r] = entry_value(k, in, t, lane, is_q);
        prev_key = key;
        prev_valid = valid;
    }
}

// Stage "scans", forward through each group: the inclusive log-cumsum and the peers before
// each entry; through the row: the write entries before each position and the write row (the
// positions of the write entries in order). A write that repeats a slot its token already
// wrote adds no gate. Returns the number of such repeats.
inline int64_t scan_forward(const Chunk& k, const ChunkScratch& s) {
    const Options& o = k.o;
    int64_t repeats = 0;
    Fix run = fix_zero();
    uint32_t kb = 0, qb = 0, writes = 0;
    int h = 0;
    for (int r = 0; r < k.n; ++r) {
        const uint32_t p = s.payload[r];
        if (p & kHead) {
            run = fix_zero();
            kb = qb = 0;
            h = r;
        }
        const bool valid = !(p & kInvalid);
        const bool is_k = valid && !(p & kIsQ);
        const bool is_q = valid && (p & kIsQ);
        const int t = payload_token(p);
        s.own_writes[r] = 0;
        if (is_k) {
            const uint32_t pp = r > 0 ? s.payload[r - 1] : 0u;
            const bool repeat = !(p & kHead) && !(pp & kIsQ) && payload_token(pp) == t;
            if (repeat) {
                ++repeats;
                s.own_writes[r] = s.own_writes[r - 1] + 1u;
            } else {
                const int lane = o.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
                run = fix_add(run, s.gate[t * o.gate_width + lane]);
            }
        }
        s.log[r] = run;
        s.before[r] = is_k ? kb : is_q ? qb : 0u;
        s.head[r] = h;
        s.writes_before[r] = writes;
        if (!(p & kIsQ)) s.write_row[writes++] = static_cast<uint32_t>(r);
        kb += is_k ? 1u : 0u;
        qb += is_q ? 1u : 0u;
    }
    return repeats;
}

// Stage "scans", backward through each group: the peers after each entry and rex.
inline void scan_backward(const Chunk& k, const ChunkScratch& s) {
    Fix total = fix_zero();
    uint32_t ka = 0, qa = 0;
    for (int r = k.n - 1; r >= 0; --r) {
        if (r == k.n - 1 || (s.payload[r + 1] & kHead)) {
            total = s.log[r];
            ka = qa = 0;
        }
        const uint32_t p = s.payload[r];
        const bool valid = !(p & kInvalid);
        const bool is_k = valid && !(p & kIsQ);
        const bool is_q = valid && (p & kIsQ);
        s.after[r] = is_k ? ka : is_q ? qa : 0u;
        s.rex[r] = fix_sub(total, s.log[r]);
        ka += is_k ? 1u : 0u;
        qa += is_q ? 1u : 0u;
    }
}

// The walk of the entry at sorted position r over the earlier valid writes of its slot group
// that pair with it (a: of another token; qk: of any token), nearest first. Those writes are
// a range of the write row, [writes before the group's head, writes before the entry),
// minus, for a write, its token's own earlier writes of the slot, which end the range. The
// range is taken a run at a time: a token's writes of one slot are consecutive there and
// share one log-cumsum (a repeat adds no gate), so a run takes one exp. For each run, nearest
// first: visit(token, exp(log_r - log_run), bottom, top), the run being the write-row indices
// [bottom, top), to be taken from top - 1 down.
template <typename Visit>
inline void walk_earlier_writes(const ChunkScratch& s, int r, Visit visit) {
    const auto write_token = [&](uint32_t j) { return payload_token(s.payload[s.write_row[j]]); };
    const uint32_t lo = s.writes_before[s.head[r]];
    uint32_t top = s.writes_before[r] - s.own_writes[r];
    while (top > lo) {
        const int tj = write_token(top - 1);
        uint32_t bottom = top - 1;   // the run: [bottom, top)
        while (bottom > lo && write_token(bottom - 1) == tj) --bottom;
        visit(tj, exp_fix(fix_sub(s.log[r], s.log[s.write_row[top - 1]])), bottom, top);
        top = bottom;
    }
}

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_CHUNK_STAGES_H
