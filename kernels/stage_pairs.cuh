// Stage "pair sums": a and qk. A unit is a row i of a (the writes of token i) or of qk (its
// reads). Only walkers add terms: valid entries with an earlier entry in their slot group.
// A walker walks its group from the nearest earlier entry to the group's head and adds one
// term per write met (a: of another token than i). Each cell is a double sum in the
// canonical order of pair_term_add: the walkers of the unit in lane order, each one's terms
// in walk order.
//
// Three paths. A chunk with at most a walker a thread whose terms fit one list (distinct
// slots: most cells are 0) takes one batch without rows (one_batch_units): its walkers list
// their terms at once, and each unit's thread stores the cells that have terms. Else, where
// the chunk's walkers are many a unit, or the block path would need many waves, the warps
// take the units one at a time (pair_warp.cuh: no block barrier) and leave to the block the
// units with a walker of many terms (long groups). Otherwise the block path does every
// unit. It runs its units in waves whose double rows fit the shared buffer. In a wave the
// walkers (stage "records" marks them in per-unit lane masks) are numbered unit by unit,
// lane by lane, and handled in batches, one walker per thread:
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
#include "pair_warp.cuh"

namespace sdm_p1 {
namespace cuda {

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

// The warp path pays where walkers are many a unit (hot slots) or where the block path
// needs many waves: it has no block barrier, but a warp spends a unit's fixed costs on it
// however few its walkers. Measured on the H200 (ms, warp path against block path): S4, 24
// walkers a unit, 3.72 against 4.36; S1 with 4096 keys, 12 a unit, 2.63 against 2.60-2.63;
// S2, 2 a unit in 5 waves, 2.41 against 2.56; S1, 1 a unit in 3 waves, 2.07 against 1.95
// (bench/NOTES.md, version 9).
constexpr uint32_t kWarpPathWalkers = 16;   // walkers a unit, at least, for the warp path
constexpr int kWarpPathWaves = 4;           // or block-path waves, at least

// Bytes at the end of the stage room that keep the list of units the warps left (2 bytes a
// unit, for the largest C).
SDM_HD size_t long_list_bytes() { return align16(2 * 2 * static_cast<size_t>(kMaxC)); }

// The term list holds at least two terms a thread, the rows of a wave at least kPairBudget
// bytes.
constexpr size_t kPairBudget = 16 * 1024;
SDM_HD size_t min_terms(int threads) { return 2 * static_cast<size_t>(threads); }
// The row budget holds a warp's room of the warp path (warp_room_bytes) at the largest C.
static_assert(kPairBudget >= 8 * kMaxC + 4 * 32 * kWarpTerms + kWindow * (sizeof(PairTerm) + 1),
              "a warp's room fits the stage");

// Bytes of first and offset (sized for the largest wave and block).
SDM_HD size_t pair_index_bytes() { return 2 * align16(4 * static_cast<size_t>(kMaxThreads + 1)); }

// The least room the pair stage needs with `threads` a block: kPairBudget of rows, the
// index, the least list, the list of units left by the warps.
SDM_HD size_t pair_temp_bytes(int threads) {
    return kPairBudget + pair_index_bytes() + min_terms(threads) * (sizeof(PairTerm) + 1) + long_list_bytes();
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

// The pair stage's temporaries in `room` bytes at base, with `row_bytes` of rows.
__device__ __forceinline__ PairTemp bind_pair_temp(char* base, size_t room, size_t row_bytes) {
    char* const start = base;
    PairTemp p;
    p.rows = reinterpret_cast<double*>(base);
    base += align16(row_bytes);
    p.first = reinterpret_cast<uint32_t*>(base);
    p.offset = reinterpret_cast<uint32_t*>(base + pair_index_bytes() / 2);
    base += pair_index_bytes();
    p.capacity = static_cast<uint32_t>((room - static_cast<size_t>(base - start)) / (sizeof(PairTerm) + 1));
    p.term = reinterpret_cast<PairTerm*>(base);
    p.cell = reinterpret_cast<uint8_t*>(p.term + p.capacity);
    return p;
}

// The units the block path does: those of a list, or (null) every unit in order. `from`
// is the place of the wave's first unit.
struct UnitList {
    const uint16_t* list;
    __device__ int at(int from, int x) const { return list ? list[from + x] : from + x; }
};

// first[w] = walkers of the wave's units (those from `from`) before its unit w, for w in
// [0, wave]. One warp.
template <class Arrays>
__device__ __forceinline__ void number_walkers(const KernelArgs& a, const Arrays& arr, UnitList units, int from, int wave,
                                               uint32_t* first) {
    if (threadIdx.x >= 32) return;
    const int lane = static_cast<int>(threadIdx.x);
    uint32_t carry = 0;
    for (int b = 0; b <= wave; b += 32) {
        const int w = b + lane;
        uint32_t count = 0;
        if (w < wave) {
            int words;
            const uint32_t* m = unit_mask(a, arr, units.at(from, w), &words);
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

// Walker `idx` of the wave.
template <class Arrays>
__device__ __forceinline__ Walker find_walker(const KernelArgs& a, const Arrays& arr, UnitList units, int from, int wave,
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
    const int u = units.at(from, lo);
    int words;
    const uint32_t* m = unit_mask(a, arr, u, &words);
    const int lane = kth_lane(m, words, static_cast<int>(idx - first[lo]));
    *unit = lo;
    return unit_walker(a, arr, u >> 1, (u & 1) != 0, lane);
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

// `count` units of `units` by the whole block: in waves whose rows fit the stage room, in
// batches of walkers (above).
template <class Arrays>
__device__ __forceinline__ void block_units(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                            UnitList units, int count, char* temp_base,
                                            size_t temp_room, BlockScanTemp<uint32_t>& scan) {
    const int C = a.s.C;
    const int per_wave = pair_wave_units(C, temp_room, static_cast<int>(blockDim.x));
    const PairTemp pt = bind_pair_temp(temp_base, temp_room, 8 * static_cast<size_t>(C) * per_wave);
    __shared__ uint32_t batch_end;
    __shared__ bool long_batch;
    float* out_a = a.out.a + k.c * C * C;
    float* out_qk = a.out.qk + k.c * C * C;
    for (int u0 = 0; u0 < count; u0 += per_wave) {
        const int wave = min(per_wave, count - u0);
        for (int x = threadIdx.x; x < wave * C; x += blockDim.x) pt.rows[x] = 0.0;
        number_walkers(a, arr, units, u0, wave, pt.first);
        __syncthreads();
        const uint32_t total = pt.first[wave];
        for (uint32_t b0 = 0; b0 < total;) {
            // 1. Count, place, and cut the batch where the list is full.
            const uint32_t idx = b0 + threadIdx.x;
            Walker w{};
            int unit = 0;
            uint32_t m = 0;
            if (idx < total) {
                w = find_walker(a, arr, units, u0, wave, pt.first, idx, &unit);
                m = count_terms(arr, w, pt.capacity);
            }
            uint32_t incl[1] = {m};
            block_scan_begin(scan);
            block_scan_tile(incl, scan, Sum());
            const uint32_t at = incl[0] - m;
            const bool taken = idx < total && incl[0] <= pt.capacity;
            if (taken) pt.offset[threadIdx.x] = at;
            if (threadIdx.x == 0) long_batch = m > pt.capacity;
            const int taken_count = __syncthreads_count(taken);
            if (long_batch) {   // uniform; walker b0 is thread 0's
                const Walker lw = find_walker(a, arr, units, u0, wave, pt.first, b0, &unit);
                long_walk(a, arr, lw, pt.rows + unit * C, pt, scan);
                b0 += 1;
                continue;
            }
            if (threadIdx.x == taken_count - 1) pt.offset[taken_count] = incl[0];
            // 2. The terms, in parallel.
            if (taken) list_terms(a, arr, w, m, pt, at);
            if (threadIdx.x == 0) batch_end = b0 + static_cast<uint32_t>(taken_count);
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
            const int u = units.at(u0, xc), j = x - xc * C;
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

// Sets the n floats at p to 0 (16-byte stores where p and n allow).
__device__ __forceinline__ void zero_floats(float* p, int n) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0u && n % 4 == 0) {
        float4* const q = reinterpret_cast<float4*>(p);
        for (int x = threadIdx.x; x < n / 4; x += blockDim.x) q[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
        for (int x = threadIdx.x; x < n; x += blockDim.x) p[x] = 0.0f;
    }
}

// Every unit in one batch, without rows: for chunks with at most one walker a thread whose
// terms the list holds (few terms a unit: most cells of a and qk are 0). The rows of a and
// qk are set to 0; the walkers are numbered over all units, count, place and list their
// terms as in block_units; then the thread of each unit stores each cell that has terms:
// the sum of the cell's terms in list order from +0.0 (the canonical order of
// pair_term_add; a unit's terms are few, so the thread finds a cell's terms by going over
// the unit's part of the list). False, with only the zeros stored, where the terms overflow
// the list: the caller then takes another path, which stores every cell.
template <class Arrays>
__device__ __forceinline__ bool one_batch_units(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                                char* temp_base, size_t temp_room,
                                                BlockScanTemp<uint32_t>& scan) {
    const int C = a.s.C, units = 2 * C;
    const PairTemp pt = bind_pair_temp(temp_base, temp_room, 0);
    float* const out_a = a.out.a + k.c * C * C;
    float* const out_qk = a.out.qk + k.c * C * C;
    zero_floats(out_a, C * C);
    zero_floats(out_qk, C * C);
    const UnitList all{nullptr};
    number_walkers(a, arr, all, 0, units, pt.first);
    __syncthreads();
    const uint32_t walkers = pt.first[units];   // at most blockDim.x (the caller's test)
    Walker w{};
    int unit = 0;
    uint32_t m = 0;
    if (threadIdx.x < walkers) {
        w = find_walker(a, arr, all, 0, units, pt.first, threadIdx.x, &unit);
        m = count_terms(arr, w, pt.capacity);
    }
    uint32_t incl[1] = {m};
    block_scan_begin(scan);
    block_scan_tile(incl, scan, Sum());
    // offset[x]: the first term of walker x; offset[walkers]: the number of terms.
    pt.offset[threadIdx.x] = incl[0] - m;
    if (threadIdx.x == blockDim.x - 1) pt.offset[blockDim.x] = incl[0];
    if (m != 0u && incl[0] <= pt.capacity) list_terms(a, arr, w, m, pt, incl[0] - m);
    __syncthreads();
    if (pt.offset[walkers] > pt.capacity) {   // uniform
        __syncthreads();   // every thread has read the index before the next path takes the room
        return false;
    }
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        const uint32_t lo = pt.offset[pt.first[u]], hi = pt.offset[pt.first[u + 1]];
        float* const out = (u & 1 ? out_qk : out_a) + (u >> 1) * C;
        for (uint32_t t = lo; t < hi; ++t) {
            const uint8_t c = pt.cell[t];
            bool seen = false;   // an earlier term of the unit has this cell
            for (uint32_t x = lo; x < t && !seen; ++x) seen = pt.cell[x] == c;
            if (seen) continue;
            double sum = 0.0;
            for (uint32_t x = t; x < hi; ++x) {
                if (pt.cell[x] == c) sum = pair_term_add(sum, pt.term[x]);
            }
            out[c] = to_f32(sum);   // a term's cell is in the kept triangle: an earlier token
        }
    }
    return true;
}

// Stage "pair sums". A chunk with at most a walker a thread (and fewer than
// kWarpPathWalkers a unit) first tries one batch without rows (one_batch_units), which
// stores every cell unless its terms overflow the list. Else, where the chunk's walkers are
// many (kWarpPathWalkers a unit) or the block path would need many waves (kWarpPathWaves),
// the warps take the units one at a time (warp_unit) as far as the stage room holds their
// rows and windows, and the block then does the units with long walks; else the block does
// all.
template <class Arrays>
__device__ __forceinline__ void pair_sums(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                          const ChunkShared& sh, char* temp_base, size_t temp_room,
                                          BlockScanTemp<uint32_t>& scan) {
    const int C = a.s.C;
    const uint32_t units = 2 * static_cast<uint32_t>(C);   // unit u: row u / 2 of a (u even) or of qk (u odd)
    __shared__ uint32_t next_unit, long_count;
    if (threadIdx.x == 0) {
        next_unit = 0;
        long_count = 0;
    }
    __syncthreads();   // stage "records" has marked the walkers
    if (sh.walkers <= blockDim.x && sh.walkers < kWarpPathWalkers * units &&
        one_batch_units(a, k, arr, temp_base, temp_room, scan)) {
        return;
    }
    const int per_wave = pair_wave_units(C, temp_room, static_cast<int>(blockDim.x));
    const int block_waves = (static_cast<int>(units) + per_wave - 1) / per_wave;
    const bool by_warps = sh.walkers >= kWarpPathWalkers * units || block_waves >= kWarpPathWaves;
    const size_t room = by_warps ? temp_room - long_list_bytes() : temp_room;
    uint16_t* const long_units = by_warps ? reinterpret_cast<uint16_t*>(temp_base + room) : nullptr;
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31u);
    const size_t room_bytes = warp_room_bytes(C);
    if (by_warps && static_cast<size_t>(warp) < room / room_bytes) {
        const WarpRoom wr = bind_warp_room(temp_base + warp * room_bytes, C);
        for (int j = lane; j < C; j += 32) wr.row[j] = 0.0;
        __syncwarp();
        for (;;) {
            uint32_t u = 0;
            if (lane == 0) u = atomicAdd(&next_unit, 1u);
            u = __shfl_sync(kFullWarp, u, 0);
            if (u >= units) break;
            float* out_row = (u & 1u ? a.out.qk : a.out.a) + (k.c * C + (u >> 1)) * C;
            const bool done = warp_unit(a, arr, static_cast<int>(u), wr, out_row);
            if (!done && lane == 0) long_units[atomicAdd(&long_count, 1u)] = static_cast<uint16_t>(u);
        }
    }
    __syncthreads();
    // The order of the warps' leftovers varies from run to run; each unit's sums do not.
    const int count = by_warps ? static_cast<int>(long_count) : static_cast<int>(units);
    if (count != 0) block_units(a, k, arr, UnitList{long_units}, count, temp_base, room, scan);
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_PAIRS_CUH
