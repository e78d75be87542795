// The lean backward's view of the chunk a block computes: its arrays (LeanBackwardLayout), its
// block-wide scalars, and the facts of a sorted position that every stage reads (its group
// head bit, the write entries before it, its payload word, its value, its gate as a compact
// log). CPU twin: BackwardScratch and ChunkScratch (src/cpu/chunk_backward.h, chunk.h).
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_CONTEXT_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_CONTEXT_CUH

#include "../../common/pair_common.cuh"
#include "../bwd_context.cuh"
#include "lean_backward_layout.h"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// Small groups are listed by size class (2, 3-4, 5-8, 9-16 and 17-32 entries), so that a warp's
// batch holds groups of about one size and its steps (the largest group's) are few.
constexpr int kSmallClasses = 5;
__device__ __forceinline__ int small_class(int m) { return 31 - __clz(m - 1); }

// Block-wide scalars of the current chunk.
struct LbShared {
    uint32_t bad;          // the chunk goes to the general backward (bad data, wide logs,
                           // a hot group past hot_max)
    int gate_lowest_bit;   // as ChunkShared's: the compact log form's shift (log_shift)
    int gate_bits;
    int shift;
    uint32_t hot_count;                    // hot groups listed
    uint32_t hot_next;                     // the next hot group a hot warp takes
    uint32_t small_count;                  // small groups listed
    uint32_t small_next;                   // the next small groups a warp takes
    uint32_t small_class[kSmallClasses];   // small groups of each size class; then where
                                           // each class's next group goes in the list
    uint32_t lone_next;                    // the next entries of stage "lone entries" a warp takes
};

// The chunk's arrays (LeanBackwardLayout says what each holds).
struct LbArrays {
    uint16_t* position;
    uint32_t* heads;
    uint32_t* writes;
    uint32_t* writes_before;
    uint32_t* seen;
    Fix* gate_fix;
    double* gate_exp;
    uint32_t* hot_list;
    uint32_t* small_list;
    double* batch_gamma;
    char* hot_arrays;
    double* xbar;
    double2* beta_terms;
};

__device__ __forceinline__ LbArrays bind_lb_arrays(char* smem, char* slice, const LeanBackwardLayout& l) {
    LbArrays a;
    a.position = reinterpret_cast<uint16_t*>(smem + l.position);
    a.heads = reinterpret_cast<uint32_t*>(smem + l.heads);
    a.writes = reinterpret_cast<uint32_t*>(smem + l.writes);
    a.writes_before = reinterpret_cast<uint32_t*>(smem + l.writes_before);
    a.seen = reinterpret_cast<uint32_t*>(smem + l.seen);
    a.gate_fix = reinterpret_cast<Fix*>(smem + l.gate_fix);
    a.gate_exp = reinterpret_cast<double*>(smem + l.gate_exp);
    a.hot_list = reinterpret_cast<uint32_t*>(smem + l.hot_list);
    a.small_list = reinterpret_cast<uint32_t*>(smem + l.small_list);
    a.batch_gamma = reinterpret_cast<double*>(smem + l.batch_gamma);
    a.hot_arrays = smem + l.hot_arrays;
    a.xbar = reinterpret_cast<double*>((l.xbar_in_smem ? smem : slice) + l.xbar);
    a.beta_terms = reinterpret_cast<double2*>((l.beta_terms_in_smem ? smem : slice) + l.beta_terms);
    return a;
}

// The chunk a block computes, with what the stages read of the backward's arguments.
struct LbChunk {
    int64_t c;
    int t_valid;           // valid tokens
    int n;                 // entries
    int nv;                // valid entries (they come first in the sorted row)
    const uint32_t* row;   // the chunk's payload words
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x >> 5); }
__device__ __forceinline__ int warp_count() { return static_cast<int>(blockDim.x >> 5); }

// Whether position r starts a group; positions past the row count as heads.
__device__ __forceinline__ bool head_at(const LbArrays& arr, const LbChunk& k, int r) {
    return r >= k.n || ((arr.heads[r >> 5] >> (r & 31)) & 1u) != 0u;
}

// Whether the valid entry at r is alone in its group.
__device__ __forceinline__ bool alone_at(const LbArrays& arr, const LbChunk& k, int r) {
    return head_at(arr, k, r) && head_at(arr, k, r + 1);
}

