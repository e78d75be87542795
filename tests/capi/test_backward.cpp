// sdm_p1_execute_backward on the CPU backend: each refusal and its message (nothing written),
// exact properties (zero upstream gives +0.0 everywhere; padding tokens and repeat lanes' gates
// get exactly 0; the bits do not depend on the thread count, or on whether the payload is
// given), and a hand-worked chunk. bindings/python/tests/test_backward_cpu.py holds the values
// to the float64 reference.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sdm/phase1.h"
#include "test_util.h"

namespace {

const int kDifferentiable[] = {SDM_P1_FIELD_A,    SDM_P1_FIELD_QK,   SDM_P1_FIELD_LOG_K, SDM_P1_FIELD_LOG_Q,
                               SDM_P1_FIELD_REX,  SDM_P1_FIELD_CPE,  SDM_P1_FIELD_K_EFF, SDM_P1_FIELD_Q_W,
                               SDM_P1_FIELD_KREC, SDM_P1_FIELD_KSPA, SDM_P1_FIELD_QREC,  SDM_P1_FIELD_QREC8};

// A float32 / bfloat16 array's bits (value-typed upstream gradients are bfloat16 with bf16).
using Bits = std::vector<uint32_t>;

// 3 streams of 2 chunks, hot slots (repeats within and across tokens), padding in the last
// chunks, per-write gates; upstream gradients of every differentiable field.
struct Problem {
    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    std::vector<int64_t> k_idx, q_idx;
    std::vector<float> k_val, q_val, g, beta;
    std::vector<uint16_t> k_bf, q_bf;
    std::vector<std::vector<float>> up;   // by field, float32 (empty: NULL)
    std::vector<std::vector<uint16_t>> up_bf;

    int64_t count(int f) const {
        const int64_t N = desc.N, C = desc.C, W = desc.W, R = desc.R;
        switch (f) {
            case SDM_P1_FIELD_A:
            case SDM_P1_FIELD_QK:
                return N * C * C;
            case SDM_P1_FIELD_LOG_Q:
            case SDM_P1_FIELD_Q_W:
            case SDM_P1_FIELD_QREC:
            case SDM_P1_FIELD_QREC8:
                return N * C * R;
            case SDM_P1_FIELD_KREC:
                return 2 * N * C * W;
            default:
                return N * C * W;
        }
    }
    bool bf16() const { return desc.value_dtype == SDM_P1_DTYPE_BFLOAT16; }
    sdm_p1_inputs inputs() const {
        sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
        in.k_idx = k_idx.data();
        in.q_idx = q_idx.data();
        in.k_val = bf16() ? static_cast<const void*>(k_bf.data()) : k_val.data();
        in.q_val = bf16() ? static_cast<const void*>(q_bf.data()) : q_val.data();
        in.g = g.data();
        in.beta = beta.empty() ? nullptr : beta.data();
        return in;
    }
    // The upstream gradients' pointers by field (NULL where not given).
    std::vector<const void*> grads() const {
        std::vector<const void*> p(SDM_P1_FIELD_COUNT, nullptr);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (up[f].empty()) continue;
            const bool value_typed = f == SDM_P1_FIELD_CPE || f == SDM_P1_FIELD_K_EFF || f == SDM_P1_FIELD_Q_W;
            p[f] = value_typed && bf16() ? static_cast<const void*>(up_bf[f].data()) : up[f].data();
        }
        return p;
    }
};

uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

