// The C API boundary: every exported function. Nothing thrown inside crosses it: errors
// become status codes and the calling thread's last-error message.
#include <cstring>
#include <exception>
#include <new>

#include "backend_registry.h"
#include "cuda/architectures.h"
#include "errors.h"
#include "outputs.h"
#include "options.h"
#include "plan.h"
#include "versioned_struct.h"
#include "sdm/phase1.h"

namespace {

// "1.2.0" from the generated version macros.
#define SDM_P1_STRINGIFY_(x) #x
#define SDM_P1_STRINGIFY(x) SDM_P1_STRINGIFY_(x)
constexpr const char kVersionString[] = SDM_P1_STRINGIFY(SDM_P1_VERSION_MAJOR) "." SDM_P1_STRINGIFY(
    SDM_P1_VERSION_MINOR) "." SDM_P1_STRINGIFY(SDM_P1_VERSION_PATCH);

template <typename Body>
sdm_p1_status guarded(Body body) {
    try {
        body();
        return SDM_P1_SUCCESS;
    } catch (const sdm_p1::Error& e) {
        sdm_p1::set_last_error(e.what());
        return e.status();
    } catch (const std::bad_alloc&) {
        sdm_p1::set_last_error("out of host memory");
        return SDM_P1_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        sdm_p1::set_last_error(std::string("internal error: ") + e.what());
        return SDM_P1_ERROR_INTERNAL;
    } catch (...) {
        sdm_p1::set_last_error("internal error: unknown exception");
        return SDM_P1_ERROR_INTERNAL;
    }
}

void require_plan(const sdm_p1_plan* plan, const char* who) {
    if (plan == nullptr) sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": plan is NULL");
}

}   // namespace

extern "C" {

unsigned sdm_p1_version_number(void) { return SDM_P1_VERSION_NUMBER; }

const char* sdm_p1_version_string(void) { return kVersionString; }

const char* sdm_p1_status_string(sdm_p1_status status) {
    // A C caller may pass any int; C++ may not load an enum outside its values, so the value
    // is read as the int it is.
    static_assert(sizeof(sdm_p1_status) == sizeof(int), "the enum is passed as an int");
    int value = 0;
    std::memcpy(&value, &status, sizeof value);
    switch (value) {
        case SDM_P1_SUCCESS:
            return "SDM_P1_SUCCESS";
        case SDM_P1_ERROR_INVALID_ARGUMENT:
            return "SDM_P1_ERROR_INVALID_ARGUMENT";
        case SDM_P1_ERROR_UNSUPPORTED:
            return "SDM_P1_ERROR_UNSUPPORTED";
        case SDM_P1_ERROR_INVALID_INPUT:
            return "SDM_P1_ERROR_INVALID_INPUT";
        case SDM_P1_ERROR_OUT_OF_MEMORY:
            return "SDM_P1_ERROR_OUT_OF_MEMORY";
        case SDM_P1_ERROR_BACKEND_UNAVAILABLE:
            return "SDM_P1_ERROR_BACKEND_UNAVAILABLE";
        case SDM_P1_ERROR_CUDA:
            return "SDM_P1_ERROR_CUDA";
        case SDM_P1_ERROR_INTERNAL:
            return "SDM_P1_ERROR_INTERNAL";
    }
    return "SDM_P1_UNKNOWN_STATUS";
}

const char* sdm_p1_last_error(void) { return sdm_p1::last_error(); }

sdm_p1_status sdm_p1_plan_create(sdm_p1_plan** plan, const sdm_p1_desc* desc) {
    if (plan != nullptr) *plan = nullptr;
    return guarded([&] {
        if (plan == nullptr) {
            sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_plan_create: plan (the output) is NULL");
        }
        *plan = sdm_p1::create_plan(desc);
    });
}

sdm_p1_status sdm_p1_plan_destroy(sdm_p1_plan* plan) {
    return guarded([&] { delete plan; });
}

sdm_p1_status sdm_p1_plan_desc(const sdm_p1_plan* plan, sdm_p1_desc* desc) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_plan_desc");
        if (desc == nullptr) sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_plan_desc: desc is NULL");
        sdm_p1::report_options(plan->options, desc);
    });
}

