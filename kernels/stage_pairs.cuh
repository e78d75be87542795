// Stage "pair sums": a and qk. A unit is a row i of a (the writes of token i) or of qk (its
// reads). Only walkers add terms: valid entries with an earlier entry in their slot group
// (stage "records" marks them in per-unit lane masks). A walker walks its group from the
// nearest earlier entry to the group's head and adds one term per write met (a: of another
// token than i). Each cell is a double sum in the canonical order of pair_term_add: the
// walkers of the unit in lane order, each one's terms in walk order.
//
// Units run in waves whose double rows fit the shared buffer. In a wave the walkers are
// numbered unit by unit, lane by lane, and handled in batches, one walker per thread:
//  1. each walker counts its terms; a block scan of the counts gives each its place in the
//     batch's term list, and the batch takes the walkers whose terms fit the list;
//  2. each walker computes its terms (the exps: in parallel over the block) into the list;
//  3. one thread per unit adds its part of the list, in order, to the unit's row.
// Each cell so has one writer and the CPU backend's order. A walker with more terms than
// the list holds (a very long group) is a batch of its own, walked by the whole block
// (long_walk). The rows are then rounded and stored coalesced.
#ifndef SDM_P1_KERNELS_STAGE_PAIRS_CUH
#define SDM_P1_KERNELS_STAGE_PAIRS_CUH

#include "block_scan.cuh"
#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// k_val / q_val of the entry with payload p (stage "load" keeps them by entry).
template <class Arrays>
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Arrays& arr, uint32_t p) {
    const int t = payload_token(p);
    const int lane = static_cast<int>(p & kLaneMask);
    return arr.value[t * (a.s.W + a.s.R) + ((p & kIsQ) ? a.s.W : 0) + lane];
}

// Moves *q down its group to the next write whose term the unit adds (a: of another token
// than i), the walk ending after the group's head. False when the walk is over.
template <class Arrays>
__device__ __forceinline__ bool next_term(const Arrays& arr, int i, bool qk, uint32_t* q, bool* more,
                                          uint32_t* pq) {
    while (*more) {
        --*q;
        *pq = arr.payload[*q];
        if (*pq & kHead) *more = false;
        // In a group every entry is valid.
        if (!(*pq & kIsQ) && (qk || payload_token(*pq) != i)) return true;
    }
    return false;
}

// The lane mask words of unit u.
template <class Arrays>
__device__ __forceinline__ const uint32_t* unit_mask(const KernelArgs& a, const Arrays& arr, int u,
                                                     int* words) {
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

// The block scans' operator for term counts.
struct Sum {
    __device__ uint32_t operator()(uint32_t x, uint32_t y) const { return x + y; }
};

// The pair stage's shared memory: the wave's double rows, the walker numbering (first
// walker of each unit of the wave, and the total), the batch's term-list offsets (one per
// walker, and the end) and its term list.
struct PairTemp {
    double* rows;       // [wave][C]
    uint32_t* first;    // [wave + 1]
    uint32_t* offset;   // [threads + 1]
    PairTerm* term;     // [capacity]
    uint8_t* cell;      // [capacity] the term's column (a token index)
    uint32_t capacity;
};

// The term list holds at least two terms a thread, the rows of a wave at least kPairBudget
// bytes.
constexpr size_t kPairBudget = 16 * 1024;
SDM_HD size_t min_terms(int threads) { return 2 * static_cast<size_t>(threads); }

// Bytes of first and offset (sized for the largest wave and block).
SDM_HD size_t pair_index_bytes() { return 2 * align16(4 * static_cast<size_t>(kMaxThreads + 1)); }

// The least room the pair stage needs with `threads` a block: kPairBudget of rows, the
// index, the least list.
SDM_HD size_t pair_temp_bytes(int threads) {
    return kPairBudget + pair_index_bytes() + min_terms(threads) * (sizeof(PairTerm) + 1);
}

// Units a wave in `room` bytes (the stage room: the arrays that are dead meanwhile, see
// ArrayLayout::stage). The rows may take what the index and the least list leave (at least
// kPairBudget); the waves are as few as that allows (fewer, fuller batches), and as even as
// can be, which leaves the rest of the room to the list.
SDM_HD int pair_wave_units(int C, size_t room, int threads) {
    const size_t least = pair_index_bytes() + min_terms(threads) * (sizeof(PairTerm) + 1);
    const size_t rows = room > least + kPairBudget ? (room - least) / 16 * 16 : kPairBudget;
    int most = static_cast<int>(rows / (8 * static_cast<size_t>(C)));   // units whose rows fit
    most = min(most, min(2 * C, kMaxThreads));
    if (most < 1) most = 1;
    const int waves = (2 * C + most - 1) / most;
    return (2 * C + waves - 1) / waves;
}

__device__ __forceinline__ PairTemp bind_pair_temp(char* base, size_t room, int C) {
    const int per_wave = pair_wave_units(C, room, static_cast<int>(blockDim.x));
    char* const start = base;
    PairTemp p;
    p.rows = reinterpret_cast<double*>(base);
    base += align16(8 * static_cast<size_t>(C) * per_wave);
    p.first = reinterpret_cast<uint32_t*>(base);
    p.offset = reinterpret_cast<uint32_t*>(base + pair_index_bytes() / 2);
    base += pair_index_bytes();
    p.capacity = static_cast<uint32_t>((room - static_cast<size_t>(base - start)) / (sizeof(PairTerm) + 1));
    p.term = reinterpret_cast<PairTerm*>(base);
    p.cell = reinterpret_cast<uint8_t*>(p.term + p.capacity);
    return p;
}

// first[w] = walkers of the wave's units before unit u0 + w, for w in [0, wave]. One warp.
template <class Arrays>
__device__ __forceinline__ void number_walkers(const KernelArgs& a, const Arrays& arr, int u0, int wave,
                                               uint32_t* first) {
    if (threadIdx.x >= 32) return;
    const int lane = static_cast<int>(threadIdx.x);
    uint32_t carry = 0;
    for (int b = 0; b <= wave; b += 32) {
        const int w = b + lane;
        uint32_t count = 0;
        if (w < wave) {
            int words;
            const uint32_t* m = unit_mask(a, arr, u0 + w, &words);
            for (int x = 0; x < words; ++x) count += __popc(m[x]);
        }
        uint32_t incl = count;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const uint32_t lower = __shfl_up_sync(0xFFFFFFFFu, incl, d);
            if (lane >= d) incl += lower;
        }
        if (w <= wave) first[w] = carry + incl - count;
        carry += __shfl_sync(0xFFFFFFFFu, incl, 31);
    }
}

