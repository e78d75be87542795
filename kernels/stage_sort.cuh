// Stage "sort": the chunk's sort keys (slot << entry_bits | entry, distinct) in ascending
// order. Each tile of keys (sort_tile_keys), which arrive in entry order, is sorted on chip
// by CUB's stable block radix sort on the slot bits alone (5 bits a pass), which orders it
// by the whole key; longer rows are completed by merge rounds, each thread merging spans
// of consecutive outputs from the place a merge-path search finds in the two runs.
#ifndef SDM_P1_KERNELS_STAGE_SORT_CUH
#define SDM_P1_KERNELS_STAGE_SORT_CUH

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

// Keys a tile of the sort holds with keys of `key_bits` bits.
template <int Threads>
__device__ __forceinline__ int sort_tile_keys(int key_bits) {
    return key_bits <= 32 ? kSortItems32 * Threads : kSortTile;
}

// The stage temporaries of the sort (either width).
template <int Threads>
union SortTemp {
    typename BlockSort<Threads>::TempStorage wide;
    typename BlockSort32<Threads>::TempStorage narrow;
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

// A merge round writes each pair of runs' merge in spans of kMergeSpan consecutive outputs,
// a thread's span being one column of the interleaved layout (so a warp's stores at each
// step are 32 consecutive keys). The thread first finds where its span starts in each run
// by a merge-path search, then merges the span from the two runs' heads: one binary search
// a span instead of one a key (S6: 1.09x faster, bench/NOTES.md version 13).
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
// scratch, each round copies its input there and reads its runs there.
template <int Threads>
__device__ __forceinline__ InterleavedKeys sort_entries(const KernelArgs& a, const Chunk& k,
                                                       InterleavedKeys keys, InterleavedKeys alt,
                                                       InterleavedKeys staged,
                                                       SortTemp<Threads>& temp) {
    constexpr int kItems = kSortTile / Threads;
    static_assert(kSortTile % kMergeSpan == 0, "a merge span lies in one run pair");
    const int n = k.n;
    const int tile = sort_tile_keys<Threads>(a.key_bits);
    for (int base = 0; base < n; base += tile) {
        if (a.key_bits <= 32) {
            sort_tile<BlockSort32<Threads>, uint32_t, kSortItems32>(a, keys, base, n, temp.narrow);
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

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_STAGE_SORT_CUH