Problem make_problem(bool bf16, unsigned seed, int gate_width) {
    Problem p;
    std::mt19937 rng(seed);
    sdm_p1_desc& d = p.desc;
    d.N = 6;
    d.C = 12;
    d.W = 4;
    d.R = 3;
    d.num_parallel = 3;
    d.stream_offset = 1000;
    d.num_keys = 7;
    d.valid_last = 9;
    d.index_dtype = SDM_P1_DTYPE_INT64;
    d.value_dtype = bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = gate_width;
    d.backend = SDM_P1_BACKEND_CPU;
    d.num_threads = 1;
    d.backward = 1;
    const int64_t tokens = d.N * d.C;
    std::uniform_int_distribution<int> key(0, static_cast<int>(d.num_keys) - 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / d.C % d.num_parallel) * d.stream_offset;
        for (int w = 0; w < d.W; ++w) {
            p.k_idx.push_back(base + key(rng));
            p.k_val.push_back(normal(rng));
        }
        for (int r = 0; r < d.R; ++r) {
            p.q_idx.push_back(base + key(rng));
            p.q_val.push_back(normal(rng));
        }
        for (int l = 0; l < gate_width; ++l) p.g.push_back(-0.6f * unit(rng));
        p.beta.push_back(unit(rng));
    }
    for (float v : p.k_val) p.k_bf.push_back(to_bf16(v));
    for (float v : p.q_val) p.q_bf.push_back(to_bf16(v));
    p.up.resize(SDM_P1_FIELD_COUNT);
    p.up_bf.resize(SDM_P1_FIELD_COUNT);
    for (int f : kDifferentiable) {
        for (int64_t i = 0; i < p.count(f); ++i) p.up[f].push_back(normal(rng));
        for (float v : p.up[f]) p.up_bf[f].push_back(to_bf16(v));
    }
    return p;
}

// One backward's gradients, as bits; the buffers start as 0xFFFFFFFF / 0xFFFF (NaN).
struct Result {
    sdm_p1_status status = SDM_P1_SUCCESS;
    std::string error;
    std::vector<uint16_t> dk16, dq16;
    std::vector<float> dk, dq, dg, dbeta;
};

const uint32_t kUnwritten = 0xFFFFFFFFu;

bool untouched(const std::vector<float>& v) {
    for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        if (u != kUnwritten) return false;
    }
    return true;
}

struct Call {
    const int32_t* payload = nullptr;
    bool ids = true;
    int threads = 1;
    bool float32_grads = false;
};

// The forward's payload for p (a plan of p's desc).
std::vector<int32_t> forward_payload(const Problem& p) {
    sdm_p1_desc d = p.desc;
    d.det_fields = 0;
    sdm_p1_plan* plan = nullptr;
    std::vector<int32_t> payload;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) return payload;
    const sdm_p1_inputs in = p.inputs();
    if (sdm_p1_execute(plan, &in, nullptr, 0, nullptr) == SDM_P1_SUCCESS) {
        sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
        sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
        const int32_t* b = static_cast<const int32_t*>(v[SDM_P1_FIELD_PAYLOAD].data);
        payload.assign(b, b + v[SDM_P1_FIELD_PAYLOAD].bytes / 4);
    }
    sdm_p1_plan_destroy(plan);
    return payload;
}

Result backward(const Problem& p, const Call& call = Call()) {
    Result r;
    const int64_t N = p.desc.N, C = p.desc.C, W = p.desc.W, R = p.desc.R;
    const bool bf16_grads = p.bf16() && !call.float32_grads;
    r.dk.assign(N * C * W, std::nanf(""));
    r.dq.assign(N * C * R, std::nanf(""));
    r.dk16.assign(N * C * W, 0xFFFFu);
    r.dq16.assign(N * C * R, 0xFFFFu);
    r.dg.assign(N * C * p.desc.gate_width, 0.0f);
    r.dbeta.assign(N * C, 0.0f);
    for (auto* v : {&r.dk, &r.dq, &r.dg, &r.dbeta}) {
        for (float& x : *v) std::memcpy(&x, &kUnwritten, 4);
    }
    sdm_p1_desc d = p.desc;
    d.num_threads = call.threads;
    if (call.float32_grads) d.grad_dtype = SDM_P1_DTYPE_FLOAT32;
    sdm_p1_plan* plan = nullptr;
    r.status = sdm_p1_plan_create(&plan, &d);
    if (r.status == SDM_P1_SUCCESS) {
        sdm_p1_inputs in = p.inputs();
        if (!call.ids) in.k_idx = in.q_idx = nullptr;
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        out.k_val = bf16_grads ? static_cast<void*>(r.dk16.data()) : r.dk.data();
        out.q_val = bf16_grads ? static_cast<void*>(r.dq16.data()) : r.dq.data();
        out.g = r.dg.data();
        out.beta = r.dbeta.data();
        const std::vector<const void*> grads = p.grads();
        r.status = sdm_p1_execute_backward(plan, &in, call.payload, grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr);
    }
    if (r.status != SDM_P1_SUCCESS) r.error = sdm_p1_last_error();
    sdm_p1_plan_destroy(plan);
    return r;
}

