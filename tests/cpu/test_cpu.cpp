// The CPU backend on random problems: the same bits for every thread count, for repeated runs
// and under a caller's flush-to-zero floating-point mode; the first bad chunk is the one
// reported whatever the threads do; and exact structural properties of the outputs.
#include <cfenv>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "sdm/phase1.h"
#include "test_util.h"

namespace {

struct Problem {
    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    std::vector<int64_t> k_idx, q_idx;
    std::vector<float> k_val, q_val, g, beta;
    std::vector<uint16_t> k_bf, q_bf;
    std::vector<int64_t> lengths;     // per-stream lengths; empty: none
    std::vector<int32_t> lengths32;   // the same as int32, where lengths32_used
    bool lengths32_used = false;

    sdm_p1_inputs inputs() const {
        sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
        in.k_idx = k_idx.data();
        in.q_idx = q_idx.data();
        const bool bf = desc.value_dtype == SDM_P1_DTYPE_BFLOAT16;
        in.k_val = bf ? static_cast<const void*>(k_bf.data()) : k_val.data();
        in.q_val = bf ? static_cast<const void*>(q_bf.data()) : q_val.data();
        in.g = g.data();
        in.beta = beta.data();
        if (lengths32_used) {
            in.stream_lengths = lengths32.data();
            in.stream_lengths_dtype = SDM_P1_DTYPE_INT32;
        } else if (!lengths.empty()) {
            in.stream_lengths = lengths.data();
            in.stream_lengths_dtype = SDM_P1_DTYPE_INT64;
        }
        return in;
    }
    void set_lengths(std::vector<int64_t> l, bool as_int32) {
        lengths = std::move(l);
        lengths32.assign(lengths.begin(), lengths.end());
        lengths32_used = as_int32;
    }
};

uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// N chunks of 3 streams with hot slots (num_keys 24), repeated writes, padding, per-write
// gates from strong to tiny, values spanning many magnitudes (some giving subnormal results).
Problem make_problem(bool bf16, unsigned seed) {
    Problem p;
    std::mt19937 rng(seed);
    sdm_p1_desc& d = p.desc;
    d.N = 12;
    d.C = 24;
    d.W = 6;
    d.R = 5;
    d.num_parallel = 3;
    d.stream_offset = 1000;
    d.num_keys = 24;
    d.valid_last = 17;
    d.index_dtype = SDM_P1_DTYPE_INT64;
    d.value_dtype = bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = d.W;
    d.det_fields = SDM_P1_DET_ALL;
    d.rec_tile = 7;
    d.backend = SDM_P1_BACKEND_CPU;
    const int64_t tokens = d.N * d.C;
    p.k_idx.resize(tokens * d.W);
    p.q_idx.resize(tokens * d.R);
    p.k_val.resize(tokens * d.W);
    p.q_val.resize(tokens * d.R);
    p.g.resize(tokens * d.W);
    p.beta.resize(tokens);
    std::uniform_int_distribution<int> key(0, static_cast<int>(d.num_keys) - 1), ex(-40, 20);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    const float gates[] = {0.0f, -1e-9f, -20.0f, -0.5f, -3e-30f, -1.0f};
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / d.C % d.num_parallel) * d.stream_offset;
        for (int w = 0; w < d.W; ++w) {
            p.k_idx[tok * d.W + w] = base + key(rng);   // repeats within a token happen
            p.k_val[tok * d.W + w] = std::ldexp(unit(rng), ex(rng));
            p.g[tok * d.W + w] = gates[rng() % 6] * (0.5f + 0.5f * std::fabs(unit(rng)));
        }
        for (int r = 0; r < d.R; ++r) {
            p.q_idx[tok * d.R + r] = base + key(rng);
            p.q_val[tok * d.R + r] = std::ldexp(unit(rng), ex(rng));
        }
        p.beta[tok] = std::fabs(unit(rng));
    }
    p.k_val[5] = 1e-38f;   // k_eff of this entry is subnormal (or flushed under FTZ)
    for (float v : p.k_val) p.k_bf.push_back(to_bf16(v));
    for (float v : p.q_val) p.q_bf.push_back(to_bf16(v));
    return p;
}

