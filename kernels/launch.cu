// The launches (launch.h): one switch over the policy's stages, each kernel the one the policy
// chose (KernelChoice::address), with its grid, block and shared memory. Host code only.
#include <cuda_runtime.h>

#include <cstdint>

#include "launch.h"

namespace sdm_p1 {
namespace cuda {

namespace {

using ForwardKernel = void (*)(KernelArgs);
using BackwardKernel = void (*)(BackwardArgs);

ForwardKernel forward_kernel(const KernelChoice& c) { return reinterpret_cast<ForwardKernel>(c.address); }
BackwardKernel backward_kernel(const KernelChoice& c) { return reinterpret_cast<BackwardKernel>(c.address); }

// Launches the chosen kernel c after the stream's previous kernel: a programmatic dependent
// launch where the device has them (sm_90 on), whose grid is launched while the previous one
// runs and waits for it in griddepcontrol.wait (phase1_kernel), hiding the launch's latency;
// elsewhere it follows the previous kernel as any launch does.
template <typename Args>
cudaError_t launch_after_previous(void (*kernel)(Args), const KernelChoice& c, bool dependent, const Args& a,
                                  cudaStream_t st) {
    cudaLaunchAttribute after_previous{};
    after_previous.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    after_previous.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch{};
    launch.gridDim = dim3(static_cast<unsigned>(c.grid));
    launch.blockDim = dim3(static_cast<unsigned>(c.threads));
    launch.dynamicSmemBytes = c.smem_bytes;
    launch.stream = st;
    launch.attrs = &after_previous;
    launch.numAttrs = dependent ? 1 : 0;
    return cudaLaunchKernelEx(&launch, kernel, a);
}

}   // namespace

bool lean_arrays_aligned(const KernelArgs& a) {
    const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0u; };
    const OutputBuffers& out = a.out;
    const void* const arrays[] = {a.k_idx,   a.q_idx, a.k_val,   a.q_val,    a.g,         out.log_k,
                                  out.rex,   out.cpe, out.k_eff, out.pos_k,  out.is_last, out.is_only,
                                  out.log_q, out.q_w, out.pos_q, out.q_last, out.q_only};
    for (const void* p : arrays) {
        if (!aligned(p)) return false;   // null (a field not requested) is aligned
    }
    return true;
}

BackwardSequence backward_sequence(const KernelPolicy& policy, const BackwardArgs& b) {
    if (b.payload == nullptr) return BackwardSequence::Sort;
    if (!policy.backward_kernels.lean.launched() || b.k.general_chunks == nullptr) return BackwardSequence::General;
    return BackwardSequence::LeanThenGeneral;
}

BackwardArgs backward_kernel_args(const KernelPolicy& policy, const BackwardArgs& b) {
    BackwardArgs a = b;
    if (backward_sequence(policy, b) != BackwardSequence::LeanThenGeneral) a.k.general_chunks = nullptr;
    return a;
}

KernelArgs plan_arguments(const KernelPolicy& policy) {
    const ForwardKernels& f = policy.forward;
    const KernelShape& s = f.shape;
    const int n = s.C * (s.W + s.R);
    KernelArgs a{};
    a.s = s;
    a.scratch_per_block = f.scratch_per_block;
    a.layout = f.arrays;
    // The sort keys' layout, as the CPU backend's (canon/chunk_arrays.h): padding entries
    // take the largest slot the key bits hold (stage "load"). One bit less where num_keys is a
    // power of two (S6: 32-bit keys).
    a.entry_bits = sort_entry_bits(n);
    a.key_bits = sort_key_bits(n, s.num_keys);
    a.div = Dividers{make_divider(s.W), make_divider(s.R),          make_divider(s.W + s.R),
                     make_divider(s.C), make_divider(s.gate_width), make_divider(s.rec_tile)};
    a.lean = f.lean_layout;
    a.spread = f.spread_layout;
    return a;
}

int launch(const KernelPolicy& policy, const KernelArgs& args, void* stream) {
    const ForwardKernels& f = policy.forward;
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(args.status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(args.out.repeats, 0, sizeof(int64_t), st);
    if (e != cudaSuccess) return e;
    const ForwardKernel general = forward_kernel(f.general);
    if (f.lean.launched()) {
        // The lean kernel first; the general kernel computes the chunks it leaves (general_chunks).
        const KernelChoice& lean = f.lean_scalar.launched() && !lean_arrays_aligned(args) ? f.lean_scalar : f.lean;
        forward_kernel(lean)<<<lean.grid, lean.threads, lean.smem_bytes, st>>>(args);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = launch_after_previous(general, f.general, f.dependent_launch, args, st);
    } else {
        general<<<f.general.grid, f.general.threads, f.general.smem_bytes, st>>>(args);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) return e;
    // Its blocks return at once where the general kernel listed no chunk; the spread kernel's
    // where it handed over none.
    e = launch_after_previous(forward_kernel(f.wide_log), f.wide_log, f.dependent_launch, args, st);
    if (e != cudaSuccess || !f.spread.launched()) return e;
    e = launch_after_previous(forward_kernel(f.spread), f.spread, f.dependent_launch, args, st);
    if (e != cudaSuccess) return e;
    return launch_after_previous(forward_kernel(f.spread_split), f.spread_split, f.dependent_launch, args, st);
}

int launch_backward(const KernelPolicy& policy, const BackwardArgs& args, void* stream) {
    const BackwardKernels& k = policy.backward_kernels;
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    const BackwardArgs b = backward_kernel_args(policy, args);
    DeviceStatus* const status = b.k.status;
    cudaError_t e = cudaMemsetAsync(status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(&status->backward, 0, sizeof(status->backward), st);
    if (e != cudaSuccess) return e;
    switch (backward_sequence(policy, args)) {
        case BackwardSequence::Sort:
            backward_kernel(k.general_sort)<<<k.general_sort.grid, k.general_sort.threads, 0, st>>>(b);
            return cudaGetLastError();
        case BackwardSequence::General:
            backward_kernel(k.general)<<<k.general.grid, k.general.threads, 0, st>>>(b);
            return cudaGetLastError();
        case BackwardSequence::LeanThenGeneral:
            break;
    }
    // The lean backward, then the general backward on the chunks it left, launched while the
    // lean one runs (its blocks wait for it in griddepcontrol.wait).
    backward_kernel(k.lean)<<<k.lean.grid, k.lean.threads, k.lean.smem_bytes, st>>>(b);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return launch_after_previous(backward_kernel(k.general), k.general, k.dependent_launch, b, st);
}

}   // namespace cuda
}   // namespace sdm_p1
