// Arrays laid out one after another, each at a 16-byte boundary (the 16-byte accesses of the
// kernels need no more): the plan-time layouts of a block's shared memory in
// kernels/lean/lean_layout.h and kernels/backward/lean/lean_backward_layout.h. Plain C++.
#ifndef SDM_P1_KERNELS_COMMON_SMEM_OFFSETS_H
#define SDM_P1_KERNELS_COMMON_SMEM_OFFSETS_H

#include <cstddef>
#include <cstdint>

namespace sdm_p1 {
namespace cuda {

inline size_t round_up16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// The bytes taken so far; take(bytes) gives the next array's offset and moves past it.
struct SmemOffsets {
    size_t end = 0;
    uint32_t take(size_t bytes) {
        const size_t offset = end;
        end += round_up16(bytes);
        return static_cast<uint32_t>(offset);
    }
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_COMMON_SMEM_OFFSETS_H