bool same_bits(const Result& a, const Result& b) {
    return std::memcmp(a.dk.data(), b.dk.data(), a.dk.size() * 4) == 0 &&
           std::memcmp(a.dq.data(), b.dq.data(), a.dq.size() * 4) == 0 && a.dk16 == b.dk16 && a.dq16 == b.dq16 &&
           std::memcmp(a.dg.data(), b.dg.data(), a.dg.size() * 4) == 0 &&
           std::memcmp(a.dbeta.data(), b.dbeta.data(), a.dbeta.size() * 4) == 0;
}

bool all_positive_zero(const std::vector<float>& v) {
    for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        if (u != 0u) return false;
    }
    return true;
}

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

void expect_refused(const Result& r, sdm_p1_status status, const char* needle) {
    CHECK_MSG(r.status == status, r.error.c_str());
    CHECK_MSG(has(r.error, needle), r.error.c_str());
    CHECK(untouched(r.dk) && untouched(r.dq) && untouched(r.dg) && untouched(r.dbeta));
}

// ---- tests ---------------------------------------------------------------------------------

void test_argument_refusals() {
    Problem p = make_problem(false, 1u, 1);
    Result r;
    // A plan without backward.
    p.desc.backward = 0;
    expect_refused(backward(p), SDM_P1_ERROR_INVALID_ARGUMENT,
                   "sdm_p1_execute_backward: the plan was created without sdm_p1_desc.backward = 1");
    p.desc.backward = 1;
    // Gradients of outputs that are not differentiable, each named.
    p.up[SDM_P1_FIELD_PAYLOAD].assign(p.desc.N * 208, 0.0f);
    expect_refused(backward(p), SDM_P1_ERROR_INVALID_ARGUMENT,
                   "sdm_p1_execute_backward: grads[10] (payload): the output is not differentiable");
    p.up[SDM_P1_FIELD_PAYLOAD].clear();
    p.up[SDM_P1_FIELD_REPEATS].assign(8, 0.0f);
    expect_refused(backward(p), SDM_P1_ERROR_INVALID_ARGUMENT, "grads[28] (repeats): the output is not differentiable");
    p.up[SDM_P1_FIELD_REPEATS].clear();
    // A kspa gradient without beta.
    p.beta.clear();
    expect_refused(backward(p), SDM_P1_ERROR_INVALID_ARGUMENT,
                   "sdm_p1_execute_backward: grads[19] (kspa) is given, which needs beta, but inputs->beta is NULL");
    p.up[SDM_P1_FIELD_KSPA].clear();
    CHECK(backward(p).status == SDM_P1_SUCCESS);   // beta is not read without one
}

