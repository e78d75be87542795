// The CUDA handlers: the library's CUDA backend on the stream XLA gives the call, for the
// device XLA runs it on. The kernels are only queued: XLA orders the stream's later work after
// them, and the call returns without waiting, except with `check`, which waits for the stream
// to report bad input data (the kernels find it; sdm_p1_execute_status reads it).
#include <cuda_runtime_api.h>

#include <string>

#include "handlers.h"
#include "phase1_call.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error synchronize(void* stream) {
    const cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    if (rc != cudaSuccess)
        return ffi::Error(ffi::ErrorCode::kInternal, std::string("cudaStreamSynchronize: ") + cudaGetErrorString(rc));
    return ffi::Error::Success();
}

sdmp1_jax::Device cuda_device(cudaStream_t stream, int32_t ordinal) {
    return {SDM_P1_BACKEND_CUDA, ordinal, stream, synchronize};
}

ffi::Error forward_cuda(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                        ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::RemainingArgs optional,
                        ffi::RemainingRets outputs, sdmp1_jax::ForwardAttrs attrs) {
    return sdmp1_jax::forward(cuda_device(stream, ordinal), attrs, k_idx, q_idx, k_val, q_val, g, optional, outputs);
}

ffi::Error backward_cuda(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer k_idx, ffi::AnyBuffer q_idx,
                         ffi::AnyBuffer k_val, ffi::AnyBuffer q_val, ffi::AnyBuffer g, ffi::AnyBuffer payload,
                         ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dk_val,
                         ffi::Result<ffi::AnyBuffer> dq_val, ffi::Result<ffi::AnyBuffer> dg, ffi::RemainingRets dbeta,
                         sdmp1_jax::BackwardAttrs attrs) {
    return sdmp1_jax::backward(cuda_device(stream, ordinal), attrs, k_idx, q_idx, k_val, q_val, g, payload, rest,
                               dk_val, dq_val, dg, dbeta);
}

}   // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    sdmp1_jax_forward_cuda, forward_cuda,
    sdmp1_jax::bind_forward(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    sdmp1_jax_backward_cuda, backward_cuda,
    sdmp1_jax::bind_backward(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>()));
