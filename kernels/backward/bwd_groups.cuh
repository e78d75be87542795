// Stages "combine" and "adjoint scans" of the backward, a thread a valid group: in ascending
// order each entry's combine (writing its value's gradient), the prefix of rbar and the
// total's adjoint; then, descending, the suffix of gbar and each non-repeat K entry's gate
// adjoint. CPU twin: group_adjoints (src/cpu/chunk_backward.cpp), whose sequence this is,
// with the pair sums of stage "pair sums" read back instead of computed in place.
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_GROUPS_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_GROUPS_CUH

#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

// The group at sorted positions [h, end).
__device__ __forceinline__ void group_adjoints(const BackwardArgs& b, const Chunk& k, const Arrays& arr, int h,
                                               int end) {
    const KernelShape& s = b.k.s;
    const UpstreamGrads& up = b.up;
    const int C = s.C, W = s.W, R = s.R;
    const double e_total = exp_fix(fix_add(arr.log[h], arr.rex[h]));
    double total_adjoint = 0.0, rbar_sum = 0.0;
    for (int r = h; r < end; ++r) {
        const uint32_t p = arr.payload[r];
        const int t = payload_token(p), lane = static_cast<int>(p & kLaneMask);
        const float v = arr.value[r];
        const double e_log = exp_fix(arr.log[r]);
        const double rho = arr.rho[r];
        arr.e_log[r] = e_log;
        if (p & kIsQ) {
            const int64_t i = (k.c * C + t) * R + lane;
            const int64_t q_row = k.c * C * R + (r - static_cast<int64_t>(arr.writes_before[r]));
            const QEntryUpstream u = q_entry_upstream(up, s.bf16, i, q_row);
            const QEntryAdjoints a = q_entry_adjoints(rho, v, e_log, u);
            if (b.grads.q_val != nullptr) store_grad(b.grads.q_val, b.grad_bf16, i, a.dv);
            arr.gbar[r] = a.gbar;
            continue;
        }
        const int64_t i = (k.c * C + t) * W + lane;
        const int64_t k_row = k.c * C * W + arr.writes_before[r];
        const KEntryUpstream u = k_entry_upstream(up, s.bf16, i, k_row);
        const double coefficient = k_entry_coefficient(up, b.k.beta, k.c * C + t, k_row);
        const KEntryAdjoints a = k_entry_adjoints(rho, arr.gamma[r], v, e_log, exp_fix(arr.rex[r]), coefficient, u);
        if (b.grads.k_val != nullptr) store_grad(b.grads.k_val, b.grad_bf16, i, a.dv);
        arr.gbar[r] = a.gbar;
        arr.rbar_before[r] = rbar_sum;
        rbar_sum = dadd(rbar_sum, a.rbar);
        total_adjoint = total_term_add(total_adjoint, a.cbar, e_total);
    }
    double suffix = 0.0;
    for (int r = end - 1; r >= h; --r) {
        suffix = dadd(suffix, arr.gbar[r]);
        const uint32_t p = arr.payload[r];
        if ((p & kIsQ) || arr.own_writes[r] != 0u) continue;   // Q entries and repeats add no gate
        arr.xbar[payload_token(p) * W + static_cast<int>(p & kLaneMask)] =
            gate_adjoint(suffix, arr.rbar_before[r], total_adjoint);
    }
}

// Every valid group, a thread a group (the valid entries come first). Ends with a barrier.
__device__ __forceinline__ void group_sums(const BackwardArgs& b, const Chunk& k, const Arrays& arr) {
    const int valid_entries = k.t_valid * (b.k.s.W + b.k.s.R);
    for (int h = threadIdx.x; h < valid_entries; h += blockDim.x) {
        if (!(arr.payload[h] & kHead)) continue;
        int end = h + 1;
        while (end < valid_entries && !(arr.payload[end] & kHead)) ++end;
        group_adjoints(b, k, arr, h, end);
    }
    __syncthreads();
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_GROUPS_CUH
