// Stage "scans": block-wide scans over the sorted row, tile by tile.
//  * forward: each group's inclusive log-cumsum (a segmented sum of the fixed-point gates of
//    its writes; a write repeating its token's slot adds none), the peers before each entry,
//    and the write entries before each position; and the chunk's walkers (stage "pair sums").
//  * backward (the row reversed): the last position of each entry's group, and the valid first
//    writes of groups at or after each position.
// From these, stage "records" finds every fact of any entry in O(1). The sums are exact
// integer sums, so the scans' tree gives the CPU backend's bits.
#ifndef SDM_P1_KERNELS_STAGE_SCANS_CUH
#define SDM_P1_KERNELS_STAGE_SCANS_CUH

#include "block_scan.cuh"
#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// Forward scan element: segmented by group head (sum, k, q), plain (writes).
struct ForwardItem {
    Fix sum;            // gates added in the group so far
    uint32_t k, q;      // valid write / read entries of the group so far
    uint32_t head;      // a group starts in this span
    uint32_t writes;    // write entries (valid or padding) so far in the row
};

struct ForwardOp {
    __device__ ForwardItem operator()(const ForwardItem& x, const ForwardItem& y) const {
        ForwardItem r;
        r.head = x.head | y.head;
        r.writes = x.writes + y.writes;
        r.sum = y.head ? y.sum : fix_add(x.sum, y.sum);
        r.k = y.head ? y.k : x.k + y.k;
        r.q = y.head ? y.q : x.q + y.q;
        return r;
    }
};

// Backward scan element (over the reversed row): segmented by group end (last), plain
// (firsts).
struct BackwardItem {
    uint32_t end;      // a group ends in this span
    uint32_t last;     // the position of the group's end
    uint32_t firsts;   // valid first writes of groups
};

struct BackwardOp {
    __device__ BackwardItem operator()(const BackwardItem& x, const BackwardItem& y) const {
        BackwardItem r;
        r.end = x.end | y.end;
        r.last = y.end ? y.last : x.last;
        r.firsts = x.firsts + y.firsts;
        return r;
    }
};


// The gate a sorted entry adds to its group's log-cumsum: its token's gate (per token) or its
// lane's (per write) if it is a valid write that does not repeat a slot its token already
// wrote (the previous entry of its group would then be that token's write).
template <class Arrays>
__device__ __forceinline__ Fix gate_added(const KernelArgs& a, const Arrays& arr, int r, uint32_t p,
                                 bool* repeat) {
    *repeat = false;
    if ((p & (kInvalid | kIsQ)) != 0u) return fix_zero();
    const int t = payload_token(p);
    if (!(p & kHead)) {
        const uint32_t pp = arr.payload[r - 1];
        if (!(pp & kIsQ) && payload_token(pp) == t) {
            *repeat = true;
            return fix_zero();
        }
    }
    const int lane = a.s.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
    return arr.gate[t * a.s.gate_width + lane];
}

template <class Arrays>
__device__ __forceinline__ void scan_forward(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                    ChunkShared& sh, BlockScanTemp<ForwardItem>& temp) {
    using Count = typename Arrays::Count;
    const int n = k.n;
    block_scan_begin(temp);
    for (int base = 0; base < n; base += static_cast<int>(blockDim.x) * kScanItems) {
        ForwardItem item[kScanItems];
        uint32_t repeats = 0, walkers = 0;
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = base + threadIdx.x * kScanItems + i;
            item[i] = ForwardItem{};
            if (r < n) {
                const uint32_t p = arr.payload[r];
                const bool valid = !(p & kInvalid);
                bool repeat;
                item[i].sum = gate_added(a, arr, r, p, &repeat);
                repeats += repeat ? 1u : 0u;
                walkers += is_walker(p) ? 1u : 0u;
                item[i].k = (valid && !(p & kIsQ)) ? 1u : 0u;
                item[i].q = (valid && (p & kIsQ)) ? 1u : 0u;
                item[i].head = (p & kHead) ? 1u : 0u;
                item[i].writes = (p & kIsQ) ? 0u : 1u;
            }
        }
        block_scan_tile(item, temp, ForwardOp());
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = base + threadIdx.x * kScanItems + i;
            if (r < n) {
                const uint32_t p = arr.payload[r];
                const bool valid = !(p & kInvalid);
                const bool is_k = valid && !(p & kIsQ), is_q = valid && (p & kIsQ);
                arr.log.set(r, item[i].sum);
                arr.before[r] = static_cast<Count>(is_k ? item[i].k - 1u : is_q ? item[i].q - 1u : 0u);
                arr.writes[r] = static_cast<Count>(item[i].writes - ((p & kIsQ) ? 0u : 1u));
            }
        }
        if (repeats) atomicAdd(&sh.repeats, repeats);
        walkers = __reduce_add_sync(0xFFFFFFFFu, walkers);
        if ((threadIdx.x & 31u) == 0u && walkers != 0u) atomicAdd(&sh.walkers, walkers);
        __syncthreads();   // temp is reused by the next tile
    }
}

template <class Arrays>
__device__ __forceinline__ void scan_backward(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                     ChunkShared& sh, BlockScanTemp<BackwardItem>& temp) {
    using Count = typename Arrays::Count;
    const int n = k.n;
    block_scan_begin(temp);
    for (int base = 0; base < n; base += static_cast<int>(blockDim.x) * kScanItems) {
        BackwardItem item[kScanItems];
        uint32_t firsts = 0;
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = n - 1 - (base + static_cast<int>(threadIdx.x) * kScanItems + i);
            item[i] = BackwardItem{};
            if (r >= 0) {
                const uint32_t p = arr.payload[r];
                item[i].end = (r == n - 1 || (arr.payload[r + 1] & kHead)) ? 1u : 0u;
                item[i].last = static_cast<uint32_t>(r);
                item[i].firsts = ((p & (kInvalid | kIsQ)) == 0u && arr.before[r] == 0u) ? 1u : 0u;
                firsts += item[i].firsts;
            }
        }
        block_scan_tile(item, temp, BackwardOp());
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = n - 1 - (base + static_cast<int>(threadIdx.x) * kScanItems + i);
            if (r >= 0) {
                arr.end[r] = static_cast<Count>(item[i].last);
                if (arr.firsts) arr.firsts[r] = static_cast<Count>(item[i].firsts);
            }
        }
        if (firsts) atomicAdd(&sh.valid_groups, firsts);
        __syncthreads();   // temp is reused by the next tile
    }
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_SCANS_CUH
