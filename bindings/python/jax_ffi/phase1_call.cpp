#include "phase1_call.h"

#include <mutex>
#include <sstream>
#include <string>

#include "../../../canon/field_sets.h"   // the library's field sets, header-only
#include "plan_cache.h"

namespace sdmp1_jax {

namespace {

ffi::ErrorCode code_of(sdm_p1_status status) {
    switch (status) {
        case SDM_P1_ERROR_INVALID_ARGUMENT:
        case SDM_P1_ERROR_INVALID_INPUT:
            return ffi::ErrorCode::kInvalidArgument;
        case SDM_P1_ERROR_UNSUPPORTED:
            return ffi::ErrorCode::kUnimplemented;
        case SDM_P1_ERROR_OUT_OF_MEMORY:
            return ffi::ErrorCode::kResourceExhausted;
        case SDM_P1_ERROR_BACKEND_UNAVAILABLE:
            return ffi::ErrorCode::kUnavailable;
        default:
            return ffi::ErrorCode::kInternal;
    }
}

// The failed library call's error, worded as the Python package's Phase1Error ("status:
// function: message"); read on the thread of the call, whose last error it is.
ffi::Error library_error(const char* function, sdm_p1_status status) {
    const std::string message = sdm_p1_last_error();
    std::string text = std::string(sdm_p1_status_string(status)) + ": ";
    if (message.compare(0, std::char_traits<char>::length(function), function) != 0)
        text += std::string(function) + ": ";
    return ffi::Error(code_of(status), text + message);
}

// A buffer that does not fit the call; the Python wrapper checks the same before it calls, so
// this is reached only by a custom call made another way.
template <typename... Parts>
ffi::Error invalid(const Parts&... parts) {
    std::ostringstream os;
    os << "sdm_phase1 custom call: ";
    (os << ... << parts);
    return ffi::Error::InvalidArgument(os.str());
}

std::string dims_text(const ffi::AnyBuffer& b) {
    std::ostringstream os;
    os << "(";
    const auto dims = b.dimensions();
    for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
    os << ")";
    return os.str();
}

// A shape of rank 1 to 3.
struct Dims {
    size_t rank;
    int64_t d[3];
};

bool has_dims(const ffi::AnyBuffer& b, const Dims& want) {
    const auto dims = b.dimensions();
    if (dims.size() != want.rank) return false;
    for (size_t i = 0; i < want.rank; ++i)
        if (dims[i] != want.d[i]) return false;
    return true;
}

ffi::DataType ffi_dtype(int32_t dtype) {
    switch (dtype) {
        case SDM_P1_DTYPE_INT8:
            return ffi::DataType::S8;
        case SDM_P1_DTYPE_INT32:
            return ffi::DataType::S32;
        case SDM_P1_DTYPE_INT64:
            return ffi::DataType::S64;
        case SDM_P1_DTYPE_FLOAT32:
            return ffi::DataType::F32;
        case SDM_P1_DTYPE_BFLOAT16:
            return ffi::DataType::BF16;
        default:
            return ffi::DataType::INVALID;
    }
}

// The plan's shapes and dtypes from the five main operands.
ffi::Error describe_inputs(const ffi::AnyBuffer& k_idx, const ffi::AnyBuffer& q_idx, const ffi::AnyBuffer& k_val,
                           const ffi::AnyBuffer& q_val, const ffi::AnyBuffer& g, sdm_p1_desc* desc) {
    if (k_idx.dimensions().size() != 3) return invalid("k_idx must be [N, C, W], got ", dims_text(k_idx));
    const int64_t N = k_idx.dimensions()[0], C = k_idx.dimensions()[1], W = k_idx.dimensions()[2];
    if (q_idx.dimensions().size() != 3 || q_idx.dimensions()[0] != N || q_idx.dimensions()[1] != C)
        return invalid("q_idx must be [N, C, R] with k_idx's N and C, got ", dims_text(q_idx));
    const int64_t R = q_idx.dimensions()[2];
    if (!has_dims(k_val, {3, {N, C, W}})) return invalid("k_val must have k_idx's shape, got ", dims_text(k_val));
    if (!has_dims(q_val, {3, {N, C, R}})) return invalid("q_val must have q_idx's shape, got ", dims_text(q_val));
    if (g.dimensions().size() != 3 || g.dimensions()[0] != N || g.dimensions()[1] != C)
        return invalid("g must be [N, C, 1] or [N, C, W], got ", dims_text(g));

    if (k_idx.element_type() == ffi::DataType::S32) {
        desc->index_dtype = SDM_P1_DTYPE_INT32;
    } else if (k_idx.element_type() == ffi::DataType::S64) {
        desc->index_dtype = SDM_P1_DTYPE_INT64;
    } else {
        return invalid("k_idx must be int32 or int64");
    }
    if (q_idx.element_type() != k_idx.element_type()) return invalid("q_idx must have k_idx's dtype");
    if (k_val.element_type() == ffi::DataType::F32) {
        desc->value_dtype = SDM_P1_DTYPE_FLOAT32;
    } else if (k_val.element_type() == ffi::DataType::BF16) {
        desc->value_dtype = SDM_P1_DTYPE_BFLOAT16;
    } else {
        return invalid("k_val must be float32 or bfloat16");
    }
    if (q_val.element_type() != k_val.element_type()) return invalid("q_val must have k_val's dtype");
    if (g.element_type() != ffi::DataType::F32) return invalid("g must be float32");

    desc->N = N;
    desc->C = C;
    desc->W = W;
    desc->R = R;
    desc->gate_width = g.dimensions()[2];
    return ffi::Error::Success();
}

// beta and stream_lengths, the operands after the main ones, as the attributes say; `next` is
// left at the operand after them.
ffi::Error optional_inputs(const ffi::RemainingArgs& rest, bool has_beta, bool has_lengths, const sdm_p1_desc& desc,
                           sdm_p1_inputs* in, size_t* next) {
    *next = 0;
    if (has_beta) {
        auto beta = rest.get<ffi::AnyBuffer>((*next)++);
        if (!beta) return beta.error();
        if (beta->element_type() != ffi::DataType::F32 || !has_dims(*beta, {2, {desc.N, desc.C}}))
            return invalid("beta must be float32 [N, C], got ", dims_text(*beta));
        in->beta = static_cast<const float*>(beta->untyped_data());
    }
    if (has_lengths) {
        auto lengths = rest.get<ffi::AnyBuffer>((*next)++);
        if (!lengths) return lengths.error();
        if (!has_dims(*lengths, {1, {desc.num_parallel}}))
            return invalid("stream_lengths must be [num_parallel], got ", dims_text(*lengths));
        if (lengths->element_type() == ffi::DataType::S32) {
            in->stream_lengths_dtype = SDM_P1_DTYPE_INT32;
        } else if (lengths->element_type() == ffi::DataType::S64) {
            in->stream_lengths_dtype = SDM_P1_DTYPE_INT64;
        } else {
            return invalid("stream_lengths must be int32 or int64");
        }
        in->stream_lengths = lengths->untyped_data();
    }
    return ffi::Error::Success();
}

void set_inputs(const ffi::AnyBuffer& k_idx, const ffi::AnyBuffer& q_idx, const ffi::AnyBuffer& k_val,
                const ffi::AnyBuffer& q_val, const ffi::AnyBuffer& g, sdm_p1_inputs* in) {
    in->k_idx = k_idx.untyped_data();
    in->q_idx = q_idx.untyped_data();
    in->k_val = k_val.untyped_data();
    in->q_val = q_val.untyped_data();
    in->g = static_cast<const float*>(g.untyped_data());
}

// The dtype and shape of field f's upstream gradient (docs/backward.md); false for a field that
// is not differentiable (canon/field_sets.h).
bool upstream_layout(int f, const sdm_p1_desc& d, ffi::DataType* dtype, Dims* dims) {
    switch (sdm_p1::upstream_of(f)) {
        case sdm_p1::Upstream::kNone:
            return false;
        case sdm_p1::Upstream::kFloat32:
            *dtype = ffi::DataType::F32;
            break;
        case sdm_p1::Upstream::kValueDtype:
            *dtype = ffi_dtype(d.value_dtype);
            break;
    }
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
            *dims = {3, {d.N, d.C, d.C}};
            break;
        case SDM_P1_FIELD_LOG_K:
        case SDM_P1_FIELD_REX:
        case SDM_P1_FIELD_CPE:
        case SDM_P1_FIELD_K_EFF:
            *dims = {3, {d.N, d.C, d.W}};
            break;
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_Q_W:
            *dims = {3, {d.N, d.C, d.R}};
            break;
        case SDM_P1_FIELD_KREC:
            *dims = {3, {d.N, d.C * d.W, 2}};
            break;
        case SDM_P1_FIELD_KSPA:
            *dims = {2, {d.N, d.C * d.W, 0}};
            break;
        default:   // qrec, qrec8
            *dims = {2, {d.N, d.C * d.R, 0}};
            break;
    }
    return true;
}

// The descriptor's options shared by both calls.
ffi::Error base_desc(const Device& device, int64_t num_parallel, int64_t stream_offset, int64_t num_keys,
                     int64_t valid_last, int64_t num_threads, sdm_p1_desc* desc) {
    *desc = SDM_P1_DESC_INITIALIZER;
    desc->num_parallel = num_parallel;
    desc->stream_offset = stream_offset;
    desc->num_keys = num_keys;
    desc->valid_last = valid_last;
    desc->backend = device.backend;
    desc->device = device.ordinal;
    if (num_threads < 0 || num_threads > INT32_MAX) return invalid("num_threads ", num_threads, " is out of range");
    desc->num_threads = static_cast<int32_t>(num_threads);
    desc->output_mode = SDM_P1_OUTPUTS_CALLER;
    return ffi::Error::Success();
}

}   // namespace

