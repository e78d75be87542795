// Lean backward stage "hot groups": every group of more than kSmallGroup entries (at most
// hot_max), a warp a group, its arrays in the warp's part of shared memory. CPU twins:
// scan_forward (the log-cumsums), row_sum and column_sum (the pair sums) and group_adjoints
// (src/cpu/chunk_backward.cpp), whose orders these keep:
//  * the log-cumsum and each entry's K entries before it: a warp scan a block of 32 entries,
//    carried over the blocks (exact integers);
//  * the pair sums over tiles of 32 entries (rows, the sums rho) by 32 K entries (columns, the
//    sums gamma), each pair's exp taken once, into the warp's tile in shared memory. The rows'
//    blocks go in ascending order and, for each, the columns' blocks in descending order; in a
//    tile a row takes its columns in descending order and a column its rows in ascending
//    order, so every row takes its columns nearest first and every column its rows nearest
//    first;
//  * the combine a lane an entry, then the adjoint scans by one lane, in group_adjoints'
//    sequence.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_HOT_GROUPS_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_HOT_GROUPS_CUH

#include "lb_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// A hot warp's arrays, by the entry's index in its group (K entries' columns by K index).
struct HotArrays {
    int64_t* log;       // the inclusive log-cumsum (compact); after the combine, cbar's bits
    double* rho;        // the row sum; after the combine, gbar
    double* gamma;      // by K index: the column sum; after the combine rbar, then the rbar prefix
    uint32_t* pay;      // the payload word
    float* value;       // the value
    uint16_t* before;   // the K entries before it in its group (a K entry's K index)
    uint16_t* kpos;     // by K index: the K entry's index in the group
    double* tile;       // [32][33] the exps of a tile's pairs, by row and column
};

__device__ __forceinline__ HotArrays bind_hot_arrays(const LbArrays& arr, const LeanBackwardLayout& l) {
    char* const base = arr.hot_arrays + static_cast<size_t>(warp_id()) * l.hot_stride;
    const size_t m = static_cast<size_t>(l.hot_max);
    HotArrays h;
    h.log = reinterpret_cast<int64_t*>(base);
    h.rho = reinterpret_cast<double*>(base + 8 * m);
    h.gamma = reinterpret_cast<double*>(base + 16 * m);
    h.pay = reinterpret_cast<uint32_t*>(base + 24 * m);
    h.value = reinterpret_cast<float*>(base + 28 * m);
    h.before = reinterpret_cast<uint16_t*>(base + 32 * m);
    h.kpos = reinterpret_cast<uint16_t*>(base + 34 * m);
    h.tile = reinterpret_cast<double*>(base + kHotBytesPerEntry * m);
    return h;
}

// The group's entries loaded: payload words, values, log-cumsums, K counts. Returns its K
// entries; *total: its log-cumsum's last value.
template <bool PerWrite>
__device__ __forceinline__ int load_hot_group(const KernelArgs& a, const LbChunk& k, const LbArrays& arr,
                                              const HotArrays& h, int s, int first, int m, int64_t* total) {
    const int me = lane_id();
    int64_t log_carry = 0;
    int k_carry = 0;
    uint32_t prev = 0;
    for (int base = 0; base < m; base += 32) {
        const int ii = base + me;
        const bool in = ii < m;
        const uint32_t p = in ? k.row[first + ii] : 0u;
        const LbEntry x = entry_of_word(p);
        uint32_t pp = __shfl_up_sync(kFullWarp, p, 1);
        if (me == 0) pp = prev;
        const bool repeat = in && !x.is_q && ii > 0 && !(pp & kIsQ) && payload_token(pp) == x.t;
        int64_t log = in && !x.is_q && !repeat ? compact_gate<PerWrite>(a, arr, k.c, x.t, x.lane, s) : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int64_t lower = __shfl_up_sync(kFullWarp, log, d);
            if (me >= d) log += lower;
        }
        log += log_carry;
        const uint32_t writes = __ballot_sync(kFullWarp, in && !x.is_q);
        const int before = k_carry + __popc(writes & ((1u << me) - 1u));
        if (in) {
            h.pay[ii] = p;
            h.value[ii] = lb_value(a, k.c, x);
            h.log[ii] = log;
            h.before[ii] = static_cast<uint16_t>(before);
            if (!x.is_q) {
                h.kpos[before] = static_cast<uint16_t>(ii);
                h.gamma[before] = 0.0;
            }
        }
        log_carry = __shfl_sync(kFullWarp, log, 31);   // lanes past m add 0
        k_carry += __popc(writes);
        prev = __shfl_sync(kFullWarp, p, 31);
    }
    __syncwarp();
    *total = log_carry;
    return k_carry;
}

