// Stage "scans": block-wide scans over the sorted row, tile by tile.
//  * forward: each group's inclusive log-cumsum (a segmented sum of the fixed-point gates of
//    its writes, a write repeating its token's slot adding none) and the peers before each
//    entry; the count of write entries before each position gives the rank table.
//  * backward (the row reversed): the peers and gates after each entry, and the indices of
//    each entry in the write and read rows; with these every per-entry output is written by
//    the shared write_entry_outputs (stage "records").
// The sums are exact integer sums, so the scans' tree gives the CPU backend's bits.
#ifndef SDM_P1_KERNELS_STAGE_SCANS_CUH
#define SDM_P1_KERNELS_STAGE_SCANS_CUH

#include <cub/block/block_scan.cuh>

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

// Backward scan element (over the reversed row): segmented by group end (sum, k, q), plain
// (writes, reads, first_writes).
struct BackwardItem {
    Fix sum;
    uint32_t k, q;
    uint32_t end;
    uint32_t writes;        // write entries (valid or padding)
    uint32_t reads;         // read entries (valid or padding)
    uint32_t first_writes;  // valid first writes of their groups
};

struct BackwardOp {
    __device__ BackwardItem operator()(const BackwardItem& x, const BackwardItem& y) const {
        BackwardItem r;
        r.end = x.end | y.end;
        r.writes = x.writes + y.writes;
        r.reads = x.reads + y.reads;
        r.first_writes = x.first_writes + y.first_writes;
        r.sum = y.end ? y.sum : fix_add(x.sum, y.sum);
        r.k = y.end ? y.k : x.k + y.k;
        r.q = y.end ? y.q : x.q + y.q;
        return r;
    }
};

using ForwardScan = cub::BlockScan<ForwardItem, kThreads>;
using BackwardScan = cub::BlockScan<BackwardItem, kThreads>;

// Carries a scan from tile to tile (called by the first warp with each tile's aggregate).
template <typename Item, typename Op>
struct RunningPrefix {
    Item total;
    __device__ Item operator()(const Item& tile_aggregate) {
        const Item before = total;
        total = Op()(total, tile_aggregate);
        return before;
    }
};

// The gate a sorted entry adds to its group's log-cumsum: its token's gate (per token) or its
// lane's (per write) if it is a valid write that does not repeat a slot its token already
// wrote (the previous entry of its group would then be that token's write).
__device__ inline Fix gate_added(const KernelArgs& a, const ChunkArrays& arr, int r, uint32_t p,
                                 bool* repeat) {
    *repeat = false;
    if ((p & (kInvalid | kIsQ)) != 0u) return fix_zero();
    const int t = static_cast<int>((p >> kTokenShift) & kTokenMask);
    if (!(p & kHead)) {
        const uint32_t pp = arr.payload[r - 1];
        if (!(pp & kIsQ) && static_cast<int>((pp >> kTokenShift) & kTokenMask) == t) {
            *repeat = true;
            return fix_zero();
        }
    }
    const int lane = a.s.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
    return arr.gate[t * a.s.gate_width + lane];
}

__device__ inline void scan_forward(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                    ChunkShared& sh, typename ForwardScan::TempStorage& temp) {
    const int n = k.n;
    const int rank_blocks = (n + 31) / 32;
    RunningPrefix<ForwardItem, ForwardOp> prefix{ForwardItem{}};
    for (int base = 0; base < n; base += kTile) {
        ForwardItem item[kItems];
        uint32_t repeats = 0, write_mask = 0;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int r = base + threadIdx.x * kItems + i;
            item[i] = ForwardItem{};
            if (r < n) {
                const uint32_t p = arr.payload[r];
                const bool valid = !(p & kInvalid);
                bool repeat;
                item[i].sum = gate_added(a, arr, r, p, &repeat);
                repeats += repeat ? 1u : 0u;
                item[i].k = (valid && !(p & kIsQ)) ? 1u : 0u;
                item[i].q = (valid && (p & kIsQ)) ? 1u : 0u;
                item[i].head = (p & kHead) ? 1u : 0u;
                item[i].writes = (p & kIsQ) ? 0u : 1u;
                write_mask |= item[i].writes << i;
            }
        }
        const uint32_t first_writes_own = item[0].writes;
        ForwardScan(temp).InclusiveScan(item, item, ForwardOp(), prefix);
        uint32_t first_writes = 0;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int r = base + threadIdx.x * kItems + i;
            if (r < n) {
                const uint32_t p = arr.payload[r];
                const bool valid = !(p & kInvalid);
                const bool is_k = valid && !(p & kIsQ), is_q = valid && (p & kIsQ);
                const uint32_t before = is_k ? item[i].k - 1u : is_q ? item[i].q - 1u : 0u;
                arr.log[r] = item[i].sum;
                arr.before[r] = before;
                first_writes += (is_k && before == 0u) ? 1u : 0u;
            }
        }
        if (repeats) atomicAdd(&sh.repeats, repeats);
        if (first_writes) atomicAdd(&sh.valid_groups, first_writes);
        // Rank table: a 32-position block is the items of four neighbouring lanes.
        if (a.out.spay_rank) {
            uint32_t mask = write_mask << (8 * (threadIdx.x & 3u));
            mask |= __shfl_xor_sync(0xFFFFFFFFu, mask, 1);
            mask |= __shfl_xor_sync(0xFFFFFFFFu, mask, 2);
            const int r0 = base + threadIdx.x * kItems;
            if ((threadIdx.x & 3u) == 0u && r0 < n) {
                const int32_t writes_before = static_cast<int32_t>(item[0].writes - first_writes_own);
                write_rank(a.out, k.c, rank_blocks, r0 / 32, writes_before, mask);
            }
        }
        __syncthreads();   // temp is reused by the next tile
    }
}