// The first group head at or after position r (k.n where none).
__device__ __forceinline__ int next_head(const LbArrays& arr, const LbChunk& k, int r) {
    while (r < k.n) {
        const uint32_t rest = arr.heads[r >> 5] >> (r & 31);
        if (rest != 0u) return min(k.n, r + __ffs(static_cast<int>(rest)) - 1);
        r = (r | 31) + 1;
    }
    return k.n;
}

// The entries of the group that starts at valid position r where one of several entries
// does (its first entry is a head, its second not), else 0.
__device__ __forceinline__ int group_at(const LbArrays& arr, const LbChunk& k, int r) {
    if (r >= k.nv || !head_at(arr, k, r) || head_at(arr, k, r + 1)) return 0;
    return min(next_head(arr, k, r + 1), k.nv) - r;
}

// The write entries before position r in the sorted row: its K-row index where it is a K
// entry (CPU: ChunkScratch::writes).
__device__ __forceinline__ uint32_t writes_before(const LbArrays& arr, int r) {
    return arr.writes_before[r >> 5] + __popc(arr.writes[r >> 5] & ((1u << (r & 31)) - 1u));
}

// An entry of a payload word: token, lane, kind.
struct LbEntry {
    int t, lane;
    bool is_q;
};

__device__ __forceinline__ LbEntry entry_of_word(uint32_t p) {
    return LbEntry{payload_token(p), static_cast<int>(p & kLaneMask), (p & kIsQ) != 0u};
}

// The value (k_val or q_val) of valid entry x.
__device__ __forceinline__ float lb_value(const KernelArgs& a, int64_t c, const LbEntry& x) {
    const int64_t tok = c * a.s.C + x.t;
    return x.is_q ? load_value(a.q_val, a.s.bf16, tok * a.s.R + x.lane)
                  : load_value(a.k_val, a.s.bf16, tok * a.s.W + x.lane);
}

// The gate a K entry (token t, lane) adds to its group's log-cumsum, in the compact form of
// shift s (per-write gates are read again: stage "load" checked them).
template <bool PerWrite>
__device__ __forceinline__ int64_t compact_gate(const KernelArgs& a, const LbArrays& arr, int64_t c, int t, int lane,
                                                int s) {
    if (!PerWrite) return static_cast<int64_t>(fix_shift_down(arr.gate_fix[t], s));
    Fix f;
    gate_to_fix(a.g[(c * a.s.C + t) * a.s.W + lane], &f);
    return static_cast<int64_t>(fix_shift_down(f, s));
}

// exp of a K entry's own gate (its log when it is alone in its group).
template <bool PerWrite>
__device__ __forceinline__ double gate_exp_of(const KernelArgs& a, const LbArrays& arr, int64_t c, int t, int lane) {
    if (!PerWrite) return arr.gate_exp[t];
    Fix f;
    gate_to_fix(a.g[(c * a.s.C + t) * a.s.W + lane], &f);
    return exp_fix(f);
}

// The upstream a (a K entry e) or qk (a Q entry) cell of e's token te and a K entry's tf.
__device__ __forceinline__ float pair_delta(const BackwardArgs& b, int64_t c, bool e_is_q, int te, int tf) {
    const int C = b.k.s.C;
    return upstream_f32(e_is_q ? b.up.qk : b.up.a, (c * C + te) * C + tf);
}

// Brings into L1 the row of upstream cells a grouped entry x reads (its token's row of a or
// qk), ahead of its pair sums.
__device__ __forceinline__ void prefetch_delta_row(const BackwardArgs& b, int64_t c, const LbEntry& x) {
    const int C = b.k.s.C;
    const float* const grad = x.is_q ? b.up.qk : b.up.a;
    if (grad == nullptr) return;
    const char* const row = reinterpret_cast<const char*>(grad + (c * C + x.t) * C);
    for (int off = 0; off < 4 * C; off += 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(row + off));
}

// Whether the pair (e, f), f an earlier K entry of e's group, has terms: a K entry e pairs
// with other tokens' K entries only.
__device__ __forceinline__ bool pairs_with(const LbEntry& e, const LbEntry& f) { return e.is_q || e.t != f.t; }

// Where entry e's gradients and upstream values are: element i of its kind's [N, C, lanes]
// arrays, and its K-row or Q-row index (the chunk's first row included).
struct LbIndex {
    int64_t i, row;
};

