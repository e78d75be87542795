// The cases each comparison family of tests/cuda/test_cuda.cpp runs on both backends. They cover
// the case families of bindings/python/tests/test_reference.py (its COVER list, det_fields
// sets, rec_tile values and random shapes) and add the limits, the benchmark shapes and
// gates and values at the edges of the arithmetic. `quick` keeps a reduced set for
// compute-sanitizer; `seed` changes every case's data (and the random family's shapes).
#ifndef SDM_P1_TESTS_CUDA_CASE_LISTS_H
#define SDM_P1_TESTS_CUDA_CASE_LISTS_H

#include <string>
#include <vector>

#include "cuda_cases.h"

namespace cuda_test {

struct ListOptions {
    bool quick = false;
    uint64_t seed = 1;
    int sms = 132;   // the device's SMs: the half-size kernel runs where N >= 2 * sms
};

using CaseList = std::vector<CaseSpec>;

// Seeds each case from the run's seed and its name; drops records the ids cannot hold.
inline CaseList seeded(CaseList cases, const std::string& family, const ListOptions& o) {
    for (CaseSpec& s : cases) {
        s.seed = mix_seed(o.seed, name_seed(family + "/" + s.name));
        s = fit_records(s);
    }
    return cases;
}

// Keeps every k-th case in quick mode.
inline CaseList thin(CaseList cases, const ListOptions& o, size_t k) {
    if (!o.quick) return cases;
    CaseList out;
    for (size_t i = 0; i < cases.size(); i += k) out.push_back(cases[i]);
    return out;
}

// bindings/python/tests/test_reference.py's COVER list, with its default det_fields (the
// records when beta is given).
inline CaseList cover_cases(const ListOptions& o) {
    const int64_t rec = kShippedWithRecords, big = (int64_t{1} << 31) - 1;
    CaseList c = {
        spec("f32-basic", 4, 64, 32, 32, 4096).streams(2).fields(rec),
        spec("bf16-int64-perwrite-mixed", 4, 64, 32, 32, 4096)
            .streams(2)
            .ids64()
            .bfloat16()
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("repeats-small", 2, 7, 3, 3, 5).key_mode(Keys::Random).gate_kind(Gates::Mixed).fields(rec),
        spec("repeats-perwrite-bf16", 2, 7, 32, 3, 9)
            .key_mode(Keys::Random)
            .gates_per_write()
            .bfloat16()
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("skewed-1", 2, 64, 3, 3, 1).key_mode(Keys::Random).gate_kind(Gates::Mixed).fields(rec),
        spec("skewed-2-perwrite", 2, 64, 3, 1, 2)
            .key_mode(Keys::Random)
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("skewed-16-distinct", 2, 64, 3, 3, 16).key_mode(Keys::Distinct).fields(rec),
        spec("skewed-16-C256", 1, 256, 1, 1, 16).key_mode(Keys::Random).gate_kind(Gates::Tiny).fields(rec),
        spec("singletons-int64", 2, 256, 3, 1, big)
            .ids64()
            .key_mode(Keys::Distinct)
            .hits(0.0)
            .gate_kind(Gates::Strong)
            .fields(rec),
        spec("singletons-int64-qhit", 1, 64, 32, 32, big)
            .ids64()
            .key_mode(Keys::Distinct)
            .hits(0.5)
            .gate_kind(Gates::Mixed)
            .fields(rec),
        spec("C1-W64-R64", 3, 1, 64, 64, 16)
            .streams(3, 1000)
            .key_mode(Keys::Random)
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .fields(rec),
        spec("C1-W1-R1", 2, 1, 1, 1, 3).streams(2).key_mode(Keys::Random).fields(rec),
        spec("C256-W32-bf16-strong", 1, 256, 32, 32, 65536).bfloat16().gate_kind(Gates::Strong).fields(rec),
        spec("C256-W64-R64-tiny", 1, 256, 64, 64, 65536).key_mode(Keys::Pool, 8192).gate_kind(Gates::Tiny).fields(rec),
        spec("C256-valid_last", 2, 256, 3, 3, 300)
            .streams(2)
            .valid(100)
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .key_mode(Keys::Random)
            .fields(rec),
        spec("C7-W3-R32", 4, 7, 3, 32, 20).streams(2).key_mode(Keys::Pool).gate_kind(Gates::Zero).fields(rec),
        spec("C7-W64-R1", 2, 7, 64, 1, 100)
            .key_mode(Keys::Distinct)
            .gates_per_write()
            .gate_kind(Gates::Strong)
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("streams-4-valid_last-1", 8, 16, 3, 3, 40)
            .streams(4, 1000)
            .valid(1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .fields(rec),
        spec("streams-3-valid_last-C-1", 6, 64, 1, 3, 32)
            .streams(3)
            .valid(63)
            .key_mode(Keys::Random)
            .bfloat16()
            .fields(rec),
        spec("extreme-gates", 2, 64, 4, 2, 6)
            .key_mode(Keys::Random)
            .gates_per_write()
            .gate_kind(Gates::Extreme)
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("signed-gates-bf16", 2, 32, 4, 4, 10)
            .key_mode(Keys::Distinct)
            .gate_kind(Gates::Signed)
            .bfloat16()
            .fields(rec),
        spec("skewed-6-C256-W4", 1, 256, 4, 2, 6)
            .key_mode(Keys::Distinct)
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(rec),
        spec("zero-gates-one-values", 2, 64, 3, 3, 8)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Zero)
            .value_kind(Values::One)
            .fields(rec),
        spec("no-read-groups", 2, 32, 8, 8, 64)
            .streams(2)
            .valid(20)
            .gate_kind(Gates::Mixed)
            .key_mode(Keys::Random)
            .no_read_groups()
            .fields(rec),
        spec("no-beta-default-det", 2, 32, 8, 8, 64).gate_kind(Gates::Mixed),
        spec("int64-huge-offset-no-records", 4, 16, 4, 4, 1000)
            .streams(2, int64_t{1} << 40)
            .ids64()
            .key_mode(Keys::Random),
        spec("int64-num_keys-2^32", 1, 64, 8, 8, int64_t{1} << 32).ids64().key_mode(Keys::Distinct).hits(0.5),
        spec("int32-top-ids", 1, 32, 4, 4, big).key_mode(Keys::Top, 40).gate_kind(Gates::Mixed).fields(rec),
        spec("threads-1", 5, 16, 4, 4, 32).key_mode(Keys::Random).gate_kind(Gates::Mixed).fields(rec),
        spec("C256-W64-R64-2streams-bf16", 2, 256, 64, 64, 20000)
            .streams(2)
            .key_mode(Keys::Pool, 4096)
            .valid(200)
            .bfloat16()
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .ids64()
            .fields(rec),
        // one slot for everything: 8192 K entries in one group (peer counts saturate at 127,
        // sorted distances at 4095; 31 repeats per token)
        spec("saturation-one-slot", 1, 256, 32, 4, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("skewed-1-C256-W2", 1, 256, 2, 2, 1).key_mode(Keys::Random).gate_kind(Gates::Tiny).fields(rec),
        // one slot, 511 walkers (one a thread) whose terms overflow the one-batch list: the
        // pair sums start in one batch, then take the waves
        spec("one-batch-overflow", 1, 128, 3, 1, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(rec),
        // 37-bit keys (64-bit sort) in an 8192-entry chunk: a merge round of 64-bit keys
        spec("wide-keys-merge", 2, 128, 32, 32, int64_t{1} << 24).gate_kind(Gates::Mixed).fields(rec),
        // the row fields in sorted order from num_keys = C (W + R) up, else with the entry
        // fields (src/cuda/cuda_backend.cpp: sorted_rows)
        spec("rows-sorted-at-n", 2, 64, 32, 32, 4096)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("rows-in-entry-order-below-n", 2, 64, 32, 32, 4095)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_ALL),
    };
    if (o.quick) {   // the saturation chunk's pair sums are slow under the sanitizers
        c = thin(c, o, 3);
        c.push_back(spec("saturation-small", 1, 64, 32, 2, 1).key_mode(Keys::Random).fields(SDM_P1_DET_ALL));
    }
    return seeded(c, "cover", o);
}

// C in {1, 7, 64, 256}, W and R in {1, 3, 32, 64}, with the options rotating through the
// dtypes, gate widths, det_fields, read groups, key modes, streams and padding.
inline CaseList grid_cases(const ListOptions& o) {
    const int64_t Cs[] = {1, 7, 64, 256}, lanes[] = {1, 3, 32, 64};
    const int64_t dets[] = {SDM_P1_DET_ALL, SDM_P1_UNSET, kShippedWithRecords, 0, SDM_P1_DET_ALL};
    const Gates gates[] = {Gates::Normal, Gates::Mixed, Gates::Strong,  Gates::Tiny,
                           Gates::Signed, Gates::Zero,  Gates::Extreme, Gates::Logsigmoid};
    const Keys keys[] = {Keys::Pool, Keys::Random, Keys::Distinct};
    const int64_t key_counts[] = {16, 1000, 65536, 5}, tiles[] = {0, 1, 5, 128, 32};
    CaseList c;
    int i = 0;
    for (int64_t C : Cs) {
        for (int64_t W : lanes) {
            for (int64_t R : lanes) {
                // pairs grow as (C W)^2 / num_keys: keep them below ~4e5 per chunk
                const int64_t min_keys = (C * W) * (C * W) / 400000 + 1;
                const int64_t P = 1 + i % 3;
                CaseSpec s = spec("C" + std::to_string(C) + "-W" + std::to_string(W) + "-R" + std::to_string(R),
                                  P * (1 + i % 2), C, W, R, std::max(key_counts[i % 4], min_keys));
                s.streams(P).key_mode(keys[i % 3]).gate_kind(gates[i % 8]).fields(dets[i % 5]).tile(tiles[i % 5]);
                s.value_kind(i % 2 ? Values::Mixed : Values::Normal);
                if (i % 2) s.ids64();
                if ((i / 2) % 2) s.bfloat16();
                if (i % 3 == 0) s.gates_per_write();
                if (i % 5 == 4) s.no_read_groups();
                if (i % 4 == 3) s.valid(1 + (C * 5 + i) % C);
                c.push_back(s);
                ++i;
            }
        }
    }
    return seeded(thin(c, o, 4), "grid", o);
}

// test_random_shapes: seeded random shapes, options and data (the seed picks the shapes).
inline CaseList random_cases(const ListOptions& o) {
    const int64_t Cs[] = {1, 2, 7, 16, 33, 64, 128, 256}, lanes[] = {1, 3, 8, 32};
    const int64_t key_counts[] = {1, 4, 16, 100, 5000}, tiles[] = {1, 3, 32, 128};
    const Gates gates[] = {Gates::Zero, Gates::Tiny, Gates::Strong, Gates::Normal, Gates::Mixed, Gates::Signed};
    Rng rng(mix_seed(o.seed, 50));
    CaseList c;
    const int count = o.quick ? 8 : 40;
    for (int k = 0; k < count; ++k) {
        const int64_t C = rng.pick(Cs), W = rng.pick(lanes), R = rng.pick(lanes), P = 1 + rng.below(3);
        int64_t num_keys = rng.pick(key_counts);
        num_keys = std::max(num_keys, ((C * W) * (C * W) + 399999) / 400000);
        CaseSpec s = spec("random-" + std::to_string(k), P * (1 + rng.below(2)), C, W, R, num_keys);
        s.streams(P).valid(1 + rng.below(C)).gate_kind(rng.pick(gates)).fields(SDM_P1_DET_ALL).tile(rng.pick(tiles));
        s.value_kind(rng.below(2) ? Values::Mixed : Values::Normal);
        s.key_mode(num_keys < W || rng.uniform(0, 1) < 0.4 ? Keys::Random : rng.below(2) ? Keys::Pool : Keys::Distinct);
        if (k % 2) s.ids64();
        if ((k / 2) % 2) s.bfloat16();
        if (k % 3 == 0) s.gates_per_write();
        if (rng.below(5) == 0) s.no_read_groups();
        c.push_back(s);
    }
    return seeded(c, "random", o);
}

// Every det_fields bit alone, none, all, and one pair; with and without read groups.
inline CaseList det_field_cases(const ListOptions& o) {
    const int64_t sets[] = {0,
                            SDM_P1_DET_POS,
                            SDM_P1_DET_SPAY_RANK,
                            SDM_P1_DET_FLAGS,
                            SDM_P1_DET_SPAY_K,
                            SDM_P1_DET_SPAY_Q,
                            SDM_P1_DET_KREC,
                            SDM_P1_DET_KSPA,
                            SDM_P1_DET_QREC,
                            SDM_P1_DET_TILES,
                            SDM_P1_DET_DC_GIDX,
                            SDM_P1_DET_QREC8,
                            SDM_P1_DET_DC_GIDX | SDM_P1_DET_KREC,
                            SDM_P1_DET_ALL};
    CaseList c;
    for (int64_t det : sets) {
        for (bool rg : {true, false}) {
            CaseSpec s = spec("det" + std::to_string(det) + (rg ? "-rg" : "-norg"), 2, 24, 5, 6, 12);
            s.streams(2).valid(17).key_mode(Keys::Random).gates_per_write().gate_kind(Gates::Mixed).fields(det).tile(5);
            if (det & 1) s.bfloat16();
            if (!rg) s.no_read_groups();
            c.push_back(s);
        }
    }
    return seeded(c, "det_fields", o);
}

inline CaseList rec_tile_cases(const ListOptions& o) {
    CaseList c;
    for (int64_t L : {1, 3, 5, 128, 0, 1 << 20}) {
        c.push_back(spec("L" + std::to_string(L), 2, 40, 7, 5, 30)
                        .valid(33)
                        .key_mode(Keys::Pool, 20)
                        .fields(SDM_P1_DET_ALL)
                        .tile(L));
    }
    c.push_back(spec("L1-C256", 1, 256, 3, 2, 50).key_mode(Keys::Random).fields(SDM_P1_DET_ALL).tile(1));
    return seeded(c, "rec_tile", o);
}

// Each gate kind in two settings; huge positive gates (exp overflows to inf) only where no
// cell can add +inf and -inf (one lane each, or all values 1).
inline CaseList gate_cases(const ListOptions& o) {
    const std::pair<const char*, Gates> kinds[] = {{"zero", Gates::Zero},       {"tiny", Gates::Tiny},
                                                   {"strong", Gates::Strong},   {"normal", Gates::Normal},
                                                   {"signed", Gates::Signed},   {"positive", Gates::Positive},
                                                   {"extreme", Gates::Extreme}, {"subnormal", Gates::Subnormal},
                                                   {"mixed", Gates::Mixed},     {"logsigmoid", Gates::Logsigmoid}};
    CaseList c;
    for (const auto& k : kinds) {
        c.push_back(spec(std::string(k.first) + "-f32-token", 2, 64, 8, 4, 24)
                        .key_mode(Keys::Random)
                        .gate_kind(k.second)
                        .fields(SDM_P1_DET_ALL));
        c.push_back(spec(std::string(k.first) + "-bf16-write", 3, 33, 5, 3, 10)
                        .streams(3)
                        .valid(20)
                        .key_mode(Keys::Distinct)
                        .bfloat16()
                        .gates_per_write()
                        .gate_kind(k.second)
                        .fields(SDM_P1_DET_ALL));
    }
    c.push_back(spec("extreme-signed-W1-R1", 2, 256, 1, 1, 4)
                    .key_mode(Keys::Random)
                    .gate_kind(Gates::ExtremeSigned)
                    .value_kind(Values::Mixed)
                    .fields(SDM_P1_DET_ALL));
    c.push_back(spec("extreme-signed-ones", 2, 64, 8, 8, 16)
                    .key_mode(Keys::Random)
                    .gates_per_write()
                    .gate_kind(Gates::ExtremeSigned)
                    .value_kind(Values::One)
                    .fields(SDM_P1_DET_ALL));
    return seeded(thin(c, o, 2), "gates", o);
}

inline CaseList value_cases(const ListOptions& o) {
    const std::pair<const char*, Values> kinds[] = {{"normal", Values::Normal},
                                                    {"mixed", Values::Mixed},
                                                    {"one", Values::One},
                                                    {"wide", Values::Wide},
                                                    {"nonfinite", Values::NonFinite}};
    CaseList c;
    for (const auto& k : kinds) {
        for (bool bf : {false, true}) {
            CaseSpec s = spec(std::string(k.first) + (bf ? "-bf16" : "-f32"), 2, 64, 16, 16, 100);
            s.gate_kind(Gates::Mixed).value_kind(k.second).fields(SDM_P1_DET_ALL);
            if (bf) s.bfloat16();
            c.push_back(s);
        }
    }
    // NaN and infinite values on hot slots repeated within tokens (inf * 0 and inf - inf in
    // the pair sums: the NaNs the fuzzer found the backends giving different bits), both
    // kernels' forms.
    c.push_back(spec("nonfinite-repeats-f32-write", 6, 14, 4, 1, 1)
                    .key_mode(Keys::Random)
                    .gates_per_write()
                    .value_kind(Values::NonFinite)
                    .fields(SDM_P1_DET_ALL));
    c.push_back(spec("nonfinite-hot-f32-mixed", 5, 14, 5, 6, 9)
                    .streams(5)
                    .key_mode(Keys::Random)
                    .gate_kind(Gates::MixedChunks)
                    .value_kind(Values::NonFinite)
                    .fields(SDM_P1_DET_ALL));
    return seeded(thin(c, o, 2), "values", o);
}

// 1 to 4 streams: overlapping, adjacent and spaced id ranges; valid_last 1, C - 1, C / 2;
// ids near the int32 limit; int64 ids at offsets past 2^32.
inline CaseList stream_cases(const ListOptions& o) {
    CaseList c;
    const int64_t keys = 40, C = 16;
    for (int64_t P = 1; P <= 4; ++P) {
        for (int v = 0; v < 3; ++v) {
            const int64_t offsets[] = {0, keys, 1000}, valids[] = {1, C - 1, C / 2};
            c.push_back(spec("P" + std::to_string(P) + "-v" + std::to_string(v), P * (v + 1), C, 3, 3, keys)
                            .streams(P, offsets[v])
                            .valid(valids[v])
                            .key_mode(Keys::Random)
                            .gate_kind(Gates::Mixed)
                            .fields(SDM_P1_DET_ALL));
        }
    }
    c.push_back(spec("P4-int32-limit", 8, 32, 4, 4, 1000)
                    .streams(4, (INT32_MAX - 1000) / 3)
                    .key_mode(Keys::Top, 64)
                    .fields(SDM_P1_DET_ALL));
    c.push_back(spec("P4-int64-offset-2^40", 8, 32, 4, 4, 1000)
                    .streams(4, int64_t{1} << 40)
                    .ids64()
                    .key_mode(Keys::Random)
                    .fields(SDM_P1_DET_ALL));
    c.push_back(spec("P2-int64-keys-2^32", 4, 32, 4, 4, int64_t{1} << 32)
                    .streams(2, int64_t{1} << 32)
                    .ids64()
                    .key_mode(Keys::Distinct)
                    .hits(0.5)
                    .fields(SDM_P1_DET_ALL));
    return seeded(thin(c, o, 3), "streams", o);
}

// The largest chunks: C * (W + R) = 2^17 (C = W = R = 256) and other long rows.
inline CaseList largest_cases(const ListOptions& o) {
    CaseList c = {
        spec("C256-W256-R256-bf16", 2, 256, 256, 256, 1 << 20)
            .streams(2)
            .valid(200)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .fields(SDM_P1_DET_ALL),
        spec("C256-W256-R256-i64-f32-write", 1, 256, 256, 256, 65536)
            .ids64()
            .gates_per_write()
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed),
        spec("C256-W256-R256-groups", 1, 256, 256, 256, 4096)
            .key_mode(Keys::Distinct)
            .no_read_groups()
            .value_kind(Values::Mixed)
            .fields(SDM_P1_DET_ALL)
            .tile(1),
        spec("C256-W255-R256", 1, 256, 255, 256, 100000).key_mode(Keys::Pool, 20000).fields(SDM_P1_DET_ALL).tile(7),
        spec("C255-W256-R256", 1, 255, 256, 256, 100000).bfloat16().gates_per_write().fields(SDM_P1_DET_ALL),
        spec("C128-W256-R256", 2, 128, 256, 256, 65536).streams(2).valid(100).fields(SDM_P1_DET_ALL),
        spec("C256-W256-R1", 2, 256, 256, 1, 65536).fields(SDM_P1_DET_ALL),
        spec("C256-W1-R256", 2, 256, 1, 256, 1000).key_mode(Keys::Random).fields(SDM_P1_DET_ALL),
        spec("C256-W128-R256", 1, 256, 128, 256, 30000).gate_kind(Gates::Strong).fields(SDM_P1_DET_ALL),
        spec("C64-W256-R256", 4, 64, 256, 256, 65536).streams(2).gate_kind(Gates::Logsigmoid).fields(SDM_P1_DET_ALL),
        // the worst legal chunks: every read on one slot, each token writing every slot
        // (about 17 M pair terms); every id on one slot (about 4.3 G terms)
        spec("C256-W256-R256-reads-on-one-slot", 1, 256, 256, 256, 256)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Slot0)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("C256-W256-R256-one-slot", 1, 256, 256, 256, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
    };
    if (o.quick) c = {c[0]};
    if (o.quick) c[0].N = c[0].P = 1;
    return seeded(c, "largest", o);
}

// The benchmark shapes S1..S6 of docs/design.md at reduced N (S6 in full), data as the benchmark
// makes it: distinct ids per token, logsigmoid gates; default det_fields and every field.
// Between them they cover the kernels and their array placements (ArrayLayout): the
// half-size kernel, two blocks an SM, with log_high and (S5) the gates in global scratch
// (S1, S4, S5: N is 2 * sms or more); the full kernel with every array in shared memory (S1
// in quick mode), with log_high in global scratch (S2, S3); the scans' arrays and the payload
// in shared memory, the rest in global scratch (S6); the stage temporaries alone in shared
// memory (S6 with every field). largest_cases keeps only the small per-token arrays in
// shared memory and has 32-bit counts (n >= 2^16).
inline CaseList bench_shape_cases(const ListOptions& o) {
    struct Shape {
        const char* name;
        int64_t N, C, W, R, keys, P;
        bool bf16, idx64, per_write;
    };
    const int64_t twice = (2 * o.sms + 8 + 127) / 128 * 128;   // N >= 2 * sms, in whole streams
    const Shape shapes[] = {
        {"S1", twice, 64, 32, 32, 65536, 128, true, false, false},
        {"S2", 256, 128, 32, 32, 65536, 128, true, false, false},
        {"S3", 256, 64, 64, 64, 65536, 128, true, false, false},
        {"S4", twice, 64, 32, 32, 1024, 128, true, false, false},
        {"S5", twice, 64, 32, 32, 65536, 128, false, true, true},
        {"S6", 128, 128, 64, 64, 262144, 2, true, false, false},
    };
    CaseList c;
    for (const Shape& b : shapes) {
        for (bool all : {false, true}) {
            if (o.quick && (all || (b.name[1] != '1' && b.name[1] != '6'))) continue;
            CaseSpec s =
                spec(std::string(b.name) + (all ? "-all" : "-default"), o.quick ? b.P : b.N, b.C, b.W, b.R, b.keys);
            s.streams(b.P, b.keys)
                .key_mode(Keys::Distinct)
                .hits(0.0)
                .gate_kind(Gates::Logsigmoid)
                .fields(all ? SDM_P1_DET_ALL : SDM_P1_UNSET);
            if (b.bf16) s.bfloat16();
            if (b.idx64) s.ids64();
            if (b.per_write) s.gates_per_write();
            c.push_back(s);
        }
    }
    return seeded(c, "bench_shapes", o);
}

// The half-size kernel (two blocks an SM: N >= 2 * sms chunks whose arrays fit half an SM)
// on small chunks, cheap enough for the sanitizers: compact log-cumsums (normal,
// logsigmoid, strong, zero gates) and the wide fallback (mixed and extreme gates span over
// 63 bits), per-write gates, both value types, streams and a short last chunk, every field,
// hot slots and slots repeated within tokens (long walks), a walker a thread whose terms
// overflow the one-batch list.
inline CaseList two_block_cases(const ListOptions& o) {
    const int64_t N = (2 * o.sms + 15) / 8 * 8;   // divisible by the streams below
    CaseList c = {
        spec("normal-f32", N, 16, 4, 4, 64).key_mode(Keys::Random).gate_kind(Gates::Normal).fields(SDM_P1_DET_ALL),
        spec("logsigmoid-default", N, 32, 8, 8, 4096)
            .streams(8, 4096)
            .key_mode(Keys::Distinct)
            .gate_kind(Gates::Logsigmoid),
        spec("mixed-bf16-write", N, 16, 4, 4, 64)
            .streams(4)
            .valid(9)
            .bfloat16()
            .gates_per_write()
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("extreme-write-records", N, 8, 8, 2, 16)
            .key_mode(Keys::Pool)
            .gates_per_write()
            .gate_kind(Gates::Extreme)
            .value_kind(Values::Mixed)
            .fields(kShippedWithRecords),
        spec("strong-int64-hot", N, 64, 4, 4, 3)
            .ids64()
            .key_mode(Keys::Random)
            .gate_kind(Gates::Strong)
            .fields(SDM_P1_DET_ALL),
        spec("zero-one-slot", N, 16, 8, 1, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Zero)
            .value_kind(Values::One)
            .fields(SDM_P1_DET_ALL),
        spec("one-batch-overflow", N, 64, 3, 1, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Normal)
            .fields(SDM_P1_DET_ALL),
        // the half-size kernel with the row fields in sorted order: kspa alone (no slots),
        // then every field (the quick set keeps the second)
        spec("sorted-rows-kspa-bf16", N, 16, 4, 4, 1000)
            .bfloat16()
            .key_mode(Keys::Pool)
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_SHIPPED | SDM_P1_DET_KSPA),
        spec("sorted-rows-int64-write", N, 16, 4, 4, 128)
            .ids64()
            .gates_per_write()
            .key_mode(Keys::Random)
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed)
            .fields(SDM_P1_DET_ALL),
        // chunks of both kernels (main and wide-log) in one execute
        spec("mixed-chunks-default", N, 32, 8, 8, 4096)
            .streams(8, 4096)
            .key_mode(Keys::Pool)
            .gate_kind(Gates::MixedChunks),
    };
    return seeded(thin(c, o, 2), "two_blocks", o);
}

