// The stages of one chunk on the CPU backend, in order: load and check, sort, decode, scans
// forward, scans backward, records, pair sums. Each is the twin of a stage of the general CUDA
// kernel (phase1_kernel in kernels/general/phase1_kernel.cuh, a header per stage) and writes the same
// arrays (ChunkScratch, chunk.h: the kernel's names), at the same index, by the stage's end:
// docs/design.md, "The stages", lists them, and tests/stage_dump/test_stage_dump.cpp (the CPU) and
// tests/stage_dump/test_stage_dump_cuda.cu (both) check them stage by stage. compute_chunk (chunk.cpp)
// runs them all; the backward (chunk_backward.cpp) runs the first five, then list_writes and
// the walk of an entry's earlier writes. Inline, so each caller's entry function inlines them whole (its
// flatten attribute).
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

// Scratch layout: each array at a multiple of 64 bytes.
inline size_t align64(size_t b) { return (b + 63) / 64 * 64; }

template <typename T>
T* take(char*& p, size_t count) {
    T* r = reinterpret_cast<T*>(p);
    p += align64(count * sizeof(T));
    return r;
}

// The chunk being computed (the kernel's Chunk, with the options and the sort keys' bits,
// which the kernel has in its KernelArgs).
struct Chunk {
    const Options& o;
    int64_t c;
    int t_valid;       // valid tokens
    int n;             // entries
    int64_t id_base;   // first slot id of its stream
    int entry_bits;    // of the sort keys (canon/chunk_arrays.h)
    int key_bits;
};

// The chunk's counts (the kernel's ChunkShared, block-wide there).
struct ChunkCounts {
    uint32_t repeats;        // scans forward: write entries repeating a slot of their token
    uint32_t walkers;        // scans forward: valid entries with an earlier entry in their group
    uint32_t valid_groups;   // scans backward: groups with a valid write
};

// Chunk c's valid tokens: by its stream's length (checked by execute) where the inputs have
// lengths, else all but in the streams' last chunks, which have valid_last.
inline int valid_tokens(const Options& o, const InputRecord& in, int64_t c) {
    if (in.stream_lengths == nullptr) return c >= o.N - o.P ? o.valid_last : o.C;
    const int64_t length = load_id(in.stream_lengths, in.lengths64, c % o.P);
    return chunk_valid_tokens(length, c / o.P, o.C);
}

inline Chunk chunk_of(const Options& o, const InputRecord& in, int64_t c) {
    const int n = o.n();
    return Chunk{
        o, c, valid_tokens(o, in, c), n, (c % o.P) * o.stream_offset, sort_entry_bits(n), sort_key_bits(n, o.num_keys)};
}

// The entry e = t * (W + R) + j of payload word p.
inline int payload_entry(const Options& o, uint32_t p) {
    return payload_token(p) * (o.W + o.R) + ((p & kIsQ) ? o.W : 0) + static_cast<int>(p & kLaneMask);
}

// The value of the entry with payload p (kernels/common/pair_common.cuh: entry_value).
inline float entry_value(const Chunk& k, const ChunkScratch& s, uint32_t p) { return s.value[payload_entry(k.o, p)]; }

