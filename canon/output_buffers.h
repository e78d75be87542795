// The typed output pointers of one execute.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_OUTPUT_BUFFERS_H
#define SDM_P1_CANON_OUTPUT_BUFFERS_H

#include "host_device.h"

namespace sdm_p1 {

// Output pointers of one execute (host memory for the CPU backend, device memory for CUDA),
// one per output field of the public header (sdm_p1_field); null: not requested. Value-typed
// fields (cpe, k_eff, q_w) hold float or bfloat16 bits as the plan's value dtype says.

struct OutputBuffers {
    float* a;
    float* qk;
    float* log_k;
    float* log_q;
    float* rex;
    void* cpe;
    int8_t* is_last;
    int8_t* is_only;
    void* k_eff;
    void* q_w;
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
    int64_t* repeats;   // [1]
};

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_OUTPUT_BUFFERS_H
