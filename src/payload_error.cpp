#include "payload_error.h"

#include <cstdio>

#include "errors.h"
#include "../canon/phase1_shared.h"

namespace sdm_p1 {

void report_payload_error(const Options& o, int64_t c, const PayloadError& e) {
    char word[16];
    std::snprintf(word, sizeof word, "0x%08x", static_cast<unsigned>(e.word));
    const bool is_q = (e.word & kIsQ) != 0u;
    const int t = payload_token(e.word), lane = static_cast<int>(e.word & kLaneMask);
    const char* kind = is_q ? ", read lane " : ", write lane ";
    const char* problem = "";
    switch (e.problem) {
        case PayloadError::kNoEntry:
            problem = "names no entry of the chunk";
            break;
        case PayloadError::kTwice:
            problem = "names an entry an earlier word named";
            break;
        case PayloadError::kPaddingBit:
            problem = t < e.t_valid ? "has the padding bit (17) on a valid token's entry"
                                    : "lacks the padding bit (17) on a padding token's entry";
            break;
        case PayloadError::kPaddingFirst:
            problem = "is padding before a valid entry (padding comes last)";
            break;
        case PayloadError::kNoHead:
            problem = "is the chunk's first entry but lacks the group-head bit (31)";
            break;
        case PayloadError::kOrder:
            problem = "is out of the order of these ids (by slot, then entry, each entry after the previous word's)";
            break;
        case PayloadError::kGroupHead:
            problem = (e.word & kHead)
                          ? "has the group-head bit (31) but the same slot as the previous entry in these ids"
                          : "lacks the group-head bit (31) but starts a slot in these ids";
            break;
    }
    fail(SDM_P1_ERROR_INVALID_INPUT, "sdm_p1_execute_backward: payload[", c, ", ", e.position, "] = ", word, " (token ",
         t, kind, lane, ") ", problem, ": the payload is not the sort of chunk ", c, "'s entries (C = ", o.C,
         ", W = ", o.W, ", R = ", o.R, ", ", e.t_valid, " valid tokens)");
}

}   // namespace sdm_p1
