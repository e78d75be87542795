// The stage dump's cases, the CPU stages run one by one with their arrays recorded, and the
// stage-by-stage comparison (tests/stage_dump/stage_dump.h).
#include "stage_dump.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "../../src/cpu/chunk_stages.h"

namespace stage_dump {

using sdm_p1::Fix;
using sdm_p1::Options;

const ArraySpec kSpecs[kDumpArrays] = {
    {"load and check", "keys", "uint64", "entry e"},
    {"load and check", "value", "float", "entry e"},
    {"load and check", "gate", "Fix", "t * gate_width + lane"},
    {"load and check", "gate_exp", "double", "token t"},
    {"load and check", "walk_mask", "uint32", "mask word"},
    {"sort", "keys", "uint64", "sorted position r"},
    {"decode", "payload", "uint32", "sorted position r"},
    {"decode", "position", "count", "entry e"},
    {"decode", "slot", "uint32", "sorted position r"},
    {"scans, forward", "log", "Fix", "sorted position r"},
    {"scans, forward", "before", "count", "sorted position r"},
    {"scans, forward", "writes", "count", "sorted position r"},
    {"scans, forward", "repeats, walkers", "uint32", "count"},
    {"scans, backward", "end", "count", "sorted position r"},
    {"scans, backward", "firsts", "count", "sorted position r"},
    {"scans, backward", "payload", "uint32", "sorted position r"},
    {"scans, backward", "valid_groups", "uint32", "count"},
    {"records", "walk_mask", "uint32", "mask word"},
    {"pair sums", "write_row", "count", "write-row index j"},
};

DumpLayout dump_layout(const Options& o) {
    const uint64_t n = static_cast<uint64_t>(o.n()), C = static_cast<uint64_t>(o.C);
    const uint64_t masks = C * static_cast<uint64_t>(sdm_p1::mask_words(o.W) + sdm_p1::mask_words(o.R));
    DumpLayout l{};
    const uint64_t counts[kDumpArrays] = {
        n,
        n,
        C * static_cast<uint64_t>(o.gate_width),
        o.gate_width == 1 ? C : 0,
        masks,   // load
        n,       // sort
        n,
        n,
        n,   // decode
        n,
        n,
        n,
        2,   // forward
        n,
        n,
        n,
        1,                                // backward
        masks,                            // records
        C * static_cast<uint64_t>(o.W),   // pair sums
    };
    for (int a = 0; a < kDumpArrays; ++a) {
        l.count[a] = counts[a];
        l.words[a] = (a == kLoadGate || a == kForwardLog) ? 2 : 1;
        l.offset[a] = l.total;
        l.total += l.count[a] * l.words[a];
    }
    return l;
}

namespace {

enum class Ids { kDistinct, kRandom };   // distinct slots within a token, or any
enum class Gates { kNormal, kWide };     // -0.5..0; or spanning 2^-70..2^20 (the wide log form)

struct Spec {
    const char* name;
    int64_t N, C, W, R, P, num_keys, valid_last, stream_offset;
    bool idx64, bf16;
    bool per_write;
    Ids ids;
    Gates gates;
};

Case make_case(const Spec& p, uint64_t seed) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = p.N;
    d.C = p.C;
    d.W = p.W;
    d.R = p.R;
    d.num_parallel = p.P;
    d.stream_offset = p.stream_offset;
    d.num_keys = p.num_keys;
    d.valid_last = p.valid_last;
    d.index_dtype = p.idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = p.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = p.per_write ? p.W : 1;
    d.need_read_groups = 1;
    d.det_fields = SDM_P1_DET_ALL;
    d.rec_tile = 5;
    d.backend = SDM_P1_BACKEND_CPU;
    d.num_threads = 1;
    Case c;
    c.name = p.name;
    c.options = sdm_p1::resolve_options(&d);
    const Options& o = c.options;
    std::mt19937_64 rng(seed);
    const auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
    const auto below = [&](int64_t m) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(m)); };
    const int64_t tokens = o.N * o.C;
    std::vector<int64_t> kid(static_cast<size_t>(tokens * o.W)), qid(static_cast<size_t>(tokens * o.R));
    std::vector<float> kv(kid.size()), qv(qid.size());
    c.g.resize(static_cast<size_t>(tokens * o.gate_width));
    c.beta.resize(static_cast<size_t>(tokens));
    for (int64_t ch = 0; ch < o.N; ++ch) {
        const int t_valid = ch >= o.N - o.P ? o.valid_last : o.C;
        const int64_t base = (ch % o.P) * o.stream_offset;
        std::vector<int64_t> written;
        for (int t = 0; t < o.C; ++t) {
            const int64_t tok = ch * o.C + t;
            const bool valid = t < t_valid;
            std::vector<int64_t> slots;
            for (int l = 0; l < o.W; ++l) {
                int64_t s = below(o.num_keys);
                if (p.ids == Ids::kDistinct) {
                    while (std::find(slots.begin(), slots.end(), s) != slots.end()) s = below(o.num_keys);
                }
                slots.push_back(s);
                written.push_back(s);
                // A padding token's ids and values are never read: garbage.
                kid[static_cast<size_t>(tok * o.W + l)] = valid ? base + s : -7 - l;
                kv[static_cast<size_t>(tok * o.W + l)] = valid ? static_cast<float>(uniform(-1.0, 1.0)) : NAN;
            }
            for (int l = 0; l < o.R; ++l) {
                // Reads mostly of slots the chunk writes, so that read groups meet write groups.
                const int64_t s = uniform(0.0, 1.0) < 0.7
                                      ? written[static_cast<size_t>(below(static_cast<int64_t>(written.size())))]
                                      : below(o.num_keys);
                qid[static_cast<size_t>(tok * o.R + l)] = valid ? base + s : INT32_MAX - l;
                qv[static_cast<size_t>(tok * o.R + l)] = valid ? static_cast<float>(uniform(-1.0, 1.0)) : INFINITY;
            }
            for (int l = 0; l < o.gate_width; ++l) {
                float g = static_cast<float>(-uniform(0.0, 0.5));
                if (p.gates == Gates::kWide) {
                    const int64_t kind = below(3);
                    g = kind == 0 ? std::ldexp(-1.5f, -70) : kind == 1 ? -std::ldexp(1.25f, 20) : g;
                }
                c.g[static_cast<size_t>(tok * o.gate_width + l)] = valid ? g : NAN;
            }
            c.beta[static_cast<size_t>(tok)] = valid ? static_cast<float>(uniform(0.0, 1.0)) : NAN;
        }
    }
    const auto ids = [&](const std::vector<int64_t>& v) {
        std::vector<unsigned char> b(v.size() * (o.idx64 ? 8 : 4));
        for (size_t i = 0; i < v.size(); ++i) {
            if (o.idx64) {
                std::memcpy(&b[i * 8], &v[i], 8);
            } else {
                const int32_t x = static_cast<int32_t>(v[i]);
                std::memcpy(&b[i * 4], &x, 4);
            }
        }
        return b;
    };
    const auto values = [&](const std::vector<float>& v) {
        std::vector<unsigned char> b(v.size() * (o.bf16 ? 2 : 4));
        for (size_t i = 0; i < v.size(); ++i) {
            uint32_t bits;
            std::memcpy(&bits, &v[i], 4);
            if (o.bf16) {
                const uint16_t h = static_cast<uint16_t>(bits >> 16);   // truncated: a bfloat16 all the same
                std::memcpy(&b[i * 2], &h, 2);
            } else {
                std::memcpy(&b[i * 4], &bits, 4);
            }
        }
        return b;
    };
    c.k_idx = ids(kid);
    c.q_idx = ids(qid);
    c.k_val = values(kv);
    c.q_val = values(qv);
    return c;
}

}   // namespace

