// A call's outputs: one block from PyTorch's allocator (the caching allocator on k_idx's GPU
// and current stream, the CPU allocator for CPU tensors), carved into the plan's outputs.
#ifndef SDMP1_TORCH_FAST_OUTPUTS_H
#define SDMP1_TORCH_FAST_OUTPUTS_H

#include <Python.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "registry.h"

namespace sdmp1_torch {

// `bytes` bytes on `like`'s device (may throw c10::Error: out of memory).
at::Tensor new_block(const at::Tensor& like, int64_t bytes);

// A new list of the outputs carved from `block`, in `specs`' order; nullptr with a Python
// error set. Each output shares the block's storage but is a tensor of its own to autograd
// (not a view, its own version counter): what as_strided below autograd's view tracking
// (c10::AutoDispatchBelowADInplaceOrView) gives, as the Python path's _PlanData.carve makes
// them. May throw c10::Error.
PyObject* carve(const at::Tensor& block, const std::vector<OutputSpec>& specs);

}   // namespace sdmp1_torch

#endif
