// The policy on a real device (launch.h: plan_kernels): the device's facts and its answers
// about the compiled kernels, from the CUDA runtime, and each chosen instantiation's address.
#include <cuda_runtime_api.h>

#include "kernel_table.h"
#include "launch.h"

namespace sdm_p1 {
namespace cuda {

namespace {

// KernelFacts from the CUDA runtime, the kernels found by name in kernel_table.h's list.
class CudaKernelFacts final : public KernelFacts {
public:
    explicit CudaKernelFacts(int device) : device_(device) {}

    int raise_smem_limit(const std::string& kernel, SmemLimits* out) override {
        const void* const f = kernel_address(kernel);
        if (f == nullptr) return cudaErrorInvalidDeviceFunction;
        int optin = 0, per_sm = 0, reserved = 0;
        cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device_);
        cudaFuncAttributes attr{};
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, f);
        if (e != cudaSuccess) return e;
        // Every plan on the device may then launch it with any amount up to the device's limit.
        out->limit = static_cast<size_t>(optin) - attr.sharedSizeBytes;
        out->per_sm = static_cast<size_t>(per_sm);
        out->per_block_overhead = static_cast<size_t>(reserved) + attr.sharedSizeBytes;
        return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(out->limit));
    }

    int set_smem_limit(const std::string& kernel, size_t bytes) override {
        const void* const f = kernel_address(kernel);
        if (f == nullptr) return cudaErrorInvalidDeviceFunction;
        return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    }

    int blocks_per_sm(const std::string& kernel, int threads, size_t smem, int* blocks) override {
        const void* const f = kernel_address(kernel);
        if (f == nullptr) return cudaErrorInvalidDeviceFunction;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, threads, smem, cudaOccupancyDefault);
    }

private:
    int device_;
};

// The chosen kernel's address; false where it names no listed instantiation.
bool bind(KernelChoice& c) {
    if (!c.launched()) return true;
    c.address = kernel_address(c.kernel);
    return c.address != nullptr;
}

}   // namespace

int plan_kernels(const PlanRequest& plan, int device, KernelPolicy* policy, bool* in_backward) {
    *in_backward = false;
    DeviceFacts d{};
    cudaError_t e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
    CudaKernelFacts facts(device);
    KernelPolicy k{};
    const int chosen = choose_policy(plan, d, facts, &k, in_backward);
    if (chosen != 0) return chosen;
    ForwardKernels& f = k.forward;
    BackwardKernels& b = k.backward_kernels;
    if (!bind(f.lean) || !bind(f.lean_scalar) || !bind(f.general) || !bind(f.wide_log) || !bind(f.spread) ||
        !bind(f.spread_split))
        return cudaErrorInvalidDeviceFunction;
    *in_backward = true;
    if (!bind(b.lean) || !bind(b.general) || !bind(b.general_sort)) return cudaErrorInvalidDeviceFunction;
    *in_backward = false;
    *policy = k;
    return cudaSuccess;
}

}   // namespace cuda
}   // namespace sdm_p1
