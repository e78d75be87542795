// One execute's inputs and output buffers, typed: what plan.cpp builds from the caller's
// sdm_p1_inputs and output list once the checks have passed, and what both backends read
// (the CPU's stages, the CUDA launch). Nothing here is owned.
#ifndef SDM_P1_INPUT_RECORD_H
#define SDM_P1_INPUT_RECORD_H

#include "../canon/phase1_shared.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

struct InputRecord {
    const void* k_idx;            // [N, C, W] int32 or int64 (Options::idx64)
    const void* q_idx;            // [N, C, R]
    const void* k_val;            // [N, C, W] float32 or bfloat16 (Options::bf16)
    const void* q_val;            // [N, C, R]
    const float* g;               // [N, C, gate_width]
    const float* beta;            // [N, C, W], or null where the plan does not write kspa
    const void* stream_lengths;   // [P] lengths, or null: the valid_last rule
    bool lengths64;               // stream_lengths are int64 (else int32)
    OutputBuffers out;            // every requested field's buffer (null: not requested)
    // The buffers the caller gave, by sdm_p1_field, with the field's name (data null where the
    // plan's own block serves or the field is not requested): the ones a backend may have to
    // check the memory of.
    struct CallerOutput {
        const void* data;
        const char* name;
    } caller_outputs[SDM_P1_FIELD_COUNT];
};

}   // namespace sdm_p1

#endif   // SDM_P1_INPUT_RECORD_H
