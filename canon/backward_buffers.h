// The typed pointers of one backward: the upstream gradients it reads and the input gradients
// it writes.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_BACKWARD_BUFFERS_H
#define SDM_P1_CANON_BACKWARD_BUFFERS_H

#include "host_device.h"

namespace sdm_p1 {

// The upstream gradient of each differentiable output (the caller's grads[f]); null reads as
// +0.0. Value-typed ones (cpe, k_eff, q_w) hold float or bfloat16 bits as the plan's value
// dtype says; the record ones are float32 by K-row or Q-row index (docs/backward.md).
struct UpstreamGrads {
    const float* a;       // [N, C, C]
    const float* qk;      // [N, C, C]
    const float* log_k;   // [N, C, W]
    const float* log_q;   // [N, C, R]
    const float* rex;     // [N, C, W]
    const void* cpe;      // [N, C, W]
    const void* k_eff;    // [N, C, W]
    const void* q_w;      // [N, C, R]
    const float* krec;    // [N, C * W, 2]: krec's words 2 (k_val * exp(rex)) and 3 (cpe)
    const float* kspa;    // [N, C * W]
    const float* qrec;    // [N, C * R]: the scale (q_w)
    const float* qrec8;   // [N, C * R]: the scale (q_w)
};

// The input gradients to write (null: not requested); k_val / q_val in float32 or bfloat16
// as the plan's grad dtype says.
struct InputGradBuffers {
    void* k_val;   // [N, C, W]
    void* q_val;   // [N, C, R]
    float* g;      // [N, C, gate_width]
    float* beta;   // [N, C]
};

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_BACKWARD_BUFFERS_H
