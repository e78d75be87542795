// The kernel policy: which kernels a plan runs, chosen once at plan creation from the plan and
// the device (choose_policy, kernel_policy.cu), as one value: for each stage of an execute
// and of a backward, the instantiation (as kernels/instantiations.txt names it), its block,
// grid and shared memory and why it was chosen; the layouts the kernels read; where each
// part lies in the workspace. The launches (kernels/launch.h) switch on it and nothing else.
// Plain C++ (no CUDA headers): the host code and the policy's test include it.
#ifndef SDM_P1_KERNELS_POLICY_KERNEL_POLICY_H
#define SDM_P1_KERNELS_POLICY_KERNEL_POLICY_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "../backward/backward_args.h"
#include "../common/kernel_args.h"

namespace sdm_p1 {
namespace cuda {

// The plan, as the policy reads it.
struct PlanRequest {
    KernelShape shape;           // the sizes and options; its forms (group_counts, slots,
                                 // sorted_rows, shipped_fields) are the policy's to choose
    int64_t det_fields;          // the SDM_P1_DET_* bits requested (SDM_P1_UNSET resolved)
    size_t output_bytes;         // the requested outputs' bytes: the global scratch and the
                                 // spread slots stay proportionate to them
    bool backward;               // the plan runs sdm_p1_execute_backward too
    uint64_t spread_min_terms;   // a chunk's pair terms from which it is handed to the spread
                                 // kernel (kSpreadMinTerms, or SDMP1_SPREAD_TERMS's)
    int64_t spread_max_slots;    // at most this many spread slots (INT64_MAX, or
                                 // SDMP1_SPREAD_SLOTS's: tests run out of slots with it)
};

// What the policy reads of the device.
struct DeviceFacts {
    int sms;        // multiprocessors
    int cc_major;   // the compute capability's major version (9: programmatic dependent launch)
};

// A kernel's shared-memory limits on a device, once its dynamic limit is raised to the
// device's maximum.
struct SmemLimits {
    size_t limit;                // the most dynamic shared memory a block may have
    size_t per_sm;               // an SM's shared memory
    size_t per_block_overhead;   // a block's reserved and static shared memory
    // The most dynamic shared memory a block may have with `blocks` blocks an SM.
    size_t room(int blocks) const {
        const size_t share = per_sm / blocks - per_block_overhead;
        return (limit < share ? limit : share) / 16 * 16;
    }
};

// What the device says of, and does to, a compiled kernel (an instantiation, by its name in
// kernels/instantiations.txt). kernels/device_facts.cu asks CUDA; the policy's test models a
// device. Each returns a cudaError_t value (0: success).
class KernelFacts {
public:
    virtual ~KernelFacts() = default;
    // Raises the kernel's dynamic shared-memory limit to the device's maximum (every plan on
    // the device may then launch it with any amount up to that) and reports its limits.
    virtual int raise_smem_limit(const std::string& kernel, SmemLimits* out) = 0;
    // Sets the kernel's dynamic shared-memory limit to `bytes`.
    virtual int set_smem_limit(const std::string& kernel, size_t bytes) = 0;
    // The blocks of the kernel an SM holds at once with `threads` threads and `smem` bytes of
    // dynamic shared memory a block.
    virtual int blocks_per_sm(const std::string& kernel, int threads, size_t smem, int* blocks) = 0;
};

// One kernel a stage launches.
struct KernelChoice {
    std::string kernel;   // the instantiation, as kernels/instantiations.txt lists it; empty:
                          // the stage launches nothing
    std::string why;      // why it was chosen, or why the stage has none (SDMP1_LOG)
    int grid = 0;         // blocks (persistent: each loops over its chunks or units)
    int threads = 0;
    size_t smem_bytes = 0;           // dynamic shared memory a block
    const void* address = nullptr;   // the kernel's, found at plan creation (bind_kernels)
    bool launched() const { return !kernel.empty(); }
};

// An execute's kernels, in launch order: the lean kernel (where the plan has one), the
// general kernel (every chunk, or the chunks the lean kernel leaves), the wide-log kernel (the
// chunks the general kernel lists), the spread kernel on whole chunks then on split ones
// (where the plan has slots); each a
// programmatic dependent of the one before where the device has them.
struct ForwardKernels {
    KernelShape shape;   // the plan's, with the forms chosen
    KernelChoice lean, general, wide_log, spread, spread_split;
    // The lean kernel's scalar form (one id and one entry lane a thread at a time) beside a
    // vector one in `lean`, for the executes whose arrays are not 16-byte aligned (launch.cu);
    // not launched where `lean` is itself scalar (W or R not a multiple of 4) or none.
    KernelChoice lean_scalar;
    bool narrow_counts;           // the chunk's counts and positions in 16 bits (n < 2^16)
    bool on_chip;                 // the general kernel's core arrays in shared memory
    bool dependent_launch;        // programmatic dependent launches (sm_90 on)
    size_t smem_limit;            // the most dynamic shared memory the general kernel's layout may
                                  // take (the arrays that do not fit it go to global scratch)
    size_t scratch_per_block;     // bytes of global scratch a general block (0: none)
    ArrayLayout arrays;           // the general and wide-log kernels' chunk arrays
    LeanLayout lean_layout;       // lean.threads == 0: no lean kernel
    SpreadLayout spread_layout;   // capacity == 0: no spread slots
};

// A backward's kernels: the lean backward (payload given, a plan it serves), then the general
// backward on the chunks it leaves; or the general backward on every chunk, from the payload
// (general) or sorting each chunk again (payload NULL: general_sort). An execute's payload
// picks between them.
struct BackwardKernels {
    KernelChoice lean, general, general_sort;
    BackwardSlice layout;             // a general backward block's slice of the workspace
    LeanBackwardLayout lean_layout;   // threads == 0: no lean backward
    bool dependent_launch;            // the general backward as a programmatic dependent of the lean one
};

// Where each part of a plan's workspace lies (byte offsets; multiples of 256).
struct WorkspaceLayout {
    size_t status;           // DeviceStatus
    size_t chunk_value;      // uint64[N] bits of each chunk's first bad value
    size_t wide_chunks;      // uint64[N] the chunks left to the wide-log kernel
    size_t general_chunks;   // uint64[N] the chunks the lean kernel (or lean backward) left
    size_t payload_value;    // backward plans: uint64[N] each chunk's first bad payload word
    size_t scratch;          // the general blocks' global scratch, if any; a backward plan's
                             // general backward slices from the same offset
    size_t lean_slices;      // backward plans: the lean backward's slices, in the spread slots
                             // where they fit, else after the general backward's
    size_t spread_slots;     // the spread kernel's slots, if any
    size_t bytes;            // the whole workspace
    bool too_large;          // a size past PTRDIFF_MAX: the plan is refused
};

// A plan's kernels, chosen once.
struct KernelPolicy {
    ForwardKernels forward;
    bool backward;
    BackwardKernels backward_kernels;   // backward plans
    WorkspaceLayout workspace;
};

// Chooses a plan's kernels on a device (kernels/policy/README.md gives the rules). Returns a
// cudaError_t value (0: success) from the first of `kernels`' answers that failed, and then
// sets *in_backward where the backward's kernels asked it (the host's message names them).
int choose_policy(const PlanRequest& plan, const DeviceFacts& device, KernelFacts& kernels, KernelPolicy* policy,
                  bool* in_backward = nullptr);

// SDMP1_LOG's lines for a plan: what choose_policy chose, instantiation by instantiation, and
// why (kernels/policy/policy_log.cpp).
std::string policy_log(const PlanRequest& plan, const KernelPolicy& policy);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_POLICY_KERNEL_POLICY_H