// The input value of lane `lane` of valid token t (0 for padding).
inline float input_value(const Chunk& k, const InputRecord& in, int t, int lane, bool is_q) {
    const Options& o = k.o;
    if (t >= k.t_valid) return 0.0f;
    const int64_t tok = k.c * o.C + t;
    return is_q ? load_value(in.q_val, o.bf16, tok * o.R + lane) : load_value(in.k_val, o.bf16, tok * o.W + lane);
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

// Stage "load and check" (twin: load_and_check in kernels/common/stage_load.cuh; lean:
// kernels/lean/lean_load.cuh). Reads and checks the chunk's ids and gates, token by token
// (entry order), and writes, by entry, the sort keys (a padding token's entries take the
// padding slot, canon/chunk_arrays.h) and the values (0 for padding); by token, the gates
// in fixed point (0 for padding tokens) and, with per-token gates, their exps; and clears the
// walker masks. Stops at the first bad id or gate, which it returns (the chunk's outputs are
// then unspecified; the kernel records it and goes on).
inline InputError load_and_check(const Chunk& k, const InputRecord& in, const ChunkScratch& s) {
    const Options& o = k.o;
    const int W = o.W, R = o.R, WR = W + R, gw = o.gate_width;
    const uint64_t padding_slot = (uint64_t{1} << (k.key_bits - k.entry_bits)) - 1u;
    InputError err{};
    for (int t = 0; t < o.C; ++t) {
        const bool valid = t < k.t_valid;
        const int64_t tok = k.c * o.C + t;
        for (int j = 0; j < WR; ++j) {
            const int e = t * WR + j;
            uint64_t slot = padding_slot;
            if (valid) {
                const bool is_q = j >= W;
                const int lane = is_q ? j - W : j;
                const int64_t id =
                    is_q ? load_id(in.q_idx, o.idx64, tok * R + lane) : load_id(in.k_idx, o.idx64, tok * W + lane);
                slot = slot_of_id(id, k.id_base);
                if (slot >= static_cast<uint64_t>(o.num_keys)) return InputError{true, false, t, lane, is_q, id, 0.0f};
            }
            s.keys[e] = slot << k.entry_bits | static_cast<uint64_t>(e);
            s.value[e] = input_value(k, in, t, j >= W ? j - W : j, j >= W);
        }
        if (valid) {
            if (!load_token_gates(o, in, tok, t, s.gate, &err)) return err;
        } else {
            std::fill(s.gate + t * gw, s.gate + (t + 1) * gw, fix_zero());
        }
        // A token's first write of a slot has its gate as log-cumsum: its exp, once per token.
        if (s.gate_exp != nullptr) s.gate_exp[t] = exp_fix(s.gate[t]);
    }
    std::fill(s.walk_mask, s.walk_mask + o.C * (mask_words(W) + mask_words(R)), 0u);
    return err;
}

// Stage "load" without ids (the backward given a payload): the valid tokens' gates.
inline InputError load_gates(const Chunk& k, const InputRecord& in, const ChunkScratch& s) {
    InputError err{};
    for (int t = 0; t < k.t_valid; ++t) {
        if (!load_token_gates(k.o, in, k.c * k.o.C + t, t, s.gate, &err)) break;
    }
    return err;
}

// Stage "sort" (twin: sort_entries in kernels/common/stage_sort.cuh; lean: kernels/lean/lean_sort.cuh):
// the keys in ascending order, by sorted position. They are distinct, so this is the stable
// sort by slot.
inline void sort_entries(const Chunk& k, const ChunkScratch& s) { std::sort(s.keys, s.keys + k.n); }

// Stage "decode" (twin: decode in kernels/common/stage_decode.cuh; lean: kernels/lean/lean_sort.cuh,
// order_buckets): from the sorted keys, each sorted position's payload word (with its group's
// head bit) and slot, and each entry's sorted position.
inline void decode(const Chunk& k, const ChunkScratch& s) {
    const int W = k.o.W, WR = W + k.o.R;
    const uint64_t entry_mask = (uint64_t{1} << k.entry_bits) - 1u;
    for (int r = 0; r < k.n; ++r) {
        const uint64_t key = s.keys[r];
        const int e = static_cast<int>(key & entry_mask);
        const uint64_t slot = key >> k.entry_bits;
        const int t = e / WR, j = e - t * WR;
        const bool is_q = j >= W;
        const int lane = is_q ? j - W : j;
        const bool valid = t < k.t_valid;
        bool head = r == 0 || !valid;
        if (!head) {
            const uint64_t prev = s.keys[r - 1];
            head = static_cast<int>(prev & entry_mask) / WR >= k.t_valid || (prev >> k.entry_bits) != slot;
        }
        s.payload[r] = payload_word(t, lane, is_q, valid) | (head ? kHead : 0u);
        s.position[e] = static_cast<uint32_t>(r);
        s.slot[r] = static_cast<uint32_t>(slot);
    }
}

// Whether the valid write with payload p (pp: the previous position's) repeats a slot its
// token already wrote, and so adds no gate: the previous entry of its group is its token's
// write (kernels/general/stage_scans.cuh: gate_added).
inline bool repeats_slot(uint32_t p, uint32_t pp) {
    return !(p & kHead) && !(pp & kIsQ) && payload_token(pp) == payload_token(p);
}

// Stage "scans", forward (twin: scan_forward in kernels/general/stage_scans.cuh; lean:
// kernels/lean/lean_groups.cuh, sum_groups): through each group, the inclusive log-cumsum (a
// write repeating its token's slot adds no gate) and the peers before each entry; through the
// row, the write entries before each position. Counts the repeats and the walkers.
inline void scan_forward(const Chunk& k, const ChunkScratch& s, ChunkCounts& counts) {
    const Options& o = k.o;
    Fix run = fix_zero();
    uint32_t kb = 0, qb = 0, writes = 0;
    for (int r = 0; r < k.n; ++r) {
        const uint32_t p = s.payload[r];
        if (p & kHead) {
            run = fix_zero();
            kb = qb = 0;
        }
        const bool valid = !(p & kInvalid);
        const bool is_k = valid && !(p & kIsQ);
        const bool is_q = valid && (p & kIsQ);
        if (is_k) {
            if (repeats_slot(p, r > 0 ? s.payload[r - 1] : 0u)) {
                ++counts.repeats;
            } else {
                const int lane = o.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
                run = fix_add(run, s.gate[payload_token(p) * o.gate_width + lane]);
            }
        }
        s.log[r] = run;
        s.before[r] = is_k ? kb : is_q ? qb : 0u;
        s.writes[r] = writes;
        writes += (p & kIsQ) ? 0u : 1u;
        kb += is_k ? 1u : 0u;
        qb += is_q ? 1u : 0u;
        counts.walkers += is_walker(p) ? 1u : 0u;
    }
}

// Stage "scans", backward (twin: scan_backward in kernels/general/stage_scans.cuh; lean:
// kernels/lean/lean_groups.cuh, sum_groups): the last position of each entry's group, the
// valid first writes of groups at or after each position, and each group's last valid write
// (its payload's kLastK bit). Counts the valid groups.
inline void scan_backward(const Chunk& k, const ChunkScratch& s, ChunkCounts& counts) {
    uint32_t end = 0, firsts = 0;
    bool last_marked = false;   // the group's last valid write has its bit
    for (int r = k.n - 1; r >= 0; --r) {
        if (r == k.n - 1 || (s.payload[r + 1] & kHead)) {
            end = static_cast<uint32_t>(r);
            last_marked = false;
        }
        const uint32_t p = s.payload[r];
        const bool valid_write = (p & (kInvalid | kIsQ)) == 0u;
        firsts += valid_write && s.before[r] == 0u ? 1u : 0u;
        s.end[r] = end;
        s.firsts[r] = firsts;
        if (valid_write && !last_marked) {
            s.payload[r] = p | kLastK;
            last_marked = true;
        }
    }
    counts.valid_groups = firsts;
}

// The sum of the gates after sorted position r in its group (exact): the log-cumsum at the
// group's end minus its own.
inline Fix rex_at(const ChunkScratch& s, int r) { return fix_sub(s.log[s.end[r]], s.log[r]); }

// Write entries (valid or padding) at or before position r (kernels/general/stage_records.cuh:
// writes_through).
inline uint32_t writes_through(const ChunkScratch& s, uint32_t r) {
    return s.writes[r] + ((s.payload[r] & kIsQ) ? 0u : 1u);
}

// Stage "records" (twin: write_records in kernels/general/stage_records.cuh; lean:
// kernels/lean/lean_writer.cuh and lean_rows.cuh): every per-entry output, the sorted rows,
// records and tile indices, in sorted order, through the shared write_entry_outputs, each
// entry's facts found from the scans' arrays as the kernel's facts_at finds them; then the
// sorted payloads and the rank table. Marks each walker in its token's walker mask, which
// stage "pair sums" reads.
inline void write_records(const Chunk& k, const InputRecord& in, const OutputBuffers& out, const ChunkScratch& s,
                          const ChunkCounts& counts) {
    const Options& o = k.o;
    const ChunkFacts f{
        k.c, o.C, o.W, o.R, o.rec_tile, k.id_base, o.bf16, in.beta, make_divider(static_cast<uint32_t>(o.rec_tile))};
    for (int r = 0; r < k.n; ++r) {
        const uint32_t p = s.payload[r] & ~kLastK;   // EntryFacts::payload has it clear
        const bool valid = !(p & kInvalid);
        const bool is_q = (p & kIsQ) != 0u;
        const int t = payload_token(p), lane = static_cast<int>(p & kLaneMask);
        const uint32_t end = s.end[r];
        // In a group every entry is valid: its write entries are its valid writes.
        const uint32_t writes_after = writes_through(s, end) - writes_through(s, static_cast<uint32_t>(r));
        EntryFacts e{};
        e.r = static_cast<uint32_t>(r);
        e.payload = p;
        e.before = s.before[r];
        e.after = !valid ? 0u : is_q ? (end - static_cast<uint32_t>(r)) - writes_after : writes_after;
        // A valid write with no valid write before it in its group has its own gate as log.
        const bool own_gate = s.gate_exp != nullptr && valid && !is_q && e.before == 0u;
        if (own_gate) e.exp_log = s.gate_exp[t];
        set_log_facts(e, s.log[r], rex_at(s, r), !is_q, out.krec != nullptr, own_gate);
        e.value = valid ? entry_value(k, s, p) : 0.0f;
        e.slot_key = static_cast<int64_t>(s.slot[r]);
        e.row_index = is_q ? static_cast<uint32_t>(r) - s.writes[r] : s.writes[r];
        e.groups_before = is_q ? 0 : static_cast<int32_t>(counts.valid_groups - s.firsts[r]);
        write_entry_outputs(out, f, e);
        if (is_walker(p)) s.walk_mask[walk_mask_base(o.W, o.R, t, is_q) + (lane >> 5)] |= 1u << (lane & 31);
    }
    write_chunk_tails(out, f, static_cast<int32_t>(counts.valid_groups));

    // The sorted payloads (with kLastK), then the row's padding.
    const int row = o.row();
    int32_t* pay_out = out.payload + k.c * row;
    for (int r = 0; r < k.n; ++r) pay_out[r] = static_cast<int32_t>(s.payload[r]);
    for (int r = k.n; r < row; ++r) pay_out[r] = static_cast<int32_t>(kTailPayload);

    // Rank table: per 32 sorted positions, the write entries before them and their bit mask.
    if (out.spay_rank) {
        const int blocks = (k.n + 31) / 32;
        for (int b = 0; b < blocks; ++b) {
            uint32_t mask = 0;
            for (int i = 0; i < 32 && 32 * b + i < k.n; ++i) {
                if (!(s.payload[32 * b + i] & kIsQ)) mask |= 1u << i;
            }
            write_rank(out, k.c, blocks, b, static_cast<int32_t>(s.writes[32 * b]), mask);
        }
    }
}

// The write row (twin: list_writes in kernels/general/stage_pairs.cuh): the sorted position of each
// write entry (valid or padding), in sorted order. Stage "pair sums" lists it first.
inline void list_writes(const Chunk& k, const ChunkScratch& s) {
    for (int r = 0; r < k.n; ++r) {
        if (!(s.payload[r] & kIsQ)) s.write_row[s.writes[r]] = static_cast<uint32_t>(r);
    }
}

// The write-row index of the first write of the slot group of the entry at r, so that the
// group's writes before r are [walk_start, writes[r]) (twin: walker_range_start in
// kernels/common/pair_common.cuh). A write knows its valid writes before it in the group (before);
// for a read, the nearest earlier write y is in its group unless a group starts after y,
// which the counts tell but where the reads between y and r exactly fill the read's peers:
// then the head bit after y does.
inline uint32_t walk_start(const ChunkScratch& s, int r) {
    const uint32_t hi = s.writes[r];
    if (!(s.payload[r] & kIsQ)) return hi - s.before[r];
    if (hi == 0u) return 0u;
    const uint32_t y = s.write_row[hi - 1u], reads_between = static_cast<uint32_t>(r) - y - 1u;
    const uint32_t peers = s.before[r];
    const bool in_group = reads_between < peers || (reads_between == peers && !(s.payload[y + 1u] & kHead));
    return in_group ? hi - 1u - s.before[y] : hi;
}

// The walk of the entry at sorted position r over the earlier valid writes of its slot group
// that pair with it (a: of another token; qk: of any token), nearest first: the write-row
// range [walk_start, writes[r]), less, for a write, its token's own earlier writes of the
// slot, the nearest ones. The range is taken a run at a time: a token's writes of one slot
// are consecutive there and share one log-cumsum (a repeat adds no gate), so a run takes one
// exp. For each run, nearest first: visit(token, exp(log_r - log_run), bottom, top), the run
// being the write-row indices [bottom, top), to be taken from top - 1 down; the exp is
// exp_of(top, token) (RowExps), or exp_fix of the argument. Needs the write row (list_writes).
template <typename Visit, typename ExpOf>
inline void walk_earlier_writes(const ChunkScratch& s, int r, Visit visit, ExpOf exp_of) {
    const auto write_token = [&](uint32_t j) { return payload_token(s.payload[s.write_row[j]]); };
    const uint32_t p = s.payload[r];
    const uint32_t lo = walk_start(s, r);
    uint32_t top = s.writes[r];
    if (!(p & kIsQ)) {
        while (top > lo && write_token(top - 1) == payload_token(p)) --top;
    }
    while (top > lo) {
        const int tj = write_token(top - 1);
        uint32_t bottom = top - 1;   // the run: [bottom, top)
        while (bottom > lo && write_token(bottom - 1) == tj) --bottom;
        visit(tj, exp_of(top, tj), bottom, top);
        top = bottom;
    }
}

template <typename Visit>
inline void walk_earlier_writes(const ChunkScratch& s, int r, Visit visit) {
    walk_earlier_writes(s, r, visit,
                        [&](uint32_t top, int) { return exp_fix(fix_sub(s.log[r], s.log[s.write_row[top - 1]])); });
}

// The exps of a chunk's stage "pair sums" (and of the backward's row sums), row by row (the
// walker's token i), each taken once per exact argument where two sources tell that
// arguments are equal (exp_fix is a function of its argument: no bit changes). By run: the
// walkers of token i in one slot group share their log (a repeat adds no gate; a read after
// its token's writes of the slot has their log, and one without them the latest earlier
// write's), so the group's runs have the same exps for each of them, kept by the run's
// nearest write (a token's reads of the slots it wrote: most of the qk terms of skewed
// chunks). By token: a run of token j whose argument equals the last one seen for j in this
// row takes its exp (the slots every token between j and i wrote, whose arguments are all the
// sum of those tokens' gates: the dense rows of hot slots).
class RowExps {
public:
    // Forgets the exps of an earlier chunk.
    RowExps(const ChunkScratch& s, int C, int W) : s_(s) {
        std::fill(s.run_row, s.run_row + C * W, -1);
        std::fill(s.token_row, s.token_row + C, -1);
    }
    // The exp of log_r - log_run for the walker at sorted position r of row i and the run of
    // token tj whose top is write-row index top.
    double get(int i, int r, uint32_t top, int tj) const {
        const uint32_t x = top - 1u;   // the run's nearest write: the run's index, below C * W
        if (s_.run_row[x] == i) return s_.run_exp[x];
        const Fix arg = fix_sub(s_.log[r], s_.log[s_.write_row[x]]);
        double e;
        if (s_.token_row[tj] == i && fix_equal(s_.token_arg[tj], arg)) {
            e = s_.token_exp[tj];
        } else {
            e = exp_fix(arg);
            s_.token_row[tj] = i;
            s_.token_arg[tj] = arg;
            s_.token_exp[tj] = e;
        }
        s_.run_row[x] = i;
        s_.run_exp[x] = e;
        return e;
    }

private:
    const ChunkScratch& s_;
};

// Stage "pair sums" (twin: pair_sums in kernels/general/stage_pairs.cuh, its paths in
// pair_one_batch.cuh and pair_windows.cuh; lean: kernels/lean/lean_pairs.cuh): lists the write
// row, then a and qk, one row (token i) at a time, in the canonical order of pair_term_add: the
// walkers of token i (its walker mask) in lane order, each with the earlier valid writes of its
// slot group that pair with it, nearest first (walk_earlier_writes). The work is linear in the
// terms.
inline void pair_sums(const Chunk& k, const OutputBuffers& out, const ChunkScratch& s) {
    const Options& o = k.o;
    const int C = o.C, W = o.W, R = o.R, WR = W + R;
    list_writes(k, s);
    double* row_a = s.row_sums;
    double* row_qk = s.row_sums + C;
    float* a = out.a + k.c * C * C;
    float* qk = out.qk + k.c * C * C;
    const RowExps exps(s, C, W);
    for (int i = 0; i < C; ++i) {
        std::fill(row_a, row_a + 2 * C, 0.0);
        for (int j = 0; i < k.t_valid && j < WR; ++j) {
            const bool is_q = j >= W;
            const int lane = is_q ? j - W : j;
            if (!((s.walk_mask[walk_mask_base(W, R, i, is_q) + (lane >> 5)] >> (lane & 31)) & 1u)) continue;
            const float v = s.value[i * WR + j];
            double* const row = is_q ? row_qk : row_a;
            const int r = static_cast<int>(s.position[i * WR + j]);
            walk_earlier_writes(
                s, r,
                [&](int tj, double e, uint32_t bottom, uint32_t top) {
                    double sum = row[tj];
                    for (uint32_t x = top; x > bottom; --x) {
                        const float w = entry_value(k, s, s.payload[s.write_row[x - 1]]);
                        sum = pair_term_add(sum, pair_term(v, w, e));
                    }
                    row[tj] = sum;
                },
                [&](uint32_t top, int tj) { return exps.get(i, r, top, tj); });
        }
        for (int j = 0; j < C; ++j) {
            a[i * C + j] = j < i ? to_f32(row_a[j]) : 0.0f;
            qk[i * C + j] = j <= i ? to_f32(row_qk[j]) : 0.0f;
        }
    }
}

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_CHUNK_STAGES_H
