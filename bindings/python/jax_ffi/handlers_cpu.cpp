// The CPU handlers: the library's CPU backend, on the thread XLA calls the handler from and the
// plan's worker threads; the call returns when the outputs are written.
#include "handlers.h"
#include "phase1_call.h"

namespace ffi = xla::ffi;

namespace {

const sdmp1_jax::Device kCpu = {SDM_P1_BACKEND_CPU, SDM_P1_UNSET, nullptr, nullptr};

ffi::Error forward_cpu(ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx, ffi::AnyBuffer k_val, ffi::AnyBuffer q_val,
                       ffi::AnyBuffer g, ffi::RemainingArgs optional, ffi::RemainingRets outputs,
                       sdmp1_jax::ForwardAttrs attrs) {
    return sdmp1_jax::forward(kCpu, attrs, k_idx, q_idx, k_val, q_val, g, optional, outputs);
}

ffi::Error backward_cpu(ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx, ffi::AnyBuffer k_val, ffi::AnyBuffer q_val,
                        ffi::AnyBuffer g, ffi::AnyBuffer payload, ffi::RemainingArgs rest,
                        ffi::Result<ffi::AnyBuffer> dk_val, ffi::Result<ffi::AnyBuffer> dq_val,
                        ffi::Result<ffi::AnyBuffer> dg, ffi::RemainingRets dbeta, sdmp1_jax::BackwardAttrs attrs) {
    return sdmp1_jax::backward(kCpu, attrs, k_idx, q_idx, k_val, q_val, g, payload, rest, dk_val, dq_val, dg, dbeta);
}

}   // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(sdmp1_jax_forward_cpu, forward_cpu, sdmp1_jax::bind_forward(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(sdmp1_jax_backward_cpu, backward_cpu, sdmp1_jax::bind_backward(ffi::Ffi::Bind()));