// The direct calls: counts, NULL and misaligned pointers, the struct rule of out.
void test_pointer_refusals() {
    const Problem p = make_problem(false, 2u, 1);
    sdm_p1_plan* plan = nullptr;
    CHECK(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_SUCCESS);
    const sdm_p1_inputs in = p.inputs();
    const std::vector<const void*> grads = p.grads();
    std::vector<float> dg(p.g.size()), dk(p.k_val.size() + 1);
    sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
    out.g = dg.data();
    const auto refused = [&](sdm_p1_status st, const char* needle) {
        CHECK_MSG(st == SDM_P1_ERROR_INVALID_ARGUMENT, sdm_p1_last_error());
        CHECK_MSG(has(sdm_p1_last_error(), needle), sdm_p1_last_error());
    };
    refused(sdm_p1_execute_backward(nullptr, &in, nullptr, nullptr, 0, &out, nullptr),
            "sdm_p1_execute_backward: plan is NULL");
    refused(sdm_p1_execute_backward(plan, nullptr, nullptr, nullptr, 0, &out, nullptr),
            "sdm_p1_execute_backward: inputs is NULL");
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), -1, &out, nullptr), "count = -1 must be in 0..");
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), SDM_P1_FIELD_COUNT + 1, &out, nullptr),
            "count = 30");
    refused(sdm_p1_execute_backward(plan, &in, nullptr, nullptr, 3, &out, nullptr), "0 when grads is NULL");
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), SDM_P1_FIELD_COUNT, nullptr, nullptr),
            "sdm_p1_execute_backward: out is NULL");
    // Misaligned: an upstream gradient, the payload, an output, an input.
    std::vector<const void*> shifted = grads;
    shifted[SDM_P1_FIELD_QK] = reinterpret_cast<const char*>(grads[SDM_P1_FIELD_QK]) + 2;
    refused(sdm_p1_execute_backward(plan, &in, nullptr, shifted.data(), SDM_P1_FIELD_COUNT, &out, nullptr),
            "grads[1] (qk) is not aligned to its element size (4 bytes)");
    const std::vector<int32_t> payload = forward_payload(p);
    CHECK(!payload.empty());
    const auto* odd_payload = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(payload.data()) + 1);
    refused(sdm_p1_execute_backward(plan, &in, odd_payload, grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr),
            "payload is not aligned");
    sdm_p1_input_grads odd = out;
    odd.k_val = reinterpret_cast<char*>(dk.data()) + 2;
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), SDM_P1_FIELD_COUNT, &odd, nullptr),
            "out->k_val is not aligned to its element size (4 bytes)");
    odd = out;
    odd.reserved = 1;
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), SDM_P1_FIELD_COUNT, &odd, nullptr),
            "out->reserved = 1 must be 0");
    odd = out;
    odd.struct_size = 8;
    refused(sdm_p1_execute_backward(plan, &in, nullptr, grads.data(), SDM_P1_FIELD_COUNT, &odd, nullptr),
            "out->struct_size = 8 is below the 40 bytes of the oldest layout (1.3)");
    sdm_p1_inputs no_ids = in;
    no_ids.k_idx = nullptr;
    refused(sdm_p1_execute_backward(plan, &no_ids, nullptr, grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr),
            "sdm_p1_execute_backward: inputs->k_idx is NULL");
    // With a payload: both ids (checked against it) or neither.
    refused(sdm_p1_execute_backward(plan, &no_ids, payload.data(), grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr),
            "sdm_p1_execute_backward: inputs->k_idx is NULL but inputs->q_idx is not: with a payload, give both ids "
            "(the payload is checked against them) or neither");
    no_ids.q_idx = nullptr;   // the payload stands for the ids
    CHECK(sdm_p1_execute_backward(plan, &no_ids, payload.data(), grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr) ==
          SDM_P1_SUCCESS);
    sdm_p1_inputs no_g = in;
    no_g.g = nullptr;
    refused(sdm_p1_execute_backward(plan, &no_g, payload.data(), grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr),
            "sdm_p1_execute_backward: inputs->g is NULL");
    sdm_p1_plan_destroy(plan);
}