std::vector<Case> make_cases() {
    const Spec specs[] = {
        // name, N, C, W, R, P, num_keys, valid_last, stream_offset, idx64, bf16, per_write, ids, gates
        {"uniform", 2, 16, 8, 8, 1, 4096, 16, 0, false, false, false, Ids::kDistinct, Gates::kNormal},
        {"hot slots", 2, 32, 4, 4, 1, 6, 32, 0, true, true, true, Ids::kDistinct, Gates::kNormal},
        {"repeats within a token", 2, 16, 6, 3, 1, 4, 16, 0, false, false, false, Ids::kRandom, Gates::kNormal},
        {"padding", 4, 16, 4, 4, 2, 64, 7, 1000, false, false, true, Ids::kRandom, Gates::kNormal},
        {"one slot", 1, 64, 8, 8, 1, 1, 64, 0, false, true, false, Ids::kRandom, Gates::kNormal},
        {"merge rounds (n = 8192, 64-bit keys)", 1, 64, 64, 64, 1, 1 << 20, 64, 0, true, false, false, Ids::kDistinct,
         Gates::kNormal},
        {"wide log form", 2, 32, 4, 4, 1, 8, 32, 0, false, false, false, Ids::kRandom, Gates::kWide},
    };
    std::vector<Case> cases;
    uint64_t seed = 2026;
    for (const Spec& p : specs) cases.push_back(make_case(p, seed++));
    return cases;
}

