// A plan's launches kept as CUDA graphs (launch_graph.cu): an execute's memsets and kernel
// launches cost the host one CUDA call each, about 2 us apiece, which on small batches is
// the call's whole cost (issue 44: S6's execute took 16-20 us of host time, its kernels
// 80-90 us of GPU time). A plan's sequence is captured once, at its second execute (a plan
// executed once never pays the capture, about 0.2 ms), and each later execute sets the
// nodes' arguments (only where they changed) and launches the graph: one launch instead of 3
// to 7 CUDA calls (H100, S6: sdm_p1_execute 21.5 -> 6.5 us of host time, the backward 16.7 ->
// 10.7; the GPU's time unchanged or 1-3 % less). Plain C++ (no CUDA headers), as launch.h.
#ifndef SDM_P1_KERNELS_LAUNCH_GRAPH_H
#define SDM_P1_KERNELS_LAUNCH_GRAPH_H

#include <memory>

#include "launch.h"

namespace sdm_p1 {
namespace cuda {

// One captured launch sequence (launch_graph.cu).
struct GraphReplay;

// A plan's graphs: the forward's, and one for each of the backward's launch sequences (no
// payload, the general backward alone, the lean one then the general one). Each enqueues
// exactly what launch / launch_backward enqueue, in the same order with the same arguments,
// so the bits are the same either way. Where a graph cannot serve, the call launches
// directly: the stream is being captured (the caller's graph records the launches
// themselves), the lean kernel's scalar form is needed (unaligned arrays), or the graph
// could not be made (then never again for that sequence). Not thread-safe: a plan is not
// executed concurrently with itself (the C API's rule). The plan's device must be current.
class LaunchGraphs {
public:
    LaunchGraphs();
    ~LaunchGraphs();
    LaunchGraphs(const LaunchGraphs&) = delete;
    LaunchGraphs& operator=(const LaunchGraphs&) = delete;

    // As launch(policy, args, stream). Returns a cudaError_t value.
    int forward(const KernelPolicy& policy, const KernelArgs& args, void* stream);
    // As launch_backward(policy, args, stream). Returns a cudaError_t value.
    int backward(const KernelPolicy& policy, const BackwardArgs& args, void* stream);

private:
    std::unique_ptr<GraphReplay> forward_;
    std::unique_ptr<GraphReplay> backward_[3];
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LAUNCH_GRAPH_H
