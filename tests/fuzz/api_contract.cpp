#include "api_contract.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fuzz {

namespace {

// The message prime_last_error() leaves; a failing call must replace it.
std::string g_primed;

bool documented(Call kind, bool cuda, sdm_p1_status s) {
    if (s == SDM_P1_ERROR_CUDA) return cuda && kind != Call::Destroy && kind != Call::DeviceCount;
    switch (kind) {
        case Call::Create:
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT || s == SDM_P1_ERROR_UNSUPPORTED ||
                   s == SDM_P1_ERROR_OUT_OF_MEMORY || s == SDM_P1_ERROR_BACKEND_UNAVAILABLE;
        case Call::Execute:
            // OUT_OF_MEMORY: host memory for the CPU backend's threads.
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT || s == SDM_P1_ERROR_INVALID_INPUT ||
                   s == SDM_P1_ERROR_OUT_OF_MEMORY;
        case Call::Backward:
            // As execute; the CUDA backend refuses the backward (not yet implemented).
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT || s == SDM_P1_ERROR_INVALID_INPUT ||
                   s == SDM_P1_ERROR_OUT_OF_MEMORY || (cuda && s == SDM_P1_ERROR_UNSUPPORTED);
        case Call::Query:
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT;
        case Call::ExecuteStatus:
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT || s == SDM_P1_ERROR_INVALID_INPUT;
        case Call::Destroy:
            return s == SDM_P1_SUCCESS;
        case Call::DeviceCount:
            return s == SDM_P1_SUCCESS || s == SDM_P1_ERROR_INVALID_ARGUMENT || s == SDM_P1_ERROR_BACKEND_UNAVAILABLE;
    }
    return false;
}

}   // namespace

void broken(const std::string& what) {
    std::fprintf(stderr, "\nBROKEN PROMISE: %s\n  last error: %s\n", what.c_str(), sdm_p1_last_error());
    std::abort();
}

void prime_last_error() {
    sdm_p1_cuda_device_count(nullptr);
    g_primed = sdm_p1_last_error();
}

void check_status(Call kind, const char* what, bool cuda, sdm_p1_status s) {
    if (!documented(kind, cuda, s)) {
        broken(std::string(what) + " returned " + sdm_p1_status_string(s) + " (" + std::to_string(s) +
               "), not a status the header documents for it");
    }
    if (std::strcmp(sdm_p1_status_string(s), "SDM_P1_UNKNOWN_STATUS") == 0) {
        broken(std::string(what) + ": sdm_p1_status_string has no name for " + std::to_string(s));
    }
    if (s == SDM_P1_SUCCESS) return;
    const char* message = sdm_p1_last_error();
    if (message == nullptr || message[0] == '\0') {
        broken(std::string(what) + " failed with " + sdm_p1_status_string(s) + " and an empty message");
    }
    if (g_primed == message && std::strcmp(what, "sdm_p1_cuda_device_count") != 0) {
        broken(std::string(what) + " failed with " + sdm_p1_status_string(s) + " but left the previous message");
    }
}

size_t dtype_size(int32_t dtype) {
    switch (dtype) {
        case SDM_P1_DTYPE_INT8:
            return 1;
        case SDM_P1_DTYPE_BFLOAT16:
            return 2;
        case SDM_P1_DTYPE_INT32:
        case SDM_P1_DTYPE_FLOAT32:
            return 4;
        case SDM_P1_DTYPE_INT64:
            return 8;
        default:
            return 0;
    }
}

void check_views(const sdm_p1_tensor* views, const sdm_p1_desc& resolved) {
    const bool plan_mode = resolved.output_mode == SDM_P1_OUTPUTS_PLAN;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor& v = views[f];
        const std::string where = "view " + std::to_string(f) + " (" + (v.name ? v.name : "NULL") + ")";
        if (v.name == nullptr || v.name[0] == '\0') broken(where + ": no name");
        if (!v.requested) {
            if (v.ndim != 0 || v.bytes != 0 || v.data != nullptr || v.shape[0] || v.shape[1] || v.shape[2]) {
                broken(where + ": not requested, but not empty");
            }
            continue;
        }
        const size_t element = dtype_size(v.dtype);
        if (element == 0 || v.ndim < 1 || v.ndim > 3) broken(where + ": bad dtype or ndim");
        size_t bytes = element;
        for (int i = 0; i < 3; ++i) {
            if (i < v.ndim ? v.shape[i] < 1 : v.shape[i] != 0) broken(where + ": bad dimension " + std::to_string(i));
            if (i < v.ndim && __builtin_mul_overflow(bytes, static_cast<size_t>(v.shape[i]), &bytes)) {
                broken(where + ": its shape's bytes overflow size_t, yet the plan was created");
            }
        }
        if (bytes != v.bytes || bytes > static_cast<size_t>(PTRDIFF_MAX)) {
            broken(where + ": bytes " + std::to_string(v.bytes) + ", its shape gives " + std::to_string(bytes));
        }
        const bool per_chunk = f != SDM_P1_FIELD_REPEATS;
        if (per_chunk ? v.shape[0] != resolved.N : (v.ndim != 1 || v.shape[0] != 1)) {
            broken(where + ": the first dimension is not N");
        }
        if (plan_mode ? (v.data == nullptr || reinterpret_cast<uintptr_t>(v.data) % 16 != 0) : v.data != nullptr) {
            broken(where + ": data " + (plan_mode ? "missing or misaligned in plan mode" : "set in caller mode"));
        }
    }
}

bool same_options(const sdm_p1_desc& a, const sdm_p1_desc& b, bool with_threads) {
    return a.N == b.N && a.C == b.C && a.W == b.W && a.R == b.R && a.num_parallel == b.num_parallel &&
           a.stream_offset == b.stream_offset && a.num_keys == b.num_keys && a.valid_last == b.valid_last &&
           a.index_dtype == b.index_dtype && a.value_dtype == b.value_dtype && a.gate_width == b.gate_width &&
           a.need_read_groups == b.need_read_groups && a.det_fields == b.det_fields && a.rec_tile == b.rec_tile &&
           a.backend == b.backend && a.device == b.device && a.output_mode == b.output_mode &&
           a.backward == b.backward && a.grad_dtype == b.grad_dtype &&
           (!with_threads || a.num_threads == b.num_threads);
}

bool same_views(const sdm_p1_tensor* a, const sdm_p1_tensor* b) {
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor &x = a[f], &y = b[f];
        if (std::strcmp(x.name, y.name) != 0 || x.dtype != y.dtype || x.requested != y.requested || x.ndim != y.ndim ||
            x.bytes != y.bytes || std::memcmp(x.shape, y.shape, sizeof x.shape) != 0) {
            return false;
        }
    }
    return true;
}

Outputs host_outputs(const sdm_p1_tensor* views, void* const* buffers) {
    Outputs out(SDM_P1_FIELD_COUNT);
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (!views[f].requested) continue;
        const void* data = buffers != nullptr && buffers[f] != nullptr ? buffers[f] : views[f].data;
        const auto* p = static_cast<const uint8_t*>(data);
        out[f].assign(p, p + views[f].bytes);
    }
    return out;
}

}   // namespace fuzz
