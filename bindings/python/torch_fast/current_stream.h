// The current CUDA stream of a device, and whether it is being captured into a CUDA graph,
// without linking c10_cuda: the stream through c10's device-guard registry (which PyTorch's
// CUDA library fills when it loads), the capture through torch._C (the function the Python
// path calls). A CPU-only PyTorch builds and loads this the same; it never has CUDA tensors.
#ifndef SDMP1_TORCH_FAST_CURRENT_STREAM_H
#define SDMP1_TORCH_FAST_CURRENT_STREAM_H

#include <Python.h>

#include <c10/core/Device.h>

#include <cstdint>

namespace sdmp1_torch {

// The raw cudaStream_t of `device`'s current stream (PyTorch's, as torch.cuda.current_stream).
std::uintptr_t current_cuda_stream(c10::Device device);

// Takes torch._C._cuda_isCurrentStreamCapturing where this PyTorch has it (a CUDA build).
// Returns false with a Python error set where torch._C cannot be imported.
bool init_capture_query();

// 1: the current stream is being captured; 0: not; -1: unknown (a Python error was cleared):
// the caller falls back to the Python path either way but 0.
int current_stream_capturing();

}   // namespace sdmp1_torch

#endif
