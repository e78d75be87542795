// The outputs of a plan: which fields it computes, their dtypes and shapes.
#ifndef SDM_P1_OUTPUTS_H
#define SDM_P1_OUTPUTS_H

#include <array>

#include "options.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

using OutputViews = std::array<sdm_p1_tensor, SDM_P1_FIELD_COUNT>;

// Every field's view (data NULL): requested or not, dtype, shape and bytes.
OutputViews describe_outputs(const Options& opt);

// Typed pointers to one execute's output buffers; a field not requested is null.
struct OutputBuffers {
    float* a;
    float* qk;
    float* log_k;
    float* log_q;
    float* rex;
    void* cpe;      // value dtype
    int8_t* is_last;
    int8_t* is_only;
    void* k_eff;    // value dtype
    void* q_w;      // value dtype
    int32_t* payload;
    int32_t* pos_k;
    int32_t* pos_q;
    int8_t* q_last;
    int8_t* q_only;
    int32_t* spay_k;
    int32_t* spay_q;
    int32_t* spay_rank;
    int32_t* krec;
    float* kspa;
    int32_t* qrec;
    int32_t* tiles_k;
    int32_t* tiles_q;
    int32_t* segb_k;
    int32_t* dc_kpos;
    int32_t* dc_bpre;
    int32_t* qrec8;
    int64_t* repeats;
};

// Typed view of an array of buffers indexed by sdm_p1_field.
OutputBuffers output_buffers(void* const* by_field);

}  // namespace sdm_p1

#endif  // SDM_P1_OUTPUTS_H
