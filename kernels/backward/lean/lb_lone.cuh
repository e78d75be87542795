// Lean backward stage "lone entries": every entry alone in its slot group, in entry order (warps
// take 32 entries at a time from a counter: the writes by token and lane, then the reads),
// and the padding tokens' entries. An entry alone has no pair sums, its log is its own gate
// (a write: its token's table, or its own gate with per-write gates) or 0 (a read), its rex 0
// and its group's total its own log: lone_k_entry_adjoints and lone_q_entry_grad
// (canon/backward_terms.h) are group_adjoints' sequence for such a group. CPU twin:
// group_adjoints (src/cpu/chunk_backward.cpp) on a group of one entry; padding tokens as
// write_token_grads.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_LONE_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_LONE_CUH

#include "lb_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// What stage "lone entries" reads of one entry before it computes: its kind, where it is and
// its upstream values (all loads, issued before any is used).
struct LoneItem {
    enum Kind { kNone, kWrite, kRead, kPadding } kind;
    LbEntry e;
    LbIndex at;
    float v;
    double coefficient;
    float kspa;
    KEntryUpstream ku;
    QEntryUpstream qu;
};

// Entry x (an index into the chunk's writes, then its reads) where it is alone or padding.
__device__ __forceinline__ LoneItem load_lone_item(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr,
                                                   int x) {
    const KernelArgs& a = b.k;
    const KernelShape& s = a.s;
    const int W = s.W, R = s.R, nk = s.C * W;
    LoneItem it{};
    it.kind = LoneItem::kNone;
    if (x >= s.C * (W + R)) return it;
    const bool is_q = x >= nk;
    const int j = is_q ? x - nk : x;
    const int t =
        static_cast<int>(is_q ? a.div.R.div(static_cast<uint32_t>(j)) : a.div.W.div(static_cast<uint32_t>(j)));
    it.e = LbEntry{t, j - t * (is_q ? R : W), is_q};
    if (t >= k.t_valid) {
        it.kind = LoneItem::kPadding;
        it.at = LbIndex{k.c * (is_q ? s.C * R : nk) + j, 0};
        return it;
    }
    const int r = arr.position[t * (W + R) + (is_q ? W : 0) + it.e.lane];
    if (!alone_at(arr, k, r)) return it;   // a grouped entry: stage "small groups" or "hot groups"
    it.at = entry_index(s, arr, k.c, it.e, r);
    it.v = lb_value(a, k.c, it.e);
    if (is_q) {
        it.kind = LoneItem::kRead;
        it.qu = q_entry_upstream(b.up, s.bf16, it.at.i, it.at.row);
    } else {
        it.kind = LoneItem::kWrite;
        it.ku = k_entry_upstream(b.up, s.bf16, it.at.i, it.at.row);
        it.coefficient = k_entry_coefficient(b.up, a.beta, k.c * s.C + t, it.at.row);
        it.kspa = upstream_f32(b.up.kspa, it.at.row);
    }
    return it;
}

template <bool PerWrite>
__device__ __forceinline__ void finish_lone_item(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr,
                                                 const LoneItem& it) {
    void* const grad = it.e.is_q ? b.grads.q_val : b.grads.k_val;
    switch (it.kind) {
        case LoneItem::kPadding:   // +0.0 in every gradient
            if (grad != nullptr) store_grad(grad, b.grad_bf16, it.at.i, 0.0);
            if (PerWrite && !it.e.is_q && b.grads.g != nullptr) b.grads.g[it.at.i] = 0.0f;
            return;
        case LoneItem::kRead:
            if (grad != nullptr) store_grad(grad, b.grad_bf16, it.at.i, lone_q_entry_grad(it.v, it.qu));
            return;
        case LoneItem::kWrite: {
            const double e_log = gate_exp_of<PerWrite>(b.k, arr, k.c, it.e.t, it.e.lane);
            const LoneKAdjoints ad = lone_k_entry_adjoints(it.v, e_log, it.coefficient, it.ku);
            if (grad != nullptr) store_grad(grad, b.grad_bf16, it.at.i, ad.dv);
            leave_gate_adjoint<PerWrite>(b, arr, k.c, it.e, ad.xbar);
            leave_beta_term(b, arr, it.e, it.kspa, it.v, e_log);
            return;
        }
        default:
            return;
    }
}

// Items: entries a lane takes at a time (their loads in flight together).
template <bool PerWrite, int Items>
__device__ __forceinline__ void lone_entries(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr,
                                             LbShared& sh) {
    const int entries = b.k.s.C * (b.k.s.W + b.k.s.R);
    for (;;) {
        int first = 0;
        if (lane_id() == 0) first = static_cast<int>(atomicAdd(&sh.lone_next, 32u * Items));
        first = __shfl_sync(kFullWarp, first, 0);
        if (first >= entries) break;
        LoneItem items[Items];
#pragma unroll
        for (int j = 0; j < Items; ++j) items[j] = load_lone_item(b, k, arr, first + 32 * j + lane_id());
#pragma unroll
        for (int j = 0; j < Items; ++j) finish_lone_item<PerWrite>(b, k, arr, items[j]);
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_LONE_CUH
