#include "plan.h"

#include <cstdint>
#include <memory>

#include "checked_size.h"
#include "cpu/cpu_backend.h"
#include "errors.h"
#include "versioned_struct.h"

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

#if !defined(SDM_P1_WITH_CUDA)
[[noreturn]] void no_cuda() {
    fail(SDM_P1_ERROR_BACKEND_UNAVAILABLE, "this libsdmp1 was built without the CUDA backend");
}
#endif

void require_input(const void* p, size_t align, const char* name) {
    if (p == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: inputs->", name, " is NULL");
    if (reinterpret_cast<uintptr_t>(p) % align != 0u) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: inputs->", name,
             " is not aligned to its element size (", align, " bytes)");
    }
}

#if defined(SDM_P1_WITH_CUDA)
// A CUDA plan's input pointers and caller output buffers must be memory of its device.
void require_device_memory(const sdm_p1_plan& plan, const sdm_p1_inputs& in, void* const* outputs,
                           int32_t count) {
    cuda::DevicePointerCheck check(plan.options.device);
    check.require(in.k_idx, "inputs->", "k_idx");
    check.require(in.q_idx, "inputs->", "q_idx");
    check.require(in.k_val, "inputs->", "k_val");
    check.require(in.q_val, "inputs->", "q_val");
    check.require(in.g, "inputs->", "g");
    if (plan.options.has(SDM_P1_DET_KSPA)) check.require(in.beta, "inputs->", "beta");
    if (in.stream_lengths != nullptr) check.require(in.stream_lengths, "inputs->", "stream_lengths");
    for (int f = 0; f < count; ++f) {
        const sdm_p1_tensor& v = plan.views[static_cast<size_t>(f)];
        if (v.requested && outputs[f] != nullptr) check.require(outputs[f], "the buffer of output ", v.name);
    }
}
#endif

}  // namespace

sdm_p1_plan* create_plan(const sdm_p1_desc* desc) {
    auto plan = std::make_unique<sdm_p1_plan>();
    plan->options = resolve_options(desc);
    Options& o = plan->options;
    plan->views = describe_outputs(o);
    const size_t output_bytes = output_block_bytes(plan->views);
    size_t workspace_bytes = 0;
    // The caller's allocator or the backend's default; the options keep it as given, which
    // is what sdm_p1_plan_desc reports.
    sdm_p1_allocator allocator = o.allocator;
    if (o.backend == SDM_P1_BACKEND_CPU) {
        if (allocator.alloc == nullptr) allocator = default_allocator(o.backend);
        workspace_bytes = cpu::workspace_bytes(o);
        plan->workers = std::make_unique<cpu::WorkerPool>(o.num_threads - 1);
    } else {
#if defined(SDM_P1_WITH_CUDA)
        o.device = cuda::resolve_device(o.device);
        if (allocator.alloc == nullptr) allocator = cuda::default_allocator();
#else
        no_cuda();
#endif
    }
#if defined(SDM_P1_WITH_CUDA)
    // The device stays current while the plan allocates and configures.
    std::unique_ptr<cuda::DeviceGuard> guard;
    if (o.backend == SDM_P1_BACKEND_CUDA) {
        guard = std::make_unique<cuda::DeviceGuard>(o.device);
        plan->cuda = cuda::prepare(o, output_bytes);
        workspace_bytes = plan->cuda.workspace_bytes;
        cuda::log_plan(o, plan->cuda);
    }
#endif
    if (workspace_bytes > kMaxBytes) too_large("the workspace");
    const size_t align = required_alignment(o.backend);
    plan->workspace = Block(allocator, workspace_bytes, align);
    if (o.output_mode == SDM_P1_OUTPUTS_PLAN) {
        plan->outputs = Block(allocator, output_bytes, align);
        char* p = static_cast<char*>(plan->outputs.data());
        for (sdm_p1_tensor& v : plan->views) {
            if (!v.requested) continue;
            v.data = p;
            p += checked_align_up(v.bytes, kOutputAlign, "output '", v.name, "'");
        }
    }
    return plan.release();
}

