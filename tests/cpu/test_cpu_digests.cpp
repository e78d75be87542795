// The CPU backend's bits, pinned: every output of the forward and every gradient of the
// backward, on inputs drawn the way users' data come (uniform, hot, Zipf-skewed and split
// Zipf slots, an S8-sized Zipf chunk, reads that follow recent writes, one group holding a
// whole chunk, per-stream lengths, gates over the whole range, one-token and one-lane chunks),
// hashed field by field (FNV-1a, 64 bits) and compared with tests/cpu/cpu_digests.txt; and
// the same bits whatever the plan's memory held before (a poisoning allocator).
//
// The CUDA backend is compared with the CPU's byte for byte on a GPU machine
// (tests/cuda/test_cuda); this test is what lets CI, which has no GPU, notice a change of the
// CPU's bits, which would part the two. The inputs come from splitmix64 and integer
// arithmetic alone (no <random> distribution, no libm but ldexp), so they are the same bytes
// on every platform.
//
//   test_cpu_digests DIGESTS_FILE          compare
//   test_cpu_digests --print               print the table (after a reviewed change of the bits)
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sdm/phase1.h"
#include "test_util.h"
#include "../splitmix64.h"

namespace {

// splitmix64: a portable stream of 64-bit words.
struct Rng {
    uint64_t s;
    uint64_t next() { return splitmix64(&s); }
    // Uniform in [0, n), n < 2^32.
    uint32_t below(uint64_t n) { return static_cast<uint32_t>(((next() >> 32) * n) >> 32); }
};

// How a case draws its slots.
enum class Law {
    kUniform,     // every slot alike
    kZipf,        // weight 1 / (rank + 1), writes and reads from one ranking
    kZipfSplit,   // the same law, writes and reads from two rankings
    kRecent,      // writes uniform; 3 reads in 4 take a slot written in the last 4 tokens
    kOneSlot,     // every id on one slot: a single group holds the chunk
};

struct Case {
    const char* name;
    int64_t N, C, W, R, keys, P;
    Law law;
    bool bf16, idx64, per_write;
    int64_t det_fields;   // SDM_P1_UNSET: the default set
    bool backward;        // also the backward, every upstream gradient given
    bool lengths;         // per-stream lengths (some streams short, one empty)
    bool wide_gates;      // gates from 2^-60 to 2^21 in magnitude (the wide log form)
};

const Case kCases[] = {
    {"uniform", 6, 32, 8, 8, 4096, 2, Law::kUniform, true, true, false, SDM_P1_UNSET, true, false, false},
    {"uniform_all", 6, 32, 8, 8, 4096, 2, Law::kUniform, false, false, true, SDM_P1_DET_ALL, true, false, false},
    {"hot16", 6, 32, 8, 8, 16, 3, Law::kUniform, false, true, true, SDM_P1_DET_ALL, true, false, false},
    {"zipf", 8, 64, 16, 16, 8192, 2, Law::kZipf, true, true, false, SDM_P1_DET_ALL, true, false, false},
    {"zipf_split_2872", 8, 64, 16, 16, 8192, 2, Law::kZipfSplit, true, false, false, 2872, true, false, false},
    {"recent_952", 6, 48, 8, 8, 65536, 2, Law::kRecent, false, true, true, 952, true, false, false},
    {"one_slot", 2, 64, 4, 4, 1024, 1, Law::kOneSlot, false, true, false, SDM_P1_DET_ALL, true, false, false},
    {"lengths", 8, 32, 8, 4, 4096, 4, Law::kZipf, true, true, true, SDM_P1_DET_ALL, true, true, false},
    {"wide_gates", 4, 32, 8, 8, 256, 1, Law::kUniform, false, true, true, SDM_P1_DET_ALL, true, false, true},
    {"one_token_lane", 2, 1, 1, 1, 4, 1, Law::kUniform, false, true, true, SDM_P1_DET_ALL, true, false, false},
    {"tiny_hot", 3, 2, 2, 3, 2, 3, Law::kUniform, true, false, false, SDM_P1_DET_ALL, true, false, false},
    {"s8_like", 2, 128, 64, 64, 262144, 2, Law::kZipf, true, true, false, SDM_P1_UNSET, true, false, false},
    {"big_chunk", 2, 256, 16, 16, 1 << 20, 1, Law::kUniform, true, true, false, SDM_P1_UNSET, false, false, false},
};

uint16_t bf16_bits(float f) {   // round to nearest even (no NaN here)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// A value of magnitude 2^lo .. 2^hi, either sign, exact in float32.
float draw_value(Rng& r, int lo, int hi) {
    const int32_t m = static_cast<int32_t>(r.below(1u << 24)) - (1 << 23);
    return std::ldexp(static_cast<float>(m), lo + static_cast<int>(r.below(static_cast<uint64_t>(hi - lo + 1))) - 23);
}

// A gate: log decay <= 0, zero in 1 of 8.
float draw_gate(Rng& r, bool wide) {
    if (r.below(8) == 0) return 0.0f;
    const float m = static_cast<float>(r.below(1u << 24));
    return -std::ldexp(m, wide ? -84 + static_cast<int>(r.below(81)) : -30 + static_cast<int>(r.below(27)));
}

// Ranks drawn with weight 1 / (rank + 1) over `keys` ranks, by integer weights.
struct Zipf {
    std::vector<uint64_t> cumulative;
    explicit Zipf(int64_t keys) {
        uint64_t total = 0;
        for (int64_t k = 0; k < keys; ++k)
            cumulative.push_back(total += (uint64_t{1} << 40) / static_cast<uint64_t>(k + 1));
    }
    uint32_t draw(Rng& r) const {
        const uint64_t u = r.next() % cumulative.back();
        return static_cast<uint32_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
    }
};

// A rank's slot: an odd multiplier modulo keys (a power of two) scatters the popular ones.
uint32_t rank_slot(uint32_t rank, int64_t keys, uint64_t mult) {
    return static_cast<uint32_t>((rank * mult) & static_cast<uint64_t>(keys - 1));
}

uint64_t fnv1a(const void* data, size_t bytes) {
    const unsigned char* b = static_cast<const unsigned char*>(data);
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

struct Problem {
    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    std::vector<int64_t> k64, q64;
    std::vector<int32_t> k32, q32;
    std::vector<float> k_val, q_val, g, beta;
    std::vector<uint16_t> k_bf, q_bf;
    std::vector<int64_t> lengths;

    sdm_p1_inputs inputs() const {
        sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
        const bool i64 = desc.index_dtype == SDM_P1_DTYPE_INT64, bf = desc.value_dtype == SDM_P1_DTYPE_BFLOAT16;
        in.k_idx = i64 ? static_cast<const void*>(k64.data()) : k32.data();
        in.q_idx = i64 ? static_cast<const void*>(q64.data()) : q32.data();
        in.k_val = bf ? static_cast<const void*>(k_bf.data()) : k_val.data();
        in.q_val = bf ? static_cast<const void*>(q_bf.data()) : q_val.data();
        in.g = g.data();
        in.beta = beta.data();
        if (!lengths.empty()) {
            in.stream_lengths = lengths.data();
            in.stream_lengths_dtype = SDM_P1_DTYPE_INT64;
        }
        return in;
    }
};

Problem make_problem(const Case& c, uint64_t seed) {
    Problem p;
    Rng r{seed};
    sdm_p1_desc& d = p.desc;
    d.N = c.N;
    d.C = c.C;
    d.W = c.W;
    d.R = c.R;
    d.num_parallel = c.P;
    d.stream_offset = c.keys + 7;   // streams' id ranges apart, with a gap
    d.num_keys = c.keys;
    d.index_dtype = c.idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = c.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = c.per_write ? c.W : 1;
    d.det_fields = c.det_fields;
    d.rec_tile = 24;
    d.backend = SDM_P1_BACKEND_CPU;
    d.num_threads = 2;
    d.backward = c.backward ? 1 : 0;
    const int64_t tokens = c.N * c.C;
    const Zipf zipf(c.law == Law::kZipf || c.law == Law::kZipfSplit ? c.keys : 1);
    std::vector<int64_t> slots_k(tokens * c.W), slots_q(tokens * c.R);
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t t = tok % c.C;   // its place in its chunk
        for (int64_t w = 0; w < c.W; ++w) {
            int64_t s = 0;
            switch (c.law) {
                case Law::kUniform:
                case Law::kRecent:
                    s = r.below(static_cast<uint64_t>(c.keys));
                    break;
                case Law::kZipf:
                case Law::kZipfSplit:
                    s = rank_slot(zipf.draw(r), c.keys, 0x9E3779B1u);
                    break;
                case Law::kOneSlot:
                    s = 5;
                    break;
            }
            slots_k[tok * c.W + w] = s;
        }
        for (int64_t q = 0; q < c.R; ++q) {
            int64_t s = 0;
            switch (c.law) {
                case Law::kUniform:
                    s = r.below(static_cast<uint64_t>(c.keys));
                    break;
                case Law::kZipf:
                    s = rank_slot(zipf.draw(r), c.keys, 0x9E3779B1u);
                    break;
                case Law::kZipfSplit:
                    s = rank_slot(zipf.draw(r), c.keys, 0x85EBCA77u);
                    break;
                case Law::kOneSlot:
                    s = 5;
                    break;
                case Law::kRecent: {
                    const int64_t back = std::min<int64_t>(t, 3);   // tokens of this chunk before it, at most 3
                    if (r.below(4) != 0) {
                        const int64_t from = tok - static_cast<int64_t>(r.below(static_cast<uint64_t>(back + 1)));
                        s = slots_k[from * c.W + r.below(static_cast<uint64_t>(c.W))];
                    } else {
                        s = r.below(static_cast<uint64_t>(c.keys));
                    }
                    break;
                }
            }
            slots_q[tok * c.R + q] = s;
        }
    }
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / c.C % c.P) * d.stream_offset;
        for (int64_t w = 0; w < c.W; ++w) slots_k[tok * c.W + w] += base;
        for (int64_t q = 0; q < c.R; ++q) slots_q[tok * c.R + q] += base;
    }
    p.k64 = slots_k;
    p.q64 = slots_q;
    p.k32.assign(slots_k.begin(), slots_k.end());
    p.q32.assign(slots_q.begin(), slots_q.end());
    for (int64_t x = 0; x < tokens * c.W; ++x) p.k_val.push_back(draw_value(r, -12, 3));
    for (int64_t x = 0; x < tokens * c.R; ++x) p.q_val.push_back(draw_value(r, -12, 3));
    for (int64_t x = 0; x < tokens * d.gate_width; ++x) p.g.push_back(draw_gate(r, c.wide_gates));
    for (int64_t x = 0; x < tokens; ++x) p.beta.push_back(std::fabs(draw_value(r, -4, 0)));
    if (c.bf16) {
        for (float& v : p.k_val) p.k_bf.push_back(bf16_bits(v));
        for (float& v : p.q_val) p.q_bf.push_back(bf16_bits(v));
    }
    if (c.lengths) {   // steps * C tokens a stream at most: full, short, very short, empty
        const int64_t full = c.N / c.P * c.C;
        for (int64_t s = 0; s < c.P; ++s) p.lengths.push_back(s == 0 ? full : s == 1 ? full - 13 : s == 2 ? 3 : 0);
    }
    return p;
}

