// The CUDA backend's host side: devices, plan preparation, the pointer checks and the launch
// of execute, and the device-side data check read back by sdm_p1_execute_status.
#ifndef SDM_P1_CUDA_BACKEND_H
#define SDM_P1_CUDA_BACKEND_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../kernels/launch.h"
#include "../../kernels/launch_graph.h"
#include "../backend.h"
#include "sdm/phase1.h"

namespace sdm_p1 {
namespace cuda {

// A plan's shape as the kernels read it: its sizes and options. Its forms (which fields,
// layouts and paths the kernels are compiled for) are the policy's to choose
// (kernels/policy/; tests/stage_dump/test_stage_dump_cuda.cu sets them itself).
KernelShape kernel_shape(const Options& o);

// Devices the backend can use; 0 (with the runtime's reason in *why) when there is no driver
// or no device. Never throws.
int device_count(std::string* why);

// Makes `device` current for its lifetime and restores the caller's current device after.
class DeviceGuard {
public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = -1;
    bool changed_ = false;
};

// The device the plan runs on: desc's, or the current one (SDM_P1_UNSET); throws
// BACKEND_UNAVAILABLE (no device, or none of the kernels' architectures runs on it) or
// INVALID_ARGUMENT (no such device).
int resolve_device(int requested);

// Throws INVALID_ARGUMENT unless p is device memory of `device`; the message names the call
// `who` and the field as `kind` followed by `name` (e.g. "inputs->", "k_idx"), built only on
// failure.
void require_device_pointer(const void* p, int device, const char* kind, const char* name,
                            const char* who = "sdm_p1_execute");

// The same check for the pointers of one execute, asking CUDA once per allocation: a pointer
// inside an allocation that an earlier pointer was found in (its address range) is device
// memory of the same device without another query, so outputs carved from one block cost one
// check. The query is one cuPointerGetAttributes of the driver (type, device and range
// together); a pointer it does not find to be device memory of the plan's device goes to
// require_device_pointer, which refuses it with its message (or accepts it, with the range from
// cuMemGetAddressRange). Nothing is kept between executes: memory freed since the last one may
// hold another device's or the host's memory at the same address now. The plan's device should
// be current.
class DevicePointerCheck {
public:
    explicit DevicePointerCheck(int device, const char* who = "sdm_p1_execute") : device_(device), who_(who) {}
    // Refuses p (Error, INVALID_ARGUMENT, naming `kind` `name`) unless it is memory of the
    // device: known(p), or else admit(p, ...).
    void require(const void* p, const char* kind, const char* name) {
        if (!known(p)) admit(p, kind, name);
    }
    // Whether p lies in a range already admitted or in device memory the driver reports (the
    // fast path: no name is needed, so a caller whose name costs something builds it after).
    bool known(const void* p);
    // The slow path: the runtime's attributes of p, refused unless of the device, its range
    // then remembered.
    void admit(const void* p, const char* kind, const char* name);

private:
    struct Range {
        uintptr_t begin, end;
    };
    int device_;
    const char* who_;
    Range ranges_[8] = {};
    int count_ = 0;
};

// A CUDA plan's backend: its device, the launch configuration and the kernels' arguments
// fixed at creation, and where their parts lie in the workspace.
class Backend final : public sdm_p1::Backend {
public:
    explicit Backend(int device) : device_(device) {}

    // Chooses the plan's kernels (kernels/launch.h: plan_kernels, the kernel policy), the
    // kernels' constant arguments and the workspace layout (`output_bytes` bounds the global
    // scratch), with the device current. Where the environment variable SDMP1_LOG is set (to
    // anything but "0"), lines on stderr: the plan's shape and the kernels it runs, stage by
    // stage, each instantiation and why the policy chose it (kernels/policy/policy_log.cpp),
    // for the benchmark and for whoever asks why a plan runs at the speed it does.
    // SDMP1_SPREAD_TERMS, where set to a decimal number, replaces the pair terms from which a
    // chunk's pair sums go to the spread kernel (kernels/spread/README.md; 0: every chunk on
    // the warp path; 18446744073709551615: none), for the tests and the benchmark: the bits
    // never depend on it. Nothing else reads the environment.
    void prepare(const Options& o, size_t output_bytes) override;
    size_t workspace_bytes() const override { return policy_.workspace.bytes; }
    size_t alignment() const override { return 256; }
    // cudaMalloc / cudaFree.
    sdm_p1_allocator default_allocator() const override;
    Block allocate(const sdm_p1_allocator& allocator, size_t bytes) const override;
    void release(Block& block) const noexcept override;

    // Checks that the inputs and the caller's output buffers are memory of the plan's
    // device, then enqueues the kernels on `stream` with the device current (replaying the
    // plan's graph where one serves: kernels/launch_graph.h).
    void execute(const Options& o, const InputRecord& in, void* workspace, void* stream) override;

    // Checks that the inputs, payload, upstream gradients and gradient buffers are memory of
    // the plan's device, then enqueues the backward's kernel (kernels/backward/) on `stream`
    // with the device current. Bad data are found on the device, as at execute.
    void execute_backward(const Options& o, const BackwardRecord& b, void* workspace, void* stream) override;

    // Reads the data check of the last execute or backward (the status says which ran): returns
    // normally when the data were good, else throws INVALID_INPUT with the CPU backend's
    // message, under the name of the call that ran.
    void check_status(const Options& o, void* workspace) const override;

private:
    int device_;
    KernelPolicy policy_{};   // the plan's kernels, their layouts and the workspace's parts
    KernelArgs args_{};       // every argument but the pointers of an execute
    LaunchGraphs graphs_;     // the launch sequences, captured at their second execute
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_CUDA_BACKEND_H
