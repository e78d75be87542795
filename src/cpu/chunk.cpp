#include "chunk.h"

#include <algorithm>
#include <cstring>

#include "chunk_stages.h"

namespace sdm_p1 {
namespace cpu {

size_t ChunkScratch::bytes(const Options& o) {
    const size_t n = static_cast<size_t>(o.n());
    return align64(n * sizeof(uint64_t)) + align64(n * sizeof(uint32_t)) + 2 * align64(n * sizeof(Fix)) +
           5 * align64(n * sizeof(uint32_t)) + 2 * align64(n * sizeof(int32_t)) + align64(n * sizeof(float)) +
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

// Stage "records": every per-entry output, the sorted rows, records and indices (in sorted
// order, through the shared write_entry_outputs), then the sorted payloads and the rank table.
void write_records(const Chunk& k, const InputRecord& in, const OutputBuffers& out, const ChunkScratch& s) {
    const Options& o = k.o;
    const ChunkFacts f{k.c,    o.C,        o.W,
                       o.R,    o.rec_tile, (k.c % o.P) * o.stream_offset,
                       o.bf16, in.beta,    make_divider(static_cast<uint32_t>(o.rec_tile))};
    uint32_t jk = 0, jq = 0;    // index in the write / read row
    int32_t valid_groups = 0;   // valid groups that ended before (valid LAST writes)
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
// its slot group that pair with it, nearest first (walk_earlier_writes). The work is linear
// in the terms.
void pair_sums(const Chunk& k, const OutputBuffers& out, const ChunkScratch& s) {
    const Options& o = k.o;
    const int C = o.C, W = o.W, WR = o.W + o.R;
    double* row_a = s.row_sums;
    double* row_qk = s.row_sums + C;
    float* a = out.a + k.c * C * C;
    float* qk = out.qk + k.c * C * C;
    for (int i = 0; i < C; ++i) {
        std::fill(row_a, row_a + 2 * C, 0.0);
        for (int j = 0; i < k.t_valid && j < WR; ++j) {
            const int r = s.position[i * WR + j];
            double* const row = j >= W ? row_qk : row_a;
            walk_earlier_writes(s, r, [&](int tj, double e, uint32_t bottom, uint32_t top) {
                double sum = row[tj];
                for (uint32_t x = top; x > bottom; --x) {
                    sum = pair_term_add(sum, pair_term(s.value[r], s.value[s.write_row[x - 1]], e));
                }
                row[tj] = sum;
            });
        }
        for (int j = 0; j < C; ++j) {
            a[i * C + j] = j < i ? to_f32(row_a[j]) : 0.0f;
            qk[i * C + j] = j <= i ? to_f32(row_qk[j]) : 0.0f;
        }
    }
}

}   // namespace

// The stages in order; kernels/phase1.cu runs the same stages, under the same names, in one
// thread block per chunk.
__attribute__((flatten SDM_P1_FMA_CLONE)) ChunkResult compute_chunk(const Options& o, const InputRecord& in,
                                                                    const OutputBuffers& out, int64_t c,
                                                                    const ChunkScratch& s) {
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

}   // namespace cpu
}   // namespace sdm_p1
