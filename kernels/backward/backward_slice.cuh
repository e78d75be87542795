// The layout of a general backward block's slice of the workspace (host code, read by the
// policy: kernels/policy/kernel_policy.cu).
#ifndef SDM_P1_KERNELS_BACKWARD_BACKWARD_SLICE_CUH
#define SDM_P1_KERNELS_BACKWARD_BACKWARD_SLICE_CUH

#include <cstddef>

#include "../common/chunk_context.cuh"
#include "backward_args.h"

namespace sdm_p1 {
namespace cuda {

// Arrays of a slice at multiples of 128 bytes.
inline size_t slice_take(size_t& at, size_t bytes) {
    const size_t offset = at;
    at += (bytes + 127) / 128 * 128;
    return offset;
}

// Where each array lies in a block's slice for chunks of shape s.
inline BackwardSlice backward_slice(const KernelShape& s) {
    const size_t n = static_cast<size_t>(s.C) * (s.W + s.R), nw = static_cast<size_t>(s.C) * s.W;
    const size_t keys = 8 * static_cast<size_t>(interleave_stride(static_cast<int>(n)));
    BackwardSlice l{};
    size_t at = 0;
    l.payload = slice_take(at, 4 * n);
    l.value = slice_take(at, 4 * n);
    l.position = slice_take(at, 4 * n);
    l.log = slice_take(at, sizeof(Fix) * n);
    l.rex = slice_take(at, sizeof(Fix) * n);
    l.writes_before = slice_take(at, 4 * n);
    l.own_writes = slice_take(at, 4 * n);
    l.head = slice_take(at, 4 * n);
    l.write_row = slice_take(at, 4 * nw);
    l.gate = slice_take(at, sizeof(Fix) * s.C * s.gate_width);
    l.rho = slice_take(at, 8 * n);
    l.gamma = slice_take(at, 8 * n);
    l.e_log = slice_take(at, 8 * n);
    l.gbar = slice_take(at, 8 * n);
    l.rbar_before = slice_take(at, 8 * n);
    l.xbar = slice_take(at, 8 * nw);
    l.keys = slice_take(at, 8 * keys);
    l.keys_alt = slice_take(at, 8 * keys);
    l.entry_value = slice_take(at, 4 * n);
    l.walk_mask = slice_take(at, 4 * static_cast<size_t>(s.C) * (mask_words(s.W) + mask_words(s.R)));
    l.bytes = (at + 255) / 256 * 256;
    return l;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BACKWARD_SLICE_CUH
