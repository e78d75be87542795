// Lean backward stage "token sums", a thread a token, lanes in increasing order: per-token
// gates' gradients (the sum of the token's gate adjoints, a repeat's +0.0 changing nothing)
// and beta's; padding tokens get +0.0. Per-write gates' gradients were stored where each
// adjoint was found. CPU twin: write_token_grads (src/cpu/chunk_backward.cpp).
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_TOKENS_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_TOKENS_CUH

#include "lb_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

template <bool PerWrite>
__device__ __forceinline__ void token_sums(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr) {
    const KernelShape& s = b.k.s;
    const int W = s.W;
    float* const dg = PerWrite ? nullptr : b.grads.g;
    float* const dbeta = b.grads.beta;
    if (dg == nullptr && dbeta == nullptr) return;
    const bool beta_terms = dbeta != nullptr && b.up.kspa != nullptr;   // else dbeta is +0.0
    for (int t = threadIdx.x; t < s.C; t += blockDim.x) {
        const int64_t tok = k.c * s.C + t;
        double gate = 0.0, beta = 0.0;
        const int lanes = t < k.t_valid ? W : 0;
        if (dg != nullptr) {
            const double* const xbar = arr.xbar + t * W;
#pragma unroll 8
            for (int l = 0; l < lanes; ++l) gate = dadd(gate, xbar[l]);
        }
        if (beta_terms) {
            const double2* const term = arr.beta_terms + t * W;
#pragma unroll 8
            for (int l = 0; l < lanes; ++l) beta = beta_term_add(beta, term[l].x, term[l].y);
        }
        if (dg != nullptr) dg[tok] = to_f32(gate);
        if (dbeta != nullptr) dbeta[tok] = to_f32(beta);
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_TOKENS_CUH
