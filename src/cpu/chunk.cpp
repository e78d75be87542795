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

// Stage "load and check": reads and checks the chunk's ids and gates; fills the sort keys
// and the fixed-point gates.
// Entry e = t * (W + R) + j is write lane j (j < W) or read lane j - W of token t.
InputError load_and_check(const Options& o, const InputRecord& in, int64_t chunk, int t_valid,
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
           2 * align64(n * sizeof(Fix)) + 5 * align64(n * sizeof(uint32_t)) +
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
    writes_before = take<uint32_t>(p, n);
    own_writes = take<uint32_t>(p, n);
    write_row = take<uint32_t>(p, n);
    before = take<uint32_t>(p, n);
    after = take<uint32_t>(p, n);
    head = take<int32_t>(p, n);
    position = take<int32_t>(p, n);
    value = take<float>(p, n);
    gate = take<Fix>(p, static_cast<size_t>(o.C) * o.gate_width);
    row_sums = take<double>(p, 2 * static_cast<size_t>(o.C));
}

namespace {

// The chunk's constants for the stages below.
struct Chunk {
    const Options& o;
    int64_t c;
    int t_valid;   // valid tokens
    int n;         // entries
};

// Chunk c's valid tokens: by its stream's length (checked by execute) where the inputs have
// lengths, else all but in the streams' last chunks, which have valid_last.
int valid_tokens(const Options& o, const InputRecord& in, int64_t c) {
    if (in.stream_lengths == nullptr) return c >= o.N - o.P ? o.valid_last : o.C;
    const int64_t length = load_id(in.stream_lengths, in.lengths64, c % o.P);
    return chunk_valid_tokens(length, c / o.P, o.C);
}

// Stage "sort": the entries' (key, entry) pairs are distinct, so this sort is the stable
// sort by slot.
void sort_entries(const Chunk& k, const ChunkScratch& s) { std::sort(s.sort_keys, s.sort_keys + k.n); }

// Stage "decode": the sorted row's payload words (with group heads), values, each entry's
// position.
void decode(const Chunk& k, const InputRecord& in, const ChunkScratch& s) {
    const Options& o = k.o;
    const int W = o.W, R = o.R, WR = W + R;
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
        const int64_t tok = k.c * o.C + t;
        s.value[r] = !valid ? 0.0f
                     : is_q ? load_value(in.q_val, o.bf16, tok * R + lane)
                            : load_value(in.k_val, o.bf16, tok * W + lane);
        prev_key = key;
        prev_valid = valid;
    }
}