std::string hex(uint64_t h) {
    char s[17];
    std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
    return s;
}

// The differentiable fields, each with its upstream gradient's element size and count.
struct Upstream {
    int field;
    bool value_dtype;   // in the value dtype, else float32
    int64_t elements;
};

std::vector<Upstream> upstreams(const Case& c) {
    const int64_t cells = c.N * c.C * c.C, nk = c.N * c.C * c.W, nq = c.N * c.C * c.R;
    return {{SDM_P1_FIELD_A, false, cells},  {SDM_P1_FIELD_QK, false, cells}, {SDM_P1_FIELD_LOG_K, false, nk},
            {SDM_P1_FIELD_LOG_Q, false, nq}, {SDM_P1_FIELD_REX, false, nk},   {SDM_P1_FIELD_CPE, true, nk},
            {SDM_P1_FIELD_K_EFF, true, nk},  {SDM_P1_FIELD_Q_W, true, nq},    {SDM_P1_FIELD_KREC, false, 2 * nk},
            {SDM_P1_FIELD_KSPA, false, nk},  {SDM_P1_FIELD_QREC, false, nq},  {SDM_P1_FIELD_QREC8, false, nq}};
}

// The plan's memory (outputs and workspace) filled with one byte value before first use:
// no output bit may depend on it (a stage reading scratch it did not write).
int poisoned_alloc(void* ctx, void** ptr, size_t bytes, void*) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) return 1;
    std::memset(p, *static_cast<const unsigned char*>(ctx), bytes);
    *ptr = p;
    return 0;
}
void poisoned_free(void*, void* ptr, size_t, void*) { std::free(ptr); }