// Slot distributions as users have them, on the pair sums' paths: skewed (Zipf) ids at
// exponents 0.8 to 1.5 (S7's law is 1.1: long groups, about 40 % of entries alone), reads that
// follow recent writes, lone and grouped entries in every proportion (pools from every entry
// its own slot down to every token writing the same W slots), one group holding a whole chunk
// (every id on one slot), every read on one slot with distinct writes, and slots repeated
// within tokens inside hot groups. Small N, and N >= 2 * sms for the half-size kernel.
inline CaseList skewed_cases(const ListOptions& o) {
    const int64_t twice = (2 * o.sms + 8 + 127) / 128 * 128;   // N >= 2 * sms, in whole streams
    CaseList c = {
        spec("S7-zipf1.1", o.quick ? 128 : twice, 64, 32, 32, 65536)
            .streams(128, 65536)
            .skewed(1.1)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("S7-zipf1.1-all", 128, 64, 32, 32, 65536)
            .streams(128, 65536)
            .skewed(1.1)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16()
            .fields(SDM_P1_DET_ALL),
        spec("zipf0.8", 8, 64, 32, 32, 65536).streams(2).skewed(0.8).gate_kind(Gates::Mixed),
        spec("zipf1.1-mixed-chunks-all", 12, 64, 32, 32, 65536)
            .streams(4)
            .skewed(1.1)
            .gate_kind(Gates::MixedChunks)
            .fields(SDM_P1_DET_ALL),
        spec("zipf1.3-f32-write", 8, 64, 32, 32, 65536)
            .streams(4)
            .skewed(1.3)
            .gates_per_write()
            .gate_kind(Gates::Normal)
            .fields(SDM_P1_DET_ALL),
        spec("zipf1.5-bf16", 8, 64, 32, 32, 4096)
            .streams(2)
            .skewed(1.5)
            .bfloat16()
            .gate_kind(Gates::Strong)
            .value_kind(Values::Mixed),
        spec("zipf1.1-C128-W64", 4, 128, 64, 64, 262144).streams(2).skewed(1.1).bfloat16().gate_kind(Gates::Logsigmoid),
        spec("zipf1.2-C256-W32-i64", 2, 256, 32, 32, 65536)
            .ids64()
            .skewed(1.2)
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("zipf1.1-C16-W8-valid", 8, 16, 8, 8, 1000)
            .streams(4)
            .valid(9)
            .skewed(1.1)
            .gate_kind(Gates::Tiny)
            .fields(kShippedWithRecords),
        spec("zipf1.1-recent-reads", 8, 64, 32, 32, 65536)
            .streams(2)
            .skewed(1.1)
            .read_mode(Reads::Recent)
            .gate_kind(Gates::Logsigmoid),
        spec("recent-reads-uniform", 8, 64, 32, 32, 65536)
            .streams(2)
            .read_mode(Reads::Recent)
            .gate_kind(Gates::Normal)
            .fields(SDM_P1_DET_ALL),
        spec("all-alone", 4, 64, 32, 32, 1 << 24)
            .ids64()
            .key_mode(Keys::Distinct)
            .hits(0.0)
            .gate_kind(Gates::Logsigmoid),
        spec("pool-C*W", 4, 64, 32, 32, 65536).key_mode(Keys::Pool, 64 * 32).gate_kind(Gates::Normal),
        spec("pool-4W", 4, 64, 32, 32, 65536).key_mode(Keys::Pool, 128).gate_kind(Gates::Normal).fields(SDM_P1_DET_ALL),
        spec("pool-W-every-token-same-slots", 4, 64, 32, 32, 65536)
            .key_mode(Keys::Pool, 32)
            .hits(1.0)
            .gate_kind(Gates::Mixed),
        spec("one-slot-C64-W32", 2, 64, 32, 32, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Logsigmoid)
            .value_kind(Values::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("reads-slot0-C64", 4, 64, 32, 32, 32)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Slot0)
            .gate_kind(Gates::Normal),
        spec("reads-slot0-C256-W64-R64", 1, 256, 64, 64, 64)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Slot0)
            .gate_kind(Gates::Logsigmoid)
            .fields(SDM_P1_DET_ALL),
        spec("one-slot-C256-W64-R64", 1, 256, 64, 64, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("skewed-repeats-C64", 4, 64, 32, 32, 40)
            .key_mode(Keys::Random)
            .gates_per_write()
            .gate_kind(Gates::Mixed)
            .fields(SDM_P1_DET_ALL),
        spec("zipf1.5-few-keys-repeats", 4, 64, 32, 32, 48)
            .key_mode(Keys::Random)
            .read_mode(Reads::Zipf)
            .gate_kind(Gates::Normal),
        // N >= 2 * sms: the half-size kernel on skewed and hot chunks
        spec("two-blocks-zipf1.5", twice, 32, 16, 16, 8192).streams(128, 8192).skewed(1.5).gate_kind(Gates::Logsigmoid),
        spec("two-blocks-one-slot", twice, 16, 8, 8, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Normal)
            .fields(SDM_P1_DET_ALL),
    };
    return seeded(thin(c, o, 3), "skewed", o);
}