// Stage "scans", forward through each group: the inclusive log-cumsum and the peers before
// each entry; through the row: the write entries before each position and the write row (the
// positions of the write entries in order). A write that repeats a slot its token already
// wrote adds no gate. Returns the number of such repeats.
int64_t scan_forward(const Chunk& k, const ChunkScratch& s) {
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
            const bool repeat = !(p & kHead) && !(pp & kIsQ) &&
                                payload_token(pp) == t;
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
void scan_backward(const Chunk& k, const ChunkScratch& s) {
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

// Stage "records": every per-entry output, the sorted rows, records and indices (in sorted
// order, through the shared write_entry_outputs), then the sorted payloads and the rank table.
void write_records(const Chunk& k, const InputRecord& in, const OutputBuffers& out,
                   const ChunkScratch& s) {
    const Options& o = k.o;
    const ChunkFacts f{k.c, o.C, o.W, o.R, o.rec_tile, (k.c % o.P) * o.stream_offset, o.bf16,
                       in.beta, make_divider(static_cast<uint32_t>(o.rec_tile))};
    uint32_t jk = 0, jq = 0;   // index in the write / read row
    int32_t valid_groups = 0;  // valid groups that ended before (valid LAST writes)
    for (int r = 0; r < k.n; ++r) {
        const uint32_t p = s.payload[r];
        const bool valid = !(p & kInvalid);
        const bool is_q = (p & kIsQ) != 0u;
        EntryFacts e{};
        e.r = static_cast<uint32_t>(r);
        e.payload = p;
        e.before = s.before[r];
        e.after = s.after[r];
        set_log_facts(e, s.log[r], s.rex[r], !is_q, out.krec != nullptr, false);
        e.value = s.value[r];
        e.slot_key = static_cast<int64_t>(s.sort_keys[r] >> kEntryBits);
        e.row_index = is_q ? jq++ : jk++;
        // Valid groups started before this entry, counting its own when it started earlier
        // (then the entry is a valid write that is not its group's first).
        e.groups_before = valid_groups + ((valid && e.before != 0u) ? 1 : 0);
        write_entry_outputs(out, f, e);
        if (!is_q && valid && e.after == 0u) {
            s.payload[r] = p | kLastK;
            ++valid_groups;
        }
    }
    write_chunk_tails(out, f, valid_groups);

    // The sorted payloads, then the row's padding.
    const int row = o.row();
    int32_t* pay_out = out.payload + k.c * row;
    for (int r = 0; r < k.n; ++r) pay_out[r] = static_cast<int32_t>(s.payload[r]);
    for (int r = k.n; r < row; ++r) pay_out[r] = static_cast<int32_t>(kTailPayload);

    // Rank table: per 32 sorted positions, the write entries before them and their bit mask.
    if (out.spay_rank) {
        const int blocks = (k.n + 31) / 32;
        int32_t writes = 0;
        for (int b = 0; b < blocks; ++b) {
            uint32_t mask = 0;
            for (int i = 0; i < 32 && 32 * b + i < k.n; ++i) {
                if (!(s.payload[32 * b + i] & kIsQ)) mask |= 1u << i;
            }
            write_rank(out, k.c, blocks, b, writes, mask);
            writes += __builtin_popcount(mask);
        }
    }
}

// Stage "pair sums": a and qk, one row (token i) at a time, in the canonical order of
// pair_term_add: the entries of token i in lane order, each with the earlier valid writes of
// its slot group (a: of another token; qk: of any token), nearest first. Those writes are a
// range of the write row, [writes before the group's head, writes before the entry), minus,
// for a write, its token's own earlier writes of the slot, which end the range. The range
// is taken a run at a time: a token's writes of one slot are consecutive there and share one
// log-cumsum (a repeat adds no gate), so a run takes one exp. The work is linear in the terms.
void pair_sums(const Chunk& k, const OutputBuffers& out, const ChunkScratch& s) {
    const Options& o = k.o;
    const int C = o.C, W = o.W, WR = o.W + o.R;
    double* row_a = s.row_sums;
    double* row_qk = s.row_sums + C;
    float* a = out.a + k.c * C * C;
    float* qk = out.qk + k.c * C * C;
    const auto write_token = [&](uint32_t j) { return payload_token(s.payload[s.write_row[j]]); };
    for (int i = 0; i < C; ++i) {
        std::fill(row_a, row_a + 2 * C, 0.0);
        for (int j = 0; i < k.t_valid && j < WR; ++j) {
            const int r = s.position[i * WR + j];
            const bool is_q = j >= W;
            double* const row = is_q ? row_qk : row_a;
            const uint32_t lo = s.writes_before[s.head[r]];
            uint32_t top = s.writes_before[r] - s.own_writes[r];
            while (top > lo) {
                const int tj = write_token(top - 1);
                uint32_t bottom = top - 1;   // the run: [bottom, top)
                while (bottom > lo && write_token(bottom - 1) == tj) --bottom;
                const double e = exp_fix(fix_sub(s.log[r], s.log[s.write_row[top - 1]]));
                double sum = row[tj];
                for (uint32_t x = top; x > bottom; --x) {
                    sum = pair_term_add(sum, pair_term(s.value[r], s.value[s.write_row[x - 1]], e));
                }
                row[tj] = sum;
                top = bottom;
            }
        }
        for (int j = 0; j < C; ++j) {
            a[i * C + j] = j < i ? to_f32(row_a[j]) : 0.0f;
            qk[i * C + j] = j <= i ? to_f32(row_qk[j]) : 0.0f;
        }
    }
}

}  // namespace

// With GCC, compute_chunk (every stage inlined) is compiled twice, the copy for processors
// with FMA chosen at load time: there the canonical fused multiply-adds (exp_double, the pair
// sums) are one instruction each instead of a call to the C library's fma, with the same
// bits. Not with clang, which refuses the two attributes together, nor under
// ThreadSanitizer: the choice is an ifunc, whose resolver runs before TSan's runtime is set
// up (a crash at load).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define SDM_P1_FMA_CLONE , target_clones("fma", "default")
#else
#define SDM_P1_FMA_CLONE
#endif

// The stages in order; kernels/phase1.cu runs the same stages, under the same names, in one
// thread block per chunk.
__attribute__((flatten SDM_P1_FMA_CLONE)) ChunkResult compute_chunk(const Options& o, const InputRecord& in, const OutputBuffers& out,
                          int64_t c, const ChunkScratch& s) {
    const Chunk k{o, c, valid_tokens(o, in, c), o.n()};
    ChunkResult result{};
    result.error = load_and_check(o, in, c, k.t_valid, s.sort_keys, s.gate);
    if (result.error.found) return result;
    sort_entries(k, s);
    decode(k, in, s);
    result.repeats = scan_forward(k, s);
    scan_backward(k, s);
    write_records(k, in, out, s);
    pair_sums(k, out, s);
    return result;
}

}  // namespace cpu
}  // namespace sdm_p1
