// Bad input data for tests/cuda/test_cuda.cpp: scenarios that plant out-of-range ids and bad gates
// (NaN, infinities, magnitude 2^22) at chosen (chunk, token, lane) places of a case's inputs,
// and legal look-alikes (padding garbage, ids at the ends of the range). The CPU backend
// fails on each bad one with the first offender in chunk order; the CUDA backend must report
// the same message through sdm_p1_execute_status.
#ifndef SDM_P1_TESTS_CUDA_BAD_DATA_H
#define SDM_P1_TESTS_CUDA_BAD_DATA_H

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda_cases.h"

namespace cuda_test {

struct BadData {
    const char* name;
    void (*plant)(const CaseSpec&, HostInputs&);
    bool is_error;   // false: legal data (padding garbage, ids at the range's ends)
};

inline size_t k_at(const CaseSpec& s, int64_t c, int64_t t, int64_t lane) {
    return static_cast<size_t>((c * s.C + t) * s.W + lane);
}
inline size_t q_at(const CaseSpec& s, int64_t c, int64_t t, int64_t lane) {
    return static_cast<size_t>((c * s.C + t) * s.R + lane);
}
inline size_t g_at(const CaseSpec& s, int64_t c, int64_t t, int64_t lane) {
    return static_cast<size_t>((c * s.C + t) * s.gate_width() + std::min(lane, s.gate_width() - 1));
}
inline int64_t id_base(const CaseSpec& s, int64_t c) { return (c % s.P) * s.offset(); }

// Data errors in three chunks; the first (chunk 2) is the one reported.
inline void plant_bad_data(const CaseSpec& s, HostInputs& in) {
    in.g[g_at(s, 2, 10, s.W - 1)] = 4194304.0f;   // 2^22
    in.k_ids[k_at(s, 4, 7, 1)] = -3;
    in.g[g_at(s, 5, 2, 0)] = std::nanf("");
}

inline const BadData kBadData[] = {
    {"k_idx one past the range",
     [](const CaseSpec& s, HostInputs& in) { in.k_ids[k_at(s, 5, 3, 2)] = id_base(s, 5) + s.num_keys; }, true},
    {"q_idx one below the range",
     [](const CaseSpec& s, HostInputs& in) { in.q_ids[q_at(s, 3, 0, 0)] = id_base(s, 3) - 1; }, true},
    {"k_idx negative", [](const CaseSpec& s, HostInputs& in) { in.k_ids[k_at(s, 2, 4, 0)] = -5; }, true},
    {"k_idx most negative",
     [](const CaseSpec& s, HostInputs& in) { in.k_ids[k_at(s, 1, 1, 1)] = s.idx64 ? INT64_MIN : INT32_MIN; }, true},
    {"q_idx largest",
     [](const CaseSpec& s, HostInputs& in) { in.q_ids[q_at(s, 4, 6, 2)] = s.idx64 ? INT64_MAX : INT32_MAX; }, true},
    {"NaN gate", [](const CaseSpec& s, HostInputs& in) { in.g[g_at(s, 6, 9, 3)] = std::nanf(""); }, true},
    {"gate 2^22", [](const CaseSpec& s, HostInputs& in) { in.g[g_at(s, 1, 15, 0)] = 4194304.0f; }, true},
    {"gate -2^22", [](const CaseSpec& s, HostInputs& in) { in.g[g_at(s, 4, 0, 2)] = -4194304.0f; }, true},
    {"gate +inf", [](const CaseSpec& s, HostInputs& in) { in.g[g_at(s, 0, 5, 1)] = INFINITY; }, true},
    {"gate -inf after the largest legal gate",
     [](const CaseSpec& s, HostInputs& in) {
         in.g[g_at(s, 3, 1, 0)] = -4194303.5f;
         in.g[g_at(s, 3, 2, 0)] = -INFINITY;
     },
     true},
    {"three chunks: the first is reported", [](const CaseSpec& s, HostInputs& in) { plant_bad_data(s, in); }, true},
    {"one token: its ids before its gates",
     [](const CaseSpec& s, HostInputs& in) {
         in.g[g_at(s, 3, 5, 0)] = std::nanf("");
         in.q_ids[q_at(s, 3, 5, 2)] = id_base(s, 3) + s.num_keys + 7;
     },
     true},
    {"one chunk: the earlier token first",
     [](const CaseSpec& s, HostInputs& in) {
         in.k_ids[k_at(s, 3, 9, 0)] = -1;
         in.g[g_at(s, 3, 8, 1)] = -INFINITY;
     },
     true},
    {"the last valid entry",
     [](const CaseSpec& s, HostInputs& in) {
         in.k_ids[k_at(s, s.N - 1, s.last_valid() - 1, s.W - 1)] = id_base(s, s.N - 1) - 1;
     },
     true},
    {"every chunk",
     [](const CaseSpec& s, HostInputs& in) {
         for (int64_t c = 0; c < s.N; ++c)
             in.k_ids[k_at(s, c, (c * 3) % s.last_valid(), c % s.W)] = id_base(s, c) + s.num_keys;
     },
     true},
    {"padding only (legal)",
     [](const CaseSpec& s, HostInputs& in) {
         in.k_ids[k_at(s, s.N - 1, s.last_valid(), 0)] = -7;
         in.g[g_at(s, s.N - 1, s.last_valid(), 0)] = INFINITY;
     },
     false},
    {"ids at both ends of the range (legal)",
     [](const CaseSpec& s, HostInputs& in) {
         in.k_ids[k_at(s, 2, 0, 0)] = id_base(s, 2);
         in.q_ids[q_at(s, 2, 0, 0)] = id_base(s, 2) + s.num_keys - 1;
         in.g[g_at(s, 2, 1, 0)] = -4194303.5f;
     },
     false},
};

// Bad per-stream lengths, for a case with lengths and at least 3 streams (and legal edges).
// The CPU backend reports the smallest bad stream before any chunk's data.
inline const BadData kBadLengths[] = {
    {"length -1", [](const CaseSpec&, HostInputs& in) { in.lengths[1] = -1; }, true},
    {"length steps * C + 1", [](const CaseSpec& s, HostInputs& in) { in.lengths[2] = s.steps() * s.C + 1; }, true},
    {"length most negative",
     [](const CaseSpec&, HostInputs& in) { in.lengths[0] = in.lengths64 ? INT64_MIN : INT32_MIN; }, true},
    {"length largest", [](const CaseSpec&, HostInputs& in) { in.lengths[2] = in.lengths64 ? INT64_MAX : INT32_MAX; },
     true},
    {"two bad streams: the smaller is reported",
     [](const CaseSpec& s, HostInputs& in) {
         in.lengths[2] = -4;
         in.lengths[1] = s.steps() * s.C + 9;
     },
     true},
    {"a bad length before a bad id of another stream",
     [](const CaseSpec& s, HostInputs& in) {
         in.lengths[0] = s.steps() * s.C;
         in.k_ids[k_at(s, 0, 0, 0)] = -1;   // chunk 0: stream 0, valid
         in.lengths[2] = -1;
     },
     true},
    {"a bad id with good lengths",
     [](const CaseSpec& s, HostInputs& in) {
         in.lengths[1] = s.steps() * s.C;
         in.q_ids[q_at(s, 1, 0, 0)] = id_base(s, 1) - 1;
     },
     true},
    {"every length 0 (legal)",
     [](const CaseSpec&, HostInputs& in) { std::fill(in.lengths.begin(), in.lengths.end(), 0); }, false},
    {"the padding of a length-1 stream (legal)",
     [](const CaseSpec& s, HostInputs& in) {
         in.lengths[1] = 1;
         in.k_ids[k_at(s, 1, 1, 0)] = -9;
         in.g[g_at(s, 1, 1, 0)] = INFINITY;
     },
     false},
};

}   // namespace cuda_test

#endif   // SDM_P1_TESTS_CUDA_BAD_DATA_H