// Per-stream lengths of one kind for P streams of `steps` chunks of C tokens: every stream
// empty, one token, an exact multiple of C, full, or a mix (each stream its own kind, or a
// random length in 0..steps * C).
enum class Lengths { Zero, One, Multiple, Full, Mixed };

inline std::vector<int64_t> stream_lengths(Lengths kind, int64_t P, int64_t steps, int64_t C, Rng& rng) {
    std::vector<int64_t> out(static_cast<size_t>(P));
    const int64_t full = steps * C;
    for (int64_t& len : out) {
        const int64_t k = kind == Lengths::Mixed ? rng.below(7) : static_cast<int64_t>(kind);
        switch (k) {
            case 0:
                len = 0;
                break;
            case 1:
                len = 1;
                break;
            case 2:
                len = C * rng.below(steps + 1);
                break;
            case 3:
                len = full;
                break;
            case 4:
                len = full - 1;
                break;
            case 5:
                len = C * rng.below(steps) + 1 + rng.below(C);
                break;   // a partial chunk
            default:
                len = rng.below(full + 1);
                break;
        }
    }
    return out;
}

// Per-stream lengths (sdm_p1_inputs.stream_lengths, int32 and int64): every kind of length
// vector on small chunks with every field, one token a chunk, C = 256, the benchmark's S1
// shape (at reduced N, and N >= 2 * sms for the half-size kernel), 32-bit counts (global
// scratch), hot slots, per-write gates and bfloat16; padding tokens hold garbage.
inline CaseList length_cases(const ListOptions& o) {
    const int64_t twice = (2 * o.sms + 8 + 127) / 128 * 128;   // N >= 2 * sms, in whole streams
    struct Shape {
        CaseSpec s;
        std::vector<Lengths> kinds;
    };
    const std::vector<Lengths> all = {Lengths::Zero, Lengths::One,   Lengths::Multiple,
                                      Lengths::Full, Lengths::Mixed, Lengths::Mixed};
    const std::vector<Lengths> mixed = {Lengths::Mixed};
    const Shape shapes[] = {
        {spec("small-all", 12, 16, 3, 3, 40)
             .streams(4, 1000)
             .key_mode(Keys::Random)
             .gate_kind(Gates::Mixed)
             .fields(SDM_P1_DET_ALL),
         all},
        {spec("small-write-bf16-i64", 12, 16, 4, 3, 64)
             .streams(3)
             .ids64()
             .bfloat16()
             .gates_per_write()
             .key_mode(Keys::Random)
             .gate_kind(Gates::Mixed)
             .value_kind(Values::Mixed)
             .fields(SDM_P1_DET_ALL),
         all},
        {spec("P1-records", 5, 32, 8, 6, 200).key_mode(Keys::Pool).fields(kShippedWithRecords).tile(7),
         {Lengths::Zero, Lengths::Mixed, Lengths::Mixed}},
        {spec("C1", 12, 1, 4, 4, 16)
             .streams(6, 1000)
             .key_mode(Keys::Random)
             .gate_kind(Gates::Mixed)
             .fields(SDM_P1_DET_ALL),
         {Lengths::One, Lengths::Mixed}},
        {spec("C256", 4, 256, 3, 3, 300)
             .streams(2)
             .gates_per_write()
             .key_mode(Keys::Random)
             .gate_kind(Gates::Mixed)
             .fields(SDM_P1_DET_ALL),
         {Lengths::Mixed, Lengths::Mixed}},
        {spec("skewed-one-slot", 8, 64, 8, 4, 1)
             .streams(4)
             .key_mode(Keys::Random)
             .gate_kind(Gates::Normal)
             .fields(SDM_P1_DET_ALL),
         mixed},
        {spec("S1-reduced", 256, 64, 32, 32, 65536)
             .streams(128, 65536)
             .bfloat16()
             .key_mode(Keys::Distinct)
             .hits(0.0)
             .gate_kind(Gates::Logsigmoid),
         mixed},
        {spec("S1-two-blocks", twice, 64, 32, 32, 65536)
             .streams(128, 65536)
             .bfloat16()
             .key_mode(Keys::Distinct)
             .hits(0.0)
             .gate_kind(Gates::Logsigmoid)
             .fields(SDM_P1_DET_ALL),
         mixed},
        {spec("C128-W256-R256", 2, 128, 256, 256, 65536).streams(2).fields(SDM_P1_DET_ALL), {Lengths::Mixed}},
    };
    CaseList c;
    Rng rng(mix_seed(o.seed, name_seed("lengths")));
    for (const Shape& sh : shapes) {
        for (size_t k = 0; k < sh.kinds.size(); ++k) {
            CaseSpec s = sh.s;
            const bool as64 = k % 2 == 1;
            s.name += "-" + std::to_string(k) + (as64 ? "-len64" : "-len32");
            s.stream_lengths(stream_lengths(sh.kinds[k], s.P, s.steps(), s.C, rng), as64);
            c.push_back(s);
        }
    }
    return seeded(thin(c, o, 3), "lengths", o);
}