ffi::Error forward(const Device& device, const ForwardAttrs& attrs, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                   ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::RemainingArgs optional,
                   ffi::RemainingRets outputs) {
    sdm_p1_desc desc;
    if (ffi::Error e = base_desc(device, attrs.num_parallel, attrs.stream_offset, attrs.num_keys, attrs.valid_last,
                                 attrs.num_threads, &desc);
        e.failure())
        return e;
    desc.need_read_groups = attrs.need_read_groups ? 1 : 0;
    desc.det_fields = attrs.det_fields;
    desc.rec_tile = attrs.rec_tile;
    if (ffi::Error e = describe_inputs(k_idx, q_idx, k_val, q_val, g, &desc); e.failure()) return e;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    set_inputs(k_idx, q_idx, k_val, q_val, g, &in);
    size_t next = 0;
    if (ffi::Error e = optional_inputs(optional, attrs.has_beta, attrs.has_lengths, desc, &in, &next); e.failure())
        return e;
    if (next != optional.size()) return invalid("the forward takes ", 5 + next, " operands, got ", 5 + optional.size());

    sdm_p1_status status;
    CachedPlan* plan = get_plan(desc, device.stream, &status);
    if (plan == nullptr) return library_error("sdm_p1_plan_create", status);

    void* outs[SDM_P1_FIELD_COUNT] = {};
    size_t r = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor& view = plan->views[f];
        if (!view.requested) continue;
        if (r >= outputs.size()) return invalid("the plan computes more outputs than the call's ", outputs.size());
        auto out = outputs.get<ffi::AnyBuffer>(r);
        if (!out) return out.error();
        // repeats is [1] int64, which JAX keeps only with x64: its 8 bytes in any dtype.
        const bool dtype_ok = f == SDM_P1_FIELD_REPEATS || (*out)->element_type() == ffi_dtype(view.dtype);
        if (!dtype_ok || (*out)->size_bytes() != view.bytes)
            return invalid("result ", r, " (", view.name, ") has ", (*out)->size_bytes(), " bytes of another dtype ",
                           "or shape than the plan's ", view.bytes);
        outs[f] = (*out)->untyped_data();
        ++r;
    }
    if (r != outputs.size()) return invalid("the plan computes ", r, " outputs, the call has ", outputs.size());

    std::lock_guard<std::mutex> lock(plan->mutex);
    status = sdm_p1_execute(plan->plan, &in, outs, SDM_P1_FIELD_COUNT, device.stream);
    if (status != SDM_P1_SUCCESS) return library_error("sdm_p1_execute", status);
    if (attrs.check && device.synchronize != nullptr) {
        if (ffi::Error e = device.synchronize(device.stream); e.failure()) return e;
        status = sdm_p1_execute_status(plan->plan);
        if (status != SDM_P1_SUCCESS) return library_error("sdm_p1_execute_status", status);
    }
    return ffi::Error::Success();
}

