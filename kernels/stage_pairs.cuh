// Stage "pair sums": a and qk. A unit is a row i of a or of qk; one warp sums a unit's row in
// double, in the canonical order of pair_term_add: the entries of token i in lane order (the
// writes for a, the reads for qk), each walking its group from the nearest earlier entry to
// the group's head and adding one term per write met (a: of another token). The warp's lanes
// find the entries that have an earlier entry in their group (most have none); lane 0 then
// walks those in order, so each cell has exactly one writer and the CPU backend's order.
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

// Adds the terms of the entry at sorted position r (which has an earlier entry in its group)
// to the unit's row: a (qk false) skips writes of its own token i.
__device__ __forceinline__ void walk_entry(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                  uint32_t r, int i, bool qk, double* acc) {
    const float v = entry_value(a, k, arr.payload[r]);
    const Fix lr = arr.log[r];
    for (uint32_t q = r - 1;; --q) {
        const uint32_t pq = arr.payload[q];
        if (!(pq & kIsQ)) {   // in a group, every entry is valid
            const int tj = static_cast<int>((pq >> kTokenShift) & kTokenMask);
            if (qk || tj != i) acc[tj] = pair_term_add(acc[tj], v, entry_value(a, k, pq), lr, arr.log[q]);
        }
        if (pq & kHead) break;
    }
}

__device__ __forceinline__ void sum_unit_row(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                    int i, bool qk, double* acc) {
    const int WR = a.s.W + a.s.R;
    const int lanes = qk ? a.s.R : a.s.W;
    const uint32_t* pos = arr.position + i * WR + (qk ? a.s.W : 0);
    const int me = static_cast<int>(threadIdx.x & 31u);
    for (int l0 = 0; l0 < lanes; l0 += 32) {
        const int lane = l0 + me;
        const uint32_t r = lane < lanes ? pos[lane] : 0u;
        const bool walks = lane < lanes && !(arr.payload[r] & kHead);
        uint32_t todo = __ballot_sync(0xFFFFFFFFu, walks);
        if (me == 0) {
            while (todo) {
                const int b = __ffs(todo) - 1;
                todo &= todo - 1u;
                walk_entry(a, k, arr, pos[l0 + b], i, qk, acc);
            }
        }
        __syncwarp();
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
