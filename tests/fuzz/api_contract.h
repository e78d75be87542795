// What the C API promises of every call, as the fuzz programs check it: a status the header
// documents for that call (never SDM_P1_ERROR_INTERNAL, which means a bug), a failure with a
// message of its own, and views consistent with their shapes. A broken promise aborts, which
// libFuzzer records as a crash with the input that caused it.
#ifndef SDM_P1_FUZZ_API_CONTRACT_H
#define SDM_P1_FUZZ_API_CONTRACT_H

#include <cstdint>
#include <string>
#include <vector>

#include "sdm/phase1.h"

namespace fuzz {

// Prints the broken promise and aborts.
[[noreturn]] void broken(const std::string& what);

// The kinds of call, by the statuses the header allows them.
enum class Call {
    Create,          // sdm_p1_plan_create
    Execute,         // sdm_p1_execute
    Backward,        // sdm_p1_execute_backward (CUDA: SDM_P1_ERROR_UNSUPPORTED until it is written)
    Query,           // sdm_p1_outputs, sdm_p1_plan_desc, sdm_p1_workspace_size
    ExecuteStatus,   // sdm_p1_execute_status
    Destroy,         // sdm_p1_plan_destroy
    DeviceCount,     // sdm_p1_cuda_device_count
};

// Runs `call` (returning an sdm_p1_status) after leaving a known message as the thread's last
// error, then checks its status is documented for `kind` (SDM_P1_ERROR_CUDA only when `cuda`)
// and that a failure left a non-empty message of its own. Returns the status.
template <typename Body>
sdm_p1_status checked(Call kind, const char* what, bool cuda, Body call);

// The parts of checked() that do not depend on the call.
void prime_last_error();
void check_status(Call kind, const char* what, bool cuda, sdm_p1_status s);

// Every view of a plan agrees with its shape: bytes = elements * element size (no overflow),
// dimensions of a requested field positive and the others 0, an unrequested field empty,
// data set in SDM_P1_OUTPUTS_PLAN mode and NULL in SDM_P1_OUTPUTS_CALLER mode; N leads every
// per-chunk field.
void check_views(const sdm_p1_tensor* views, const sdm_p1_desc& resolved);

// The resolved descriptors of two plans of the same request agree field by field (the
// allocator aside); num_threads too when `with_threads`.
bool same_options(const sdm_p1_desc& a, const sdm_p1_desc& b, bool with_threads);

// The views of two plans of the same request agree (names, dtypes, shapes, bytes).
bool same_views(const sdm_p1_tensor* a, const sdm_p1_tensor* b);

// Every requested output's bytes, by field, from host memory (`buffers[f]`, or the view's
// data where that is NULL).
using Outputs = std::vector<std::vector<uint8_t>>;
Outputs host_outputs(const sdm_p1_tensor* views, void* const* buffers);

// The element size of a dtype.
size_t dtype_size(int32_t dtype);

template <typename Body>
sdm_p1_status checked(Call kind, const char* what, bool cuda, Body call) {
    prime_last_error();
    const sdm_p1_status s = call();
    check_status(kind, what, cuda, s);
    return s;
}

}   // namespace fuzz

#endif   // SDM_P1_FUZZ_API_CONTRACT_H
