// A kernel's shared-memory limits on a device (raise_smem_limit, kernels/phase1.cu), which the
// general and the lean kernels' configurations share.
#ifndef SDM_P1_KERNELS_SMEM_LIMITS_CUH
#define SDM_P1_KERNELS_SMEM_LIMITS_CUH

#include <cuda_runtime.h>

#include <cstddef>

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

using KernelFn = void (*)(KernelArgs);

// A kernel's shared-memory limits on a device, once its dynamic limit is raised to the
// device's maximum.
struct SmemLimits {
    size_t limit;                // the most dynamic shared memory a block may have
    size_t per_sm;               // an SM's shared memory
    size_t per_block_overhead;   // a block's reserved and static shared memory
    // The most dynamic shared memory a block may have with `blocks` blocks an SM.
    size_t room(int blocks) const;
};

// Raises `kernel`'s dynamic shared-memory limit to the device's maximum (so every plan on the
// device may launch it with any amount up to that) and reports its limits.
// Any kernel, by its function's address (the backward's kernels take other arguments).
cudaError_t raise_smem_limit(const void* kernel, int device, SmemLimits* out);
inline cudaError_t raise_smem_limit(KernelFn kernel, int device, SmemLimits* out) {
    return raise_smem_limit(reinterpret_cast<const void*>(kernel), device, out);
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_SMEM_LIMITS_CUH
