// Lean stage "sort" of the hot pass (the twin of lean_sort.cuh for chunks of hot or many
// groups, of the general kernel's kernels/stage_sort.cuh and stage_decode.cuh, and of the
// CPU's sort_entries and decode in src/cpu/chunk_stages.h): the chunk's valid keys in order by
// CUB's block radix sort of the whole key (slot << entry_bits | entry), whatever the sizes of
// its slots' groups, then the runs of one slot settled as lean_sort.cuh settles them: an
// entry alone gets its payload word, a group of several is listed for stage "groups" (and,
// past kLeanWarpGroup entries, listed again for a warp of its own). Padding entries sort last
// in entry order: the entry at sorted position e.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_HOT_SORT_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_HOT_SORT_CUH

#include <cub/block/block_radix_sort.cuh>

#include "lean_sort.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// 5 bits a pass: 6 passes for S7's 29 bits (16 slot, 12 entry and the padding bit above).
using HotSort = cub::BlockRadixSort<uint32_t, kLeanHotThreads, kLeanHotKeysPerThread, cub::NullType, 5>;

// A run of m keys of one slot from sorted position r (its first key `key`): alone, or a group
// listed (no room: the chunk goes to the general kernel).
__device__ __forceinline__ void settle_hot_run(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh, uint32_t r,
                                               uint32_t key, uint32_t m) {
    if (m == 1u) {
        place_alone(a, arr, r, key);
        return;
    }
    const uint32_t first = atomicAdd(&sh.grouped, m);
    if (first + m > a.lean_hot.max_grouped) {
        sh.overflow = 1u;
        return;
    }
    const uint2 d = make_uint2(r | m << 16, first);
    arr.glist[atomicAdd(&sh.groups, 1u)] = d;
    if (m > kLeanWarpGroup) arr.hbig[atomicAdd(&sh.hbig, 1u)] = d;
}

// The chunk's keys sorted into pay (valid ones at 0 .. valid entries - 1, padding ones at
// their entry), the run heads marked in kmask (free until stage "rows"), the runs settled.
__device__ __forceinline__ void hot_sort(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, LeanShared& sh,
                                         const ThreadKeys& tk) {
    const int bits = a.lean_hot.sort_bits, eb = a.entry_bits;
    const uint32_t valid = static_cast<uint32_t>(k.t_valid * (a.s.W + a.s.R));
    const uint32_t last = 1u << bits;   // above every valid key: the slots past the chunk's entries
    uint32_t keys[kLeanHotKeysPerThread];
#pragma unroll
    for (int x = 0; x < kLeanHotKeysPerThread; ++x) {
        keys[x] = tk.valid >> x & 1u ? tk.key[x] : last;
        if (!(tk.valid >> x & 1u) && (tk.present >> x & 1u)) {
            arr.pay[tk.key[x]] = entry_payload(a, static_cast<int>(tk.key[x]), false) | kHead;
        }
    }
    HotSort(*static_cast<typename HotSort::TempStorage*>(arr.hsort)).SortBlockedToStriped(keys, 0, bits + 1);
    // Thread i holds sorted positions i, i + 1024, ... (a warp: 32 consecutive ones each time).
    const uint32_t lane = threadIdx.x & 31u;
#pragma unroll
    for (int x = 0; x < kLeanHotKeysPerThread; ++x) {
        const uint32_t r = x * kLeanHotThreads + threadIdx.x;
        if (r < valid) arr.pay[r] = keys[x];
    }
    __syncthreads();
    bool head[kLeanHotKeysPerThread];
#pragma unroll
    for (int x = 0; x < kLeanHotKeysPerThread; ++x) {
        const uint32_t r = x * kLeanHotThreads + threadIdx.x;
        head[x] = r < valid && (r == 0u || arr.pay[r - 1u] >> eb != keys[x] >> eb);
        const uint32_t word = __ballot_sync(kFullWarp, head[x]);
        if (lane == 0u && r < valid) arr.kmask[r >> 5] = word;   // kmask has (n + 31) / 32 words
    }
    __syncthreads();
    const uint32_t words = (valid + 31u) >> 5;
#pragma unroll
    for (int x = 0; x < kLeanHotKeysPerThread; ++x) {
        if (!head[x]) continue;
        const uint32_t r = x * kLeanHotThreads + threadIdx.x;
        uint32_t w = (r + 1u) >> 5, end = valid;
        uint32_t next = w < words ? arr.kmask[w] & (~0u << ((r + 1u) & 31u)) : 0u;
        while (next == 0u && ++w < words) next = arr.kmask[w];
        if (next != 0u) end = min(valid, 32u * w + __ffs(next) - 1u);
        settle_hot_run(a, arr, sh, r, keys[x], end - r);
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_HOT_SORT_CUH