int64_t input_id(const Case& c, bool is_q, int64_t tok, int lane) {
    const Options& o = c.options;
    const size_t i = static_cast<size_t>(tok * (is_q ? o.R : o.W) + lane);
    const unsigned char* b = (is_q ? c.q_idx : c.k_idx).data();
    if (o.idx64) {
        int64_t v;
        std::memcpy(&v, b + 8 * i, 8);
        return v;
    }
    int32_t v;
    std::memcpy(&v, b + 4 * i, 4);
    return v;
}

float input_value(const Case& c, bool is_q, int64_t tok, int lane) {
    const Options& o = c.options;
    const size_t i = static_cast<size_t>(tok * (is_q ? o.R : o.W) + lane);
    const unsigned char* b = (is_q ? c.q_val : c.k_val).data();
    uint32_t bits;
    if (o.bf16) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        bits = static_cast<uint32_t>(h) << 16;
    } else {
        std::memcpy(&bits, b + 4 * i, 4);
    }
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
}

HostOutputs host_outputs(const Options& o, unsigned char fill) {
    const sdm_p1::OutputViews views = sdm_p1::describe_outputs(o);
    HostOutputs h;
    h.fields.resize(SDM_P1_FIELD_COUNT);
    void* by_field[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (!views[static_cast<size_t>(f)].requested) continue;
        h.fields[static_cast<size_t>(f)].assign(views[static_cast<size_t>(f)].bytes, fill);
        by_field[f] = h.fields[static_cast<size_t>(f)].data();
    }
    h.buffers = sdm_p1::output_buffers(by_field);
    return h;
}

sdm_p1::InputRecord input_record(const Case& c, const sdm_p1::OutputBuffers& out) {
    sdm_p1::InputRecord in{};
    in.k_idx = c.k_idx.data();
    in.q_idx = c.q_idx.data();
    in.k_val = c.k_val.data();
    in.q_val = c.q_val.data();
    in.g = c.g.data();
    in.beta = c.beta.data();
    in.stream_lengths = nullptr;
    in.out = out;
    return in;
}

namespace {

// A chunk's scratch, 64-byte aligned.
struct Scratch {
    std::vector<unsigned char> bytes;
    sdm_p1::cpu::ChunkScratch s;
    explicit Scratch(const Options& o) : bytes(sdm_p1::cpu::ChunkScratch::bytes(o) + 64) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data());
        s.bind(reinterpret_cast<void*>((p + 63) / 64 * 64), o);
    }
};

struct Recorder {
    const DumpLayout& l;
    std::vector<uint64_t>& d;
    template <typename T>
    void words(DumpArray a, const T* p) {
        for (uint64_t i = 0; i < l.count[a]; ++i) {
            uint64_t w = 0;
            std::memcpy(&w, &p[i], sizeof(T));
            d[l.offset[a] + i] = w;
        }
    }
    void fix(DumpArray a, const Fix* p) {
        for (uint64_t i = 0; i < l.count[a]; ++i) {
            d[l.offset[a] + 2 * i] = p[i].lo;
            d[l.offset[a] + 2 * i + 1] = p[i].hi;
        }
    }
};

}   // namespace

