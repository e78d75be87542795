// The CUDA backend's host side: devices, plan preparation, the pointer checks and the launch
// of execute, and the device-side data check read back by sdm_p1_execute_status.
#ifndef SDM_P1_CUDA_BACKEND_H
#define SDM_P1_CUDA_BACKEND_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../kernels/launch.h"
#include "../options.h"
#include "../outputs.h"
#include "sdm/phase1.h"

namespace sdm_p1 {
namespace cuda {

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

// What a CUDA plan fixed at creation: its device, the kernel's launch configuration and
// where its parts lie in the workspace.
struct Prepared {
    LaunchConfig config{};
    size_t status_offset = 0;   // DeviceStatus
    size_t value_offset = 0;    // uint64[N] bits of each chunk's first bad value
    size_t wide_offset = 0;     // uint64[N] the chunks left to the wide-log kernel
    size_t general_offset = 0;  // uint64[N] the chunks the lean kernel left to the main kernel
    size_t scratch_offset = 0;  // global scratch of the blocks (config), if any
    size_t workspace_bytes = 0;
};

// The device the plan runs on: desc's, or the current one (SDM_P1_UNSET); throws
// BACKEND_UNAVAILABLE (no device, or none of the kernels' architectures runs on it) or
// INVALID_ARGUMENT (no such device).
int resolve_device(int requested);

// Chooses the launch configuration and the workspace layout; `output_bytes` bounds the
// global scratch. The plan's device must be current.
Prepared prepare(const Options& o, size_t output_bytes);

// Where the environment variable SDMP1_LOG is set (to anything but "0"), one line on
// stderr: the plan's shape and the kernels its launch configuration runs (lean or general
// first, blocks, threads, shared memory). For the benchmark and for whoever asks why a plan
// runs at the speed it does; nothing else reads the environment.
void log_plan(const Options& o, const Prepared& p);

// cudaMalloc / cudaFree.
sdm_p1_allocator default_allocator();

// Throws INVALID_ARGUMENT unless p is device memory of `device`; the message names the field
// as `kind` followed by `name` (e.g. "inputs->", "k_idx"), built only on failure.
void require_device_pointer(const void* p, int device, const char* kind, const char* name);

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
    explicit DevicePointerCheck(int device) : device_(device) {}
    void require(const void* p, const char* kind, const char* name);

private:
    struct Range {
        uintptr_t begin, end;
    };
    int device_;
    Range ranges_[8] = {};
    int count_ = 0;
};

// Enqueues the plan's work on `stream`; the plan's device must be current.
void execute(const Options& o, const Prepared& p, const sdm_p1_inputs& in,
             const OutputBuffers& out, void* workspace, void* stream);

// Reads the data check of the last execute (the caller has synchronized): returns normally
// when the data were good, else throws INVALID_INPUT with the CPU backend's message. Only
// for a plan executed at least once: before, the workspace holds no check.
void check_status(const Options& o, const Prepared& p, void* workspace);

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_CUDA_BACKEND_H