// Every output byte of one run, by field; empty on failure.
std::vector<std::vector<char>> run(const Problem& p, int threads, std::string* error = nullptr) {
    sdm_p1_desc d = p.desc;
    d.num_threads = threads;
    sdm_p1_plan* plan = nullptr;
    std::vector<std::vector<char>> out;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) {
        if (error) *error = sdm_p1_last_error();
        return out;
    }
    const sdm_p1_inputs in = p.inputs();
    if (sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_SUCCESS) {
        sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
        sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
        for (const sdm_p1_tensor& t : v) {
            const char* b = static_cast<const char*>(t.data);
            out.emplace_back(b, b + t.bytes);
        }
    } else if (error) {
        *error = sdm_p1_last_error();
    }
    sdm_p1_plan_destroy(plan);
    return out;
}

void test_threads_and_repeats_same_bits() {
    for (bool bf16 : {false, true}) {
        const Problem p = make_problem(bf16, 11u);
        const auto one = run(p, 1);
        CHECK(!one.empty());
        for (int threads : {2, 3, 5, 12}) CHECK_MSG(run(p, threads) == one, bf16 ? "bf16" : "f32");
        CHECK(run(p, 2) == one);
        // a plan executed twice gives the same bits
        sdm_p1_plan* plan = nullptr;
        sdm_p1_desc d = p.desc;
        d.num_threads = 2;
        sdm_p1_plan_create(&plan, &d);
        const sdm_p1_inputs in = p.inputs();
        sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
        sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
        bool same = true;
        for (int rep = 0; rep < 2; ++rep) {
            CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_SUCCESS);
            for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
                same &= v[f].bytes == 0 || std::memcmp(v[f].data, one[f].data(), v[f].bytes) == 0;
            }
        }
        CHECK(same);
        sdm_p1_plan_destroy(plan);
        const int64_t repeats = *reinterpret_cast<const int64_t*>(one[SDM_P1_FIELD_REPEATS].data());
        CHECK(repeats > 0);   // hot slots with 6 writes of 24 keys: repeats are certain
    }
}

void test_flush_to_zero_caller() {
#if defined(__x86_64__)
    const Problem p = make_problem(false, 12u);
    const auto normal = run(p, 2);
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u);   // FTZ and DAZ, as code built with -ffast-math sets them
    const auto flushed = run(p, 2);
    const unsigned after = _mm_getcsr();
    _mm_setcsr(saved);
    CHECK(after == (saved | 0x8040u));   // the caller's mode is restored
    CHECK(flushed == normal);
    const float* k_eff = reinterpret_cast<const float*>(normal[SDM_P1_FIELD_K_EFF].data());
    CHECK(k_eff[5] != 0.0f && std::fpclassify(k_eff[5]) == FP_SUBNORMAL);
#endif
}

void test_first_bad_chunk_reported() {
    Problem p = make_problem(false, 13u);
    p.k_idx[(3 * p.desc.C + 2) * p.desc.W] = -1;    // chunk 3
    p.g[(9 * p.desc.C + 1) * p.desc.W + 4] = NAN;   // chunk 9
    for (int threads : {1, 4, 12}) {
        std::string error;
        CHECK(run(p, threads, &error).empty());
        CHECK_MSG(error.find("k_idx[3, 2, 0] = -1") != std::string::npos, error.c_str());
    }
    p.k_idx[(1 * p.desc.C + 0) * p.desc.W] = INT64_MIN;   // chunk 1 (stream 1, ids from 1000)
    std::string lowest;
    CHECK(run(p, 2, &lowest).empty());
    CHECK_MSG(lowest.find("k_idx[1, 0, 0] = -9223372036854775808") != std::string::npos, lowest.c_str());
    p.k_idx[(1 * p.desc.C + 0) * p.desc.W] = 1000;
    p.k_idx[(3 * p.desc.C + 2) * p.desc.W] = 3;   // chunk 3 is stream 0: [0, 24)
    std::string error;
    CHECK(run(p, 3, &error).empty());
    CHECK_MSG(error.find("g[9, 1, 4] = nan") != std::string::npos, error.c_str());
}

// Per-stream lengths that say what valid_last says (every stream full but for its last
// chunk's valid_last tokens) give the bytes of the valid_last rule, whatever the plan's own
// valid_last; as int64 and as int32.
void test_lengths_as_valid_last() {
    const Problem p = make_problem(false, 15u);   // valid_last 17
    const auto rule = run(p, 3);
    CHECK(!rule.empty());
    const int64_t steps = p.desc.N / p.desc.num_parallel;
    for (bool as_int32 : {false, true}) {
        Problem q = p;
        q.desc.valid_last = 5;   // ignored with lengths
        q.set_lengths(std::vector<int64_t>(3, (steps - 1) * p.desc.C + 17), as_int32);
        CHECK_MSG(run(q, 3) == rule, as_int32 ? "int32" : "int64");
    }
}

