// Stage "pair sums", first path (CPU twin: pair_sums in src/cpu/chunk_stages.h, which has one
// path; lean: kernels/lean/lean_pairs.cuh, the same plan): every unit in one batch, without rows, for chunks with one
// or two walkers a thread at most (one_batch_walkers) and few terms a unit (distinct slots:
// most cells of a and qk are 0). The rows of a and qk are set to 0; the walkers are numbered
// over all units (stage "records" marks them in per-unit lane masks), each thread takes its
// share, and a block scan of their term counts places every term in one list, in unit order,
// each walker's terms in canonical order; each thread computes its walkers' terms (the exps,
// in parallel). Then the thread of each unit stores each cell that has terms: the sum of the
// cell's terms in list order from +0.0. False, with only the zeros stored, where the list or
// a unit's share of it is too long: the caller then takes the warp path, which stores every
// cell. A walker here walks its group back to the head, with no write row to list first:
// every entry of a group but its head is a walker, so a walk is shorter than the batch, and
// the path's walks together take at most the square of the batch's size.
#ifndef SDM_P1_KERNELS_PAIR_ONE_BATCH_CUH
#define SDM_P1_KERNELS_PAIR_ONE_BATCH_CUH

#include "../common/block_scan.cuh"
#include "../common/pair_common.cuh"