// The lean kernel (kernels/lean/): plans of the default fields (or fewer) with num_keys >= 8 n.
// Every entry alone; uniform ids as the benchmark's S1, S2, S5 and S6 draw them (both block
// tiers: up to 256 threads, three blocks an SM, and 1024); each limit at and past it (a
// bucket of 16 and 17 keys, grouped entries at n / 4 and one pair more, a unit of 64 and 96
// pair terms: past a limit the chunk goes to the general kernel, in the same execute as the
// lean chunks); lean and general chunks alternating, wide-log chunks among lean ones, and
// skewed chunks enough for every block to leave its chunks to the general kernel; repeats;
// NaN, infinite, subnormal and signed-zero values on lone entries; per-stream lengths and
// short last chunks; lanes that are not a multiple of 4 (the scalar paths); every subset of
// the default fields alone.
inline CaseList lean_cases(const ListOptions& o) {
    const int64_t big = 1 << 17;   // n = 4096 (C 64, W = R = 32): a bucket spans 32 slots
    CaseList c = {
        spec("alone-bf16", 4, 64, 32, 32, 1 << 20)
            .streams(2, 1 << 20)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .hits(0.0)
            .gate_kind(Gates::Logsigmoid),
        spec("S1-uniform", 6, 64, 32, 32, 65536)
            .streams(2, 65536)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .hits(0.05)
            .gate_kind(Gates::Logsigmoid),
        spec("S5-i64-f32-write", 4, 64, 32, 32, 65536)
            .streams(2, 65536)
            .ids64()
            .gates_per_write()
            .key_mode(Keys::Distinct)
            .hits(0.1)
            .gate_kind(Gates::Normal),
        spec("S2-C128", 3, 128, 32, 32, 65536)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .hits(0.1)
            .gate_kind(Gates::Logsigmoid),
        spec("S6-C128-W64", 2, 128, 64, 64, 262144)
            .streams(2, 262144)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .hits(0.05)
            .gate_kind(Gates::Logsigmoid),
        spec("S6-f32-write-i64", 2, 128, 64, 64, 262144)
            .ids64()
            .gates_per_write()
            .key_mode(Keys::Distinct)
            .hits(0.3)
            .gate_kind(Gates::Strong)
            .value_kind(Values::Mixed),
        spec("bucket-at-limit", 4, 64, 32, 32, big).lean_chunks(Lean::Crowd, 16).gate_kind(Gates::Logsigmoid),
        spec("bucket-past-limit", 4, 64, 32, 32, big).lean_chunks(Lean::Crowd, 17).gate_kind(Gates::Logsigmoid),
        spec("grouped-at-limit", 3, 64, 32, 32, big).lean_chunks(Lean::Pairs, 512).gate_kind(Gates::Normal).bfloat16(),
        spec("grouped-past-limit", 3, 64, 32, 32, big)
            .lean_chunks(Lean::Pairs, 513)
            .gate_kind(Gates::Normal)
            .bfloat16(),
        spec("unit-terms-at-limit", 3, 64, 32, 32, big)
            .lean_chunks(Lean::Shared, 3)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("unit-terms-past-limit", 3, 64, 32, 32, big)
            .lean_chunks(Lean::Shared, 4)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("repeats-token", 4, 64, 32, 32, big).lean_chunks(Lean::Repeats).gate_kind(Gates::Logsigmoid).bfloat16(),
        spec("repeats-write-i64", 4, 64, 32, 32, big)
            .ids64()
            .gates_per_write()
            .lean_chunks(Lean::Repeats)
            .gate_kind(Gates::Signed),
        spec("lean-and-general-chunks", 6, 64, 32, 32, big)
            .streams(2, big)
            .lean_chunks(Lean::HotChunks)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("wide-chunks-among-lean", 6, 64, 32, 32, 65536)
            .key_mode(Keys::Distinct)
            .hits(0.2)
            .gate_kind(Gates::MixedChunks),
        // skewed chunks, several a block: each block leaves its first two to the general
        // kernel, then the rest without loading them
        spec("skewed-blocks-give-up", 2400, 16, 8, 8, 4096)
            .streams(4, 4096)
            .skewed(1.1)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("nonfinite-bf16", 4, 64, 32, 32, 65536)
            .bfloat16()
            .key_mode(Keys::Distinct)
            .hits(0.2)
            .value_kind(Values::NonFinite)
            .gate_kind(Gates::Logsigmoid),
        spec("nonfinite-f32-write", 4, 64, 32, 32, 65536)
            .gates_per_write()
            .key_mode(Keys::Distinct)
            .hits(0.2)
            .value_kind(Values::NonFinite)
            .gate_kind(Gates::Normal),
        spec("wide-values-subnormal-gates", 4, 64, 32, 32, 65536)
            .key_mode(Keys::Distinct)
            .hits(0.2)
            .value_kind(Values::Wide)
            .gate_kind(Gates::Subnormal),
        spec("extreme-gates-one-values", 4, 64, 32, 32, 65536)
            .key_mode(Keys::Distinct)
            .hits(0.2)
            .value_kind(Values::One)
            .gate_kind(Gates::Extreme),
        spec("zero-gates", 2, 64, 32, 32, 65536).key_mode(Keys::Distinct).hits(0.2).gate_kind(Gates::Zero),
        spec("recent-reads", 4, 64, 32, 32, 65536)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Recent)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("valid_last-17", 4, 64, 32, 32, 65536)
            .streams(2, 65536)
            .valid(17)
            .key_mode(Keys::Distinct)
            .hits(0.3)
            .gate_kind(Gates::Normal),
        spec("scalar-lanes-C7-W3-R5", 6, 7, 3, 5, 4096)
            .streams(3, 4096)
            .valid(4)
            .key_mode(Keys::Distinct)
            .hits(0.3)
            .gate_kind(Gates::Mixed)
            .value_kind(Values::Mixed),
        spec("scalar-lanes-write-W6", 4, 33, 6, 2, 8192)
            .ids64()
            .gates_per_write()
            .key_mode(Keys::Distinct)
            .hits(0.3)
            .gate_kind(Gates::Normal),
        spec("C1-W4-R4", 8, 1, 4, 4, 4096).streams(4, 5000).key_mode(Keys::Distinct).hits(0.5).gate_kind(Gates::Normal),
        spec("no-read-groups", 4, 64, 32, 32, 65536)
            .key_mode(Keys::Distinct)
            .hits(0.3)
            .no_read_groups()
            .gate_kind(Gates::Normal),
    };
    for (int64_t det : {int64_t{0}, int64_t{SDM_P1_DET_POS}, int64_t{SDM_P1_DET_SPAY_RANK}, int64_t{SDM_P1_DET_FLAGS},
                        int64_t{SDM_P1_DET_SPAY_K}, int64_t{SDM_P1_DET_SPAY_Q}}) {
        c.push_back(spec("det" + std::to_string(det), 3, 64, 32, 32, 65536)
                        .key_mode(Keys::Distinct)
                        .hits(0.3)
                        .gate_kind(Gates::Normal)
                        .fields(det));
    }
    Rng rng(mix_seed(o.seed, name_seed("lean-lengths")));
    for (bool as64 : {false, true}) {
        CaseSpec s = spec(std::string("lengths-") + (as64 ? "len64" : "len32"), 12, 64, 32, 32, 65536)
                         .streams(4, 65536)
                         .key_mode(Keys::Distinct)
                         .hits(0.2)
                         .gate_kind(Gates::Logsigmoid)
                         .bfloat16();
        c.push_back(s.stream_lengths(stream_lengths(Lengths::Mixed, s.P, s.steps(), s.C, rng), as64));
    }
    return seeded(thin(c, o, 3), "lean", o);
}

