#include "backend_registry.h"

#include "cpu/cpu_backend.h"
#include "errors.h"
#if defined(SDM_P1_WITH_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace sdm_p1 {

#if defined(SDM_P1_WITH_CUDA)

bool cuda_built() { return true; }

namespace {

int32_t usable_devices() { return cuda::device_count(nullptr); }

std::unique_ptr<Backend> make_cuda_backend(Options& o) {
    o.device = cuda::resolve_device(o.device);
    return std::make_unique<cuda::Backend>(o.device);
}

}   // namespace

#else

bool cuda_built() { return false; }

namespace {

int32_t usable_devices() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(Options&) {
    fail(SDM_P1_ERROR_INTERNAL, "a CUDA plan in a libsdmp1 built without the CUDA backend");
}

}   // namespace

#endif

void require_cuda(const char* who) {
    if (!cuda_built()) {
        fail(SDM_P1_ERROR_BACKEND_UNAVAILABLE, who, ": this libsdmp1 was built without the CUDA backend");
    }
}

int32_t cuda_device_count(const char* who) {
    require_cuda(who);
    return usable_devices();
}

sdm_p1_backend resolve_backend(int32_t requested) {
    switch (requested) {
        case SDM_P1_BACKEND_AUTO:
            return usable_devices() > 0 ? SDM_P1_BACKEND_CUDA : SDM_P1_BACKEND_CPU;
        case SDM_P1_BACKEND_CPU:
            return SDM_P1_BACKEND_CPU;
        case SDM_P1_BACKEND_CUDA:
            if (!cuda_built()) {
                fail(SDM_P1_ERROR_BACKEND_UNAVAILABLE,
                     "sdm_p1_desc.backend = SDM_P1_BACKEND_CUDA, but this libsdmp1 was built "
                     "without the CUDA backend (meson option cuda=disabled or no nvcc)");
            }
            return SDM_P1_BACKEND_CUDA;
    }
    fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.backend = ", requested, ": not an sdm_p1_backend");
}

std::unique_ptr<Backend> make_backend(Options& o) {
    if (o.backend == SDM_P1_BACKEND_CPU) return std::make_unique<cpu::Backend>(o.num_threads);
    return make_cuda_backend(o);
}

}   // namespace sdm_p1
