// Stage "scans" (CPU twins: scan_forward and scan_backward in src/cpu/chunk_stages.h; lean:
// sum_groups in kernels/lean/lean_groups.cuh): block-wide scans over the sorted row, tile by
// tile.
//  * forward: each group's inclusive log-cumsum (a segmented sum of the fixed-point gates of
//    its writes; a write repeating its token's slot adds none), the peers before each entry,
//    and the write entries before each position; and the chunk's walkers (stage "pair sums").
//  * backward (the row reversed): the last position of each entry's group, the valid first
//    writes of groups at or after each position, and each group's last valid write (kLastK).
// From these, stage "records" finds every fact of any entry in O(1). The sums are exact
// integer sums, so the scans' tree gives the CPU backend's bits.
#ifndef SDM_P1_KERNELS_STAGE_SCANS_CUH
#define SDM_P1_KERNELS_STAGE_SCANS_CUH

#include "../common/block_scan.cuh"
#include "../common/chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// Forward scan element, wide: the exact 128-bit sum and 32-bit counters (any chunk).
// Segmented by group head (sum, k, q), plain (writes).
struct ForwardItem {
    Fix sum;           // gates added in the group so far
    uint32_t k, q;     // valid write / read entries of the group so far
    uint32_t head;     // a group starts in this span
    uint32_t writes;   // write entries (valid or padding) so far in the row

    // The gates as the sums take them: arr.gate as it is.
    __device__ static void prepare_gates(const KernelArgs&, Fix*, int) {}
    __device__ static Fix gate_at(const Fix* gates, int x) { return x < 0 ? fix_zero() : gates[x]; }
    // The element of the entry with payload p adding `gate` to its group's sum.
    __device__ static ForwardItem of(uint32_t p, Fix gate) {
        const bool valid = !(p & kInvalid), is_q = (p & kIsQ) != 0u;
        return ForwardItem{gate, valid && !is_q ? 1u : 0u, valid && is_q ? 1u : 0u, (p & kHead) ? 1u : 0u,
                           is_q ? 0u : 1u};
    }
    __device__ uint32_t valid_k() const { return k; }
    __device__ uint32_t valid_q() const { return q; }
    __device__ uint32_t write_count() const { return writes; }
    __device__ void store_log(const LogArray& log, uint32_t col, int i) const { log.set(col * 8u + i, sum); }
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

// Forward scan element, compact: the sum in the compact log form (LogArray::shift >= 0:
// every gate is a multiple of 2^shift and every group's sum fits the word) and 16-bit
// counters (n < 2^16). Half the words of ForwardItem through every shuffle of the scan.
constexpr uint32_t kSpanHead = 1u << 31;
struct CompactForwardItem {
    int64_t sum;            // gates added in the group so far, >> shift
    uint32_t kq;            // valid write entries of the group so far, + valid read entries << 16
    uint32_t head_writes;   // kSpanHead: a group starts in this span; below it, the write
                            // entries (valid or padding) so far in the row