void test_desc_fields() {
    Problem p = make_problem(false, 3u, 1);
    sdm_p1_plan* plan = nullptr;
    p.desc.backward = 2;
    CHECK(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(has(sdm_p1_last_error(), "sdm_p1_desc.backward = 2: must be 0, 1 or SDM_P1_UNSET"), sdm_p1_last_error());
    p.desc.backward = 1;
    p.desc.grad_dtype = SDM_P1_DTYPE_BFLOAT16;   // not the value dtype (float32)
    CHECK(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(has(sdm_p1_last_error(), "sdm_p1_desc.grad_dtype = 5"), sdm_p1_last_error());
    p.desc.grad_dtype = SDM_P1_DTYPE_INT32;
    CHECK(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_ERROR_INVALID_ARGUMENT);
    // Reported resolved: the value dtype by default.
    p.desc.value_dtype = SDM_P1_DTYPE_BFLOAT16;
    p.desc.grad_dtype = SDM_P1_UNSET;
    CHECK(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_SUCCESS);
    sdm_p1_desc got = SDM_P1_DESC_INITIALIZER;
    CHECK(sdm_p1_plan_desc(plan, &got) == SDM_P1_SUCCESS);
    CHECK(got.backward == 1 && got.grad_dtype == SDM_P1_DTYPE_BFLOAT16);
    sdm_p1_plan_destroy(plan);
    const sdm_p1_desc defaults = SDM_P1_DESC_INITIALIZER;
    CHECK(defaults.backward == 0 && defaults.grad_dtype == 0);
    // Ignored without backward: a forward-only plan accepts any grad_dtype (found by fuzz_api:
    // a forward-only plan was refused for it).
    for (int32_t backward : {0, SDM_P1_UNSET}) {
        for (int32_t grad_dtype : {int32_t{SDM_P1_DTYPE_INT32}, int32_t{7}, INT32_MIN}) {
            p.desc.backward = backward;
            p.desc.grad_dtype = grad_dtype;
            CHECK_MSG(sdm_p1_plan_create(&plan, &p.desc) == SDM_P1_SUCCESS, sdm_p1_last_error());
            CHECK(sdm_p1_plan_desc(plan, &got) == SDM_P1_SUCCESS);
            CHECK(got.backward == 0 && got.grad_dtype == SDM_P1_DTYPE_BFLOAT16);   // the value dtype
            sdm_p1_plan_destroy(plan);
        }
    }
}

void test_bad_data_refused_nothing_written() {
    Problem p = make_problem(false, 4u, 4);
    const std::vector<int32_t> good = forward_payload(p);
    const int row = static_cast<int>(good.size() / p.desc.N);
    const int n = static_cast<int>(p.desc.C * (p.desc.W + p.desc.R));
    Call call;
    call.ids = false;
    std::vector<int32_t> bad = good;
    call.payload = bad.data();
    // Chunk 2, position 5: one entry twice (and another missing).
    bad[2 * row + 5] = bad[2 * row + 4];
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "sdm_p1_execute_backward: payload[2, 5] = ");
    CHECK(has(backward(p, call).error, "names an entry an earlier word named: the payload is not the sort of chunk 2"));
    // A lane past W.
    bad = good;
    bad[1 * row + 7] = (bad[1 * row + 7] & ~0xFF & ~(1 << 8)) | 4;
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "payload[1, 7] = ");
    CHECK(has(backward(p, call).error, "names no entry of the chunk"));
    // The padding bit on a valid token's entry (chunk 3: 9 valid tokens of 12).
    bad = good;
    bad[3 * row] |= 1 << 17;
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "has the padding bit (17) on a valid token's entry");
    // Padding before a valid entry: swap the last valid and the first padding word.
    bad = good;
    const int nv = 9 * static_cast<int>(p.desc.W + p.desc.R);
    std::swap(bad[3 * row + nv - 1], bad[3 * row + nv]);
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "is padding before a valid entry");
    // The first entry without its head bit.
    bad = good;
    bad[0] &= 0x7FFFFFFF;
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "lacks the group-head bit (31)");
    // Words past C * (W + R) and bits 18-30 are not read.
    bad = good;
    for (int c = 0; c < p.desc.N; ++c) {
        for (int r = n; r < row; ++r) bad[c * row + r] = -1;
        bad[c * row] ^= 1 << 20;
    }
    const Result with_bad_tail = backward(p, call);
    call.payload = good.data();
    CHECK(with_bad_tail.status == SDM_P1_SUCCESS && same_bits(with_bad_tail, backward(p, call)));
    // Ids, gates and lengths: the forward's messages under this function's name.
    call = Call();
    Problem q = p;
    q.k_idx[(4 * q.desc.C + 1) * q.desc.W + 2] = 5;   // chunk 4 is stream 1: [1000, 1007)
    expect_refused(backward(q, call), SDM_P1_ERROR_INVALID_INPUT,
                   "sdm_p1_execute_backward: k_idx[4, 1, 2] = 5 lies outside stream 1's slot range [1000, 1007)");
    q = p;
    q.g[(1 * q.desc.C + 3) * q.desc.W + 1] = INFINITY;
    expect_refused(backward(q, call), SDM_P1_ERROR_INVALID_INPUT, "sdm_p1_execute_backward: gate g[1, 3, 1] = inf");
    call.payload = good.data();   // gates are checked with a payload too
    expect_refused(backward(q, call), SDM_P1_ERROR_INVALID_INPUT, "gate g[1, 3, 1] = inf");
}

