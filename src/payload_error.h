// A payload given to sdm_p1_execute_backward that is not the sort of its chunk's entries:
// what the check records about the first bad word, and the message it is reported with.
#ifndef SDM_P1_PAYLOAD_ERROR_H
#define SDM_P1_PAYLOAD_ERROR_H

#include <cstdint>

#include "options.h"

namespace sdm_p1 {

struct PayloadError {
    enum Problem {
        kNoEntry,        // names no entry of the chunk (token or lane out of range)
        kTwice,          // names an entry an earlier word named
        kPaddingBit,     // padding bit set on a valid token's entry, or clear on a padding one's
        kPaddingFirst,   // a padding entry before a valid one
        kNoHead,         // the first entry of a chunk with valid tokens lacks the head bit
        // With the ids given (checked against them, after the checks above and the ids'):
        kOrder,      // its entry's sort key (slot, entry) not above the previous word's
        kGroupHead   // a valid entry's head bit not exactly where its slot differs from the previous one's
    };
    bool found;
    Problem problem;
    int position;   // in the chunk's row
    uint32_t word;
    int t_valid;   // the chunk's valid tokens
};

// Throws Error(SDM_P1_ERROR_INVALID_INPUT) naming chunk c, the word, its position and the
// problem.
[[noreturn]] void report_payload_error(const Options& o, int64_t c, const PayloadError& e);

}   // namespace sdm_p1

#endif   // SDM_P1_PAYLOAD_ERROR_H
