// sdm_p1_execute_backward's checks of what the caller gives (the plan's flag, the upstream
// gradients, the inputs, the payload, the input-gradient buffers) and its call of the backend.
#include <cstdint>
#include <string>
#include <type_traits>

#include "../canon/field_members.h"
#include "errors.h"
#include "input_checks.h"
#include "plan.h"
#include "versioned_struct.h"

namespace sdm_p1 {

namespace {

constexpr const char* kWho = "sdm_p1_execute_backward";

// The element bytes of field f's upstream gradient, or 0 where f is not differentiable.
size_t upstream_element_bytes(int f, const Options& o) {
    switch (upstream_of(f)) {
        case Upstream::kFloat32:
            return 4;
        case Upstream::kValueDtype:
            return o.bf16 ? 2 : 4;
        case Upstream::kNone:
            break;
    }
    return 0;
}

// "grads[19] (kspa)" for messages.
std::string grad_name(const sdm_p1_plan& plan, int f) {
    return upstream_label(f, plan.views[static_cast<size_t>(f)].name);
}

// The upstream gradients by field, each differentiable and aligned.
UpstreamGrads checked_upstream(const sdm_p1_plan& plan, const void* const* grads, int32_t count) {
    if (count < 0 || count > SDM_P1_FIELD_COUNT || (grads == nullptr && count != 0)) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, kWho, ": count = ", count, " must be in 0..SDM_P1_FIELD_COUNT (",
             SDM_P1_FIELD_COUNT, "), and 0 when grads is NULL");
    }
    const void* by_field[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < count; ++f) {
        const void* p = grads[f];
        if (p == nullptr) continue;
        const size_t bytes = upstream_element_bytes(f, plan.options);
        if (bytes == 0) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, kWho, ": ", grad_name(plan, f), ": the output is not differentiable");
        }
        require_pointer(kWho, "", grad_name(plan, f).c_str(), p, bytes);
        by_field[f] = p;
    }
    // One member a differentiable field (canon/field_sets.h), each set from its gradient.
    static_assert(sizeof(UpstreamGrads) == differentiable_count() * sizeof(const void*),
                  "UpstreamGrads and canon/field_sets.h name different fields");
    UpstreamGrads up{};
    for_each_upstream(
        up, [&](int f, auto& member) { member = static_cast<std::remove_reference_t<decltype(member)>>(by_field[f]); });
    return up;
}

// The input-gradient buffers, read by the struct-size rule; each given one aligned.
InputGradBuffers checked_grad_buffers(const Options& o, const sdm_p1_input_grads* caller) {
    if (caller == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, kWho, ": out is NULL");
    sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
    read_struct(caller, caller->struct_size, &out, kInputGradsLayout);
    if (out.reserved != 0) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, kWho, ": out->reserved = ", out.reserved, " must be 0");
    }
    const size_t value_bytes = o.grad_bf16 ? 2 : 4;
    if (out.k_val != nullptr) require_pointer(kWho, "out->", "k_val", out.k_val, value_bytes);
    if (out.q_val != nullptr) require_pointer(kWho, "out->", "q_val", out.q_val, value_bytes);
    if (out.g != nullptr) require_pointer(kWho, "out->", "g", out.g, 4);
    if (out.beta != nullptr) require_pointer(kWho, "out->", "beta", out.beta, 4);
    return InputGradBuffers{out.k_val, out.q_val, out.g, out.beta};
}

}   // namespace

void execute_backward_plan(sdm_p1_plan& plan, const sdm_p1_inputs* inputs, const int32_t* payload,
                           const void* const* grads, int32_t count, const sdm_p1_input_grads* out, void* stream) {
    const Options& o = plan.options;
    if (!o.backward) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, kWho,
             ": the plan was created without sdm_p1_desc.backward = 1, so it runs the forward only");
    }
    BackwardRecord b{};
    b.up = checked_upstream(plan, grads, count);
    const std::string kspa_reason = grad_name(plan, SDM_P1_FIELD_KSPA) + " is given";
    const InputNeeds needs{payload == nullptr ? InputNeeds::kIds : InputNeeds::kIdsIfGiven,
                           b.up.kspa != nullptr ? kspa_reason.c_str() : nullptr};
    b.in = checked_inputs(kWho, o, inputs, needs);
    if (payload != nullptr) require_pointer(kWho, "", "payload", payload, 4);
    b.payload = payload;
    b.grads = checked_grad_buffers(o, out);
    plan.backend->execute_backward(o, b, plan.workspace.data(), stream);
    plan.executed = true;   // CUDA: sdm_p1_execute_status reports this backward's data check
}

}   // namespace sdm_p1