// Chunks with any number of valid tokens: each chunk's bytes equal those of a one-step plan
// (its stream and its inputs alone) with valid_last its valid count; a chunk with none holds
// the neutral outputs of padding; the padding tokens' inputs are never read; and one plan
// serves every length vector.
void test_lengths_per_chunk() {
    Problem p = make_problem(true, 16u);   // N 12, P 3, C 24: 4 steps, lengths in 0..96
    const sdm_p1_desc& d = p.desc;
    const int64_t P = d.num_parallel, C = d.C, steps = d.N / P;
    p.set_lengths({0, 96, 49}, false);
    const auto out = run(p, 4);
    CHECK(!out.empty());
    // Another stream vector on the same shape: a new plan's bytes, each execute its own.
    Problem other = p;
    other.set_lengths({1, 24, 95}, true);
    const auto out_other = run(other, 2);
    CHECK(!out_other.empty() && out_other != out);

    // Garbage in every padding token changes nothing.
    Problem garbage = p;
    for (int64_t c = 0; c < d.N; ++c) {
        const int64_t tv = std::min<int64_t>(C, std::max<int64_t>(0, p.lengths[c % P] - c / P * C));
        for (int64_t t = tv; t < C; ++t) {
            const int64_t tok = c * C + t;
            for (int w = 0; w < d.W; ++w) {
                garbage.k_idx[tok * d.W + w] = -1 - w;
                garbage.g[tok * d.W + w] = NAN;
                garbage.k_bf[tok * d.W + w] = 0x7FC0;
            }
            for (int r = 0; r < d.R; ++r) garbage.q_idx[tok * d.R + r] = INT64_MAX;
            garbage.beta[tok] = NAN;
        }
    }
    CHECK(run(garbage, 3) == out);

    // Each step through a one-step plan per valid count.
    sdm_p1_tensor views[SDM_P1_FIELD_COUNT];
    {
        sdm_p1_plan* plan = nullptr;
        CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
        sdm_p1_outputs(plan, views, SDM_P1_FIELD_COUNT);
        sdm_p1_plan_destroy(plan);
    }
    bool same = true, neutral = true;
    int compared = 0, empty = 0;
    for (int64_t step = 0; step < steps; ++step) {
        for (int64_t s = 0; s < P; ++s) {
            const int64_t c = step * P + s;
            const int64_t tv = std::min<int64_t>(C, std::max<int64_t>(0, p.lengths[s] - step * C));
            if (tv == 0) {
                ++empty;
                const float* a = reinterpret_cast<const float*>(out[SDM_P1_FIELD_A].data()) + c * C * C;
                const float* lk = reinterpret_cast<const float*>(out[SDM_P1_FIELD_LOG_K].data()) + c * C * d.W;
                const uint16_t* cpe = reinterpret_cast<const uint16_t*>(out[SDM_P1_FIELD_CPE].data()) + c * C * d.W;
                const int8_t* last = reinterpret_cast<const int8_t*>(out[SDM_P1_FIELD_IS_LAST].data()) + c * C * d.W;
                const int32_t* pay = reinterpret_cast<const int32_t*>(out[SDM_P1_FIELD_PAYLOAD].data()) +
                                     c * views[SDM_P1_FIELD_PAYLOAD].shape[1];
                for (int64_t i = 0; i < C * C; ++i) neutral &= a[i] == 0.0f;
                for (int64_t i = 0; i < C * d.W; ++i) neutral &= lk[i] == 0.0f && cpe[i] == 0x3F80 && last[i] == 0;
                for (int64_t i = 0; i < C * (d.W + d.R); ++i)
                    neutral &= (static_cast<uint32_t>(pay[i]) & 0x20000u) != 0;
                continue;
            }
            Problem one = p;
            one.set_lengths({}, false);
            one.desc.N = P;
            one.desc.valid_last = tv;
            const int64_t first = step * P * C;   // the step's first token
            auto slice = [&](auto& v, int64_t per_token) {
                v.assign(v.begin() + first * per_token, v.begin() + (first + P * C) * per_token);
            };
            slice(one.k_idx, d.W);
            slice(one.q_idx, d.R);
            slice(one.k_val, d.W);
            slice(one.q_val, d.R);
            slice(one.k_bf, d.W);
            slice(one.q_bf, d.R);
            slice(one.g, d.gate_width);
            slice(one.beta, 1);
            const auto ref = run(one, 1);
            CHECK(!ref.empty());
            if (ref.empty()) continue;
            for (int f = 0; f < SDM_P1_FIELD_REPEATS; ++f) {
                if (!views[f].requested) continue;
                const size_t per = views[f].bytes / static_cast<size_t>(d.N);
                same &= std::memcmp(out[f].data() + c * per, ref[f].data() + s * per, per) == 0;
            }
            ++compared;
        }
    }
    CHECK(compared == 7 && empty == 5);   // stream 0 empty; stream 2: 24, 24, 1, 0
    CHECK(same);
    CHECK(neutral);
}