// Skewed and hot chunks in lean plans (kernels/lean/), which the lean kernel leaves to the
// general kernel: one slot's group at the lean kernel's bucket limit and past it (16 / 17
// keys), at a warp's edge (32 / 33) and larger (300, 1024, 1025 writes and reads of one slot),
// 144 of a chunk's 256 entries in one group, skewed ids as S7 draws them (both Zipf laws and
// exponents 0.8 to 1.5, reads that follow recent writes), with non-finite values, subnormal
// gates, per-write gates and per-stream lengths, and at S6's chunk size (C 128, W = R = 64).
inline CaseList lean_skewed_cases(const ListOptions& o) {
    const int64_t big = 1 << 17;
    CaseList c;
    for (int64_t m : {int64_t{16}, int64_t{17}, int64_t{32}, int64_t{33}, int64_t{300}, int64_t{1024}, int64_t{1025}}) {
        c.push_back(spec("column-" + std::to_string(m), 3, 64, 32, 32, big)
                        .lean_chunks(Lean::Column, m)
                        .gate_kind(m % 2 ? Gates::Logsigmoid : Gates::Normal)
                        .value_kind(m == 300 ? Values::Mixed : Values::Normal));
    }
    c.push_back(
        spec("column-144-of-256-C16", 2, 16, 8, 8, big).lean_chunks(Lean::Column, 16 * 9).gate_kind(Gates::Mixed));
    c.push_back(spec("skewed-S7-zipf1.1", 4, 64, 32, 32, 65536).streams(2, 65536).skewed(1.1).bfloat16());
    c.push_back(
        spec("skewed-S7-zipf0.8-write", 3, 64, 32, 32, 65536).skewed(0.8).gates_per_write().gate_kind(Gates::Normal));
    c.push_back(spec("skewed-S7-zipf1.5-i64", 3, 64, 32, 32, 65536).ids64().skewed(1.5).gate_kind(Gates::Logsigmoid));
    c.push_back(spec("skewed-zipf-keys-recent-reads", 3, 64, 32, 32, 65536)
                    .key_mode(Keys::Zipf)
                    .read_mode(Reads::Recent)
                    .gate_kind(Gates::Logsigmoid)
                    .bfloat16());
    c.push_back(spec("skewed-zipf-nonfinite", 3, 64, 32, 32, 65536).skewed(1.1).value_kind(Values::NonFinite));
    c.push_back(spec("skewed-zipf-subnormal-gates", 3, 64, 32, 32, 65536)
                    .skewed(1.1)
                    .value_kind(Values::Wide)
                    .gate_kind(Gates::Subnormal));
    c.push_back(spec("skewed-C128-W64", 2, 128, 64, 64, 262144).skewed(1.1).bfloat16().gate_kind(Gates::Logsigmoid));
    {
        Rng lengths_rng(mix_seed(o.seed, name_seed("lean-skewed-lengths")));
        CaseSpec s = spec("skewed-zipf-lengths", 8, 64, 32, 32, 65536).streams(4, 65536).skewed(1.1).bfloat16();
        c.push_back(s.stream_lengths(stream_lengths(Lengths::Mixed, s.P, s.steps(), s.C, lengths_rng), false));
    }
    return seeded(thin(c, o, 3), "lean_skewed", o);
}

