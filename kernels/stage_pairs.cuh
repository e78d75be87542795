// Stage "pair sums": a and qk. One thread per unit (a row i of a, or of qk) sums its row in
// double, in the canonical order of pair_term_add: the entries of token i in lane order (the
// writes for a, the reads for qk), each walking its group from the nearest earlier entry to
// the group's head and adding one term per write met (a: of another token). So each cell has
// exactly one writer and the CPU backend's order. Units run in waves whose double rows fit
// the shared buffer; each wave's rows are then rounded and stored coalesced.
#ifndef SDM_P1_KERNELS_STAGE_PAIRS_CUH
#define SDM_P1_KERNELS_STAGE_PAIRS_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

__device__ inline void sum_unit_row(const KernelArgs& a, const ChunkArrays& arr, int i, bool qk,
                                    double* acc) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R;
    const int lanes = qk ? s.R : s.W;
    const int first = qk ? s.W : 0;
    for (int lane = 0; lane < lanes; ++lane) {
        const uint32_t r = arr.position[i * WR + first + lane];
        if (arr.payload[r] & kHead) continue;   // no earlier entry in its group
        const float v = arr.value[r];
        const Fix lr = arr.log[r];
        for (uint32_t q = r - 1;; --q) {
            const uint32_t pq = arr.payload[q];
            if (!(pq & kIsQ)) {   // in a group, every entry is valid
                const int tj = static_cast<int>((pq >> kTokenShift) & kTokenMask);
                if (qk || tj != i) acc[tj] = pair_term_add(acc[tj], v, arr.value[q], lr, arr.log[q]);
            }
            if (pq & kHead) break;
        }
    }
}

__device__ inline void pair_sums(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                 double* rows) {
    const int C = a.s.C;
    const int units = 2 * C;   // unit u: row u / 2 of a (u even) or of qk (u odd)
    const int per_wave = pair_units_per_wave(C);
    float* out_a = a.out.a + k.c * C * C;
    float* out_qk = a.out.qk + k.c * C * C;
    for (int u0 = 0; u0 < units; u0 += per_wave) {
        const int wave = min(per_wave, units - u0);
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) rows[x] = 0.0;
        __syncthreads();
        if (static_cast<int>(threadIdx.x) < wave) {
            const int u = u0 + threadIdx.x;
            const int i = u >> 1;
            if (i < k.t_valid) sum_unit_row(a, arr, i, (u & 1) != 0, rows + threadIdx.x * C);
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