// A walker: its unit's row i, kind, sorted position, value and log.
struct Walker {
    int i;
    bool qk;
    uint32_t r;
    float v;
    Fix lr;   // its log's stored words (LogArray::raw)
};

// Walker `idx` of the wave.
template <class Arrays>
__device__ __forceinline__ Walker find_walker(const KernelArgs& a, const Arrays& arr, int u0, int wave,
                                              const uint32_t* first, uint32_t idx, int* unit) {
    int lo = 0, hi = wave - 1;   // the unit w with first[w] <= idx < first[w + 1]
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (first[mid] <= idx) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    const int u = u0 + lo;
    int words;
    const uint32_t* m = unit_mask(a, arr, u, &words);
    const int lane = kth_lane(m, words, static_cast<int>(idx - first[lo]));
    Walker w;
    w.i = u >> 1;
    w.qk = (u & 1) != 0;
    w.r = arr.position[w.i * (a.s.W + a.s.R) + (w.qk ? a.s.W : 0) + lane];
    w.v = entry_value(a, arr, arr.payload[w.r]);
    w.lr = arr.log.raw(w.r);
    *unit = lo;
    return w;
}

// The terms of walker w, counted up to limit + 1.
template <class Arrays>
__device__ __forceinline__ uint32_t count_terms(const Arrays& arr, const Walker& w, uint32_t limit) {
    uint32_t q = w.r, pq, m = 0;
    bool more = true;
    while (m <= limit && next_term(arr, w.i, w.qk, &q, &more, &pq)) ++m;
    return m;
}

// A walker with more terms than the list holds (at least two terms a thread: only with
// slots repeated within tokens). The block walks its group together, a position a thread a
// round; each round's terms go to the list in walk order and one thread per column adds
// that column's terms in order.
template <class Arrays>
__device__ __forceinline__ void long_walk(const KernelArgs& a, const Arrays& arr, const Walker& w, double* row,
                                          const PairTemp& pt, BlockScanTemp<uint32_t>& scan) {
    __shared__ uint32_t head_at, listed;
    const uint32_t t = threadIdx.x, threads = blockDim.x;
    for (uint32_t cursor = w.r;;) {   // positions below cursor are still to walk
        const bool in_range = cursor >= t + 1u;
        const uint32_t p = in_range ? cursor - 1u - t : 0u;
        const uint32_t pp = in_range ? arr.payload[p] : 0u;
        if (t == 0) head_at = threads;
        __syncthreads();
        if (in_range && (pp & kHead)) atomicMin(&head_at, t);
        __syncthreads();
        const uint32_t h = head_at;   // the walk ends at the group's head
        const bool is_term = in_range && t <= h && !(pp & kIsQ) && (w.qk || payload_token(pp) != w.i);
        uint32_t incl[1] = {is_term ? 1u : 0u};
        block_scan_begin(scan);
        block_scan_tile(incl, scan, Sum());
        if (is_term) {
            pt.term[incl[0] - 1u] = pair_term(w.v, entry_value(a, arr, pp), arr.log.exp_diff(w.lr, arr.log.raw(p)));
            pt.cell[incl[0] - 1u] = static_cast<uint8_t>(payload_token(pp));
        }
        if (t == threads - 1) listed = incl[0];
        __syncthreads();
        for (int j = threadIdx.x; j < a.s.C; j += blockDim.x) {
            double acc = row[j];
            for (uint32_t x = 0; x < listed; ++x) {
                if (pt.cell[x] == j) acc = pair_term_add(acc, pt.term[x]);
            }
            row[j] = acc;
        }
        __syncthreads();
        if (h < threads || cursor <= threads) break;   // uniform: every thread read h, cursor
        cursor -= threads;
    }
}