// "name field digest" lines of one case: its forward's outputs (by the plan's field names),
// then, for a backward case, its four gradients; the plan's memory and the gradients' buffers
// filled with `poison` first.
std::vector<std::string> case_digests(const Case& c, unsigned char poison) {
    std::vector<std::string> lines;
    Problem p = make_problem(c, fnv1a(c.name, std::strlen(c.name)));
    p.desc.allocator.ctx = &poison;
    p.desc.allocator.alloc = poisoned_alloc;
    p.desc.allocator.free = poisoned_free;
    sdm_p1_plan* plan = nullptr;
    if (sdm_p1_plan_create(&plan, &p.desc) != SDM_P1_SUCCESS) {
        lines.push_back(std::string(c.name) + " plan_create failed: " + sdm_p1_last_error());
        return lines;
    }
    const sdm_p1_inputs in = p.inputs();
    if (sdm_p1_execute(plan, &in, nullptr, 0, nullptr) != SDM_P1_SUCCESS) {
        lines.push_back(std::string(c.name) + " execute failed: " + sdm_p1_last_error());
        sdm_p1_plan_destroy(plan);
        return lines;
    }
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    for (const sdm_p1_tensor& t : v) {
        if (t.bytes > 0) lines.push_back(std::string(c.name) + " " + t.name + " " + hex(fnv1a(t.data, t.bytes)));
    }
    if (c.backward) {
        Rng r{0xB4C0 + static_cast<uint64_t>(c.N * c.C)};
        std::vector<std::vector<float>> f32(SDM_P1_FIELD_COUNT);
        std::vector<std::vector<uint16_t>> bf(SDM_P1_FIELD_COUNT);
        const void* grads[SDM_P1_FIELD_COUNT] = {};
        for (const Upstream& u : upstreams(c)) {
            for (int64_t x = 0; x < u.elements; ++x) f32[u.field].push_back(draw_value(r, -6, 2));
            if (u.value_dtype && c.bf16) {
                for (float x : f32[u.field]) bf[u.field].push_back(bf16_bits(x));
                grads[u.field] = bf[u.field].data();
            } else {
                grads[u.field] = f32[u.field].data();
            }
        }
        const int64_t nk = c.N * c.C * c.W, nq = c.N * c.C * c.R;
        const size_t vbytes = c.bf16 ? 2 : 4;   // grad_dtype: the value dtype
        std::vector<unsigned char> dk(nk * vbytes, poison), dq(nq * vbytes, poison);
        std::vector<unsigned char> dg(c.N * c.C * p.desc.gate_width * 4, poison), dbeta(c.N * c.C * 4, poison);
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        out.k_val = dk.data();
        out.q_val = dq.data();
        out.g = reinterpret_cast<float*>(dg.data());
        out.beta = reinterpret_cast<float*>(dbeta.data());
        if (sdm_p1_execute_backward(plan, &in, nullptr, grads, SDM_P1_FIELD_COUNT, &out, nullptr) != SDM_P1_SUCCESS) {
            lines.push_back(std::string(c.name) + " execute_backward failed: " + sdm_p1_last_error());
        } else {
            lines.push_back(std::string(c.name) + " grad_k_val " + hex(fnv1a(dk.data(), dk.size())));
            lines.push_back(std::string(c.name) + " grad_q_val " + hex(fnv1a(dq.data(), dq.size())));
            lines.push_back(std::string(c.name) + " grad_g " + hex(fnv1a(dg.data(), dg.size())));
            lines.push_back(std::string(c.name) + " grad_beta " + hex(fnv1a(dbeta.data(), dbeta.size())));
        }
    }
    sdm_p1_plan_destroy(plan);
    return lines;
}

