// What the JAX handlers share across platforms: a custom call's buffers and attributes checked
// and turned into a plan descriptor and inputs, a cached plan run on them, and the library's
// errors turned into ffi::Error with its message. handlers_cpu.cpp and handlers_cuda.cpp bind it
// to XLA, each with its platform's context.
#ifndef SDMP1_JAX_PHASE1_CALL_H
#define SDMP1_JAX_PHASE1_CALL_H

#include <cstdint>
#include <utility>

#include "sdm/phase1.h"
#include "xla/ffi/api/ffi.h"

namespace sdmp1_jax {

namespace ffi = xla::ffi;

// The forward's attributes: exactly these, as sdm_phase1.jax_ffi passes them (XLA decodes the
// attribute dictionary into this struct by name, refusing any other set).
struct ForwardAttrs {
    int64_t num_parallel;
    int64_t stream_offset;
    int64_t num_keys;
    int64_t valid_last;
    bool need_read_groups;
    int64_t det_fields;
    int64_t rec_tile;
    int64_t num_threads;   // CPU threads; 0: the hardware's count. Ignored on CUDA.
    bool has_beta;         // beta follows g
    bool has_lengths;      // stream_lengths follows g (and beta)
    // CUDA: wait for the stream after the execute and raise bad input data as the call's error
    // (sdm_p1_execute_status). The CPU backend reports them at once without it.
    bool check;
};

// The backward's attributes.
struct BackwardAttrs {
    int64_t num_parallel;
    int64_t stream_offset;
    int64_t num_keys;
    int64_t valid_last;
    int64_t num_threads;
    bool has_beta;
    bool has_lengths;
    // Bit f set: the upstream gradient of sdm_p1_field f is an operand, after beta and the
    // lengths, in field order.
    int64_t grad_fields;
};

// Where a call runs.
struct Device {
    int32_t backend;   // SDM_P1_BACKEND_CPU or SDM_P1_BACKEND_CUDA
    int32_t ordinal;   // XLA's device ordinal on CUDA; SDM_P1_UNSET on the CPU
    void* stream;      // XLA's stream of the call on CUDA; nullptr on the CPU
    // Waits until the work queued on `stream` is done (the forward's check); nullptr on the CPU.
    ffi::Error (*synchronize)(void* stream);
};

// The forward: `optional` holds beta and stream_lengths as the attributes say, `outputs` every
// output the plan computes, in field order (repeats last).
ffi::Error forward(const Device& device, const ForwardAttrs& attrs, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                   ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::RemainingArgs optional,
                   ffi::RemainingRets outputs);

// The backward: `rest` holds beta and stream_lengths as the attributes say, then the upstream
// gradients of grad_fields; `dbeta` one buffer with has_beta, else none.
ffi::Error backward(const Device& device, const BackwardAttrs& attrs, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                    ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::AnyBuffer payload,
                    ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dk_val, ffi::Result<ffi::AnyBuffer> dq_val,
                    ffi::Result<ffi::AnyBuffer> dg, ffi::RemainingRets dbeta);

// The operands, results and attributes of each call, appended to a binding that already holds
// the platform's context (none on the CPU; the stream and device on CUDA). The handler's
// parameters follow the same order.
template <typename Binding>
auto bind_forward(Binding&& binding) {
    return std::move(binding)
        .template Arg<ffi::AnyBuffer>()   // k_idx
        .template Arg<ffi::AnyBuffer>()   // q_idx
        .template Arg<ffi::AnyBuffer>()   // k_val
        .template Arg<ffi::AnyBuffer>()   // q_val
        .template Arg<ffi::AnyBuffer>()   // g
        .RemainingArgs()                  // beta, stream_lengths
        .RemainingRets()                  // the outputs
        .template Attrs<ForwardAttrs>();
}

template <typename Binding>
auto bind_backward(Binding&& binding) {
    return std::move(binding)
        .template Arg<ffi::AnyBuffer>()   // k_idx
        .template Arg<ffi::AnyBuffer>()   // q_idx
        .template Arg<ffi::AnyBuffer>()   // k_val
        .template Arg<ffi::AnyBuffer>()   // q_val
        .template Arg<ffi::AnyBuffer>()   // g
        .template Arg<ffi::AnyBuffer>()   // payload
        .RemainingArgs()                  // beta, stream_lengths, upstream gradients
        .template Ret<ffi::AnyBuffer>()   // dL/dk_val
        .template Ret<ffi::AnyBuffer>()   // dL/dq_val
        .template Ret<ffi::AnyBuffer>()   // dL/dg
        .RemainingRets()                  // dL/dbeta
        .template Attrs<BackwardAttrs>();
}

}   // namespace sdmp1_jax

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(sdmp1_jax::ForwardAttrs, StructMember<int64_t>("num_parallel"),
                                      StructMember<int64_t>("stream_offset"), StructMember<int64_t>("num_keys"),
                                      StructMember<int64_t>("valid_last"), StructMember<bool>("need_read_groups"),
                                      StructMember<int64_t>("det_fields"), StructMember<int64_t>("rec_tile"),
                                      StructMember<int64_t>("num_threads"), StructMember<bool>("has_beta"),
                                      StructMember<bool>("has_lengths"), StructMember<bool>("check"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(sdmp1_jax::BackwardAttrs, StructMember<int64_t>("num_parallel"),
                                      StructMember<int64_t>("stream_offset"), StructMember<int64_t>("num_keys"),
                                      StructMember<int64_t>("valid_last"), StructMember<int64_t>("num_threads"),
                                      StructMember<bool>("has_beta"), StructMember<bool>("has_lengths"),
                                      StructMember<int64_t>("grad_fields"));

#endif   // SDMP1_JAX_PHASE1_CALL_H