__device__ __forceinline__ LbIndex entry_index(const KernelShape& s, const LbArrays& arr, int64_t c, const LbEntry& x,
                                               int r) {
    const uint32_t w = writes_before(arr, r);
    if (x.is_q) return LbIndex{(c * s.C + x.t) * s.R + x.lane, c * s.C * s.R + (r - static_cast<int64_t>(w))};
    return LbIndex{(c * s.C + x.t) * s.W + x.lane, c * s.C * s.W + w};
}

// What the combine of a grouped entry reads from global memory: where its gradient goes and
// its upstream values (loaded before its pair sums, so their latency hides behind them).
struct LbUpstream {
    LbIndex at;
    KEntryUpstream ku;    // K entries
    QEntryUpstream qu;    // Q entries
    double coefficient;   // K entries: the kspa coefficient
    float kspa;           // K entries: the kspa gradient (0 where not given)
};

__device__ __forceinline__ LbUpstream load_upstream(const BackwardArgs& b, const LbArrays& arr, int64_t c,
                                                    const LbEntry& x, int r) {
    const KernelShape& s = b.k.s;
    LbUpstream u{};
    u.at = entry_index(s, arr, c, x, r);
    if (x.is_q) {
        u.qu = q_entry_upstream(b.up, s.bf16, u.at.i, u.at.row);
    } else {
        u.ku = k_entry_upstream(b.up, s.bf16, u.at.i, u.at.row);
        u.coefficient = k_entry_coefficient(b.up, b.k.beta, c * s.C + x.t, u.at.row);
        u.kspa = upstream_f32(b.up.kspa, u.at.row);
    }
    return u;
}

// The combine of a grouped entry (group_adjoints' loop body): its value's gradient stored,
// and what the adjoint scans need of it.
struct LbCombined {
    double gbar, rbar, cbar;
};

__device__ __forceinline__ LbCombined combine_entry(const BackwardArgs& b, const LbEntry& x, const LbUpstream& u,
                                                    float v, double rho, double gamma, int64_t log, int64_t total,
                                                    int s, double* e_log_out) {
    const double e_log = exp_compact(log, s);
    *e_log_out = e_log;
    LbCombined out{0.0, 0.0, 0.0};
    if (x.is_q) {
        const QEntryAdjoints q = q_entry_adjoints(rho, v, e_log, u.qu);
        if (b.grads.q_val != nullptr) store_grad(b.grads.q_val, b.grad_bf16, u.at.i, q.dv);
        out.gbar = q.gbar;
        return out;
    }
    const KEntryAdjoints a = k_entry_adjoints(rho, gamma, v, e_log, exp_compact(total - log, s), u.coefficient, u.ku);
    if (b.grads.k_val != nullptr) store_grad(b.grads.k_val, b.grad_bf16, u.at.i, a.dv);
    out.gbar = a.gbar;
    out.rbar = a.rbar;
    out.cbar = a.cbar;
    return out;
}

// A K entry's gate adjoint (+0.0 for a repeat, which adds no gate), left for stage "token
// sums": per-token gates sum it there (xbar); a per-write gate's gradient is stored at once.
template <bool PerWrite>
__device__ __forceinline__ void leave_gate_adjoint(const BackwardArgs& b, const LbArrays& arr, int64_t c,
                                                   const LbEntry& x, double xbar) {
    const KernelShape& s = b.k.s;
    if (b.grads.g == nullptr) return;
    if (PerWrite) {
        b.grads.g[(c * s.C + x.t) * s.W + x.lane] = to_f32(xbar);
    } else {
        arr.xbar[x.t * s.W + x.lane] = xbar;
    }
}

// A K entry's term of beta's gradient (its kspa gradient dkspa, value v and exp(log)), left for
// stage "token sums" as its exact factor and exp.
__device__ __forceinline__ void leave_beta_term(const BackwardArgs& b, const LbArrays& arr, const LbEntry& x,
                                                float dkspa, float v, double e_log) {
    if (b.grads.beta != nullptr && b.up.kspa != nullptr) {
        arr.beta_terms[x.t * b.k.s.W + x.lane] = make_double2(beta_term_factor(dkspa, v), e_log);
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_CONTEXT_CUH