std::vector<std::string> all_digests(unsigned char poison) {
    std::vector<std::string> lines;
    for (const Case& c : kCases) {
        for (std::string& l : case_digests(c, poison)) lines.push_back(std::move(l));
    }
    return lines;
}

const char* g_digests_file = nullptr;

// Every line of the table computed again, and nothing more or less.
void test_digests_match() {
    std::ifstream f(g_digests_file);
    CHECK_MSG(f.good(), g_digests_file);
    std::map<std::string, std::string> want;   // "case field" -> digest
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t cut = line.rfind(' ');
        want[line.substr(0, cut)] = line.substr(cut + 1);
    }
    size_t seen = 0;
    for (const std::string& got : all_digests(0xA5)) {
        const size_t cut = got.rfind(' ');
        const auto it = want.find(got.substr(0, cut));
        if (it == want.end()) {
            CHECK_MSG(false, ("not in the table: " + got).c_str());
            continue;
        }
        ++seen;
        CHECK_MSG(it->second == got.substr(cut + 1),
                  ("bits changed: " + got + ", the table has " + it->second).c_str());
    }
    CHECK_MSG(seen == want.size(), "the table has lines no case computes");
    CHECK(want.size() > 100);
}

// Memory the library allocated and never wrote is never read: plans whose memory starts
// as all zeros and as all ones give the bits of the table's (0xA5) runs.
void test_memory_contents_never_read() {
    const std::vector<std::string> want = all_digests(0xA5);
    CHECK(all_digests(0x00) == want);
    CHECK(all_digests(0xFF) == want);
}