// The pair sums of the group: rho of every entry, gamma of every K entry. A tile's exps are
// taken first, a lane a column (independent, and one per distinct argument down the
// column), then each row sums its columns and each column its rows.
__device__ __forceinline__ void hot_pair_sums(const BackwardArgs& b, const LbChunk& k, const HotArrays& h, int s, int m,
                                              int mk) {
    const int me = lane_id();
    double* const my_row = h.tile + 33 * me;
    for (int row0 = 0; row0 < m; row0 += 32) {
        const int ii = row0 + me;
        const bool in = ii < m;
        const uint32_t p = in ? h.pay[ii] : kIsQ;
        const LbEntry x = entry_of_word(p);
        const int64_t log = in ? h.log[ii] : 0;
        const float v = in ? h.value[ii] : 0.0f;
        const int before = in ? h.before[ii] : 0;   // the row's columns are the K indices below this
        if (before > 0) prefetch_delta_row(b, k.c, x);
        const int columns = __reduce_max_sync(kFullWarp, before);
        double rho = 0.0;
        for (int col0 = (columns - 1) / 32 * 32; columns > 0 && col0 >= 0; col0 -= 32) {
            const int kk = col0 + me;   // this lane's column
            const bool col_in = kk < mk;
            const int f_at = col_in ? h.kpos[kk] : 0;
            const uint32_t p_f = col_in ? h.pay[f_at] : 0u;
            const LbEntry f = entry_of_word(p_f);
            const int64_t log_f = col_in ? h.log[f_at] : 0;
            const float v_f = col_in ? h.value[f_at] : 0.0f;
            // The exps, a lane a column; a row's argument equal to the row's above reuses its exp.
            int64_t last_arg = 0;
            double last_e = 1.0;
            for (int i = 0; i < 32; ++i) {
                const int64_t log_i = __shfl_sync(kFullWarp, log, i);
                const uint32_t p_i = __shfl_sync(kFullWarp, p, i);
                const int before_i = __shfl_sync(kFullWarp, before, i);
                if (kk < before_i && pairs_with(entry_of_word(p_i), f)) {
                    const int64_t arg = log_i - log_f;
                    if (arg != last_arg) {
                        last_e = exp_compact(arg, s);
                        last_arg = arg;
                    }
                    h.tile[33 * i + me] = last_e;
                }
            }
            __syncwarp();
            // Each row's sum over the tile's columns, nearest (highest) first.
            for (int jj = 31; jj >= 0; --jj) {
                const uint32_t p_j = __shfl_sync(kFullWarp, p_f, jj);
                const float v_j = __shfl_sync(kFullWarp, v_f, jj);
                const LbEntry f_j = entry_of_word(p_j);
                if (col0 + jj < before && pairs_with(x, f_j)) {
                    rho = walk_term_add(rho, pair_delta(b, k.c, x.is_q, x.t, f_j.t), v_j, my_row[jj]);
                }
            }
            // Each column's sum over the tile's rows, nearest (lowest) first.
            double gamma = col_in ? h.gamma[kk] : 0.0;
            for (int i = 0; i < 32; ++i) {
                const uint32_t p_i = __shfl_sync(kFullWarp, p, i);
                const float v_i = __shfl_sync(kFullWarp, v, i);
                const int before_i = __shfl_sync(kFullWarp, before, i);
                const LbEntry x_i = entry_of_word(p_i);
                if (kk < before_i && pairs_with(x_i, f)) {
                    gamma = walk_term_add(gamma, pair_delta(b, k.c, x_i.is_q, x_i.t, f.t), v_i, h.tile[33 * i + me]);
                }
            }
            if (col_in) h.gamma[kk] = gamma;
            __syncwarp();
        }
        if (in) h.rho[ii] = rho;
    }
    __syncwarp();
}

