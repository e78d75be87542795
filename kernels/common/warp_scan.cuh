// Warp scans, by shuffles: the inclusive sum of counts (the places of lanes' items in a list
// laid out lane by lane), and the inclusive scan of items of whole 32-bit words under an
// associative operator (block_scan.cuh's tiles). Every kernel's warp-level prefix sums are
// these (the lean backward's segmented scans of logs and adjoints aside).
#ifndef SDM_P1_KERNELS_COMMON_WARP_SCAN_CUH
#define SDM_P1_KERNELS_COMMON_WARP_SCAN_CUH

#include <cstdint>
#include <cstring>

namespace sdm_p1 {
namespace cuda {

// The sum of x over the warp's lanes 0 .. the calling one, `lane` (every lane calls it).
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T x, int lane) {
    static_assert(sizeof(T) == 4, "a count in one word");
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T lower = __shfl_up_sync(0xFFFFFFFFu, x, d);
        if (lane >= d) x += lower;
    }
    return x;
}

// A warp shuffle of an item of whole 32-bit words: `shuffle` moves each word.
template <typename T, typename Shuffle>
__device__ __forceinline__ T shuffle_words(const T& v, Shuffle shuffle) {
    constexpr int kWords = sizeof(T) / 4;
    static_assert(sizeof(T) % 4 == 0, "scan items are whole words");
    uint32_t w[kWords];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = shuffle(w[i]);
    T r;
    memcpy(&r, w, sizeof(T));
    return r;
}

template <typename T>
__device__ __forceinline__ T shfl_up(const T& v, int delta) {
    return shuffle_words(v, [delta](uint32_t x) { return __shfl_up_sync(0xFFFFFFFFu, x, delta); });
}

template <typename T>
__device__ __forceinline__ T shfl_from(const T& v, int lane) {
    return shuffle_words(v, [lane](uint32_t x) { return __shfl_sync(0xFFFFFFFFu, x, lane); });
}

// Inclusive scan of items within the warp (lane 0 first) under `op`.
template <typename T, typename Op>
__device__ __forceinline__ T warp_inclusive_scan(T x, Op op) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T lower = shfl_up(x, d);
        if (lane >= d) x = op(lower, x);
    }
    return x;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_COMMON_WARP_SCAN_CUH