// The lean kernel's stage "records" (kernels/lean/lean_records.cuh): the training field sets
// (296, 952, 2872, every field but kspa) and each row field alone, on lone
// entries (uniform ids as S1 and S6 draw them), on grouped ones (pairs, shared slots, token
// repeats, a bucket at the limit, a chunk left to the general kernel beside lean ones), with
// per-write gates and int64 ids, bfloat16, NaN and infinite values, subnormal gates, small
// tiles (L 1, 5, 32: a tile at every K-row index, tiles that split groups), lanes that are not
// a multiple of 4, no read groups, short last chunks and per-stream lengths. kspa runs in the
// lean kernel alone or beside other fields (kspa alone; pairs-kspa; S6's 1,024-thread form with
// every field); with qrec on S1's 256-thread form (kShippedWithRecords, every field) the
// general kernel computes such plans.
inline CaseList lean_record_cases(const ListOptions& o) {
    const int64_t big = 1 << 17;
    // every field the lean kernel serves (a plan asking for kspa keeps the general kernel)
    const int64_t all = SDM_P1_DET_ALL & ~SDM_P1_DET_KSPA, t952 = 952, t2872 = 2872;
    CaseList c;
    for (int64_t det : {int64_t{296}, t952, t2872, kShippedWithRecords, all, int64_t{SDM_P1_DET_ALL},
                        int64_t{SDM_P1_DET_KREC}, int64_t{SDM_P1_DET_KSPA}, int64_t{SDM_P1_DET_QREC},
                        int64_t{SDM_P1_DET_TILES}, int64_t{SDM_P1_DET_DC_GIDX}, int64_t{SDM_P1_DET_QREC8}}) {
        c.push_back(spec("S1-det" + std::to_string(det), 4, 64, 32, 32, 65536)
                        .streams(2, 65536)
                        .key_mode(Keys::Distinct)
                        .hits(0.3)
                        .gate_kind(Gates::Logsigmoid)
                        .fields(det));
    }
    c.push_back(spec("S6-bf16-det2872", 2, 128, 64, 64, 262144)
                    .streams(2, 262144)
                    .bfloat16()
                    .key_mode(Keys::Distinct)
                    .hits(0.05)
                    .gate_kind(Gates::Logsigmoid)
                    .fields(t2872));
    c.push_back(spec("S6-bf16-every-field", 2, 128, 64, 64, 262144)
                    .streams(2, 262144)
                    .bfloat16()
                    .key_mode(Keys::Distinct)
                    .hits(0.2)
                    .gate_kind(Gates::Mixed)
                    .fields(SDM_P1_DET_ALL));
    c.push_back(spec("S6-f32-write-i64-all", 2, 128, 64, 64, 262144)
                    .ids64()
                    .gates_per_write()
                    .key_mode(Keys::Distinct)
                    .hits(0.3)
                    .gate_kind(Gates::Strong)
                    .value_kind(Values::Mixed)
                    .fields(all));
    c.push_back(
        spec("pairs-all", 3, 64, 32, 32, big).lean_chunks(Lean::Pairs, 256).gate_kind(Gates::Normal).fields(all));
    c.push_back(spec("pairs-bf16-952", 3, 64, 32, 32, big)
                    .lean_chunks(Lean::Pairs, 300)
                    .gate_kind(Gates::Logsigmoid)
                    .bfloat16()
                    .fields(t952));
    c.push_back(spec("pairs-kspa", 3, 64, 32, 32, big)
                    .lean_chunks(Lean::Pairs, 256)
                    .gate_kind(Gates::Mixed)
                    .value_kind(Values::Mixed)
                    .fields(SDM_P1_DET_SHIPPED | SDM_P1_DET_KSPA | SDM_P1_DET_KREC | SDM_P1_DET_TILES));
    c.push_back(spec("shared-all", 3, 64, 32, 32, big)
                    .lean_chunks(Lean::Shared, 3)
                    .gate_kind(Gates::Normal)
                    .value_kind(Values::Mixed)
                    .fields(all));
    c.push_back(spec("repeats-token-all", 4, 64, 32, 32, big)
                    .lean_chunks(Lean::Repeats)
                    .gate_kind(Gates::Logsigmoid)
                    .fields(all));
    c.push_back(spec("repeats-write-i64-all", 4, 64, 32, 32, big)
                    .ids64()
                    .gates_per_write()
                    .lean_chunks(Lean::Repeats)
                    .gate_kind(Gates::Signed)
                    .fields(all));
    c.push_back(spec("bucket-at-limit-2872", 4, 64, 32, 32, big)
                    .lean_chunks(Lean::Crowd, 16)
                    .gate_kind(Gates::Logsigmoid)
                    .fields(t2872));
    c.push_back(spec("lean-and-general-chunks-all", 6, 64, 32, 32, big)
                    .streams(2, big)
                    .lean_chunks(Lean::HotChunks)
                    .gate_kind(Gates::Logsigmoid)
                    .bfloat16()
                    .fields(all));
    c.push_back(spec("nonfinite-write-all", 4, 64, 32, 32, 65536)
                    .gates_per_write()
                    .key_mode(Keys::Distinct)
                    .hits(0.2)
                    .value_kind(Values::NonFinite)
                    .gate_kind(Gates::Normal)
                    .fields(all));
    c.push_back(spec("subnormal-gates-952", 4, 64, 32, 32, 65536)
                    .key_mode(Keys::Distinct)
                    .hits(0.2)
                    .value_kind(Values::Wide)
                    .gate_kind(Gates::Subnormal)
                    .fields(t952));
    for (int64_t L : {int64_t{1}, int64_t{5}, int64_t{32}}) {
        c.push_back(spec("tile-" + std::to_string(L), 3, 64, 32, 32, big)
                        .lean_chunks(Lean::Pairs, 200)
                        .gate_kind(Gates::Normal)
                        .tile(L)
                        .fields(all));
    }
    c.push_back(spec("scalar-lanes-C7-W3-R5-all", 6, 7, 3, 5, 4096)
                    .streams(3, 4096)
                    .valid(4)
                    .key_mode(Keys::Distinct)
                    .hits(0.3)
                    .gate_kind(Gates::Mixed)
                    .value_kind(Values::Mixed)
                    .tile(3)
                    .fields(all));
    c.push_back(spec("no-read-groups-all", 4, 64, 32, 32, 65536)
                    .key_mode(Keys::Distinct)
                    .hits(0.3)
                    .no_read_groups()
                    .gate_kind(Gates::Normal)
                    .fields(all));
    c.push_back(spec("valid_last-17-2872", 4, 64, 32, 32, 65536)
                    .streams(2, 65536)
                    .valid(17)
                    .key_mode(Keys::Distinct)
                    .hits(0.3)
                    .gate_kind(Gates::Normal)
                    .fields(t2872));
    Rng rng(mix_seed(o.seed, name_seed("lean-records-lengths")));
    CaseSpec s = spec("lengths-all", 12, 64, 32, 32, 65536)
                     .streams(4, 65536)
                     .key_mode(Keys::Distinct)
                     .hits(0.2)
                     .gate_kind(Gates::Logsigmoid)
                     .bfloat16()
                     .fields(all);
    c.push_back(s.stream_lengths(stream_lengths(Lengths::Mixed, s.P, s.steps(), s.C, rng), true));
    return seeded(thin(c, o, 3), "lean_records", o);
}

