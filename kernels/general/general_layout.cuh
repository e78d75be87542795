// The general kernel's plan-time layout of a chunk's arrays (host code, read by the policy:
// kernels/policy/kernel_policy.cu), from the sizes of its stage temporaries.
#ifndef SDM_P1_KERNELS_GENERAL_GENERAL_LAYOUT_CUH
#define SDM_P1_KERNELS_GENERAL_GENERAL_LAYOUT_CUH

#include <cstddef>

#include "../common/chunk_context.cuh"
#include "../common/stage_sort.cuh"
#include "stage_pairs.cuh"

namespace sdm_p1 {
namespace cuda {

// Whether the chunk's counts and positions fit 16 bits (they run up to n = C * (W + R)). The
// layout and the kernel's Count type both follow this one rule.
inline bool narrow_counts(const KernelShape& s) { return s.C * (s.W + s.R) < 65536; }

// The layout of a chunk's arrays for blocks of `threads` (a full block per chunk, or a
// half-size one, two to an SM) with `smem_limit` bytes of shared memory a block. The sort's
// temporaries (SortTemp) share the stage room with the pair sums'.
inline ArrayLayout general_layout(const KernelShape& s, int threads, size_t smem_limit) {
    const int count_bytes = narrow_counts(s) ? 2 : 4;
    const size_t sort = threads == kMaxThreads ? sizeof(SortTemp<kMaxThreads>) : sizeof(SortTemp<kMaxThreads / 2>);
    return array_layout(s.C, s.W, s.R, s.gate_width, s.group_counts, s.slots, count_bytes, sort, pair_temp_bytes(),
                        smem_limit);
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_GENERAL_GENERAL_LAYOUT_CUH
