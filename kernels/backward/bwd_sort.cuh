// Stages "load and check", "sort" and "decode" of the backward without a payload: the
// forward's own stages (kernels/common/stage_load.cuh, stage_sort.cuh, stage_decode.cuh) on the
// block's slice, then the values gathered to sorted order. CPU twins: load_and_check,
// sort_entries and decode (src/cpu/chunk_stages.h), as backward_chunk calls them.
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_SORT_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_SORT_CUH

#include "../common/stage_decode.cuh"
#include "../common/stage_load.cuh"
#include "../common/stage_sort.cuh"
#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

__device__ __forceinline__ SortView sort_view(const Arrays& arr) {
    return SortView{arr.keys, arr.entry_value, arr.gate, nullptr, arr.walk_mask, arr.payload, arr.position};
}

// Stage "load and check" (the forward's): sort keys, values by entry, gates; the first bad id
// or gate in sh.error_code. Ends with a barrier, after which report_chunk_error may run.
__device__ __forceinline__ void load_ids(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh) {
    load_and_check(a, k, sort_view(arr), sh);
    __syncthreads();
}

// Stages "sort" and "decode" (the forward's), then each sorted position's value. Ends with a
// barrier.
__device__ __forceinline__ void sort_and_decode(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                                SortTemp<kThreads>& temp) {
    const InterleavedKeys none{nullptr, arr.keys.stride};
    const InterleavedKeys sorted = sort_entries<kThreads, false>(a, k, arr.keys, arr.keys_alt, none, temp);
    const SortView view = sort_view(arr);
    decode<false>(a, k, sorted, view);
    __syncthreads();
    const int W = a.s.W, WR = W + a.s.R;
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t p = arr.payload[r];
        const bool is_q = (p & kIsQ) != 0u;
        arr.value[r] = arr.entry_value[entry_of(W, WR, payload_token(p), static_cast<int>(p & kLaneMask), is_q)];
    }
    __syncthreads();
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_SORT_CUH
