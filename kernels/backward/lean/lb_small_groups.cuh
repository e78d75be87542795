// Lean backward stage "small groups": every group of 2 to kSmallGroup entries, a lane an entry,
// the groups of the chunk's list packed into warp batches of up to 32 lanes.
// CPU twins: scan_forward (the log-cumsums), row_sum and column_sum (the pair sums) and
// group_adjoints (src/cpu/chunk_backward.cpp), whose orders these keep:
//  * the log-cumsum: a segmented scan of exact integers (any order gives the same);
//  * the pair sums, each pair's exp taken once: at step k, lane i takes the pair (i, i - 1 -
//    k), so a row sum (rho, in its lane) takes its earlier K entries nearest first; the column
//    sums (gamma) travel up one lane a step, so column j takes its later entries nearest first,
//    and is final when it leaves the group's last lane;
//  * the combine a lane an entry; the total's adjoint and the rbar prefix passed up the group
//    a lane a step, the gbar suffix down.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_SMALL_GROUPS_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_SMALL_GROUPS_CUH

#include "lb_context.cuh"
#include "../../common/warp_scan.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// A lane's place in a batch: its group (first position, entries, first lane) and its index
// in it; active: the lane holds an entry.
struct BatchLane {
    bool active;
    int first, m, lane0, ii;
};

// The batch of the start lanes `taken` (each with its group's first position r, entries m and
// inclusive lane count incl): lane X's group is the one whose lanes hold X.
__device__ __forceinline__ BatchLane batch_lane(uint32_t taken, int r, int m, int incl) {
    const int me = lane_id();
    const bool start = (taken >> me & 1u) != 0u;
    const uint32_t bounds = __reduce_or_sync(kFullWarp, start ? 1u << (incl - m) : 0u);
    const int lanes = __reduce_max_sync(kFullWarp, start ? incl : 0);
    BatchLane b{me < lanes, 0, 0, 0, 0};
    const uint32_t below = bounds & (me == 31 ? ~0u : (2u << me) - 1u);
    int rank = __popc(below) - 1;   // the groups before X's
    uint32_t starts = taken;
    for (; rank > 0; --rank) starts &= starts - 1u;
    const int src = b.active ? __ffs(static_cast<int>(starts)) - 1 : 0;
    b.first = __shfl_sync(kFullWarp, r, src);
    b.m = __shfl_sync(kFullWarp, m, src);
    b.lane0 = __shfl_sync(kFullWarp, incl - m, src);
    b.ii = me - b.lane0;
    if (!b.active) b.m = b.ii = 0;
    return b;
}

