// Stage "sort" (CPU twin: sort_entries in src/cpu/chunk_stages.h; lean:
// kernels/lean/lean_sort.cuh): the chunk's sort keys (slot << entry_bits | entry, distinct) in
// ascending order, by sorted position. Each tile of keys (sort_tile_keys), which arrive in entry order, is sorted on chip
// by a stable radix sort on the slot bits alone, which orders it by the whole key: CUB's
// block radix sort (5 bits a pass), or for 32-bit keys, where it takes fewer passes, 8 bits
// a pass ranked by CUB's match-based ranking (sort_tile32, in the shipped-fields kernels).
// Longer rows are completed by merge rounds, each thread merging spans of consecutive
// outputs from the place a merge-path search finds in the two runs.
#ifndef SDM_P1_KERNELS_STAGE_SORT_CUH
#define SDM_P1_KERNELS_STAGE_SORT_CUH

#include <cub/block/block_radix_rank.cuh>
#include <cub/block/block_radix_sort.cuh>

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// A tile of 64-bit keys is kSortTile keys whatever the block size, so chunks of up to 4096
// entries need no merge round in either kernel.
template <int Threads>
using BlockSort = cub::BlockRadixSort<uint64_t, Threads, kSortTile / Threads, cub::NullType, 5>;
// Keys of at most 32 significant bits (num_keys and n small enough, the usual case) are
// sorted as 32-bit words, 16 a thread: half the bytes through the sort's exchanges, and
// 8192-key tiles in the full-size block (no merge round up to 8192 entries) in the room of
// a 4096-key tile of 64-bit keys.
constexpr int kSortItems32 = 16;
template <int Threads>
using BlockSort32 = cub::BlockRadixSort<uint32_t, Threads, kSortItems32, cub::NullType, 5>;
// Or ranked 8 bits a pass by CUB's match-based ranking (a warp's keys of one digit found by
// one match instruction). A pass costs more than one of BlockSort32's, so it serves where it
// takes fewer passes: 2 for 16 slot bits where BlockSort32 takes 4 (measured on an H200: S1
// 1.1 %, S2 2.2 %, S3 2.1 % faster; at equal passes, S4's 10 bits, 2.7 % slower).
constexpr int kDigitBits32 = 8;
template <int Threads>
using BlockRank32 = cub::BlockRadixRankMatch<Threads, kDigitBits32, false>;
template <int Threads>
union Sort32Temp {
    typename BlockSort32<Threads>::TempStorage counted;
    typename BlockRank32<Threads>::TempStorage rank;
    uint32_t keys[kSortItems32 * Threads];   // a pass's keys in sorted order
};

// Whether 32-bit keys with `slot_bits` bits to sort on take the match-ranked sort.
__device__ __forceinline__ bool match_ranked(int slot_bits) {
    return (slot_bits + kDigitBits32 - 1) / kDigitBits32 < (slot_bits + 4) / 5;
}

// Keys a tile of the sort holds with keys of `key_bits` bits.
template <int Threads>
__device__ __forceinline__ int sort_tile_keys(int key_bits) {
    return key_bits <= 32 ? kSortItems32 * Threads : kSortTile;
}

// The stage temporaries of the sort (either width).
template <int Threads>
union SortTemp {
    typename BlockSort<Threads>::TempStorage wide;
    Sort32Temp<Threads> narrow;
};

// Sorts the tile of keys from `base` (Key: the width sorted on, Items a thread) in place.
template <typename Sort, typename Key, int Items>
__device__ __forceinline__ void sort_tile(const KernelArgs& a, InterleavedKeys keys, int base, int n,
                                          typename Sort::TempStorage& temp) {
    Key item[Items];
#pragma unroll
    for (int i = 0; i < Items; ++i) {
        const int r = base + threadIdx.x * Items + i;
        // Past the row: the largest key; the sort is stable, so these stay last.
        item[i] = r < n ? static_cast<Key>(keys[r]) : static_cast<Key>(~Key{0});
    }
    Sort(temp).Sort(item, a.entry_bits, a.key_bits);
#pragma unroll
    for (int i = 0; i < Items; ++i) {
        const int r = base + threadIdx.x * Items + i;
        if (r < n) keys[r] = item[i];
    }
}

// Sorts the tile of 32-bit keys from `base` in place (match_ranked: at least one pass):
// kSortItems32 a thread in warp-striped order (a warp's keys consecutive, its lanes'
// interleaved), the order in which the ranking is stable; each pass ranks them by one digit
// of the slot bits and places them by rank in temp.keys.
template <int Threads>
__device__ __forceinline__ void sort_tile32(const KernelArgs& a, InterleavedKeys keys, int base, int n,
                                            Sort32Temp<Threads>& temp) {
    constexpr int kItems = kSortItems32;
    const int warp_first = static_cast<int>(threadIdx.x & ~31u) * kItems;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    uint32_t item[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
        const int r = base + warp_first + i * 32 + lane;
        // Past the row: the largest key, which stays last (the ranking is stable).
        item[i] = r < n ? static_cast<uint32_t>(keys[r]) : ~0u;
    }
    for (int bit = a.entry_bits; bit < a.key_bits; bit += kDigitBits32) {
        int rank[kItems];
        const int bits = min(kDigitBits32, a.key_bits - bit);
        BlockRank32<Threads>(temp.rank).RankKeys(item, rank, cub::BFEDigitExtractor<uint32_t>(bit, bits));
        __syncthreads();   // the ranking's counters are read before temp.keys takes their bytes
#pragma unroll
        for (int i = 0; i < kItems; ++i) temp.keys[rank[i]] = item[i];
        __syncthreads();
        if (bit + kDigitBits32 < a.key_bits) {
#pragma unroll
            for (int i = 0; i < kItems; ++i) item[i] = temp.keys[warp_first + i * 32 + lane];
            __syncthreads();   // temp is the next pass's counters
        }
    }
    // Back to the chunk's row in striped order: a warp's stores are 32 consecutive positions.
    for (int i = threadIdx.x; i < kItems * Threads && base + i < n; i += Threads) keys[base + i] = temp.keys[i];
}