sdm_p1_status sdm_p1_workspace_size(const sdm_p1_plan* plan, size_t* bytes) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_workspace_size");
        if (bytes == nullptr) sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_workspace_size: bytes is NULL");
        *bytes = plan->workspace.bytes();
    });
}

sdm_p1_status sdm_p1_outputs(const sdm_p1_plan* plan, sdm_p1_tensor* views, int32_t count) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_outputs");
        if (views == nullptr || count < 0) {
            sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_outputs: views is NULL or count < 0");
        }
        for (int32_t f = 0; f < count && f < SDM_P1_FIELD_COUNT; ++f) {
            views[f] = plan->views[static_cast<size_t>(f)];
        }
    });
}

sdm_p1_status sdm_p1_execute(sdm_p1_plan* plan, const sdm_p1_inputs* inputs, void* const* outputs, int32_t count,
                             void* stream) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_execute");
        sdm_p1::execute_plan(*plan, inputs, outputs, count, stream);
    });
}

sdm_p1_status sdm_p1_execute_backward(sdm_p1_plan* plan, const sdm_p1_inputs* inputs, const int32_t* payload,
                                      const void* const* grads, int32_t count, const sdm_p1_input_grads* out,
                                      void* stream) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_execute_backward");
        sdm_p1::execute_backward_plan(*plan, inputs, payload, grads, count, out, stream);
    });
}

sdm_p1_status sdm_p1_execute_status(sdm_p1_plan* plan) {
    return guarded([&] {
        require_plan(plan, "sdm_p1_execute_status");
        sdm_p1::check_execute_status(*plan);
    });
}

sdm_p1_status sdm_p1_cuda_device_count(int32_t* count) {
    return guarded([&] {
        if (count == nullptr) sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_cuda_device_count: count is NULL");
        *count = 0;
        *count = sdm_p1::cuda_device_count("sdm_p1_cuda_device_count");
    });
}

sdm_p1_status sdm_p1_cuda_architectures(const char** list) {
    return guarded([&] {
        if (list == nullptr) sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_cuda_architectures: list is NULL");
        *list = sdm_p1::cuda::built_architectures();   // "" without the CUDA backend
        sdm_p1::require_cuda("sdm_p1_cuda_architectures");
    });
}

sdm_p1_status sdm_p1_desc_init(sdm_p1_desc* desc, size_t struct_size) {
    return guarded([&] {
        const sdm_p1_desc defaults = SDM_P1_DESC_INITIALIZER;
        sdm_p1::init_struct("sdm_p1_desc_init", desc, struct_size, &defaults, sdm_p1::kDescLayout);
    });
}

sdm_p1_status sdm_p1_inputs_init(sdm_p1_inputs* inputs, size_t struct_size) {
    return guarded([&] {
        const sdm_p1_inputs defaults = SDM_P1_INPUTS_INITIALIZER;
        sdm_p1::init_struct("sdm_p1_inputs_init", inputs, struct_size, &defaults, sdm_p1::kInputsLayout);
    });
}

sdm_p1_status sdm_p1_input_grads_init(sdm_p1_input_grads* grads, size_t struct_size) {
    return guarded([&] {
        const sdm_p1_input_grads defaults = SDM_P1_INPUT_GRADS_INITIALIZER;
        sdm_p1::init_struct("sdm_p1_input_grads_init", grads, struct_size, &defaults, sdm_p1::kInputGradsLayout);
    });
}

sdm_p1_status sdm_p1_describe_outputs(const sdm_p1_desc* desc, sdm_p1_tensor* views, int32_t count) {
    return guarded([&] {
        if (views == nullptr || count < 0) {
            sdm_p1::fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_describe_outputs: views is NULL or count < 0");
        }
        const sdm_p1::OutputViews described = sdm_p1::describe_outputs(sdm_p1::resolve_options(desc));
        for (int32_t f = 0; f < count && f < SDM_P1_FIELD_COUNT; ++f) views[f] = described[static_cast<size_t>(f)];
    });
}

}   // extern "C"
