#include "input_error.h"

#include "errors.h"
#include "../canon/phase1_shared.h"

namespace sdm_p1 {

void report_input_error(const Options& o, int64_t c, const InputError& e, const char* who) {
    const int64_t stream = c % o.P;
    if (e.gate) {
        fail(SDM_P1_ERROR_INVALID_INPUT, who, ": gate g[", c, ", ", e.token, ", ", e.lane, "] = ", e.gate_value,
             " is not a finite number of magnitude below 2^22");
    }
    fail(SDM_P1_ERROR_INVALID_INPUT, who, ": ", e.is_q ? "q_idx[" : "k_idx[", c, ", ", e.token, ", ", e.lane,
         "] = ", e.id, " lies outside stream ", stream, "'s slot range [", stream * o.stream_offset, ", ",
         stream * o.stream_offset + o.num_keys, ")");
}

void report_length_error(const Options& o, int64_t stream, int64_t length, const char* who) {
    const int64_t steps = o.N / o.P;
    fail(SDM_P1_ERROR_INVALID_INPUT, who, ": stream_lengths[", stream, "] = ", length, ": stream ", stream,
         "'s length must be in 0..", steps * o.C, " (steps * C = ", steps, " * ", o.C, ")");
}

int64_t first_bad_length(const Options& o, const void* lengths, bool lengths64) {
    const int64_t most = o.N / o.P * o.C;
    for (int64_t s = 0; s < o.P; ++s) {
        const int64_t len = load_id(lengths, lengths64, s);
        if (len < 0 || len > most) return s;
    }
    return -1;
}

}   // namespace sdm_p1