// A merge round writes each pair of runs' merge in spans of kMergeSpan consecutive outputs,
// a thread's span being one column of the interleaved layout (so a warp's stores at each
// step are 32 consecutive keys). The thread first finds where its span starts in each run
// by a merge-path search, then merges the span from the two runs' heads: one binary search
// a span instead of one a key (S6 0.222 -> 0.199 ms on an H200: docs/performance.md, sort).
constexpr int kMergeSpan = 8;
static_assert(kMergeSpan == kScanItems, "a span is one column of the interleaved layout");

// Merges span `span` (outputs span * kMergeSpan on, those below n) of the round whose runs
// are `run` keys long, from src into dst. A span lies in one run pair: pairs are whole
// tiles, a multiple of kMergeSpan keys.
__device__ __forceinline__ void merge_span(InterleavedKeys src, InterleavedKeys dst, int n, int run, int span) {
    const int out = span * kMergeSpan;
    const int start = out / (2 * run) * (2 * run), d = out - start;
    const int len_a = min(run, n - start), len_b = max(0, min(run, n - start - len_a));
    // i, the first run's keys among the pair's first d outputs: the least i whose key is
    // above the second run's key d - 1 - i (the keys are distinct), in [lo, hi].
    int lo = max(0, d - len_b), hi = min(d, len_a);
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (src[start + mid] < src[start + len_a + d - 1 - mid]) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    int i = lo, j = d - lo;   // the heads: i in the first run, j in the second
    uint64_t head_a = i < len_a ? src[start + i] : 0u, head_b = j < len_b ? src[start + len_a + j] : 0u;
#pragma unroll
    for (int step = 0; step < kMergeSpan; ++step) {
        if (out + step >= n) break;
        const bool take_a = i < len_a && (j >= len_b || head_a < head_b);
        dst[out + step] = take_a ? head_a : head_b;
        if (take_a) {
            if (++i < len_a) head_a = src[start + i];
        } else {
            if (++j < len_b) head_b = src[start + len_a + j];
        }
    }
}

// Copies the n keys of src to dst (same stride), a row of the interleaved layout at a time.
__device__ __forceinline__ void copy_keys(InterleavedKeys dst, InterleavedKeys src, int n) {
    for (int row = 0; row < 8; ++row) {
        for (int col = threadIdx.x; col * 8 + row < n; col += blockDim.x) {
            const size_t i = static_cast<size_t>(row) * src.stride + col;
            dst.base[i] = src.base[i];
        }
    }
}

// Sorts the n keys of `keys` (`alt` is the merge rounds' second buffer); returns the
// buffer that holds them sorted. `staged`, where not null, is room in shared memory for the
// keys (the sort's temporaries are dead in the merge rounds): with the key buffers in global
// scratch, each round copies its input there and reads its runs there. MatchRanked: the
// kernel carries the match-ranked sort (the shipped-fields kernels; in the others the second
// tile sort cost the shapes that do not take it up to 0.5 %, and S6 with every field, which
// takes it, 0.8 %).
template <int Threads, bool MatchRanked>
__device__ __forceinline__ InterleavedKeys sort_entries(const KernelArgs& a, const Chunk& k, InterleavedKeys keys,
                                                        InterleavedKeys alt, InterleavedKeys staged,
                                                        SortTemp<Threads>& temp) {
    constexpr int kItems = kSortTile / Threads;
    static_assert(kSortTile % kMergeSpan == 0, "a merge span lies in one run pair");
    const int n = k.n;
    const int tile = sort_tile_keys<Threads>(a.key_bits);
    for (int base = 0; base < n; base += tile) {
        if (a.key_bits <= 32) {
            if (MatchRanked && match_ranked(a.key_bits - a.entry_bits)) {
                sort_tile32<Threads>(a, keys, base, n, temp.narrow);
            } else {
                sort_tile<BlockSort32<Threads>, uint32_t, kSortItems32>(a, keys, base, n, temp.narrow.counted);
            }
        } else {
            sort_tile<BlockSort<Threads>, uint64_t, kItems>(a, keys, base, n, temp.wide);
        }
        __syncthreads();   // temp is reused by the next tile
    }
    InterleavedKeys src = keys, dst = alt;
    for (int run = tile; run < n; run *= 2) {
        InterleavedKeys search = src;
        if (staged) {
            copy_keys(staged, src, n);
            __syncthreads();
            search = staged;
        }
        for (int span = threadIdx.x; span * kMergeSpan < n; span += blockDim.x) {
            merge_span(search, dst, n, run, span);
        }
        __syncthreads();
        const InterleavedKeys t = src;
        src = dst;
        dst = t;
    }
    return src;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_SORT_CUH