template <bool PerWrite>
__device__ __forceinline__ void sum_batch(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr, int s,
                                          const BatchLane& q) {
    const KernelArgs& a = b.k;
    const int me = lane_id();
    const int pos = q.first + q.ii;
    const uint32_t p = q.active ? k.row[pos] : 0u;
    const LbEntry x = entry_of_word(p);
    if (q.active && q.ii > 0) prefetch_delta_row(b, k.c, x);
    const float v = q.active ? lb_value(a, k.c, x) : 0.0f;
    const uint32_t pp = __shfl_up_sync(kFullWarp, p, 1);
    // a write repeating its token's slot adds no gate (repeats_slot)
    const bool repeat = q.active && !x.is_q && q.ii > 0 && !(pp & kIsQ) && payload_token(pp) == x.t;
    int64_t log = q.active && !x.is_q && !repeat ? compact_gate<PerWrite>(a, arr, k.c, x.t, x.lane, s) : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int64_t lower = __shfl_up_sync(kFullWarp, log, d);
        if (q.ii >= d) log += lower;
    }
    const LbUpstream up = q.active ? load_upstream(b, arr, k.c, x, pos) : LbUpstream{};
    const int last = q.lane0 + q.m - 1;   // the group's last lane
    const int64_t total = __shfl_sync(kFullWarp, log, max(last, 0));
    const int steps = __reduce_max_sync(kFullWarp, q.m);

    // Pair sums: lane i takes (i, i - 1 - k) at step k.
    double* const batch_gamma = arr.batch_gamma + 32 * warp_id();
    double rho = 0.0, column = 0.0;
    for (int k_step = 0; k_step + 1 < steps; ++k_step) {
        const int src = max(me - 1 - k_step, 0);
        const int64_t log_f = __shfl_sync(kFullWarp, log, src);
        const float v_f = __shfl_sync(kFullWarp, v, src);
        const uint32_t p_f = __shfl_sync(kFullWarp, p, src);
        double in = __shfl_up_sync(kFullWarp, column, 1);
        if (k_step == 0) in = 0.0;   // the column sum of lane i - 1 starts here
        const LbEntry f = entry_of_word(p_f);
        if (q.active && q.ii - 1 - k_step >= 0 && !f.is_q && pairs_with(x, f)) {
            const double e = exp_compact(log - log_f, s);
            const float delta = pair_delta(b, k.c, x.is_q, x.t, f.t);
            rho = walk_term_add(rho, delta, v_f, e);
            in = walk_term_add(in, delta, v, e);
        }
        column = in;
        // The group's last lane holds the final column sum of index m - 2 - k: it leaves it at
        // that entry's lane.
        if (q.active && q.ii == q.m - 1 && q.m - 2 - k_step >= 0) batch_gamma[q.lane0 + q.m - 2 - k_step] = column;
    }
    __syncwarp();
    const double gamma = q.active && q.ii < q.m - 1 ? batch_gamma[me] : 0.0;   // the last entry has none
    __syncwarp();                                                              // read before the next batch writes

    // The combine, a lane an entry.
    double e_log = 1.0;
    LbCombined comb{0.0, 0.0, 0.0};
    if (q.active) comb = combine_entry(b, x, up, v, rho, gamma, log, total, s, &e_log);
    if (q.active && !x.is_q) leave_beta_term(b, arr, x, up.kspa, v, e_log);
    if (b.grads.g == nullptr) return;   // the adjoint scans serve the gates' gradient alone

    // Adjoint scans: ascending, the total's adjoint and the rbar prefix (K entries).
    const double e_total = exp_compact(total, s);
    double total_adjoint = 0.0, rbar_sum = 0.0, rbar_before = 0.0;
    for (int k_step = 0; k_step < steps; ++k_step) {
        double t_in = __shfl_up_sync(kFullWarp, total_adjoint, 1);
        double r_in = __shfl_up_sync(kFullWarp, rbar_sum, 1);
        if (q.active && q.ii == k_step) {
            if (q.ii == 0) t_in = r_in = 0.0;
            if (x.is_q) {
                total_adjoint = t_in;
                rbar_sum = r_in;
            } else {
                rbar_before = r_in;
                rbar_sum = dadd(r_in, comb.rbar);
                total_adjoint = total_term_add(t_in, comb.cbar, e_total);
            }
        }
    }
    const double group_total_adjoint = __shfl_sync(kFullWarp, total_adjoint, max(last, 0));
    // Descending, the gbar suffix.
    double suffix = 0.0;
    for (int k_step = 0; k_step < steps; ++k_step) {
        double in = __shfl_down_sync(kFullWarp, suffix, 1);
        if (q.active && q.ii == q.m - 1 - k_step) {
            if (k_step == 0) in = 0.0;
            suffix = dadd(in, comb.gbar);
        }
    }
    if (q.active && !x.is_q) {
        leave_gate_adjoint<PerWrite>(b, arr, k.c, x,
                                     repeat ? 0.0 : gate_adjoint(suffix, rbar_before, group_total_adjoint));
    }
}

// Small groups a warp takes from the list at a time (typical groups of 2 to 4 entries fill a
// batch or two).
constexpr int kSmallClaim = 16;

// Every small group of the chunk: warps take kSmallClaim of them at a time from the list and
// sum them in batches of up to 32 entries (groups in list order while their entries fit).
template <bool PerWrite>
__device__ __forceinline__ void small_groups(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr,
                                             LbShared& sh) {
    const int count = static_cast<int>(sh.small_count);
    for (;;) {
        int first = 0;
        if (lane_id() == 0) first = static_cast<int>(atomicAdd(&sh.small_next, static_cast<uint32_t>(kSmallClaim)));
        first = __shfl_sync(kFullWarp, first, 0);
        if (first >= count) break;
        const int i = first + lane_id();
        const uint32_t group = lane_id() < kSmallClaim && i < count ? arr.small_list[i] : 0u;
        const int r = static_cast<int>(group & 0xFFFFu), m = static_cast<int>(group >> 16);
        uint32_t starts = __ballot_sync(kFullWarp, m != 0);
        while (starts != 0u) {
            // The next batch: the remaining groups, in order, while their entries fit 32 lanes.
            const int mine = (starts >> lane_id() & 1u) != 0u ? m : 0;
            const int incl = warp_inclusive_sum(mine, lane_id());
            const uint32_t taken = __ballot_sync(kFullWarp, mine != 0 && incl <= 32);
            sum_batch<PerWrite>(b, k, arr, sh.shift, batch_lane(taken, r, m, incl));
            starts &= ~taken;
        }
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_SMALL_GROUPS_CUH
