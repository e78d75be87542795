// Lean stage "sort" (the twin of kernels/common/stage_sort.cuh and kernels/common/stage_decode.cuh, and of
// the CPU's sort_entries and decode in src/cpu/chunk_stages.h): a
// bucket sort of the chunk's valid keys on the top bits of their slot, its keys held in the
// threads' registers throughout. Each key's bucket is counted (its arrival among the bucket's
// keys comes back from the counter's atomic add), the counters are scanned into the buckets'
// starts, and every key goes to its bucket's start plus its arrival (scatter_keys); a bucket
// of one key holds an entry alone in its group, whose payload word is final at once. Each
// bucket of several keys is then put in order by one thread, and its runs of one slot
// settled: an entry alone gets its payload word, a group of several is listed for stage
// "groups" (order_buckets). The keys are distinct, so the order is the unique sorted order
// whatever order the atomics gave. A slot's entries share a bucket (its top bits), so groups
// never span buckets. Padding entries (tokens past the chunk's valid ones) sort last in entry
// order: the entry at sorted position e. A bucket of more than kLeanBucketLimit keys sends the
// chunk to the general kernel (sh.overflow).
#ifndef SDM_P1_KERNELS_LEAN_LEAN_SORT_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_SORT_CUH

#include "lean_load.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// The start of bucket b (b up to the bucket count, whose start is the valid entries' count).
__device__ __forceinline__ uint32_t bucket_start(const LeanArrays& arr, uint32_t b) {
    return (arr.starts[b >> 1] >> ((b & 1u) << 4)) & 0xFFFFu;
}

// Counts each valid key in its bucket (two 16-bit counters a word; the chunk's entries stay
// below 2^16) and keeps its place there.
__device__ __forceinline__ void count_buckets(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh,
                                              ThreadKeys& tk) {
    const int shift = a.lean.bucket_shift;
    bool over = false;
#pragma unroll
    for (int w = 0; w < kLeanKeysPerThread / 8; ++w) tk.rank[w] = 0u;
#pragma unroll
    for (int x = 0; x < kLeanKeysPerThread; ++x) {
        if (!(tk.valid >> x & 1u)) continue;
        const uint32_t b = tk.key[x] >> shift, half = (b & 1u) << 4;
        const uint32_t place = (atomicAdd(&arr.starts[b >> 1], 1u << half) >> half) & 0xFFFFu;
        over |= place >= static_cast<uint32_t>(kLeanBucketLimit);
        tk.rank[x >> 3] |= min(place, 15u) << ((x & 7) << 2);
    }
    if (over) sh.overflow = 1u;
}

// The counters become the buckets' starts, and the buckets of several keys are listed by
// size (two, three, more), so that stage "sort"'s last step gives every lane of a warp the
// same work. Thread i owns buckets 16 i .. 16 i + 15 (eight counter words).
__device__ __forceinline__ void scan_buckets(const LeanArrays& arr, LeanShared& sh, const uint32_t (&room)[3]) {
    static_assert(kLeanBucketsPerThread == 16, "eight counter words a thread, two 16-byte loads");
    uint4* const words = reinterpret_cast<uint4*>(arr.starts) + 2 * threadIdx.x;
    const uint4 lo = words[0], hi = words[1];
    uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint32_t sum = 0, two = 0, three = 0, more = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const uint32_t c = (w[i >> 1] >> ((i & 1) << 4)) & 0xFFFFu;
        sum += c;
        two += c == 2u ? 1u : 0u;
        three += c == 3u ? 1u : 0u;
        more += c >= 4u ? 1u : 0u;
    }
    uint32_t total;
    uint32_t start = block_exclusive_sum(sum, sh, &total);
    const uint32_t from2 = two != 0u ? atomicAdd(&sh.sized[0], two) : 0u;
    const uint32_t from3 = three != 0u ? atomicAdd(&sh.sized[1], three) : 0u;
    const uint32_t from4 = more != 0u ? atomicAdd(&sh.sized[2], more) : 0u;
    if (from2 + two > room[0] || from3 + three > room[1] || from4 + more > room[2]) {
        sh.overflow = 1u;   // the chunk goes to the general kernel: nothing listed reads these
    } else {
        uint16_t *at2 = arr.sized[0] + from2, *at3 = arr.sized[1] + from3, *at4 = arr.sized[2] + from4;
        const uint32_t b0 = 16u * threadIdx.x;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const uint32_t c = (w[i >> 1] >> ((i & 1) << 4)) & 0xFFFFu;
            const uint16_t b = static_cast<uint16_t>(b0 + i);
            if (c == 2u) *at2++ = b;
            if (c == 3u) *at3++ = b;
            if (c >= 4u) *at4++ = b;
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t c0 = w[i] & 0xFFFFu, c1 = w[i] >> 16;
        w[i] = start | (start + c0) << 16;
        start += c0 + c1;
    }
    words[0] = make_uint4(w[0], w[1], w[2], w[3]);
    words[1] = make_uint4(w[4], w[5], w[6], w[7]);
    if (threadIdx.x == 0) arr.starts[kLeanBucketsPerThread * blockDim.x / 2] = total;   // the end of the last bucket
}

