// libsdmp1_jax: libsdmp1's forward and backward as XLA FFI custom calls, for JAX under jit
// (bindings/python/sdm_phase1/jax_ffi.py registers them). The only symbols the library exports;
// Python loads it with ctypes and hands the handlers to jax.ffi.register_ffi_target.
//
// Custom call "sdm_phase1.forward": operands k_idx, q_idx, k_val, q_val, g, then beta (when
// has_beta) and stream_lengths (when has_lengths); results: every output the plan computes, in
// sdm_p1_field order, repeats last (8 bytes). Custom call "sdm_phase1.backward": operands k_idx,
// q_idx, k_val, q_val, g, payload, then beta, stream_lengths (as above) and the upstream gradient
// of each field whose bit is set in grad_fields, in field order; results: dL/dk_val, dL/dq_val,
// dL/dg, and dL/dbeta when has_beta. The attributes are those of phase1_call.h.
#ifndef SDMP1_JAX_HANDLERS_H
#define SDMP1_JAX_HANDLERS_H

#include <cstdint>

#include "xla/ffi/api/c_api.h"

#define SDMP1_JAX_EXPORT extern "C" __attribute__((visibility("default")))

// The CPU handlers: the CPU backend on the calling thread and the plan's workers.
SDMP1_JAX_EXPORT XLA_FFI_Error* sdmp1_jax_forward_cpu(XLA_FFI_CallFrame* call_frame);
SDMP1_JAX_EXPORT XLA_FFI_Error* sdmp1_jax_backward_cpu(XLA_FFI_CallFrame* call_frame);

// The CUDA handlers (only in a library built with the CUDA backend): the CUDA backend on XLA's
// stream for the call.
SDMP1_JAX_EXPORT XLA_FFI_Error* sdmp1_jax_forward_cuda(XLA_FFI_CallFrame* call_frame);
SDMP1_JAX_EXPORT XLA_FFI_Error* sdmp1_jax_backward_cuda(XLA_FFI_CallFrame* call_frame);

// How many plans the handlers have created in this process (each is cached and reused by every
// later call of its shapes, options, device and stream): for tests of the cache.
SDMP1_JAX_EXPORT int64_t sdmp1_jax_plans_created(void);

#endif   // SDMP1_JAX_HANDLERS_H
