// An inclusive block-wide scan, tile by tile, of small structs under an associative operator
// (the segmented sums of stage "scans"), with T{} its identity. Warp shuffles, then one warp
// over the warps' totals; the carry from tile to tile lives in the temporary storage. Written
// for this kernel rather than taken from CUB: CUB's scan of these 32-byte items spilled. No
// CPU twin: the CPU backend's scans (src/cpu/chunk_stages.h) are sequential loops.
#ifndef SDM_P1_KERNELS_BLOCK_SCAN_CUH
#define SDM_P1_KERNELS_BLOCK_SCAN_CUH

#include "chunk_context.cuh"
#include "warp_scan.cuh"

namespace sdm_p1 {
namespace cuda {

template <typename T>
struct BlockScanTemp {
    T warp_prefix[kMaxThreads / 32];   // per warp: the scan of everything before it
    T carry;                           // the scan of all earlier tiles
};

// Before the first tile: the carry is the identity (the caller's next barrier publishes it).
template <typename T>
__device__ __forceinline__ void block_scan_begin(BlockScanTemp<T>& temp) {
    if (threadIdx.x == 0) temp.carry = T{};
}

// Replaces items (a blocked tile: thread t holds positions t * ITEMS ...) by their inclusive
// scan, continuing the earlier tiles' scan. The caller puts a barrier between two tiles.
template <int ITEMS, typename T, typename Op>
__device__ __forceinline__ void block_scan_tile(T (&items)[ITEMS], BlockScanTemp<T>& temp, Op op) {
    const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
    T mine = items[0];
#pragma unroll
    for (int i = 1; i < ITEMS; ++i) mine = op(mine, items[i]);
    const T x = warp_inclusive_scan(mine, op);
    const T x_before = shfl_up(x, 1);
    if (lane == 31) temp.warp_prefix[warp] = x;   // the warp's total, for now
    __syncthreads();
    if (warp == 0) {
        const int warps = static_cast<int>(blockDim.x >> 5);
        const T t = warp_inclusive_scan(lane < warps ? temp.warp_prefix[lane] : T{}, op);
        const T t_before = shfl_up(t, 1);
        const T total = shfl_from(t, warps - 1);
        const T carry = temp.carry;
        if (lane < warps) temp.warp_prefix[lane] = lane == 0 ? carry : op(carry, t_before);
        __syncwarp();
        if (lane == 0) temp.carry = op(carry, total);
    }
    __syncthreads();
    T run = lane == 0 ? temp.warp_prefix[warp] : op(temp.warp_prefix[warp], x_before);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        run = op(run, items[i]);
        items[i] = run;
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BLOCK_SCAN_CUH