// Bad lengths: the smallest bad stream named with its length and the range, before any
// output is written; bad dtypes, reserved and misaligned pointers are refused as arguments.
void test_bad_lengths() {
    Problem p = make_problem(false, 17u);   // 4 steps of 24: lengths in 0..96
    sdm_p1_desc d = p.desc;
    d.num_threads = 3;
    sdm_p1_plan* plan = nullptr;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    p.set_lengths({96, 50, 7}, false);
    sdm_p1_inputs in = p.inputs();
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_SUCCESS);
    std::vector<char> before(static_cast<const char*>(v[SDM_P1_FIELD_QK].data),
                             static_cast<const char*>(v[SDM_P1_FIELD_QK].data) + v[SDM_P1_FIELD_QK].bytes);
    const struct {
        std::vector<int64_t> lengths;
        bool as_int32;
        const char* message;
    } bad[] = {
        {{96, -1, 7},
         false,
         "sdm_p1_execute: stream_lengths[1] = -1: stream 1's length must be in 0..96 (steps * C = 4 * 24)"},
        {{96, 50, 97}, true, "sdm_p1_execute: stream_lengths[2] = 97: stream 2's length must be in 0..96"},
        {{INT64_MIN, 50, 7}, false, "stream_lengths[0] = -9223372036854775808: stream 0's"},
        {{INT32_MAX, 50, 7}, true, "stream_lengths[0] = 2147483647: stream 0's"},
        {{0, 200, -3}, false, "stream_lengths[1] = 200: stream 1's"},
    };
    for (const auto& b : bad) {
        p.set_lengths(b.lengths, b.as_int32);
        in = p.inputs();
        // A bad id too, in the first chunk: the length is reported all the same.
        p.k_idx[0] = -1;
        CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_ERROR_INVALID_INPUT);
        CHECK_MSG(std::string(sdm_p1_last_error()).find(b.message) != std::string::npos, sdm_p1_last_error());
        p.k_idx[0] = 0;
        CHECK(std::memcmp(v[SDM_P1_FIELD_QK].data, before.data(), before.size()) == 0);
    }
    p.set_lengths({96, 50, 7}, false);
    in = p.inputs();
    in.stream_lengths_dtype = 0;
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(std::string(sdm_p1_last_error()).find("stream_lengths_dtype = 0") != std::string::npos,
              sdm_p1_last_error());
    in.stream_lengths_dtype = SDM_P1_DTYPE_FLOAT32;
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_ERROR_INVALID_ARGUMENT);
    in = p.inputs();
    in.stream_lengths = reinterpret_cast<const char*>(p.lengths.data()) + 4;
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(std::string(sdm_p1_last_error()).find("stream_lengths is not aligned") != std::string::npos,
              sdm_p1_last_error());
    in = p.inputs();
    in.reserved = 1;
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(std::string(sdm_p1_last_error()).find("reserved = 1 must be 0") != std::string::npos,
              sdm_p1_last_error());
    // NULL lengths: the dtype is ignored.
    in = p.inputs();
    in.stream_lengths = nullptr;
    in.stream_lengths_dtype = 99;
    CHECK(sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_SUCCESS);
    sdm_p1_plan_destroy(plan);
}

