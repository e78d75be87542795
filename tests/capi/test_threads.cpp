// Plans of different shapes created, executed and destroyed by 16 threads at once (each plan
// with its own worker threads too): every output byte as in a serial run, every thread's bad
// input reported in its own last-error message. Run under ThreadSanitizer by run.sh test.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sdm/phase1.h"
#include "test_util.h"

namespace {

// A request and its inputs, filled from a seed.
struct Shape {
    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    std::vector<int64_t> k_idx64, q_idx64;
    std::vector<int32_t> k_idx32, q_idx32;
    std::vector<float> k_val, q_val, g, beta;

    sdm_p1_inputs inputs() const {
        sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
        const bool i64 = desc.index_dtype == SDM_P1_DTYPE_INT64;
        in.k_idx = i64 ? static_cast<const void*>(k_idx64.data()) : k_idx32.data();
        in.q_idx = i64 ? static_cast<const void*>(q_idx64.data()) : q_idx32.data();
        in.k_val = k_val.data();   // bfloat16: the same bytes, as twice as many 16-bit values
        in.q_val = q_val.data();
        in.g = g.data();
        in.beta = beta.data();
        return in;
    }
};

uint32_t next(uint32_t& s) {
    s = s * 1664525u + 1013904223u;
    return s >> 8;
}

// N chunks of C tokens in P streams; ids of a few hot keys (long slot groups).
Shape make_shape(int64_t N, int64_t C, int64_t W, int64_t R, int64_t P, bool i64, bool bf16, bool per_write_gates,
                 int64_t det_fields, int32_t output_mode, uint32_t seed) {
    Shape s;
    sdm_p1_desc& d = s.desc;
    d.N = N;
    d.C = C;
    d.W = W;
    d.R = R;
    d.num_parallel = P;
    d.num_keys = 3 * W + 5;
    d.stream_offset = d.num_keys + 11;
    d.valid_last = C - C / 3;
    d.index_dtype = i64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = per_write_gates ? W : 1;
    d.det_fields = det_fields;
    d.rec_tile = 5;
    d.backend = SDM_P1_BACKEND_CPU;
    d.output_mode = output_mode;
    for (int64_t tok = 0; tok < N * C; ++tok) {
        const int64_t base = tok / C % P * d.stream_offset;
        for (int64_t w = 0; w < W; ++w) {
            s.k_idx64.push_back(base + next(seed) % d.num_keys);
            s.k_val.push_back(static_cast<float>(next(seed) % 2001) / 1000.0f - 1.0f);
        }
        for (int64_t r = 0; r < R; ++r) {
            s.q_idx64.push_back(base + next(seed) % d.num_keys);
            s.q_val.push_back(static_cast<float>(next(seed) % 2001) / 1000.0f - 1.0f);
        }
        for (int64_t w = 0; w < d.gate_width; ++w) s.g.push_back(-static_cast<float>(next(seed) % 3000) / 1000.0f);
        s.beta.push_back(static_cast<float>(next(seed) % 1000) / 1000.0f);
    }
    for (int64_t id : s.k_idx64) s.k_idx32.push_back(static_cast<int32_t>(id));
    for (int64_t id : s.q_idx64) s.q_idx32.push_back(static_cast<int32_t>(id));
    return s;
}

std::vector<Shape> make_shapes() {
    const int32_t plan = SDM_P1_OUTPUTS_PLAN, caller = SDM_P1_OUTPUTS_CALLER;
    std::vector<Shape> shapes;
    shapes.push_back(make_shape(6, 16, 4, 3, 2, false, false, false, SDM_P1_UNSET, plan, 1u));
    shapes.push_back(make_shape(4, 32, 2, 2, 1, false, true, false, SDM_P1_DET_ALL, plan, 2u));
    shapes.push_back(make_shape(3, 64, 1, 1, 3, true, false, true, SDM_P1_DET_ALL, caller, 3u));
    shapes.push_back(make_shape(8, 8, 8, 8, 4, true, true, true, SDM_P1_DET_SHIPPED, caller, 4u));
    shapes.push_back(make_shape(2, 128, 2, 1, 1, false, false, false, SDM_P1_DET_ALL, plan, 5u));
    shapes.push_back(make_shape(5, 12, 3, 5, 5, true, false, true, SDM_P1_DET_KREC | SDM_P1_DET_TILES, caller, 6u));
    return shapes;
}

using Outputs = std::vector<std::vector<uint8_t>>;

// One plan's life: created with `threads` workers, executed twice, destroyed. Empty on any
// failure, with the message in *error.
Outputs run_plan(const Shape& s, int32_t threads, std::string* error) {
    sdm_p1_desc d = s.desc;
    d.num_threads = threads;
    sdm_p1_plan* plan = nullptr;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) {
        *error = sdm_p1_last_error();
        return {};
    }
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    Outputs out(SDM_P1_FIELD_COUNT);
    void* buffers[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        out[f].resize(v[f].bytes);
        buffers[f] = v[f].data != nullptr ? v[f].data : out[f].data();
    }
    const sdm_p1_inputs in = s.inputs();
    const bool caller = d.output_mode == SDM_P1_OUTPUTS_CALLER;
    for (int rep = 0; rep < 2; ++rep) {
        if (sdm_p1_execute(plan, &in, caller ? buffers : nullptr, caller ? SDM_P1_FIELD_COUNT : 0, nullptr) !=
            SDM_P1_SUCCESS) {
            *error = sdm_p1_last_error();
            sdm_p1_plan_destroy(plan);
            return {};
        }
    }
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (v[f].data != nullptr) std::memcpy(out[f].data(), v[f].data, v[f].bytes);
    }
    sdm_p1_plan_destroy(plan);
    return out;
}

