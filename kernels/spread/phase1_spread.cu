// The spread path's kernels (kernels/spread/README.md): the main kernels of plans with
// spread slots, which hand chunks over, and the spread kernel (by the chunk's count type);
// and its plan-time layout. A translation unit of its own, compiled in parallel with the
// others.
#include <cuda_runtime.h>

#include <algorithm>

#include "../general/phase1_kernel.cuh"
#include "spread_kernel.cuh"

namespace sdm_p1 {
namespace cuda {

KernelFn spread_kernel_for(bool narrow_counts) {
    return narrow_counts ? spread_kernel<uint16_t> : spread_kernel<uint32_t>;
}

KernelFn spread_main_kernel(const LaunchConfig& c) {
    return c.shipped_fields ? full_size_kernel_of<false, false, true, true>(c)
                            : full_size_kernel_of<false, false, false, true>(c);
}

int spread_configure(const KernelShape& s, const ArrayLayout& arrays, const LaunchConfig& c, size_t output_bytes,
                     int device, int sms, SpreadLayout* out) {
    *out = SpreadLayout{};
    // Full-size blocks, rows not in sorted order: the main kernels compiled with the path.
    if (c.threads != kMaxThreads || c.sorted_rows) return cudaSuccess;
    SpreadLayout l{};
    const bool narrow_counts = c.narrow_counts;
    const int main_grid = c.grid;
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
    l.min_terms = kSpreadMinTerms;
    // A slot for every chunk, in plans of at most two chunks a main block: with more, every SM
    // has chunks of its own to compute, and handing chunks over lost (S4 2.52 -> 2.66 ms, S7
    // 4.50 -> 4.72 with every chunk of the warp path handed over; kernels/spread/README.md).
    // Within twice the outputs' bytes (or kSpreadSlotsFloor): the workspace stays
    // proportionate to them.
    const size_t budget = std::max(2 * output_bytes, kSpreadSlotsFloor);
    const int64_t by_bytes = static_cast<int64_t>(budget / l.slot_bytes);
    l.capacity = s.N <= 2 * static_cast<int64_t>(main_grid) ? std::min<int64_t>(s.N, by_bytes) : 0;
    const KernelFn kernel = spread_kernel_for(narrow_counts);
    l.smem_bytes = (kSpreadThreads / 32) * warp_room_bytes(s.C);
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem_bytes));
    int per_sm = 0;
    if (e == cudaSuccess) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSpreadThreads, l.smem_bytes);
    }
    if (e != cudaSuccess) return e;
    l.grid = sms * std::max(per_sm, 1);
    if (l.capacity < 1) return cudaSuccess;   // no room for a slot: the main kernel sums every chunk
    // The main kernel with the path has the same static shared memory (ChunkShared holds its
    // scalars), so the layout holds; its limit is raised as the others' were.
    SmemLimits limits{};
    e = raise_smem_limit(spread_main_kernel(c), device, &limits);
    if (e != cudaSuccess) return e;
    if (limits.limit < c.smem_bytes) return cudaSuccess;
    *out = l;
    return cudaSuccess;
}

}   // namespace cuda
}   // namespace sdm_p1
