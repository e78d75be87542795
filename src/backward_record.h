// One backward's inputs, upstream gradients and input-gradient buffers, typed: what
// backward_plan.cpp builds from the caller's arguments once the checks have passed, and what
// a backend's execute_backward reads. Nothing here is owned.
#ifndef SDM_P1_BACKWARD_RECORD_H
#define SDM_P1_BACKWARD_RECORD_H

#include <cstdint>

#include "input_record.h"
#include "../canon/phase1_shared.h"

namespace sdm_p1 {

struct BackwardRecord {
    InputRecord in;           // the forward's inputs (ids null when payload is given; no outputs)
    const int32_t* payload;   // [N, row] the forward's sort, or null: sort again from the ids
    UpstreamGrads up;         // null: zero
    InputGradBuffers grads;   // null: not requested
};

}   // namespace sdm_p1

#endif   // SDM_P1_BACKWARD_RECORD_H