void execute_plan(sdm_p1_plan& plan, const sdm_p1_inputs* caller_in, void* const* outputs,
                  int32_t count, void* stream) {
    const Options& o = plan.options;
    if (caller_in == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: inputs is NULL");
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;   // the defaults of fields an older caller lacks
    read_struct(caller_in, caller_in->struct_size, &in, kInputsLayout);
    const size_t idx = o.idx64 ? 8 : 4, val = o.bf16 ? 2 : 4;
    require_input(in.k_idx, idx, "k_idx");
    require_input(in.q_idx, idx, "q_idx");
    require_input(in.k_val, val, "k_val");
    require_input(in.q_val, val, "q_val");
    require_input(in.g, 4, "g");
    if (o.has(SDM_P1_DET_KSPA)) {
        if (in.beta == nullptr) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT,
                 "sdm_p1_execute: det_fields asks for kspa (SDM_P1_DET_KSPA), which needs beta, but "
                 "inputs->beta is NULL");
        }
        require_input(in.beta, 4, "beta");
    }
    if (in.reserved != 0) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: inputs->reserved = ", in.reserved,
             " must be 0");
    }
    if (in.stream_lengths != nullptr) {
        const int32_t dt = in.stream_lengths_dtype;
        if (dt != SDM_P1_DTYPE_INT32 && dt != SDM_P1_DTYPE_INT64) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: inputs->stream_lengths_dtype = ", dt,
                 " must be SDM_P1_DTYPE_INT32 (", SDM_P1_DTYPE_INT32, ") or SDM_P1_DTYPE_INT64 (",
                 SDM_P1_DTYPE_INT64, ") when inputs->stream_lengths is set");
        }
        require_input(in.stream_lengths, dt == SDM_P1_DTYPE_INT64 ? 8 : 4, "stream_lengths");
    }

    // The output buffers, by field.
    if (count < 0 || count > SDM_P1_FIELD_COUNT || (outputs == nullptr && count != 0)) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: count = ", count,
             " must be in 0..SDM_P1_FIELD_COUNT (", SDM_P1_FIELD_COUNT, "), and 0 when outputs is NULL");
    }
    void* buffers[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor& v = plan.views[static_cast<size_t>(f)];
        if (!v.requested) continue;
        void* given = f < count ? outputs[f] : nullptr;
        buffers[f] = given != nullptr ? given : v.data;
        if (buffers[f] == nullptr) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: no buffer for output '", v.name,
                 "' (", v.bytes, " bytes): a plan in SDM_P1_OUTPUTS_CALLER mode needs one for every "
                 "requested field");
        }
        const size_t align = v.dtype == SDM_P1_DTYPE_INT8 ? 1 : v.dtype == SDM_P1_DTYPE_BFLOAT16 ? 2
                             : v.dtype == SDM_P1_DTYPE_INT64 ? 8 : 4;
        if (reinterpret_cast<uintptr_t>(buffers[f]) % align != 0u) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: the buffer of output '", v.name,
                 "' is not aligned to its element size (", align, " bytes)");
        }
    }
    if (o.backend == SDM_P1_BACKEND_CPU) {
        cpu::execute(o, in, output_buffers(buffers), plan.workspace.data(), *plan.workers);
        return;
    }
#if defined(SDM_P1_WITH_CUDA)
    const cuda::DeviceGuard guard(o.device);   // current for the checks' driver queries too
    require_device_memory(plan, in, outputs, count);
    cuda::execute(o, plan.cuda, in, output_buffers(buffers), plan.workspace.data(), stream);
    plan.executed = true;
#else
    (void)stream;
    no_cuda();
#endif
}

void check_execute_status(sdm_p1_plan& plan) {
    // The CPU reports in execute; a plan never executed has nothing to report.
    if (plan.options.backend != SDM_P1_BACKEND_CUDA || !plan.executed) return;
#if defined(SDM_P1_WITH_CUDA)
    const cuda::DeviceGuard guard(plan.options.device);
    cuda::check_status(plan.options, plan.cuda, plan.workspace.data());
#endif
}

}  // namespace sdm_p1

sdm_p1_plan::~sdm_p1_plan() {
#if defined(SDM_P1_WITH_CUDA)
    if (options.backend == SDM_P1_BACKEND_CUDA && (outputs.data() != nullptr || workspace.data() != nullptr)) {
        try {
            const sdm_p1::cuda::DeviceGuard guard(options.device);
            outputs = sdm_p1::Block();
            workspace = sdm_p1::Block();
        } catch (...) {
            // The device could not be made current: free on the current one (the default
            // allocator's cudaFree accepts any device's pointer).
        }
    }
#endif
}