// Exact properties that hold for any input.
void test_structure() {
    const Problem p = make_problem(false, 14u);
    const auto out = run(p, 3);
    const sdm_p1_desc& d = p.desc;
    const int C = static_cast<int>(d.C), W = static_cast<int>(d.W), R = static_cast<int>(d.R);
    const int n = C * (W + R), row = (n + 15) / 16 * 16;
    auto f32 = [&](int f) { return reinterpret_cast<const float*>(out[f].data()); };
    auto i32 = [&](int f) { return reinterpret_cast<const int32_t*>(out[f].data()); };
    auto i8 = [&](int f) { return reinterpret_cast<const int8_t*>(out[f].data()); };
    bool tri = true, pad = true, sorted = true, posmap = true, rows = true, flags = true;
    for (int c = 0; c < d.N; ++c) {
        const int tv = c >= d.N - d.num_parallel ? static_cast<int>(d.valid_last) : C;
        for (int i = 0; i < C; ++i) {
            for (int j = 0; j < C; ++j) {
                const float a = f32(SDM_P1_FIELD_A)[(c * C + i) * C + j];
                const float q = f32(SDM_P1_FIELD_QK)[(c * C + i) * C + j];
                tri &= (j < i || a == 0.0f) && (j <= i || q == 0.0f);
                pad &= (i < tv && j < tv) || (a == 0.0f && q == 0.0f);
            }
        }
        // The sorted row: slots non-decreasing over valid entries, padding last, and every
        // entry's packed position points back at its own payload word.
        const int32_t* pay = i32(SDM_P1_FIELD_PAYLOAD) + c * row;
        int64_t prev_slot = -1;
        int k_seen = 0, q_seen = 0;
        for (int r = 0; r < n; ++r) {
            const uint32_t w = static_cast<uint32_t>(pay[r]);
            const int t = (w >> 9) & 0xFF, lane = w & 0xFF;
            const bool isq = w & 0x100u, valid = !(w & 0x20000u);
            sorted &= valid == (t < tv);
            if (valid) {
                const int64_t slot = isq ? p.q_idx[(c * C + t) * R + lane] : p.k_idx[(c * C + t) * W + lane];
                sorted &= slot >= prev_slot && ((w >> 31) != 0) == (slot != prev_slot);
                prev_slot = slot;
            } else {
                prev_slot = INT64_MAX;
            }
            const int32_t pos =
                isq ? i32(SDM_P1_FIELD_POS_Q)[(c * C + t) * R + lane] : i32(SDM_P1_FIELD_POS_K)[(c * C + t) * W + lane];
            posmap &= (pos & 0x1FFFF) == r;
            // The kind rows hold the same entries in the same order.
            const int32_t e =
                isq ? i32(SDM_P1_FIELD_SPAY_Q)[c * C * R + q_seen++] : i32(SDM_P1_FIELD_SPAY_K)[c * C * W + k_seen++];
            rows &= (static_cast<uint32_t>(e) & 0x3FFFFu) == (w & 0x3FFFFu);
        }
        for (int r = n; r < row; ++r) sorted &= static_cast<uint32_t>(pay[r]) == 0x80020000u;
        for (int k = 0; k < C * W; ++k) {
            const int8_t last = i8(SDM_P1_FIELD_IS_LAST)[c * C * W + k], only = i8(SDM_P1_FIELD_IS_ONLY)[c * C * W + k];
            flags &= (last == 0 || last == 1) && (only == 0 || only == 1) && (!only || last);
        }
        const int ntk = (C * W + 6) / 7;
        int groups = 0;
        for (int k = 0; k < C * W; ++k) groups += i8(SDM_P1_FIELD_IS_LAST)[c * C * W + k];
        flags &= i32(SDM_P1_FIELD_SEGB_K)[c * (ntk + 1) + ntk] == groups;
        flags &= i32(SDM_P1_FIELD_DC_BPRE)[c * ((C * W + 31) / 32 + 1) + (C * W + 31) / 32] == groups;
    }
    CHECK(tri);
    CHECK(pad);
    CHECK(sorted);
    CHECK(posmap);
    CHECK(rows);
    CHECK(flags);
}

}   // namespace

int main() {
    RUN(test_threads_and_repeats_same_bits);
    RUN(test_flush_to_zero_caller);
    RUN(test_first_bad_chunk_reported);
    RUN(test_structure);
    RUN(test_lengths_as_valid_last);
    RUN(test_lengths_per_chunk);
    RUN(test_bad_lengths);
    return test_summary();
}
