// Stage "scans" of the backward: through the sorted row, the write entries before each
// position and the write row; through each group, its log-cumsums, repeats, head and rex.
// CPU twins: scan_forward and scan_backward (src/cpu/chunk_stages.h). The row's counts are a
// block-wide scan (integers: any order gives the same); each group is scanned by one thread,
// in the CPU's order (fixed-point sums are exact, so that order is not needed for the bits,
// but it keeps the code the CPU's). A hot group is one long thread.
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_SCANS_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_SCANS_CUH

#include <cub/block/block_scan.cuh>

#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

using CountScan = cub::BlockScan<uint32_t, kThreads>;

// The write entries (valid or padding) before each sorted position, and the write row. Each
// thread takes a run of consecutive positions. Ends with a barrier.
__device__ __forceinline__ void scan_writes(const Chunk& k, const Arrays& arr, CountScan::TempStorage& temp) {
    const int per = (k.n + kThreads - 1) / kThreads;
    const int lo = min(k.n, static_cast<int>(threadIdx.x) * per), hi = min(k.n, lo + per);
    uint32_t writes = 0;
    for (int r = lo; r < hi; ++r) writes += (arr.payload[r] & kIsQ) ? 0u : 1u;
    uint32_t before = 0;
    CountScan(temp).ExclusiveSum(writes, before);
    for (int r = lo; r < hi; ++r) {
        arr.writes_before[r] = before;
        if (!(arr.payload[r] & kIsQ)) arr.write_row[before++] = static_cast<uint32_t>(r);
    }
    __syncthreads();
}

// The group starting at sorted position h (a head): forward, the inclusive log-cumsum, the
// repeats and the head of each entry; backward, rex. Returns the group's end.
__device__ __forceinline__ int scan_group(const KernelShape& s, const Chunk& k, const Arrays& arr, int h) {
    Fix run = fix_zero();
    int r = h;
    for (; r < k.n && (r == h || !(arr.payload[r] & kHead)); ++r) {
        const uint32_t p = arr.payload[r];
        const bool is_k = !(p & kInvalid) && !(p & kIsQ);
        const int t = payload_token(p);
        uint32_t own = 0;
        if (is_k) {
            const uint32_t pp = r > h ? arr.payload[r - 1] : 0u;
            const bool repeat = r > h && !(pp & kIsQ) && payload_token(pp) == t;
            if (repeat) {
                own = arr.own_writes[r - 1] + 1u;
            } else {
                const int lane = s.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
                run = fix_add(run, arr.gate[t * s.gate_width + lane]);
            }
        }
        arr.own_writes[r] = own;
        arr.log[r] = run;
        arr.head[r] = h;
    }
    for (int x = h; x < r; ++x) arr.rex[x] = fix_sub(run, arr.log[x]);
    return r;
}

// Every group of the chunk, a thread a group. Ends with a barrier.
__device__ __forceinline__ void scan_groups(const KernelShape& s, const Chunk& k, const Arrays& arr) {
    for (int h = threadIdx.x; h < k.n; h += blockDim.x) {
        if (arr.payload[h] & kHead) scan_group(s, k, arr, h);
    }
    __syncthreads();
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_SCANS_CUH
