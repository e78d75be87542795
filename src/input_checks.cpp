#include "input_checks.h"

#include <cstdint>

#include "errors.h"
#include "versioned_struct.h"

namespace sdm_p1 {

void require_pointer(const char* who, const char* kind, const char* name, const void* p, size_t align) {
    if (p == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", kind, name, " is NULL");
    if (reinterpret_cast<uintptr_t>(p) % align != 0u) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", kind, name, " is not aligned to its element size (", align,
             " bytes)");
    }
}

InputRecord checked_inputs(const char* who, const Options& o, const sdm_p1_inputs* caller, const InputNeeds& needs) {
    if (caller == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": inputs is NULL");
    StructLayout layout = kInputsLayout;   // its messages name the calling function
    layout.function = who;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;   // the defaults of fields an older caller lacks
    read_struct(caller, caller->struct_size, &in, layout);
    const size_t idx = o.idx64 ? 8 : 4, val = o.bf16 ? 2 : 4;
    const bool ids = needs.ids == InputNeeds::kIds || in.k_idx != nullptr || in.q_idx != nullptr;
    if (needs.ids == InputNeeds::kIdsIfGiven && ids && (in.k_idx == nullptr || in.q_idx == nullptr)) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": inputs->", in.k_idx == nullptr ? "k_idx" : "q_idx",
             " is NULL but inputs->", in.k_idx == nullptr ? "q_idx" : "k_idx",
             " is not: with a payload, give both ids (the payload is checked against them) or neither");
    }
    if (ids) {
        require_pointer(who, "inputs->", "k_idx", in.k_idx, idx);
        require_pointer(who, "inputs->", "q_idx", in.q_idx, idx);
    }
    require_pointer(who, "inputs->", "k_val", in.k_val, val);
    require_pointer(who, "inputs->", "q_val", in.q_val, val);
    require_pointer(who, "inputs->", "g", in.g, 4);
    if (needs.beta_reason != nullptr) {
        if (in.beta == nullptr) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", needs.beta_reason,
                 ", which needs beta, but inputs->beta is NULL");
        }
        require_pointer(who, "inputs->", "beta", in.beta, 4);
    }
    if (in.reserved != 0) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": inputs->reserved = ", in.reserved, " must be 0");
    }
    if (in.stream_lengths != nullptr) {
        const int32_t dt = in.stream_lengths_dtype;
        if (dt != SDM_P1_DTYPE_INT32 && dt != SDM_P1_DTYPE_INT64) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": inputs->stream_lengths_dtype = ", dt,
                 " must be SDM_P1_DTYPE_INT32 (", SDM_P1_DTYPE_INT32, ") or SDM_P1_DTYPE_INT64 (", SDM_P1_DTYPE_INT64,
                 ") when inputs->stream_lengths is set");
        }
        require_pointer(who, "inputs->", "stream_lengths", in.stream_lengths, dt == SDM_P1_DTYPE_INT64 ? 8 : 4);
    }

    InputRecord record{};
    record.k_idx = ids ? in.k_idx : nullptr;
    record.q_idx = ids ? in.q_idx : nullptr;
    record.k_val = in.k_val;
    record.q_val = in.q_val;
    record.g = in.g;
    record.beta = needs.beta_reason != nullptr ? in.beta : nullptr;
    record.stream_lengths = in.stream_lengths;
    record.lengths64 = in.stream_lengths_dtype == SDM_P1_DTYPE_INT64;
    return record;
}

}   // namespace sdm_p1
