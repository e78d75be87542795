// Stage "sort": the chunk's sort keys (slot << entry_bits | entry, distinct) in ascending
// order. Each tile of keys (sort_tile_keys), which arrive in entry order, is sorted on chip
// by CUB's stable block radix sort on the slot bits alone (5 bits a pass), which orders it
// by the whole key; longer rows are completed by merge rounds in which every key finds its
// output place by a binary search in the other run (a thread's searches in lockstep).
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

// Searches run together in a merge round: a thread's kMergeBatch binary searches step in
// lockstep, so their loads (from global scratch where the keys are there) are in flight at
// once instead of one dependent load after another.
constexpr int kMergeBatch = 8;

// Moves keys [x0, x0 + Batch) of `search` (those below n) to their places in dst, the
// merge of their run pair [start, start + 2 * run). A key's place: its own rank in its run
// plus the keys of the other run below it (keys are distinct). The batch lies in one run
// (runs are whole tiles, a multiple of Batch), so its searches cover the same other run and
// halve it in the same steps: a branch-free lower bound whose length sequence is shared.
template <int Batch>
__device__ __forceinline__ void merge_batch(InterleavedKeys search, InterleavedKeys dst, int n, int run, int x0) {
    const int start = x0 / (2 * run) * (2 * run);
    const int len_a = min(run, n - start);
    const int len_b = max(0, min(run, n - start - len_a));
    const bool in_a = x0 - start < len_a;
    const int from = in_a ? start + len_a : start, len = in_a ? len_b : len_a;
    const int first_out = in_a ? x0 : x0 - len_a;
    uint64_t key[Batch];
    int below[Batch];   // keys of the other run below key[b], found in [below, below + m]
#pragma unroll
    for (int b = 0; b < Batch; ++b) {
        key[b] = x0 + b < n ? search[x0 + b] : 0u;
        below[b] = 0;
    }
    if (len > 0) {
        for (int m = len; m > 1;) {
            const int half = m / 2;
            uint64_t probe[Batch];
#pragma unroll
            for (int b = 0; b < Batch; ++b) probe[b] = search[from + below[b] + half];
#pragma unroll
            for (int b = 0; b < Batch; ++b) below[b] += probe[b] < key[b] ? half : 0;
            m -= half;
        }
        uint64_t probe[Batch];
#pragma unroll
        for (int b = 0; b < Batch; ++b) probe[b] = search[from + below[b]];
#pragma unroll
        for (int b = 0; b < Batch; ++b) below[b] += probe[b] < key[b] ? 1 : 0;
    }
#pragma unroll
    for (int b = 0; b < Batch; ++b) {
        if (x0 + b < n) dst[first_out + b + below[b]] = key[b];
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
// scratch, each round copies its input there and does its binary searches on chip.
template <int Threads>
__device__ __forceinline__ InterleavedKeys sort_entries(const KernelArgs& a, const Chunk& k,
                                                       InterleavedKeys keys, InterleavedKeys alt,
                                                       InterleavedKeys staged,
                                                       SortTemp<Threads>& temp) {
    constexpr int kItems = kSortTile / Threads;
    static_assert(kItems % kMergeBatch == 0 && kSortTile % kMergeBatch == 0,
                  "a thread's merge keys come in whole batches, each within one run");
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
        // Blocked order, as the tiles: at each step a warp's reads of src are contiguous.
        for (int base = 0; base < n; base += kSortTile) {
            for (int i0 = 0; i0 < kItems; i0 += kMergeBatch) {
                const int x0 = base + threadIdx.x * kItems + i0;
                if (x0 < n) merge_batch<kMergeBatch>(search, dst, n, run, x0);
            }
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
