// The backends this libsdmp1 was built with: the one place that knows whether the CUDA
// backend is in (SDM_P1_WITH_CUDA), what SDM_P1_BACKEND_AUTO resolves to, and which Backend a
// plan gets.
#ifndef SDM_P1_BACKEND_REGISTRY_H
#define SDM_P1_BACKEND_REGISTRY_H

#include <cstdint>
#include <memory>

#include "backend.h"
#include "options.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

// Whether the CUDA backend was built in.
bool cuda_built();

// The backend a descriptor's `requested` backend runs on: AUTO is CUDA where it is built and
// the machine has a device, else the CPU. Throws BACKEND_UNAVAILABLE for CUDA where it was
// not built, INVALID_ARGUMENT for a value that is no sdm_p1_backend.
sdm_p1_backend resolve_backend(int32_t requested);

// The backend of a plan with options `o` (o.backend resolved), before its prepare. A CUDA
// plan's device is resolved here (o.device: desc's, or the current one). Throws Error.
std::unique_ptr<Backend> make_backend(Options& o);

// Throws BACKEND_UNAVAILABLE, naming the C function `who`, where CUDA was not built.
void require_cuda(const char* who);

// Devices the CUDA backend can use (0 without a driver or device); require_cuda(who) first.
int32_t cuda_device_count(const char* who);

}   // namespace sdm_p1

#endif   // SDM_P1_BACKEND_REGISTRY_H