namespace sdm_p1 {
namespace cuda {

// A unit's terms at most, in one batch: its thread finds the terms of a cell by going over
// the unit's part of the list, so its work grows with the square of this.
constexpr uint32_t kOneBatchUnitTerms = 64;
// Walkers a thread at most (consecutive ones: the block scan's blocked order): two in the
// full-size block of the default fields' kernel, whose chunks (S6) often hold more walkers
// than threads; else one (two made those kernels slower, through instruction fetch:
// S5 1.86 -> 2.21 ms in the half-size kernel; docs/performance.md, pair sums).
constexpr int kOneBatchWalkers = 2;
template <int Threads, bool SortedRows>
__host__ __device__ constexpr int one_batch_walkers() {
    return Threads == kMaxThreads && !SortedRows ? 2 : 1;
}

// The batch's room: the first walker of each unit (and the total), each walker's first term
// (and the end), then the term list.
struct OneBatchRoom {
    uint32_t* first;    // [2 C + 1]
    uint32_t* offset;   // [kOneBatchWalkers * threads + 1]
    PairTerm* term;     // [capacity]
    uint8_t* cell;      // [capacity] the term's column (a token index)
    uint32_t capacity;
};

// Bytes of first and offset (sized for the largest C and block).
SDM_HD size_t one_batch_index_bytes() {
    return align16(4 * static_cast<size_t>(2 * kMaxC + 1)) +
           align16(4 * static_cast<size_t>(kOneBatchWalkers * kMaxThreads + 1));
}

// The least room of the path: the index and 128 terms (it takes what room the stage has).
SDM_HD size_t one_batch_room_bytes() { return one_batch_index_bytes() + 128 * (sizeof(PairTerm) + 1); }

__device__ __forceinline__ OneBatchRoom bind_one_batch_room(char* base, size_t room) {
    OneBatchRoom b;
    b.first = reinterpret_cast<uint32_t*>(base);
    b.offset = reinterpret_cast<uint32_t*>(base + align16(4 * static_cast<size_t>(2 * kMaxC + 1)));
    base += one_batch_index_bytes();
    b.capacity = static_cast<uint32_t>((room - one_batch_index_bytes()) / (sizeof(PairTerm) + 1));
    b.term = reinterpret_cast<PairTerm*>(base);
    b.cell = reinterpret_cast<uint8_t*>(b.term + b.capacity);
    return b;
}

// The lane mask words of unit u (row u / 2 of a if u is even, else of qk).
template <class Arrays>
__device__ __forceinline__ const uint32_t* unit_mask(const KernelArgs& a, const Arrays& arr, int u, int* words) {
    const bool is_q = (u & 1) != 0;
    *words = mask_words(is_q ? a.s.R : a.s.W);
    return arr.walk_mask + walk_mask_base(a.s.W, a.s.R, u >> 1, is_q);
}

// The lane of the k-th walker (from 0) of a unit's mask.
__device__ __forceinline__ int kth_lane(const uint32_t* mask, int words, int k) {
    for (int w = 0; w < words; ++w) {
        const int c = __popc(mask[w]);
        if (k < c) return 32 * w + static_cast<int>(__fns(mask[w], 0u, k + 1));
        k -= c;
    }
    return -1;   // not reached: k is below the unit's walker count
}

// first[u] = walkers of the units before u, for u in [0, units]. One warp.
template <class Arrays>
__device__ __forceinline__ void number_walkers(const KernelArgs& a, const Arrays& arr, int units, uint32_t* first) {
    if (threadIdx.x >= 32) return;
    const int lane = static_cast<int>(threadIdx.x);
    uint32_t carry = 0;
    for (int b = 0; b <= units; b += 32) {
        const int u = b + lane;
        uint32_t count = 0;
        if (u < units) {
            int words;
            const uint32_t* m = unit_mask(a, arr, u, &words);
            for (int x = 0; x < words; ++x) count += __popc(m[x]);
        }
        const uint32_t incl = warp_inclusive_sum(count, lane);
        if (u <= units) first[u] = carry + incl - count;
        carry += __shfl_sync(kFullWarp, incl, 31);
    }
}

// Walker `idx` (numbered by number_walkers over `units` units).
template <class Arrays>
__device__ __forceinline__ Walker find_walker(const KernelArgs& a, const Arrays& arr, int units, const uint32_t* first,
                                              uint32_t idx) {
    int lo = 0, hi = units - 1;   // the unit u with first[u] <= idx < first[u + 1]
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (first[mid] <= idx) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    int words;
    const uint32_t* m = unit_mask(a, arr, lo, &words);
    return unit_walker(a, arr, lo >> 1, (lo & 1) != 0, kth_lane(m, words, static_cast<int>(idx - first[lo])));
}

// Moves *q down its group to the next write whose term the unit adds (a: of another token
// than i), the walk ending after the group's head. False when the walk is over.
template <class Arrays>
__device__ __forceinline__ bool walk_next(const Arrays& arr, int i, bool qk, uint32_t* q, bool* more, uint32_t* pq) {
    while (*more) {
        --*q;
        *pq = arr.payload[*q];
        if (*pq & kHead) *more = false;
        if (!(*pq & kIsQ) && (qk || payload_token(*pq) != i)) return true;
    }
    return false;
}

template <class Arrays>
__device__ __forceinline__ uint32_t walk_count(const Arrays& arr, const Walker& w, uint32_t limit) {
    uint32_t q = w.r, pq, m = 0;
    bool more = true;
    while (m <= limit && walk_next(arr, w.i, w.qk, &q, &more, &pq)) ++m;
    return m;
}

struct Sum {
    __device__ uint32_t operator()(uint32_t x, uint32_t y) const { return x + y; }
};

// The path, for a chunk with at most Walkers * blockDim.x walkers; `room` bytes at base.
template <int Walkers, class Arrays>
__device__ __forceinline__ bool one_batch_units(const KernelArgs& a, const Chunk& k, const Arrays& arr, char* base,
                                                size_t room, BlockScanTemp<uint32_t>& scan) {
    const int C = a.s.C, units = 2 * C;
    const OneBatchRoom b = bind_one_batch_room(base, room);
    float* const out_a = a.out.a + k.c * C * C;
    float* const out_qk = a.out.qk + k.c * C * C;
    zero_floats(out_a, C * C);
    zero_floats(out_qk, C * C);
    number_walkers(a, arr, units, b.first);
    __syncthreads();
    const uint32_t walkers = b.first[units];
    Walker w[Walkers];
    uint32_t m[Walkers], incl[Walkers];
#pragma unroll
    for (int x = 0; x < Walkers; ++x) {
        const uint32_t idx = threadIdx.x * Walkers + x;
        w[x] = Walker{};
        m[x] = 0;
        if (idx < walkers) {
            w[x] = find_walker(a, arr, units, b.first, idx);
            m[x] = walk_count(arr, w[x], b.capacity);
        }
        incl[x] = m[x];
    }
    block_scan_begin(scan);
    block_scan_tile(incl, scan, Sum());
    // offset[x]: the first term of walker x; offset[walkers]: the number of terms.
#pragma unroll
    for (int x = 0; x < Walkers; ++x) {
        b.offset[threadIdx.x * Walkers + x] = incl[x] - m[x];
        if (m[x] == 0u || incl[x] > b.capacity) continue;
        uint32_t q = w[x].r, pq;
        bool more = true;
        for (uint32_t t = 0; t < m[x] && walk_next(arr, w[x].i, w[x].qk, &q, &more, &pq); ++t) {
            b.term[incl[x] - m[x] + t] =
                pair_term(w[x].v, entry_value(a, arr, pq), arr.log.exp_diff(w[x].lr, arr.log.raw(q)));
            b.cell[incl[x] - m[x] + t] = static_cast<uint8_t>(payload_token(pq));
        }
    }
    if (threadIdx.x == blockDim.x - 1) b.offset[Walkers * blockDim.x] = incl[Walkers - 1];
    __syncthreads();
    bool too_long = b.offset[walkers] > b.capacity;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        too_long |= b.offset[b.first[u + 1]] - b.offset[b.first[u]] > kOneBatchUnitTerms;
    }
    // A barrier, after which no thread reads the room if the path gives up (the next path
    // takes it).
    if (__syncthreads_or(too_long)) return false;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        const uint32_t lo = b.offset[b.first[u]], hi = b.offset[b.first[u + 1]];
        store_cell_sums(b.term, b.cell, lo, hi, (u & 1 ? out_qk : out_a) + (u >> 1) * C);
    }
    return true;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PAIR_ONE_BATCH_CUH
