// What a plan asks of its backend. The CPU backend (src/cpu/) and the CUDA backend
// (src/cuda/) implement it; backend_registry.h creates them. plan.cpp validates what the
// caller gives and owns the memory; a backend fixes at creation what the plan's shape
// decides, and at execute only reads the InputRecord.
#ifndef SDM_P1_BACKEND_H
#define SDM_P1_BACKEND_H

#include <cstddef>

#include "backward_record.h"
#include "input_record.h"
#include "memory.h"
#include "options.h"
#include "outputs.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

class Backend {
public:
    virtual ~Backend() = default;

    // Fixes what the plan's shape decides (the CUDA launch configuration and kernel
    // constants, the workspace layout); `output_bytes` is the plan's outputs together.
    // Called once, before any other member. Throws Error.
    virtual void prepare(const Options& o, size_t output_bytes) = 0;

    // Bytes of workspace an execute needs (after prepare).
    virtual size_t workspace_bytes() const = 0;

    // The alignment the backend needs of every block of memory (the header documents it).
    virtual size_t alignment() const = 0;

    // The allocator a plan uses where the caller gives none.
    virtual sdm_p1_allocator default_allocator() const = 0;

    // A block of `bytes` from `allocator`, allocated in the backend's context (the CUDA
    // plan's device current). Throws Error.
    virtual Block allocate(const sdm_p1_allocator& allocator, size_t bytes) const = 0;

    // Frees `block` in the backend's context; never throws.
    virtual void release(Block& block) const noexcept = 0;

    // Runs (CPU) or enqueues on `stream` (CUDA) one execute of the checked record. Throws
    // Error: INVALID_ARGUMENT for memory the backend cannot use, INVALID_INPUT for bad data
    // (the CPU, which finds it during the execute).
    virtual void execute(const Options& o, const InputRecord& in, void* workspace, void* stream) = 0;

    // Runs (CPU) or enqueues on `stream` (CUDA) one backward of the checked record
    // (docs/backward.md). Throws Error: INVALID_INPUT for bad data, found before any gradient
    // is written (CPU; CUDA finds bad data on the device, for check_status); INVALID_ARGUMENT
    // for memory the backend cannot use (CUDA).
    virtual void execute_backward(const Options& o, const BackwardRecord& b, void* workspace, void* stream) = 0;

    // The data check of the last execute or backward (sdm_p1_execute_status), which the
    // caller has synchronized; only after at least one. Throws Error (INVALID_INPUT).
    virtual void check_status(const Options& o, void* workspace) const = 0;
};

}   // namespace sdm_p1

#endif   // SDM_P1_BACKEND_H