// A payload checked against the ids given with it (issue 44): a payload of other ids is
// refused where it is not their sort, at the first word out of their order. Hand-made cases:
// the ids changed at the first group start r (head bit set, slot above the previous word's)
// whose entry index is below the previous word's, so that r's entry takes the previous word's
// slot: the payload stays their sort up to r, and r is out of order; a head bit added where
// the slot does not change and taken off where it does. Without the ids the payload is
// trusted (documented): the same call runs.
void test_payload_of_other_ids_refused() {
    const Problem p = make_problem(false, 8u, 1);
    const std::vector<int32_t> good = forward_payload(p);
    CHECK(!good.empty());
    const int64_t C = p.desc.C, W = p.desc.W, R = p.desc.R, WR = W + R;
    const int row = static_cast<int>(good.size() / p.desc.N);
    Call call;
    call.payload = good.data();
    const Result ok = backward(p, call);
    CHECK_MSG(ok.status == SDM_P1_SUCCESS, ok.error.c_str());   // the forward's own payload passes
    const auto word = [&](int64_t c, int r) { return static_cast<uint32_t>(good[c * row + r]); };
    // The entry index of a payload word (token bits 9-16, read bit 8, lane bits 0-7).
    const auto entry = [&](uint32_t w) { return ((w >> 9) & 0xFF) * WR + ((w >> 8 & 1u) ? W : 0) + (w & 0xFF); };
    const auto valid = [](uint32_t w) { return !(w >> 17 & 1u); };
    const auto at = [](int64_t c, int r) {
        char s[64];
        std::snprintf(s, sizeof s, "payload[%lld, %d] = ", static_cast<long long>(c), r);
        return std::string(s);
    };
    bool found = false;
    for (int64_t c = 0; c < p.desc.N && !found; ++c) {
        for (int r = 1; r < static_cast<int>(C * WR) && !found; ++r) {
            const uint32_t w = word(c, r), prev = word(c, r - 1);
            if (!valid(w) || !valid(prev) || !(w >> 31) || entry(w) > entry(prev)) continue;
            Problem q = p;
            const uint32_t t = (w >> 9) & 0xFF, lane = w & 0xFF, pt = (prev >> 9) & 0xFF, pl = prev & 0xFF;
            int64_t& id = (w >> 8 & 1u) ? q.q_idx[(c * C + t) * R + lane] : q.k_idx[(c * C + t) * W + lane];
            id = (prev >> 8 & 1u) ? p.q_idx[(c * C + pt) * R + pl] : p.k_idx[(c * C + pt) * W + pl];
            const Result refused_order = backward(q, call);
            expect_refused(refused_order, SDM_P1_ERROR_INVALID_INPUT, at(c, r).c_str());
            CHECK_MSG(
                has(refused_order.error,
                    std::string("is out of the order of these ids (by slot, then entry, each entry after the previous "
                                "word's): the payload is not the sort of chunk " +
                                std::to_string(c))
                        .c_str()),
                refused_order.error.c_str());
            Call trusted = call;
            trusted.ids = false;
            CHECK(backward(q, trusted).status == SDM_P1_SUCCESS);
            found = true;
        }
    }
    CHECK(found);
    // Head bits against these ids: one added inside a group, one taken off a group start
    // (chunk 1's first past position 0).
    int inside = 1, start = 1;
    while (!valid(word(1, inside)) || (word(1, inside) >> 31)) ++inside;
    while (!(word(1, start) >> 31)) ++start;
    std::vector<int32_t> bad = good;
    bad[row + inside] = static_cast<int32_t>(word(1, inside) | 0x80000000u);
    call.payload = bad.data();
    Result r = backward(p, call);
    expect_refused(r, SDM_P1_ERROR_INVALID_INPUT, at(1, inside).c_str());
    CHECK_MSG(has(r.error, "has the group-head bit (31) but the same slot as the previous entry in these ids"),
              r.error.c_str());
    bad = good;
    bad[row + start] = static_cast<int32_t>(word(1, start) & 0x7FFFFFFFu);
    r = backward(p, call);
    expect_refused(r, SDM_P1_ERROR_INVALID_INPUT, at(1, start).c_str());
    CHECK_MSG(has(r.error, "lacks the group-head bit (31) but starts a slot in these ids"), r.error.c_str());
    // Another problem's payload on the same shape: refused, nothing written.
    const std::vector<int32_t> other = forward_payload(make_problem(false, 9u, 1));
    call.payload = other.data();
    expect_refused(backward(p, call), SDM_P1_ERROR_INVALID_INPUT, "the payload is not the sort of chunk ");
    // A bad id with a payload: the forward's message (the ids are checked before the order).
    Problem q = p;
    q.q_idx[(4 * C + 1) * R + 2] = 5;   // chunk 4 is stream 1: [1000, 1007)
    call.payload = good.data();
    expect_refused(backward(q, call), SDM_P1_ERROR_INVALID_INPUT,
                   "sdm_p1_execute_backward: q_idx[4, 1, 2] = 5 lies outside stream 1's slot range [1000, 1007)");
}