// The group at sorted positions [first, first + m), by the calling warp.
template <bool PerWrite>
__device__ __forceinline__ void hot_group(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr,
                                          const HotArrays& h, int s, int first, int m) {
    const int me = lane_id();
    int64_t total = 0;
    const int mk = load_hot_group<PerWrite>(b.k, k, arr, h, s, first, m, &total);
    hot_pair_sums(b, k, h, s, m, mk);
    // The combine, a lane an entry.
    for (int ii = me; ii < m; ii += 32) {
        const uint32_t p = h.pay[ii];
        const LbEntry x = entry_of_word(p);
        const int before = h.before[ii];
        double e_log = 1.0;
        const LbUpstream up = load_upstream(b, arr, k.c, x, first + ii);
        const LbCombined comb = combine_entry(b, x, up, h.value[ii], h.rho[ii], x.is_q ? 0.0 : h.gamma[before],
                                              h.log[ii], total, s, &e_log);
        h.rho[ii] = comb.gbar;
        if (!x.is_q) {
            h.gamma[before] = comb.rbar;
            h.log[ii] = __double_as_longlong(comb.cbar);
            leave_beta_term(b, arr, x, up.kspa, h.value[ii], e_log);
        }
    }
    __syncwarp();
    if (b.grads.g == nullptr) return;   // the adjoint scans serve the gates' gradient alone
    // The adjoint scans, one lane: ascending, the total's adjoint and the rbar prefix;
    // descending, the gbar suffix and each K entry's gate adjoint.
    if (me == 0) {
        const double e_total = exp_compact(total, s);
        double total_adjoint = 0.0, rbar_sum = 0.0;
        for (int ii = 0; ii < m; ++ii) {
            if (h.pay[ii] & kIsQ) continue;
            const int before = h.before[ii];
            const double rbar = h.gamma[before];
            h.gamma[before] = rbar_sum;
            rbar_sum = dadd(rbar_sum, rbar);
            total_adjoint = total_term_add(total_adjoint, __longlong_as_double(h.log[ii]), e_total);
        }
        double suffix = 0.0;
        for (int ii = m - 1; ii >= 0; --ii) {
            suffix = dadd(suffix, h.rho[ii]);
            const uint32_t p = h.pay[ii];
            if (p & kIsQ) continue;
            const uint32_t pp = ii > 0 ? h.pay[ii - 1] : kIsQ;
            const bool repeat = !(pp & kIsQ) && payload_token(pp) == payload_token(p);
            leave_gate_adjoint<PerWrite>(b, arr, k.c, entry_of_word(p),
                                         repeat ? 0.0 : gate_adjoint(suffix, h.gamma[h.before[ii]], total_adjoint));
        }
    }
    __syncwarp();
}

// Every hot group of the chunk: the hot warps take them from the list.
template <bool PerWrite>
__device__ __forceinline__ void hot_groups(const BackwardArgs& b, const LbChunk& k, const LbArrays& arr, LbShared& sh) {
    const HotArrays h = bind_hot_arrays(arr, b.lean);
    for (;;) {
        uint32_t i = 0;
        if (lane_id() == 0) i = atomicAdd(&sh.hot_next, 1u);
        i = __shfl_sync(kFullWarp, i, 0);
        if (i >= sh.hot_count) break;
        const uint32_t g = arr.hot_list[i];
        hot_group<PerWrite>(b, k, arr, h, sh.shift, static_cast<int>(g & 0xFFFFu), static_cast<int>(g >> 16));
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_HOT_GROUPS_CUH
