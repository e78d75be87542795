// Stage "token sums" of the backward, a thread a token: its gates' gradients (per write: each
// non-repeat lane's adjoint; per token: their sum, lanes in increasing order) and beta's;
// padding tokens get +0.0 in every gradient, values included. CPU twin: write_token_grads
// (src/cpu/chunk_backward.cpp).
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_TOKENS_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_TOKENS_CUH

#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

// Ends with a barrier (the next chunk reuses the slice).
__device__ __forceinline__ void token_sums(const BackwardArgs& b, const Chunk& k, const Arrays& arr) {
    const KernelShape& s = b.k.s;
    const InputGradBuffers& out = b.grads;
    const int W = s.W, R = s.R, WR = W + R, gw = s.gate_width;
    for (int t = threadIdx.x; t < s.C; t += blockDim.x) {
        const int64_t tok = k.c * s.C + t;
        if (t >= k.t_valid) {
            for (int l = 0; out.k_val != nullptr && l < W; ++l) store_grad(out.k_val, b.grad_bf16, tok * W + l, 0.0);
            for (int l = 0; out.q_val != nullptr && l < R; ++l) store_grad(out.q_val, b.grad_bf16, tok * R + l, 0.0);
            for (int l = 0; out.g != nullptr && l < gw; ++l) out.g[tok * gw + l] = 0.0f;
            if (out.beta != nullptr) out.beta[tok] = 0.0f;
            continue;
        }
        double token_gate = 0.0, beta = 0.0;
        for (int l = 0; l < W; ++l) {
            const int r = arr.position[t * WR + l];
            const bool repeat = arr.own_writes[r] != 0u;
            const double x = repeat ? 0.0 : arr.xbar[t * W + l];   // a repeat's is never written
            if (gw != 1 && out.g != nullptr) out.g[tok * W + l] = repeat ? 0.0f : to_f32(x);
            if (!repeat) token_gate = dadd(token_gate, x);
            if (b.up.kspa != nullptr) {
                const float dkspa = b.up.kspa[k.c * s.C * W + arr.writes_before[r]];
                beta = beta_term_add(beta, dkspa, arr.value[r], arr.e_log[r]);
            }
        }
        if (gw == 1 && out.g != nullptr) out.g[tok] = to_f32(token_gate);
        if (out.beta != nullptr) out.beta[tok] = to_f32(beta);
    }
    __syncthreads();
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_TOKENS_CUH