void test_zero_upstream_gives_positive_zero() {
    for (bool bf16 : {false, true}) {
        Problem p = make_problem(bf16, 5u, 4);
        for (int f : kDifferentiable) {
            std::fill(p.up[f].begin(), p.up[f].end(), 0.0f);
            std::fill(p.up_bf[f].begin(), p.up_bf[f].end(), uint16_t{0});
        }
        Call call;
        call.float32_grads = true;
        const Result zero = backward(p, call);
        CHECK(zero.status == SDM_P1_SUCCESS);
        CHECK(all_positive_zero(zero.dk) && all_positive_zero(zero.dq) && all_positive_zero(zero.dg) &&
              all_positive_zero(zero.dbeta));
        for (int f : kDifferentiable) p.up[f].clear();   // NULL reads as +0.0
        CHECK(same_bits(backward(p, call), zero));
    }
}

void test_padding_and_repeat_gates_exactly_zero() {
    const Problem p = make_problem(false, 6u, 4);
    const Result r = backward(p);
    CHECK(r.status == SDM_P1_SUCCESS);
    const int64_t C = p.desc.C, W = p.desc.W, R = p.desc.R;
    bool padding_zero = true, some_repeat = false, repeats_zero = true, valid_nonzero = true;
    for (int64_t c = 0; c < p.desc.N; ++c) {
        const int64_t valid = c >= p.desc.N - p.desc.num_parallel ? p.desc.valid_last : C;
        for (int64_t t = 0; t < C; ++t) {
            const int64_t tok = c * C + t;
            for (int64_t l = 0; l < W; ++l) {
                const float dk = r.dk[tok * W + l], dg = r.dg[tok * W + l];
                bool repeat = false;   // an earlier lane of the token wrote the slot
                for (int64_t e = 0; e < l; ++e) repeat |= p.k_idx[tok * W + e] == p.k_idx[tok * W + l];
                if (t >= valid) padding_zero &= dk == 0.0f && !std::signbit(dk) && dg == 0.0f && !std::signbit(dg);
                if (t < valid && repeat) {
                    some_repeat = true;
                    repeats_zero &= dg == 0.0f && !std::signbit(dg);
                }
                if (t < valid && !repeat) valid_nonzero &= dg != 0.0f && dk != 0.0f;
            }
            for (int64_t l = 0; l < R && t >= valid; ++l) {
                padding_zero &= r.dq[tok * R + l] == 0.0f && !std::signbit(r.dq[tok * R + l]);
            }
            if (t >= valid) padding_zero &= r.dbeta[tok] == 0.0f && !std::signbit(r.dbeta[tok]);
        }
    }
    CHECK(padding_zero);
    CHECK(some_repeat && repeats_zero);
    CHECK(valid_nonzero);
}