    // The gates in the compact form, each once, in place of its Fix's low word (the gates
    // are read only by this scan); the caller's barrier publishes them.
    __device__ static void prepare_gates(const KernelArgs& a, Fix* gates, int shift) {
        for (int x = threadIdx.x; x < a.s.C * a.s.gate_width; x += blockDim.x) {
            gates[x].lo = fix_shift_down(gates[x], shift);
        }
    }
    __device__ static int64_t gate_at(const Fix* gates, int x) { return x < 0 ? 0 : static_cast<int64_t>(gates[x].lo); }
    __device__ static CompactForwardItem of(uint32_t p, int64_t gate) {
        const bool valid = !(p & kInvalid), is_q = (p & kIsQ) != 0u;
        return CompactForwardItem{gate, valid ? (is_q ? 1u << 16 : 1u) : 0u,
                                  ((p & kHead) ? kSpanHead : 0u) | (is_q ? 0u : 1u)};
    }
    __device__ uint32_t valid_k() const { return kq & 0xFFFFu; }
    __device__ uint32_t valid_q() const { return kq >> 16; }
    __device__ uint32_t write_count() const { return head_writes & ~kSpanHead; }
    __device__ void store_log(const LogArray& log, uint32_t col, int i) const {
        log.low.at(col, i) = static_cast<uint64_t>(sum);
    }
};

struct CompactForwardOp {
    __device__ CompactForwardItem operator()(const CompactForwardItem& x, const CompactForwardItem& y) const {
        const bool head = (y.head_writes & kSpanHead) != 0u;
        CompactForwardItem r;
        r.sum = head ? y.sum : x.sum + y.sum;
        r.kq = head ? y.kq : x.kq + y.kq;   // each half stays below 2^16: no carry between them
        r.head_writes =
            ((x.head_writes | y.head_writes) & kSpanHead) + (x.head_writes & ~kSpanHead) + (y.head_writes & ~kSpanHead);
        return r;
    }
};

union ForwardScanTemp {
    BlockScanTemp<ForwardItem> wide;
    BlockScanTemp<CompactForwardItem> compact;
};

// Backward scan element (over the reversed row): segmented by group end (end_last, writes),
// plain (firsts).
constexpr uint32_t kSpanEnd = 1u << 31;
struct BackwardItem {
    uint32_t end_last;   // kSpanEnd: a group ends in this span; below it, the position of
                         // the group's end
    uint32_t firsts;     // valid first writes of groups
    uint32_t writes;     // valid writes of the group from here to its end
};

struct BackwardOp {
    __device__ BackwardItem operator()(const BackwardItem& x, const BackwardItem& y) const {
        const bool end = (y.end_last & kSpanEnd) != 0u;
        return BackwardItem{end ? y.end_last : x.end_last, x.firsts + y.firsts, end ? y.writes : x.writes + y.writes};
    }
};

// The index in arr.gate of the gate a sorted entry (payload p; pp: the previous position's)
// adds to its group's log-cumsum, or -1 for none: its token's gate (per token) or its lane's
// (per write) if it is a valid write that does not repeat a slot its token already wrote
// (the previous entry of its group would then be that token's write).
__device__ __forceinline__ int gate_added(const KernelArgs& a, uint32_t p, uint32_t pp, bool* repeat) {
    *repeat = false;
    if ((p & (kInvalid | kIsQ)) != 0u) return -1;
    const int t = payload_token(p);
    if (!(p & kHead) && !(pp & kIsQ) && payload_token(pp) == t) {
        *repeat = true;
        return -1;
    }
    const int lane = a.s.gate_width == 1 ? 0 : static_cast<int>(p & kLaneMask);
    return t * a.s.gate_width + lane;
}

// The forward scan with elements of type Item (ForwardItem or CompactForwardItem), Op its
// operator. A thread's positions are col * 8 + i (blocked order): it reads each payload once.
template <class Item, class Op, class Arrays>
__device__ __forceinline__ void forward_tiles(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh,
                                              BlockScanTemp<Item>& temp) {
    using Count = typename Arrays::Count;
    const int n = k.n;
    Item::prepare_gates(a, arr.gate, arr.log.shift);
    block_scan_begin(temp);
    __syncthreads();   // the prepared gates, before any tile reads them
    for (int base = 0; base < n; base += static_cast<int>(blockDim.x) * kScanItems) {
        const uint32_t col = static_cast<uint32_t>(base / kScanItems) + threadIdx.x;
        const int r0 = static_cast<int>(col) * kScanItems;
        uint32_t p[kScanItems];
        Item item[kScanItems];
        uint32_t repeats = 0, walkers = 0;
        uint32_t pp = r0 > 0 && r0 < n ? arr.payload[r0 - 1] : 0u;   // the previous position's
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            p[i] = r0 + i < n ? arr.payload.at(col, i) : kInvalid;
            bool repeat = false;
            item[i] = r0 + i < n ? Item::of(p[i], Item::gate_at(arr.gate, gate_added(a, p[i], pp, &repeat))) : Item{};
            repeats += r0 + i < n && repeat ? 1u : 0u;
            walkers += is_walker(p[i]) ? 1u : 0u;
            pp = p[i];
        }
        block_scan_tile(item, temp, Op());
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            if (r0 + i < n) {
                const bool valid = !(p[i] & kInvalid), is_q = (p[i] & kIsQ) != 0u;
                item[i].store_log(arr.log, col, i);
                arr.before.at(col, i) = static_cast<Count>(!valid ? 0u
                                                           : is_q ? item[i].valid_q() - 1u
                                                                  : item[i].valid_k() - 1u);
                arr.writes.at(col, i) = static_cast<Count>(item[i].write_count() - (is_q ? 0u : 1u));
            }
        }
        if (repeats) atomicAdd(&sh.repeats, repeats);
        walkers = __reduce_add_sync(0xFFFFFFFFu, walkers);
        if ((threadIdx.x & 31u) == 0u && walkers != 0u) atomicAdd(&sh.walkers, walkers);
        __syncthreads();   // temp is reused by the next tile
    }
}

