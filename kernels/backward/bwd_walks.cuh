// Stage "pair sums" of the backward: each valid entry's row sum (rho) and each valid K
// entry's column sum (gamma), a thread an entry; each sum is the CPU's, term for term in its
// order (nearest first), so the bits do not depend on how entries are spread over threads.
// CPU twins: row_sum, column_sum (src/cpu/chunk_backward.cpp) and walk_earlier_writes
// (src/cpu/chunk_stages.h). A thread's work is its entry's walks: entries of hot groups make
// long threads.
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_WALKS_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_WALKS_CUH

#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

// rho of the entry at r: the earlier valid writes of its group that pair with it (a range of
// the write row, minus a K entry's own token's run), a run at a time, nearest first; delta
// is the upstream a (K entry) or qk (Q entry) cell of its token and the write's.
__device__ __forceinline__ double row_sum(const BackwardArgs& b, const Chunk& k, const Arrays& arr, int r) {
    const int C = b.k.s.C;
    const uint32_t p = arr.payload[r];
    const float* const delta = (p & kIsQ) ? b.up.qk : b.up.a;
    const int64_t cells = (k.c * C + payload_token(p)) * C;   // its token's row
    const auto write_token = [&](uint32_t j) { return payload_token(arr.payload[arr.write_row[j]]); };
    const Fix log_r = arr.log[r];
    const uint32_t lo = arr.writes_before[arr.head[r]];
    uint32_t top = arr.writes_before[r] - arr.own_writes[r];
    double acc = 0.0;
    while (top > lo) {
        const int tj = write_token(top - 1);
        uint32_t bottom = top - 1;   // the run: [bottom, top)
        while (bottom > lo && write_token(bottom - 1) == tj) --bottom;
        const double e = exp_fix(fix_sub(log_r, arr.log[arr.write_row[top - 1]]));
        const float d = upstream_f32(delta, cells + tj);
        for (uint32_t x = top; x > bottom; --x) acc = walk_term_add(acc, d, arr.value[arr.write_row[x - 1]], e);
        top = bottom;
    }
    return acc;
}

// gamma of the K entry at r: the later entries of its group that pair with it (all but its
// own token's K entries), nearest first. Consecutive entries of one log-cumsum share their
// exp.
__device__ __forceinline__ double column_sum(const BackwardArgs& b, const Chunk& k, const Arrays& arr, int r) {
    const int C = b.k.s.C, t = payload_token(arr.payload[r]);
    const int64_t cells = k.c * C * C;
    const Fix log_r = arr.log[r];
    double acc = 0.0, e = 1.0;
    Fix e_arg = fix_zero();
    for (int x = r + 1; x < k.n; ++x) {
        const uint32_t p = arr.payload[x];
        if (p & kHead) break;   // the group's end
        const bool is_q = (p & kIsQ) != 0u;
        const int te = payload_token(p);
        if (!is_q && te == t) continue;   // its token's repeats of the slot: no pair
        const Fix d = fix_sub(arr.log[x], log_r);
        if (!fix_equal(d, e_arg)) {
            e = exp_fix(d);
            e_arg = d;
        }
        acc = walk_term_add(acc, upstream_f32(is_q ? b.up.qk : b.up.a, cells + te * C + t), arr.value[x], e);
    }
    return acc;
}

// Both sums of every valid entry (the valid entries come first). Ends with a barrier.
__device__ __forceinline__ void pair_sums(const BackwardArgs& b, const Chunk& k, const Arrays& arr) {
    const int valid_entries = k.t_valid * (b.k.s.W + b.k.s.R);
    for (int r = threadIdx.x; r < valid_entries; r += blockDim.x) {
        arr.rho[r] = row_sum(b, k, arr, r);
        if (!(arr.payload[r] & kIsQ)) arr.gamma[r] = column_sum(b, k, arr, r);
    }
    __syncthreads();
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_WALKS_CUH