ffi::Error backward(const Device& device, const BackwardAttrs& attrs, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                    ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::AnyBuffer payload,
                    ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dk_val, ffi::Result<ffi::AnyBuffer> dq_val,
                    ffi::Result<ffi::AnyBuffer> dg, ffi::RemainingRets dbeta) {
    sdm_p1_desc desc;
    if (ffi::Error e = base_desc(device, attrs.num_parallel, attrs.stream_offset, attrs.num_keys, attrs.valid_last,
                                 attrs.num_threads, &desc);
        e.failure())
        return e;
    // Gradients only: no optional outputs, k_val / q_val gradients in the value dtype (JAX's
    // cotangent of an input has the input's dtype).
    desc.det_fields = 0;
    desc.backward = 1;
    if (ffi::Error e = describe_inputs(k_idx, q_idx, k_val, q_val, g, &desc); e.failure()) return e;
    const int64_t row = (desc.C * (desc.W + desc.R) + 15) / 16 * 16;
    if (payload.element_type() != ffi::DataType::S32 || !has_dims(payload, {2, {desc.N, row}}))
        return invalid("payload must be the forward's int32 [N, row] output, got ", dims_text(payload));
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    set_inputs(k_idx, q_idx, k_val, q_val, g, &in);
    // The payload is this rule's own forward's residual, beside the same ids: given without
    // them, it is not checked against them again (sdm_p1_execute_backward).
    in.k_idx = nullptr;
    in.q_idx = nullptr;
    size_t next = 0;
    if (ffi::Error e = optional_inputs(rest, attrs.has_beta, attrs.has_lengths, desc, &in, &next); e.failure())
        return e;

    if (attrs.grad_fields < 0 || attrs.grad_fields >> SDM_P1_FIELD_COUNT != 0)
        return invalid("grad_fields ", attrs.grad_fields, " names no sdm_p1_field");
    const void* grads[SDM_P1_FIELD_COUNT] = {};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (!(attrs.grad_fields >> f & 1)) continue;
        ffi::DataType dtype;
        Dims dims;
        if (!upstream_layout(f, desc, &dtype, &dims)) return invalid("field ", f, " is not differentiable");
        auto grad = rest.get<ffi::AnyBuffer>(next++);
        if (!grad) return grad.error();
        if (grad->element_type() != dtype || !has_dims(*grad, dims))
            return invalid("the upstream gradient of field ", f, " has another dtype or shape ", dims_text(*grad));
        grads[f] = grad->untyped_data();
    }
    if (next != rest.size()) return invalid("the backward takes ", 6 + next, " operands, got ", 6 + rest.size());

    const ffi::DataType value = ffi_dtype(desc.value_dtype);
    if (dk_val->element_type() != value || !has_dims(*dk_val, {3, {desc.N, desc.C, desc.W}}) ||
        dq_val->element_type() != value || !has_dims(*dq_val, {3, {desc.N, desc.C, desc.R}}) ||
        dg->element_type() != ffi::DataType::F32 || !has_dims(*dg, {3, {desc.N, desc.C, desc.gate_width}}))
        return invalid("the gradients' results must have k_val's, q_val's and g's dtypes and shapes");
    sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
    out.k_val = dk_val->untyped_data();
    out.q_val = dq_val->untyped_data();
    out.g = static_cast<float*>(dg->untyped_data());
    if (dbeta.size() != (attrs.has_beta ? 1u : 0u)) return invalid("dL/dbeta is a result exactly when beta is given");
    if (attrs.has_beta) {
        auto db = dbeta.get<ffi::AnyBuffer>(0);
        if (!db) return db.error();
        if ((*db)->element_type() != ffi::DataType::F32 || !has_dims(**db, {2, {desc.N, desc.C}}))
            return invalid("dL/dbeta must be float32 [N, C]");
        out.beta = static_cast<float*>((*db)->untyped_data());
    }

    sdm_p1_status status;
    CachedPlan* plan = get_plan(desc, device.stream, &status);
    if (plan == nullptr) return library_error("sdm_p1_plan_create", status);
    std::lock_guard<std::mutex> lock(plan->mutex);
    status = sdm_p1_execute_backward(plan->plan, &in, static_cast<const int32_t*>(payload.untyped_data()), grads,
                                     SDM_P1_FIELD_COUNT, &out, device.stream);
    if (status != SDM_P1_SUCCESS) return library_error("sdm_p1_execute_backward", status);
    return ffi::Error::Success();
}

}   // namespace sdmp1_jax