sdm_p1::InputError run_cpu_stages(const Case& c, const sdm_p1::OutputBuffers& out, int64_t chunk,
                                  std::vector<uint64_t>* dump) {
    using namespace sdm_p1::cpu;
    const Options& o = c.options;
    const sdm_p1::InputRecord in = input_record(c, out);
    Scratch scratch(o);
    const ChunkScratch& s = scratch.s;
    const DumpLayout l = dump_layout(o);
    dump->assign(l.total, 0);
    Recorder rec{l, *dump};
    const Chunk k = chunk_of(o, in, chunk);
    const sdm_p1::InputError err = load_and_check(k, in, s);
    if (err.found) return err;
    rec.words(kLoadKeys, s.keys);
    rec.words(kLoadValue, s.value);
    rec.fix(kLoadGate, s.gate);
    rec.words(kLoadGateExp, s.gate_exp);
    rec.words(kLoadWalkMask, s.walk_mask);
    sort_entries(k, s);
    rec.words(kSortKeys, s.keys);
    decode(k, s);
    rec.words(kDecodePayload, s.payload);
    rec.words(kDecodePosition, s.position);
    rec.words(kDecodeSlot, s.slot);
    ChunkCounts counts{};
    scan_forward(k, s, counts);
    rec.fix(kForwardLog, s.log);
    rec.words(kForwardBefore, s.before);
    rec.words(kForwardWrites, s.writes);
    const uint32_t forward_counts[2] = {counts.repeats, counts.walkers};
    rec.words(kForwardCounts, forward_counts);
    scan_backward(k, s, counts);
    rec.words(kBackwardEnd, s.end);
    rec.words(kBackwardFirsts, s.firsts);
    rec.words(kBackwardPayload, s.payload);
    rec.words(kBackwardCounts, &counts.valid_groups);
    write_records(k, in, out, s, counts);
    rec.words(kRecordsWalkMask, s.walk_mask);
    pair_sums(k, out, s);
    rec.words(kPairsWriteRow, s.write_row);
    return err;
}

void compute_chunk_whole(const Case& c, const sdm_p1::OutputBuffers& out, int64_t chunk) {
    Scratch scratch(c.options);
    sdm_p1::cpu::compute_chunk(c.options, input_record(c, out), out, chunk, scratch.s);
}

bool compare_dumps(const DumpLayout& l, const std::vector<uint64_t>& want, const std::vector<uint64_t>& got,
                   const char* want_name, const char* got_name) {
    int a = 0;
    while (a < kDumpArrays) {
        const char* const stage = kSpecs[a].stage;
        std::string line = std::string("  ") + stage + ":";
        for (; a < kDumpArrays && std::strcmp(kSpecs[a].stage, stage) == 0; ++a) {
            const uint64_t count = l.count[a], words = l.words[a];
            for (uint64_t i = 0; i < count; ++i) {
                for (uint64_t w = 0; w < words; ++w) {
                    const uint64_t x = l.offset[a] + i * words + w;
                    if (want[x] == got[x]) continue;
                    if (line.back() == ',') line.replace(line.size() - 1, 1, " equal;");
                    std::printf("%s %s (%s) differs at %s = %" PRIu64 "%s: %s 0x%016" PRIx64 ", %s 0x%016" PRIx64 "\n",
                                line.c_str(), kSpecs[a].name, kSpecs[a].type, kSpecs[a].index, i,
                                words > 1 ? (w == 0 ? " (low word)" : " (high word)") : "", want_name, want[x],
                                got_name, got[x]);
                    return false;
                }
            }
            char part[160];
            std::snprintf(part, sizeof part, " %s %" PRIu64 "/%" PRIu64 ",", kSpecs[a].name, count, count);
            line += part;
        }
        line.back() = ' ';
        std::printf("%sequal\n", line.c_str());
    }
    return true;
}

}   // namespace stage_dump