__device__ inline void scan_backward(const KernelArgs& a, const Chunk& k, const ChunkArrays& arr,
                                     const ChunkShared& sh, typename BackwardScan::TempStorage& temp) {
    const KernelShape& s = a.s;
    const int n = k.n;
    const uint32_t nk = static_cast<uint32_t>(s.C * s.W), nq = static_cast<uint32_t>(s.C * s.R);
    const ChunkFacts f{k.c, s.C, s.W, s.R, s.rec_tile, k.id_base, s.bf16,
                       a.out.kspa ? a.beta : nullptr};
    const int64_t row = (static_cast<int64_t>(n) + kRowAlign - 1) / kRowAlign * kRowAlign;
    int32_t* pay_out = a.out.payload + k.c * row;
    RunningPrefix<BackwardItem, BackwardOp> prefix{BackwardItem{}};
    for (int base = 0; base < n; base += kTile) {
        BackwardItem item[kItems], own[kItems];
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int r = n - 1 - (base + static_cast<int>(threadIdx.x) * kItems + i);
            own[i] = BackwardItem{};
            if (r >= 0) {
                const uint32_t p = arr.payload[r];
                const bool valid = !(p & kInvalid);
                const bool is_k = valid && !(p & kIsQ);
                bool repeat;
                own[i].sum = gate_added(a, arr, r, p, &repeat);
                own[i].k = is_k ? 1u : 0u;
                own[i].q = (valid && (p & kIsQ)) ? 1u : 0u;
                own[i].end = (r == n - 1 || (arr.payload[r + 1] & kHead)) ? 1u : 0u;
                own[i].writes = (p & kIsQ) ? 0u : 1u;
                own[i].reads = (p & kIsQ) ? 1u : 0u;
                own[i].first_writes = (is_k && arr.before[r] == 0u) ? 1u : 0u;
            }
            item[i] = own[i];
        }
        BackwardScan(temp).InclusiveScan(item, item, BackwardOp(), prefix);
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int r = n - 1 - (base + static_cast<int>(threadIdx.x) * kItems + i);
            if (r < 0) continue;
            const uint32_t p = arr.payload[r];
            const bool valid = !(p & kInvalid);
            const bool is_q = (p & kIsQ) != 0u;
            EntryFacts e;
            e.r = static_cast<uint32_t>(r);
            e.payload = p;
            e.before = arr.before[r];
            // Exclusive (strictly after r) = inclusive - the entry's own part.
            e.after = !valid ? 0u : is_q ? item[i].q - own[i].q : item[i].k - own[i].k;
            e.log = arr.log[r];
            e.rex = fix_sub(item[i].sum, own[i].sum);
            e.value = arr.value[r];
            e.slot_key = arr.slot[r];
            e.row_index = is_q ? nq - item[i].reads : nk - item[i].writes;
            e.groups_before = static_cast<int32_t>(sh.valid_groups - item[i].first_writes);
            write_entry_outputs(a.out, f, e);
            const bool last = valid && !is_q && e.after == 0u;
            pay_out[r] = static_cast<int32_t>(p | (last ? kLastK : 0u));
        }
        __syncthreads();   // temp is reused by the next tile
    }
    for (int r = n + static_cast<int>(threadIdx.x); r < row; r += blockDim.x) {
        pay_out[r] = static_cast<int32_t>(kTailPayload);
    }
    if (threadIdx.x == 0) write_chunk_tails(a.out, f, static_cast<int32_t>(sh.valid_groups));
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_SCANS_CUH
