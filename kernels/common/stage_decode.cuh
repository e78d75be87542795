// Stage "decode" (CPU twin: decode in src/cpu/chunk_stages.h; lean: order_buckets in
// kernels/lean/lean_sort.cuh): from the sorted keys, every sorted position's payload word
// (with its group head bit) and, where the plan has records, its slot; and every entry's
// sorted position.
#ifndef SDM_P1_KERNELS_STAGE_DECODE_CUH
#define SDM_P1_KERNELS_STAGE_DECODE_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

// SortedRows: the kernel that writes the row fields in sorted order (write_records), which
// keeps the slots where the plan has records.
template <bool SortedRows, class Arrays>
__device__ __forceinline__ void decode(const KernelArgs& a, const Chunk& k, InterleavedKeys sorted, const Arrays& arr) {
    const KernelShape& s = a.s;
    const int W = s.W, WR = W + s.R;
    const uint64_t entry_mask = (uint64_t{1} << a.entry_bits) - 1u;
    uint32_t* const slots = SortedRows ? slot_array(a) : nullptr;
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint64_t key = sorted[r];
        const int e = static_cast<int>(key & entry_mask);
        const uint64_t slot = key >> a.entry_bits;
        const int t = a.div.WR.div(e), j = e - t * WR;
        const bool is_q = j >= W;
        const int lane = is_q ? j - W : j;
        const bool valid = t < k.t_valid;
        bool head = r == 0 || !valid;
        if (!head) {
            const uint64_t prev = sorted[r - 1];
            const int prev_t = a.div.WR.div(static_cast<uint32_t>(prev & entry_mask));
            head = prev_t >= k.t_valid || (prev >> a.entry_bits) != slot;
        }
        arr.payload[r] = payload_word(t, lane, is_q, valid) | (head ? kHead : 0u);
        arr.position[e] = static_cast<typename Arrays::Count>(r);
        if (slots) slots[r] = static_cast<uint32_t>(slot);
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_DECODE_CUH