// Chunks at the lean backward's limits (kernels/backward/lean/): a group of kSmallGroup = 32
// entries (a lane each, in a warp batch) and of 33 (a hot group, a warp's), a hot group of
// hot_max entries (max(64, 2 C) rounded up to 32: 64 at C = 16, 128 at C = 64) and of one more
// (its chunk goes to the general backward, beside the lean backward's odd chunks), hot groups
// of writes and reads (the first 32 tokens write the same 32 slots and each reads one: groups
// of 33; 31 tokens: 32), skewed chunks with many hot groups, per-write gates, non-finite
// values and gates, bfloat16 and per-stream lengths.
inline CaseList lean_backward_cases(const ListOptions& o) {
    const int64_t big = 1 << 17;
    CaseList c = {
        spec("group-32-small", 4, 16, 8, 8, big).lean_chunks(Lean::Group, 32).gate_kind(Gates::Logsigmoid),
        spec("group-33-hot", 4, 16, 8, 8, big).lean_chunks(Lean::Group, 33).gate_kind(Gates::Logsigmoid).bfloat16(),
        spec("group-64-hot-max", 4, 16, 8, 8, big).lean_chunks(Lean::Group, 64).gate_kind(Gates::Normal),
        spec("group-65-general", 4, 16, 8, 8, big)
            .lean_chunks(Lean::Group, 65)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("group-128-hot-max-C64", 2, 64, 32, 32, big).lean_chunks(Lean::Group, 128).gate_kind(Gates::Logsigmoid),
        spec("group-129-general-C64", 2, 64, 32, 32, big)
            .lean_chunks(Lean::Group, 129)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("group-40-write-gates", 4, 16, 8, 8, big)
            .gates_per_write()
            .lean_chunks(Lean::Group, 40)
            .gate_kind(Gates::Signed),
        spec("group-40-nonfinite", 4, 16, 8, 8, big)
            .lean_chunks(Lean::Group, 40)
            .value_kind(Values::NonFinite)
            .gate_kind(Gates::Subnormal),
        spec("shared-31-groups-32", 2, 64, 32, 32, big).lean_chunks(Lean::Shared, 31).gate_kind(Gates::Normal),
        spec("shared-32-groups-33", 2, 64, 32, 32, big)
            .lean_chunks(Lean::Shared, 32)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("S8-zipf1.1-reduced", 2, 128, 64, 64, 262144)
            .streams(2)
            .skewed(1.1)
            .bfloat16()
            .gate_kind(Gates::Logsigmoid),
        spec("S8-zipf1.5-reduced", 2, 128, 64, 64, 262144)
            .streams(2)
            .skewed(1.5)
            .bfloat16()
            .gate_kind(Gates::Logsigmoid),
        spec("S7-zipf1.3-write-gates", 4, 64, 32, 32, 65536)
            .streams(2)
            .skewed(1.3)
            .gates_per_write()
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("S4-keys1024", 4, 64, 32, 32, 1024).key_mode(Keys::Distinct).gate_kind(Gates::Logsigmoid).bfloat16(),
        spec("recent-reads-C128", 2, 128, 32, 32, 4096)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Recent)
            .gate_kind(Gates::Normal),
        spec("wide-chunks-skewed", 6, 64, 32, 32, 65536).skewed(1.1).gate_kind(Gates::MixedChunks),
    };
    Rng rng(mix_seed(o.seed, name_seed("lean-backward-lengths")));
    CaseSpec lengths = spec("skewed-lengths", 12, 64, 32, 32, 65536)
                           .streams(4, 65536)
                           .skewed(1.2)
                           .gate_kind(Gates::Logsigmoid)
                           .bfloat16();
    c.push_back(
        lengths.stream_lengths(stream_lengths(Lengths::Mixed, lengths.P, lengths.steps(), lengths.C, rng), true));
    return seeded(thin(c, o, 2), "lean-backward", o);
}