// The inputs are what the table was made from: a draw of the generator pinned by value, so
// that a change to it reads as such and not as a change of the library's bits.
void test_generator_pinned() {
    Rng r{1};
    CHECK(r.next() == 0x910A2DEC89025CC1ull);
    const Problem p = make_problem(kCases[3], 7);
    CHECK(p.k64.size() == 8u * 64u * 16u);
    uint64_t h = fnv1a(p.k64.data(), p.k64.size() * 8);
    h ^= fnv1a(p.k_val.data(), p.k_val.size() * 4);
    h ^= fnv1a(p.g.data(), p.g.size() * 4);
    CHECK_MSG(h == 0xE116815C33A3B252ull, hex(h).c_str());
    // Zipf: the most popular slot takes far more than a uniform share of the writes.
    std::map<int64_t, int> count;
    for (int64_t s : p.k64) ++count[s];
    int top = 0;
    for (const auto& kv : count) top = std::max(top, kv.second);
    CHECK(top > 400);   // 1 / H(8192) of 8,192 writes is about 850; uniform: a few
}

}   // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--print") == 0) {
        std::printf(
            "# test_cpu_digests --print (tests/cpu/test_cpu_digests.cpp): case, field, FNV-1a 64 of its bytes\n");
        for (const std::string& l : all_digests(0xA5)) std::printf("%s\n", l.c_str());
        return 0;
    }
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIGESTS_FILE | --print\n", argv[0]);
        return 2;
    }
    g_digests_file = argv[1];
    RUN(test_generator_pinned);
    RUN(test_digests_match);
    RUN(test_memory_contents_never_read);
    return test_summary();
}