// What one thread saw.
struct ThreadResult {
    int runs = 0;
    int mismatches = 0;
    int wrong_messages = 0;
    std::string first_problem;
};

constexpr int kThreads = 16;
constexpr int kRounds = 12;

void worker(int t, const std::vector<Shape>& shapes, const std::vector<Outputs>& serial, const Shape& bad,
            ThreadResult& result) {
    for (int round = 0; round < kRounds; ++round) {
        const size_t i = static_cast<size_t>(t + round) % shapes.size();
        std::string error;
        const Outputs out = run_plan(shapes[i], 1 + (t + round) % 3, &error);
        ++result.runs;
        if (out != serial[i]) {
            ++result.mismatches;
            if (result.first_problem.empty()) result.first_problem = "shape " + std::to_string(i) + ": " + error;
        }
        // Bad data: this thread's message names this thread's offender.
        if (round % 2 == t % 2) {
            Shape mine = bad;
            const size_t lane = static_cast<size_t>(t) % mine.k_idx32.size();
            mine.k_idx32[lane] = -1 - t;
            error.clear();
            const Outputs none = run_plan(mine, 2, &error);
            const std::string want = "= " + std::to_string(-1 - t) + " lies outside";
            if (!none.empty() || error.find(want) == std::string::npos) {
                ++result.wrong_messages;
                if (result.first_problem.empty()) result.first_problem = "bad data: " + error;
            }
        }
    }
}

void test_concurrent_plans_match_serial() {
    const std::vector<Shape> shapes = make_shapes();
    std::vector<Outputs> serial;
    for (const Shape& s : shapes) {
        std::string error;
        serial.push_back(run_plan(s, 1, &error));
        CHECK_MSG(!serial.back().empty(), error.c_str());
    }
    const Shape& bad = shapes[0];   // int32 ids
    std::vector<ThreadResult> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back(worker, t, std::cref(shapes), std::cref(serial), std::cref(bad), std::ref(results[t]));
    }
    for (std::thread& th : threads) th.join();
    int runs = 0;
    for (const ThreadResult& r : results) {
        runs += r.runs;
        CHECK_MSG(r.mismatches == 0, r.first_problem.c_str());
        CHECK_MSG(r.wrong_messages == 0, r.first_problem.c_str());
    }
    CHECK(runs == kThreads * kRounds);
}

}   // namespace

int main() {
    RUN(test_concurrent_plans_match_serial);
    return test_summary();
}