void test_same_bits_threads_and_payload() {
    for (bool bf16 : {false, true}) {
        for (int gw : {1, 4}) {
            const Problem p = make_problem(bf16, 7u + gw, gw);
            const Result one = backward(p);
            CHECK(one.status == SDM_P1_SUCCESS);
            Call call;
            call.threads = 4;
            CHECK(same_bits(backward(p, call), one));
            const std::vector<int32_t> payload = forward_payload(p);
            call.payload = payload.data();
            call.ids = false;
            CHECK(same_bits(backward(p, call), one));
            call.threads = 1;
            CHECK(same_bits(backward(p, call), one));
        }
    }
}

// One chunk of two tokens, one write and one read each, all on one slot (per-token gates g0,
// g1): a[1, 0] = k1 k0 e^g1, qk[1, 1] = q1 k1, kspa of K row 1 = -beta1 k1 e^(g0 + g1).
void test_hand_worked() {
    Problem p;
    sdm_p1_desc& d = p.desc;
    d.N = 1;
    d.C = 2;
    d.W = 1;
    d.R = 1;
    d.num_keys = 1;
    d.gate_width = 1;
    d.backend = SDM_P1_BACKEND_CPU;
    d.index_dtype = SDM_P1_DTYPE_INT64;
    d.backward = 1;
    p.k_idx = {0, 0};
    p.q_idx = {0, 0};
    p.k_val = {2.0f, 3.0f};
    p.q_val = {4.0f, 5.0f};
    p.g = {-0.5f, -1.0f};
    p.beta = {0.25f, 0.5f};
    p.up.resize(SDM_P1_FIELD_COUNT);
    p.up_bf.resize(SDM_P1_FIELD_COUNT);
    p.up[SDM_P1_FIELD_A] = {7.0f, 7.0f, 1.0f, 7.0f};   // only a[1, 0] is read
    Result r = backward(p);
    const double e1 = std::exp(-1.0), e15 = std::exp(-1.5);
    CHECK(r.status == SDM_P1_SUCCESS);
    CHECK(near_ulps(r.dk[0], 3.0 * e1, 1) && near_ulps(r.dk[1], 2.0 * e1, 1));
    CHECK(r.dq[0] == 0.0f && r.dq[1] == 0.0f);
    CHECK(r.dg[0] == 0.0f && near_ulps(r.dg[1], 6.0 * e1, 1));   // a does not depend on g0
    CHECK(r.dbeta[0] == 0.0f && r.dbeta[1] == 0.0f);

    p.up[SDM_P1_FIELD_A].clear();
    p.up[SDM_P1_FIELD_QK] = {0.0f, 7.0f, 0.0f, 1.0f};   // qk[1, 1]; cell [0, 1] never read
    r = backward(p);
    CHECK(r.dk[0] == 0.0f && r.dk[1] == 5.0f && r.dq[0] == 0.0f && r.dq[1] == 3.0f);
    CHECK(r.dg[0] == 0.0f && r.dg[1] == 0.0f);

    p.up[SDM_P1_FIELD_QK].clear();
    p.up[SDM_P1_FIELD_KSPA] = {0.0f, 1.0f};   // K row 1 is token 1's write
    r = backward(p);
    CHECK(r.dk[0] == 0.0f && near_ulps(r.dk[1], -0.5 * e15, 1));
    CHECK(near_ulps(r.dg[0], -1.5 * e15, 1) && near_ulps(r.dg[1], -1.5 * e15, 1));
    CHECK(r.dbeta[0] == 0.0f && near_ulps(r.dbeta[1], -3.0 * e15, 1));
}

}   // namespace

int main() {
    RUN(test_argument_refusals);
    RUN(test_pointer_refusals);
    RUN(test_desc_fields);
    RUN(test_bad_data_refused_nothing_written);
    RUN(test_zero_upstream_gives_positive_zero);
    RUN(test_padding_and_repeat_gates_exactly_zero);
    RUN(test_same_bits_threads_and_payload);
    RUN(test_payload_of_other_ids_refused);
    RUN(test_hand_worked);
    return test_summary();
}