// The payload word of an entry alone in its group at sorted position r (a head; a write is
// its group's last write), and its position by entry.
__device__ __forceinline__ void place_alone(const KernelArgs& a, const LeanArrays& arr, uint32_t r, uint32_t key) {
    const KeyEntry y = key_entry(a, key);
    arr.pay[r] = payload_word(y.t, y.lane, y.is_q, true) | kHead | (y.is_q ? 0u : kLastK);
    arr.info[y.e] = static_cast<uint16_t>(r);
}

// Every key to its bucket's start plus its arrival there. A bucket of one key holds an entry
// alone in its group: its payload word is final at once. Padding entries' payload words go to
// position e.
__device__ __forceinline__ void scatter_keys(const KernelArgs& a, const LeanArrays& arr, const ThreadKeys& tk) {
    const int shift = a.lean.bucket_shift;
#pragma unroll
    for (int x = 0; x < kLeanKeysPerThread; ++x) {
        const uint32_t key = tk.key[x];
        if (tk.valid >> x & 1u) {
            const uint32_t b = key >> shift;
            const uint32_t start = bucket_start(arr, b), r = start + ((tk.rank[x >> 3] >> ((x & 7) << 2)) & 15u);
            if (bucket_start(arr, b + 1u) - start == 1u) {
                place_alone(a, arr, r, key);
            } else {
                arr.pay[r] = key;
            }
        } else if (tk.present >> x & 1u) {
            arr.pay[key] = entry_payload(a, static_cast<int>(key), false) | kHead;
        }
    }
}

// A run of m keys of one slot from sorted position r (its first key `key`): alone, or a group
// listed for stage "groups" with its grouped-list indices (no room: the chunk goes to the
// general kernel).
__device__ __forceinline__ void settle_run(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh, uint32_t r,
                                           uint32_t key, uint32_t m) {
    if (m == 1u) {
        place_alone(a, arr, r, key);
        return;
    }
    const uint32_t first = atomicAdd(&sh.grouped, m);
    if (first + m > a.lean.max_grouped) {
        sh.overflow = 1u;
    } else {
        arr.glist[atomicAdd(&sh.groups, 1u)] = make_uint2(r | m << 16, first);
    }
}

// Every bucket of several keys in order, its runs of one slot settled: buckets of two and of
// three keys by straight-line compares (most of them), larger ones by an insertion sort of at
// most kLeanBucketLimit keys. A thread a bucket.
__device__ __forceinline__ void order_buckets(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh) {
    const int eb = a.entry_bits;
    for (uint32_t i = threadIdx.x; i < sh.sized[0]; i += blockDim.x) {
        const uint32_t r = bucket_start(arr, arr.sized[0][i]);
        const uint32_t x = arr.pay[r], y = arr.pay[r + 1u];
        const uint32_t k0 = min(x, y), k1 = max(x, y);
        if (k0 >> eb == k1 >> eb) {
            arr.pay[r] = k0;
            arr.pay[r + 1u] = k1;
            settle_run(a, arr, sh, r, k0, 2u);
        } else {
            place_alone(a, arr, r, k0);
            place_alone(a, arr, r + 1u, k1);
        }
    }
    for (uint32_t i = threadIdx.x; i < sh.sized[1]; i += blockDim.x) {
        const uint32_t r = bucket_start(arr, arr.sized[1][i]);
        const uint32_t x = arr.pay[r], y = arr.pay[r + 1u], z = arr.pay[r + 2u];
        const uint32_t k0 = min(min(x, y), z), k2 = max(max(x, y), z), k1 = x ^ y ^ z ^ k0 ^ k2;
        const bool same01 = k0 >> eb == k1 >> eb, same12 = k1 >> eb == k2 >> eb;
        arr.pay[r] = k0;   // the keys of runs of several stay for stage "groups"
        arr.pay[r + 1u] = k1;
        arr.pay[r + 2u] = k2;
        if (same01) {
            settle_run(a, arr, sh, r, k0, same12 ? 3u : 2u);
            if (!same12) place_alone(a, arr, r + 2u, k2);
        } else {
            place_alone(a, arr, r, k0);
            settle_run(a, arr, sh, r + 1u, k1, same12 ? 2u : 1u);
            if (!same12) place_alone(a, arr, r + 2u, k2);
        }
    }
    for (uint32_t i = threadIdx.x; i < sh.sized[2]; i += blockDim.x) {
        const uint32_t b = arr.sized[2][i];
        const uint32_t start = bucket_start(arr, b), end = bucket_start(arr, b + 1u);
        for (uint32_t x = start + 1u; x < end; ++x) {
            const uint32_t key = arr.pay[x];
            uint32_t y = x;
            for (; y > start && arr.pay[y - 1u] > key; --y) arr.pay[y] = arr.pay[y - 1u];
            arr.pay[y] = key;
        }
        for (uint32_t g0 = start; g0 < end;) {
            const uint32_t key = arr.pay[g0];
            uint32_t g1 = g0 + 1u;
            while (g1 < end && arr.pay[g1] >> eb == key >> eb) ++g1;
            settle_run(a, arr, sh, g0, key, g1 - g0);
            g0 = g1;
        }
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_SORT_CUH
