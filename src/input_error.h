// Bad input data (a valid token's id outside its stream's range, a bad gate, a stream length
// out of range): what both backends record about the first offender, and the one message
// they report it with.
#ifndef SDM_P1_INPUT_ERROR_H
#define SDM_P1_INPUT_ERROR_H

#include <cstdint>

#include "options.h"

namespace sdm_p1 {

// The first bad input found in a chunk (entry order: per token, its ids, then its gates).
struct InputError {
    bool found;
    bool gate;   // a gate (else an id)
    int token;
    int lane;    // write or read column (for an id), gate column (for a gate)
    bool is_q;   // the id is a read id
    int64_t id;
    float gate_value;
};

// Throws Error(SDM_P1_ERROR_INVALID_INPUT) naming chunk c's offender and its value, in a
// message of the C function `who`.
[[noreturn]] void report_input_error(const Options& o, int64_t c, const InputError& e,
                                     const char* who = "sdm_p1_execute");

// Throws Error(SDM_P1_ERROR_INVALID_INPUT): stream_lengths[stream] = length lies outside
// 0..steps * C.
[[noreturn]] void report_length_error(const Options& o, int64_t stream, int64_t length,
                                      const char* who = "sdm_p1_execute");

// The first stream (in stream order) whose length in `lengths` (host memory, int64 or int32
// elements) lies outside 0..steps * C, or -1 when every one is in range.
int64_t first_bad_length(const Options& o, const void* lengths, bool lengths64);

}   // namespace sdm_p1

#endif   // SDM_P1_INPUT_ERROR_H
