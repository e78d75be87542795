#include "plan.h"

#include <cstdint>
#include <memory>

#include "backend_registry.h"
#include "checked_size.h"
#include "errors.h"
#include "input_checks.h"

namespace sdm_p1 {

namespace {

constexpr size_t kOutputAlign = 256;

// The plan's one block of outputs: each requested field at a multiple of kOutputAlign. Each
// input (ids of at most 8 bytes an entry) is smaller than the outputs together (log_k or
// log_q, rex or q_w, and the payload row), so this also bounds the inputs.
size_t output_block_bytes(const OutputViews& views) {
    size_t total = 0;
    for (const sdm_p1_tensor& v : views) {
        const size_t field = checked_align_up(v.bytes, kOutputAlign, "output '", v.name, "'");
        total = checked_add(total, field, "the outputs together (", v.name, " and the fields before it)");
    }
    return total;
}

}   // namespace

sdm_p1_plan* create_plan(const sdm_p1_desc* desc) {
    auto plan = std::make_unique<sdm_p1_plan>();
    plan->options = resolve_options(desc);
    Options& o = plan->options;
    plan->views = describe_outputs(o);
    const size_t output_bytes = output_block_bytes(plan->views);
    plan->backend = make_backend(o);
    Backend& backend = *plan->backend;
    backend.prepare(o, output_bytes);
    const size_t workspace_bytes = backend.workspace_bytes();
    if (workspace_bytes > kMaxBytes) too_large("the workspace");
    // The caller's allocator or the backend's default; the options keep it as given, which
    // is what sdm_p1_plan_desc reports.
    const sdm_p1_allocator allocator = o.allocator.alloc != nullptr ? o.allocator : backend.default_allocator();
    plan->workspace = backend.allocate(allocator, workspace_bytes);
    if (o.output_mode == SDM_P1_OUTPUTS_PLAN) {
        plan->outputs = backend.allocate(allocator, output_bytes);
        char* p = static_cast<char*>(plan->outputs.data());
        for (sdm_p1_tensor& v : plan->views) {
            if (!v.requested) continue;
            v.data = p;
            p += checked_align_up(v.bytes, kOutputAlign, "output '", v.name, "'");
        }
    }
    return plan.release();
}

void execute_plan(sdm_p1_plan& plan, const sdm_p1_inputs* caller_in, void* const* outputs, int32_t count,
                  void* stream) {
    const Options& o = plan.options;
    const InputNeeds needs{InputNeeds::kIds,
                           o.has(SDM_P1_DET_KSPA) ? "det_fields asks for kspa (SDM_P1_DET_KSPA)" : nullptr};
    InputRecord record = checked_inputs("sdm_p1_execute", o, caller_in, needs);

    // The output buffers, by field.
    if (count < 0 || count > SDM_P1_FIELD_COUNT || (outputs == nullptr && count != 0)) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: count = ", count, " must be in 0..SDM_P1_FIELD_COUNT (",
             SDM_P1_FIELD_COUNT, "), and 0 when outputs is NULL");
    }
    void* buffers[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor& v = plan.views[static_cast<size_t>(f)];
        if (!v.requested) continue;
        void* given = f < count ? outputs[f] : nullptr;
        buffers[f] = given != nullptr ? given : v.data;
        if (buffers[f] == nullptr) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: no buffer for output '", v.name, "' (", v.bytes,
                 " bytes): a plan in SDM_P1_OUTPUTS_CALLER mode needs one for every "
                 "requested field");
        }
        const size_t align = v.dtype == SDM_P1_DTYPE_INT8       ? 1
                             : v.dtype == SDM_P1_DTYPE_BFLOAT16 ? 2
                             : v.dtype == SDM_P1_DTYPE_INT64    ? 8
                                                                : 4;
        if (reinterpret_cast<uintptr_t>(buffers[f]) % align != 0u) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: the buffer of output '", v.name,
                 "' is not aligned to its element size (", align, " bytes)");
        }
        record.caller_outputs[f] = InputRecord::CallerOutput{given, v.name};
    }
    record.out = output_buffers(buffers);
    plan.backend->execute(o, record, plan.workspace.data(), stream);
    plan.executed = true;
}

void check_execute_status(sdm_p1_plan& plan) {
    // A plan never executed has nothing to report (the CPU reports in execute).
    if (!plan.executed) return;
    plan.backend->check_status(plan.options, plan.workspace.data());
}

}   // namespace sdm_p1

sdm_p1_plan::~sdm_p1_plan() {
    if (backend != nullptr) {
        backend->release(outputs);
        backend->release(workspace);
    }
}
