// The interface between the CUDA backend's host code (src/cuda/) and its kernels: a plan's
// kernels chosen once (plan_kernels: the policy, kernels/policy/, on the device), and the one
// switch that launches them (launch, launch_backward). Plain C++ (no CUDA headers), so host
// code compiled by the C++ compiler includes it as well.
#ifndef SDM_P1_KERNELS_LAUNCH_H
#define SDM_P1_KERNELS_LAUNCH_H

#include "backward/backward_args.h"
#include "common/kernel_args.h"
#include "policy/kernel_policy.h"

namespace sdm_p1 {
namespace cuda {

// Chooses the kernels of `plan` on `device` (choose_policy with the device's answers, which
// raise the chosen kernels' shared-memory limits), and finds each chosen instantiation.
// Returns a cudaError_t value (0: success; cudaErrorInvalidDeviceFunction where the policy
// names an instantiation kernels/instantiations.txt does not list), where it fails with
// *in_backward set if the backward's kernels failed. In device_facts.cpp.
int plan_kernels(const PlanRequest& plan, int device, KernelPolicy* policy, bool* in_backward);

// The plan's part of the kernels' arguments: the shape, the chunk layout, key bits, dividers
// and the lean and spread layouts; the pointers stay null (launch.cu).
KernelArgs plan_arguments(const KernelPolicy& policy);

// Enqueues one execute on `stream`: clears the status and repeats, then runs the forward's
// stages (policy.forward) that have a kernel. `args` is plan_arguments' with the execute's
// pointers set: the inputs (stream_lengths null: the valid_last rule), the outputs, the
// workspace's parts (policy.workspace; general_chunks null where the plan has no lean
// kernel). Returns a cudaError_t value (0: success).
int launch(const KernelPolicy& policy, const KernelArgs& args, void* stream);

// Whether the lean kernel's vector form may run on an execute's arrays (where the plan has
// its scalar twin, ForwardKernels::lean_scalar): the ids, values, gates and entry fields
// 16-byte aligned (null, a field not requested, is aligned).
bool lean_arrays_aligned(const KernelArgs& args);

// The backward's launch sequences: without a payload the general backward sorts again; with
// one, the general backward alone (no lean backward in the plan, or general_chunks null), or
// the lean backward and then the general one on the chunks it leaves.
enum class BackwardSequence { Sort, General, LeanThenGeneral };
BackwardSequence backward_sequence(const KernelPolicy& policy, const BackwardArgs& args);

// The arguments every kernel of that sequence gets: `args`, with general_chunks null unless
// the lean backward runs.
BackwardArgs backward_kernel_args(const KernelPolicy& policy, const BackwardArgs& args);

// Enqueues one backward on `stream`: clears the status (and marks it a backward's), then runs
// the lean backward (payload given, a plan it serves) and the general backward on the chunks
// it leaves, or the general backward on every chunk (policy.backward_kernels). `args` has the
// execute's pointers set (k.general_chunks null: no lean backward). Returns a cudaError_t
// value (0: success).
int launch_backward(const KernelPolicy& policy, const BackwardArgs& args, void* stream);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LAUNCH_H
