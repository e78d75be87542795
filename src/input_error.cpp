#include "input_error.h"

#include "errors.h"

namespace sdm_p1 {

void report_input_error(const Options& o, int64_t c, const InputError& e) {
    const int64_t stream = c % o.P;
    if (e.gate) {
        fail(SDM_P1_ERROR_INVALID_INPUT, "sdm_p1_execute: gate g[", c, ", ", e.token, ", ", e.lane,
             "] = ", e.gate_value, " is not a finite number of magnitude below 2^22");
    }
    fail(SDM_P1_ERROR_INVALID_INPUT, "sdm_p1_execute: ", e.is_q ? "q_idx[" : "k_idx[", c, ", ",
         e.token, ", ", e.lane, "] = ", e.id, " lies outside stream ", stream, "'s slot range [",
         stream * o.stream_offset, ", ", stream * o.stream_offset + o.num_keys, ")");
}

}  // namespace sdm_p1