// The compact elements where the chunk's log-cumsums have the compact form and its counts
// 16 bits (the usual case), else the wide ones.
template <class Arrays>
__device__ __forceinline__ void scan_forward(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh,
                                             ForwardScanTemp& temp) {
    if constexpr (sizeof(typename Arrays::Count) == 2) {
        if (arr.log.shift >= 0) {
            forward_tiles<CompactForwardItem, CompactForwardOp>(a, k, arr, sh, temp.compact);
            return;
        }
    }
    forward_tiles<ForwardItem, ForwardOp>(a, k, arr, sh, temp.wide);
}

// A thread's positions are r0, r0 - 1, ...; the position after each is the one before it
// in the thread's list, so each payload is read once. A group's last valid write gets its
// payload's kLastK bit here (stage "records" stores the payloads as they are).
template <class Arrays>
__device__ __forceinline__ void scan_backward(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh,
                                              BlockScanTemp<BackwardItem>& temp) {
    using Count = typename Arrays::Count;
    const int n = k.n;
    block_scan_begin(temp);
    for (int base = 0; base < n; base += static_cast<int>(blockDim.x) * kScanItems) {
        const int r0 = n - 1 - (base + static_cast<int>(threadIdx.x) * kScanItems);
        BackwardItem item[kScanItems];
        uint32_t p[kScanItems];
        uint32_t firsts = 0;
        // The payload after the current position (the row's end counts as a group head).
        uint32_t next = r0 >= 0 && r0 < n - 1 ? arr.payload[r0 + 1] : kHead;
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = r0 - i;
            item[i] = BackwardItem{};
            p[i] = 0u;
            if (r >= 0) {
                p[i] = arr.payload[r];
                const bool valid_write = (p[i] & (kInvalid | kIsQ)) == 0u;
                item[i].end_last = ((next & kHead) ? kSpanEnd : 0u) | static_cast<uint32_t>(r);
                item[i].firsts = valid_write && arr.before[r] == 0u ? 1u : 0u;
                item[i].writes = valid_write ? 1u : 0u;
                firsts += item[i].firsts;
                next = p[i];
            }
        }
        block_scan_tile(item, temp, BackwardOp());
#pragma unroll
        for (int i = 0; i < kScanItems; ++i) {
            const int r = r0 - i;
            if (r >= 0) {
                arr.end[r] = static_cast<Count>(item[i].end_last & ~kSpanEnd);
                if (arr.firsts) arr.firsts[r] = static_cast<Count>(item[i].firsts);
                // The scan's reads of these payloads are behind its barrier.
                if ((p[i] & (kInvalid | kIsQ)) == 0u && item[i].writes == 1u) arr.payload[r] = p[i] | kLastK;
            }
        }
        if (firsts) atomicAdd(&sh.valid_groups, firsts);
        __syncthreads();   // temp is reused by the next tile
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_SCANS_CUH