// Terms [0, m) of walker w go to the list from `at`.
template <class Arrays>
__device__ __forceinline__ void list_terms(const KernelArgs& a, const Arrays& arr, const Walker& w,
                                               uint32_t m, const PairTemp& pt, uint32_t at) {
    uint32_t q = w.r, pq;
    bool more = true;
    for (uint32_t t = 0; t < m && next_term(arr, w.i, w.qk, &q, &more, &pq); ++t) {
        pt.term[at + t] = pair_term(w.v, entry_value(a, arr, pq), arr.log.exp_diff(w.lr, arr.log.raw(q)));
        pt.cell[at + t] = static_cast<uint8_t>(payload_token(pq));
    }
}

// Adds terms [begin, end) of the list to their cells of `row`, in order. Each cell's next
// value is read one term ahead, before the current term's sum is stored (and replaced by that
// sum where both terms have the same cell), so the chain through shared memory does not
// wait on a load for every term: the adds' order, and so every bit, stays that of the
// plain loop.
__device__ __forceinline__ void add_terms(const PairTemp& pt, double* row, uint32_t begin, uint32_t end) {
    if (begin >= end) return;
    uint32_t cell = pt.cell[begin];
    double sum = row[cell];
    for (uint32_t t = begin; t < end; ++t) {
        const uint32_t next_cell = t + 1 < end ? pt.cell[t + 1] : cell;
        const double next_sum = row[next_cell];   // read before this term's store
        sum = pair_term_add(sum, pt.term[t]);
        row[cell] = sum;
        const bool same = next_cell == cell;
        cell = next_cell;
        sum = same ? sum : next_sum;
    }
}

template <class Arrays>
__device__ __forceinline__ void pair_sums(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                          char* temp_base, size_t temp_room, BlockScanTemp<uint32_t>& scan) {
    const int C = a.s.C;
    const int units = 2 * C;   // unit u: row u / 2 of a (u even) or of qk (u odd)
    const int per_wave = pair_wave_units(C, temp_room, static_cast<int>(blockDim.x));
    const PairTemp pt = bind_pair_temp(temp_base, temp_room, C);
    __shared__ uint32_t batch_end;
    __shared__ bool long_batch;
    float* out_a = a.out.a + k.c * C * C;
    float* out_qk = a.out.qk + k.c * C * C;
    __syncthreads();   // stage "records" has marked the walkers
    for (int u0 = 0; u0 < units; u0 += per_wave) {
        const int wave = min(per_wave, units - u0);
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) pt.rows[x] = 0.0;
        number_walkers(a, arr, u0, wave, pt.first);
        __syncthreads();
        const uint32_t total = pt.first[wave];
        for (uint32_t b0 = 0; b0 < total;) {
            // 1. Count, place, and cut the batch where the list is full.
            const uint32_t idx = b0 + threadIdx.x;
            Walker w{};
            int unit = 0;
            uint32_t m = 0;
            if (idx < total) {
                w = find_walker(a, arr, u0, wave, pt.first, idx, &unit);
                m = count_terms(arr, w, pt.capacity);
            }
            uint32_t incl[1] = {m};
            block_scan_begin(scan);
            block_scan_tile(incl, scan, Sum());
            const uint32_t at = incl[0] - m;
            const bool taken = idx < total && incl[0] <= pt.capacity;
            if (taken) pt.offset[threadIdx.x] = at;
            if (threadIdx.x == 0) long_batch = m > pt.capacity;
            const int count = __syncthreads_count(taken);
            if (long_batch) {   // uniform; walker b0 is thread 0's
                const Walker lw = find_walker(a, arr, u0, wave, pt.first, b0, &unit);
                long_walk(a, arr, lw, pt.rows + unit * C, pt, scan);
                b0 += 1;
                continue;
            }
            if (threadIdx.x == count - 1) pt.offset[count] = incl[0];
            // 2. The terms, in parallel.
            if (taken) list_terms(a, arr, w, m, pt, at);
            if (threadIdx.x == 0) batch_end = b0 + static_cast<uint32_t>(count);
            __syncthreads();
            // 3. Each unit's part of the list, in order.
            const uint32_t b1 = batch_end;
            for (int x = threadIdx.x; x < wave; x += blockDim.x) {
                const uint32_t lo = max(pt.first[x], b0), hi = min(pt.first[x + 1], b1);
                if (lo >= hi) continue;
                add_terms(pt, pt.rows + x * C, pt.offset[lo - b0], pt.offset[hi - b0]);
            }
            __syncthreads();
            b0 = b1;
        }
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) {
            const int xc = a.div.C.div(x);
            const int u = u0 + xc, j = x - xc * C;
            const int i = u >> 1;
            if (u & 1) {
                out_qk[i * C + j] = j <= i ? to_f32(pt.rows[x]) : 0.0f;
            } else {
                out_a[i * C + j] = j < i ? to_f32(pt.rows[x]) : 0.0f;
            }
        }
        __syncthreads();
    }
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_PAIRS_CUH
