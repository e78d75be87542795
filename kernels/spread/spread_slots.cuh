// The spread path's plan-time sizes (host code, read by the policy:
// kernels/policy/kernel_policy.cu): where a chunk's arrays lie in its slot, and the spread
// kernel's shared memory.
#ifndef SDM_P1_KERNELS_SPREAD_SPREAD_SLOTS_CUH
#define SDM_P1_KERNELS_SPREAD_SPREAD_SLOTS_CUH

#include <cstddef>

#include "../common/chunk_context.cuh"
#include "../general/stage_pairs.cuh"
#include "spread_layout.h"

namespace sdm_p1 {
namespace cuda {

// The layout of a slot for a chunk whose arrays the general kernel places as `arrays` says,
// counts of 16 bits where narrow_counts; capacity, min_terms, grid and smem_bytes left 0.
inline SpreadLayout spread_slot_layout(const KernelShape& s, const ArrayLayout& arrays, bool narrow_counts) {
    SpreadLayout l{};
    const size_t count_bytes = narrow_counts ? 2 : 4;
    l.payload_bytes = arrays.payload.bytes;
    l.log_bytes = arrays.log_low.bytes;
    l.count_bytes = arrays.writes.bytes;
    l.write_row_bytes = align16(count_bytes * static_cast<size_t>(s.C) * s.W);
    l.position_bytes = arrays.position.bytes;
    l.value_bytes = arrays.value.bytes;
    l.runs_bytes = arrays.runs.bytes;
    l.facts_bytes = sizeof(SpreadWrite) * static_cast<size_t>(s.C) * s.W;
    size_t at = sizeof(SpreadHeader);
    const auto place = [&at](size_t bytes) {
        const size_t offset = at;
        at += align16(bytes);
        return offset;
    };
    l.payload = place(l.payload_bytes);
    l.log_low = place(l.log_bytes);
    l.writes = place(l.count_bytes);
    l.before = place(l.count_bytes);
    l.write_row = place(l.write_row_bytes);
    l.position = place(l.position_bytes);
    l.value = place(l.value_bytes);
    l.runs = place(l.runs_bytes);
    l.facts = place(l.facts_bytes);
    l.slot_bytes = (at + 255) / 256 * 256;
    return l;
}

// The spread kernel's dynamic shared memory: a double row of C cells a warp.
inline size_t spread_smem_bytes(int C) { return (kSpreadThreads / 32) * warp_room_bytes(C); }

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_SPREAD_SPREAD_SLOTS_CUH
