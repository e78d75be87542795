// Stage "pair sums": a and qk. A unit is a row i of a or of qk; one warp sums a unit's row in
// double, in the canonical order of pair_term_add: the entries of token i in lane order (the
// writes for a, the reads for qk), each walking its group from the nearest earlier entry to
// the group's head and adding one term per write met (a: of another token). The warp's lanes
// take one entry each; those with an earlier entry in their group (most have none) then
// add their terms in lane order (their first terms computed by all lanes at once),
// so each cell has exactly one writer and the CPU backend's order.
// Units run in waves whose double rows fit the shared buffer; each wave's rows are then
// rounded and stored coalesced.
#ifndef SDM_P1_KERNELS_STAGE_PAIRS_CUH
#define SDM_P1_KERNELS_STAGE_PAIRS_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// k_val / q_val of the entry with payload p.
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Chunk& k, uint32_t p) {
    const int64_t tok = k.c * a.s.C + static_cast<int>((p >> kTokenShift) & kTokenMask);
    const int lane = static_cast<int>(p & kLaneMask);
    return (p & kIsQ) ? load_value(a.q_val, a.s.bf16, tok * a.s.R + lane)
                      : load_value(a.k_val, a.s.bf16, tok * a.s.W + lane);
}

// Terms each lane computes ahead for its entry, in parallel with the other lanes, before the
// lanes add their terms one lane after the other.
constexpr int kTermsAhead = 2;

// Moves *q down its group to the next write whose term the unit adds (a: of another token
// than i), the walk ending after the group's head. False when the walk is over.
__device__ __forceinline__ bool next_term(const ChunkArrays& arr, int i, bool qk, uint32_t* q, bool* more,
                                          uint32_t* pq) {
    while (*more) {
        --*q;
        *pq = arr.payload[*q];
        if (*pq & kHead) *more = false;
        // In a group every entry is valid.
        if (!(*pq & kIsQ) && (qk || static_cast<int>((*pq >> kTokenShift) & kTokenMask) != i)) return true;
    }
    return false;
}

__device__ __forceinline__ void sum_unit_row(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                             int i, bool qk, double* acc) {
    const int WR = a.s.W + a.s.R;
    const int lanes = qk ? a.s.R : a.s.W;
    const uint32_t* pos = arr.position + i * WR + (qk ? a.s.W : 0);
    const int me = static_cast<int>(threadIdx.x & 31u);
    for (int l0 = 0; l0 < lanes; l0 += 32) {
        // Lane me walks the group of entry l0 + me, if it has an earlier entry.
        const int lane = l0 + me;
        const uint32_t r = lane < lanes ? pos[lane] : 0u;
        const bool walks = lane < lanes && !(arr.payload[r] & kHead);
        uint32_t q = r;
        bool more = walks;
        const float v = walks ? entry_value(a, k, arr.payload[r]) : 0.0f;
        const Fix lr = walks ? arr.log[r] : fix_zero();
        PairTerm ahead[kTermsAhead];
        int cell[kTermsAhead];
        bool have[kTermsAhead];
#pragma unroll
        for (int t = 0; t < kTermsAhead; ++t) {
            uint32_t pq = 0;
            have[t] = next_term(arr, i, qk, &q, &more, &pq);
            cell[t] = static_cast<int>((pq >> kTokenShift) & kTokenMask);
            if (have[t]) ahead[t] = pair_term(v, entry_value(a, k, pq), lr, arr.log[q]);
        }
        // The entries' terms go in lane order, each lane's in walk order.
        uint32_t todo = __ballot_sync(0xFFFFFFFFu, walks);
        while (todo) {
            const int turn = __ffs(todo) - 1;
            todo &= todo - 1u;
            if (me == turn) {
#pragma unroll
                for (int t = 0; t < kTermsAhead; ++t) {
                    if (have[t]) acc[cell[t]] = pair_term_add(acc[cell[t]], ahead[t]);
                }
                uint32_t pq;
                while (next_term(arr, i, qk, &q, &more, &pq)) {
                    const int tj = static_cast<int>((pq >> kTokenShift) & kTokenMask);
                    acc[tj] = pair_term_add(acc[tj], pair_term(v, entry_value(a, k, pq), lr, arr.log[q]));
                }
            }
            __syncwarp();
        }
    }
}

__device__ __forceinline__ void pair_sums(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                 double* rows) {
    const int C = a.s.C;
    const int units = 2 * C;   // unit u: row u / 2 of a (u even) or of qk (u odd)
    const int per_wave = pair_units_per_wave(C);
    const int warp = static_cast<int>(threadIdx.x >> 5), warps = static_cast<int>(blockDim.x >> 5);
    float* out_a = a.out.a + k.c * C * C;
    float* out_qk = a.out.qk + k.c * C * C;
    for (int u0 = 0; u0 < units; u0 += per_wave) {
        const int wave = min(per_wave, units - u0);
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) rows[x] = 0.0;
        __syncthreads();
        for (int w = warp; w < wave; w += warps) {
            const int u = u0 + w;
            const int i = u >> 1;
            if (i < k.t_valid) sum_unit_row(a, k, arr, i, (u & 1) != 0, rows + w * C);
        }
        __syncthreads();
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) {
            const int u = u0 + x / C, j = x % C;
            const int i = u >> 1;
            if (u & 1) {
                out_qk[i * C + j] = j <= i ? to_f32(rows[x]) : 0.0f;
            } else {
                out_a[i * C + j] = j < i ? to_f32(rows[x]) : 0.0f;
            }
        }
        __syncthreads();
    }
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_PAIRS_CUH