// Chunks for the spread path (kernels/spread/): hot chunks on the pair sums' warp path in a plan
// of more chunks than two a main block (it has no slots: every chunk summed in place, whatever
// the threshold), S8's shape at reduced N (its chunks pass the default threshold), a chunk on
// one slot with C = 256, reads on one slot after recent writes, and hot chunks with per-stream
// lengths. Then the warp path's dense batches (kernels/general/pair_dense.cuh: 32 walkers each
// with a run of every earlier token): every id on one slot with W and R past a warp (a dense
// batch of 32, then one of 4) and C past 64 (two passes of cells); every token writing every
// slot of a small bank with reads on slot 0, gates by write (a cell's exp argument changes
// from walker to walker); a bank of 30 slots for 24 writes a token (dense batches in the first
// rows, windows after, in one unit's batches too); wide log-cumsums and non-finite values on
// one slot. The first and the last two of those chunks reach the spread kernel's split
// (kSpreadSplitTermsPerCell: (W + R) * W / 2 terms a cell on one slot), their units summed in
// parts of 32 cells (C = 72: 32, 32, 8; C = 33: 32, 1); two more split: 16 slots of 64 writes
// a token (runs of 4, most rows past the first few with a token missing from a walker's
// range: windows, each part adding its own cells), and reads on slot 0 of 16 slots each
// token writes once (no runs; 12 reads a write).
inline CaseList spread_cases(const ListOptions& o) {
    const int64_t twice = (2 * o.sms + 8 + 127) / 128 * 128;   // N >= 2 * sms, in whole streams
    CaseList c = {
        spec("many-chunks-no-slots-one-slot", 8 * twice, 16, 32, 32, 1)
            .streams(128)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("S8-reduced", o.quick ? 4 : 16, 128, 64, 64, 262144)
            .streams(2)
            .skewed(1.1)
            .bfloat16()
            .gate_kind(Gates::Logsigmoid),
        spec("one-slot-C256-W32-R32", 2, 256, 32, 32, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("reads-slot0-recent-C128", 4, 128, 32, 32, 64)
            .streams(2)
            .key_mode(Keys::Random)
            .read_mode(Reads::Recent)
            .gate_kind(Gates::Normal)
            .fields(SDM_P1_DET_ALL),
        spec("dense-one-slot-C72-W36-R36", 3, 72, 36, 36, 1)
            .key_mode(Keys::Random)
            .gate_kind(Gates::Logsigmoid)
            .bfloat16(),
        spec("dense-every-slot-reads-slot0", 2, 48, 40, 40, 40)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Slot0)
            .gates_per_write()
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
        spec("dense-then-windows-30-slots", 4, 64, 24, 24, 30).key_mode(Keys::Random).gate_kind(Gates::Logsigmoid),
        spec("dense-wide-logs-one-slot", 2, 40, 33, 31, 1).key_mode(Keys::Random).gate_kind(Gates::Mixed),
        spec("dense-nonfinite-one-slot", 2, 33, 32, 32, 1)
            .key_mode(Keys::Random)
            .value_kind(Values::NonFinite)
            .gate_kind(Gates::Subnormal),
        spec("split-windows-16-slots", 2, 64, 64, 64, 16).key_mode(Keys::Random).gate_kind(Gates::Logsigmoid),
        spec("split-reads-slot0-distinct-writes", 2, 64, 16, 192, 16)
            .key_mode(Keys::Distinct)
            .read_mode(Reads::Slot0)
            .gate_kind(Gates::Normal)
            .value_kind(Values::Mixed),
    };
    Rng rng(mix_seed(o.seed, name_seed("spread-lengths")));
    CaseSpec hot = spec("one-slot-lengths", 12, 16, 32, 32, 1)
                       .streams(4)
                       .key_mode(Keys::Random)
                       .gate_kind(Gates::Normal)
                       .fields(SDM_P1_DET_ALL);
    c.push_back(hot.stream_lengths(stream_lengths(Lengths::Mixed, hot.P, hot.steps(), hot.C, rng), false));
    return seeded(thin(c, o, 2), "spread", o);
}

// A chunk of C tokens whose W writes and R reads all hit one slot, every token valid: its pair
// terms (a walker's earlier writes in the group, its own token's included) are, for token t's
// write lane l, t * W + l, and for its reads (t + 1) * W each. With W + R >= 33 it takes the
// warp path (at least 16 walkers a unit).
inline CaseSpec one_slot_chunks(int64_t N, int64_t C, int64_t W, int64_t R) {
    return spec("one-slot-threshold", N, C, W, R, 1).key_mode(Keys::Random).gate_kind(Gates::Normal);
}
inline uint64_t one_slot_chunk_terms(int64_t C, int64_t W, int64_t R) {
    uint64_t terms = 0;
    for (int64_t t = 0; t < C; ++t) {
        for (int64_t l = 0; l < W; ++l) terms += static_cast<uint64_t>(t * W + l);
        terms += static_cast<uint64_t>(R * (t + 1) * W);
    }
    return terms;
}

}   // namespace cuda_test

#endif   // SDM_P1_TESTS_CUDA_CASE_LISTS_H
