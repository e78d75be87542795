// A plan's launch sequences as CUDA graphs (launch_graph.h). Host code only.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "launch_graph.h"

namespace sdm_p1 {
namespace cuda {

// One launch sequence captured from launch / launch_backward on a stream of its own, and the
// arguments its kernel nodes hold now. Every kernel of a sequence takes the same argument
// struct (its `bytes`); a memset node whose destination is the pointer at `follow` in that
// struct (the forward's repeats, a caller's output) is pointed anew when the pointer changes,
// the others (the status in the plan's workspace) never change.
struct GraphReplay {
    cudaGraph_t graph = nullptr;   // kept: the nodes' handles belong to it
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> kernels;
    std::vector<cudaKernelNodeParams> kernel_params;
    std::vector<cudaGraphNode_t> memsets;
    std::vector<cudaMemsetParams> memset_params;
    std::vector<bool> memset_follows;
    std::vector<unsigned char> bytes;   // the argument struct the kernel nodes hold
    bool seen = false;                  // executed once (directly): the next execute captures
    bool failed = false;                // no graph for this sequence: launch directly

    ~GraphReplay() {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        if (graph != nullptr) cudaGraphDestroy(graph);
    }
};

namespace {

// The pointer at byte offset `at` of an argument struct.
void* pointer_at(const unsigned char* bytes, size_t at) {
    void* p = nullptr;
    std::memcpy(&p, bytes + at, sizeof p);
    return p;
}

// Captures `enqueue` (which launches the sequence on the stream it is given, with `args`)
// into r's graph and instantiates it, recording its kernel and memset nodes. On any
// failure r is marked failed and the capture's error is cleared from the runtime.
template <typename Args, typename Enqueue>
void capture(GraphReplay& r, const Args& args, size_t follow, Enqueue enqueue) {
    r.failed = true;
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    cudaGraph_t graph = nullptr;
    bool ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
        const int e = enqueue(s);
        ok = cudaStreamEndCapture(s, &graph) == cudaSuccess && e == 0 && graph != nullptr;
    }
    cudaStreamDestroy(s);
    if (ok) {
        r.graph = graph;
        graph = nullptr;
        ok = cudaGraphInstantiate(&r.exec, r.graph, 0) == cudaSuccess;
    }
    size_t count = 0;
    if (ok) ok = cudaGraphGetNodes(r.graph, nullptr, &count) == cudaSuccess;
    std::vector<cudaGraphNode_t> nodes(count);
    if (ok && count != 0) ok = cudaGraphGetNodes(r.graph, nodes.data(), &count) == cudaSuccess;
    r.bytes.assign(reinterpret_cast<const unsigned char*>(&args),
                   reinterpret_cast<const unsigned char*>(&args) + sizeof args);
    void* const followed = follow < sizeof args ? pointer_at(r.bytes.data(), follow) : nullptr;
    for (size_t i = 0; ok && i < count; ++i) {
        cudaGraphNodeType type{};
        ok = cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess;
        if (!ok) break;
        if (type == cudaGraphNodeTypeKernel) {
            cudaKernelNodeParams p{};
            ok = cudaGraphKernelNodeGetParams(nodes[i], &p) == cudaSuccess;
            r.kernels.push_back(nodes[i]);
            r.kernel_params.push_back(p);
        } else if (type == cudaGraphNodeTypeMemset) {
            cudaMemsetParams p{};
            ok = cudaGraphMemsetNodeGetParams(nodes[i], &p) == cudaSuccess;
            r.memsets.push_back(nodes[i]);
            r.memset_params.push_back(p);
            r.memset_follows.push_back(followed != nullptr && p.dst == followed);
        } else {
            ok = false;   // launch and launch_backward enqueue memsets and kernels alone
        }
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    r.failed = !ok;
}

// Points r's nodes at `args` where they differ from what they hold; false (r then marked
// failed, the runtime's error cleared) where the runtime refuses an update.
template <typename Args>
bool point_nodes(GraphReplay& r, const Args& args, size_t follow) {
    const auto* const bytes = reinterpret_cast<const unsigned char*>(&args);
    if (std::memcmp(r.bytes.data(), bytes, sizeof args) == 0) return true;
    void* const followed = follow < sizeof args ? pointer_at(bytes, follow) : nullptr;
    bool ok = true;
    for (size_t i = 0; ok && i < r.memsets.size(); ++i) {
        if (!r.memset_follows[i] || r.memset_params[i].dst == followed) continue;
        cudaMemsetParams p = r.memset_params[i];
        p.dst = followed;
        ok = cudaGraphExecMemsetNodeSetParams(r.exec, r.memsets[i], &p) == cudaSuccess;
        if (ok) r.memset_params[i] = p;
    }
    void* params[] = {const_cast<Args*>(&args)};
    for (size_t i = 0; ok && i < r.kernels.size(); ++i) {
        cudaKernelNodeParams p = r.kernel_params[i];
        p.kernelParams = params;
        p.extra = nullptr;
        ok = cudaGraphExecKernelNodeSetParams(r.exec, r.kernels[i], &p) == cudaSuccess;
    }
    if (!ok) {
        r.failed = true;
        cudaGetLastError();
        return false;
    }
    std::memcpy(r.bytes.data(), bytes, sizeof args);
    return true;
}

// Whether `stream` may take a graph launch: not being captured (a caller capturing it records
// the launches themselves) and its capture state known.
bool replay_allowed(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return status == cudaStreamCaptureStatusNone;
}

// Enqueues one execute of a sequence on `stream`: `enqueue` (its direct launches) where
// `direct` or no graph may serve, else r's graph with its nodes pointed at `node_args`. A
// sequence is captured at its second execute, so that a plan executed once never pays for
// the capture.
template <typename Args, typename Enqueue>
int run_sequence(std::unique_ptr<GraphReplay>& slot, const Args& node_args, size_t follow, bool direct,
                 cudaStream_t stream, Enqueue enqueue) {
    if (!slot) slot.reset(new GraphReplay);
    GraphReplay& r = *slot;
    if (direct || r.failed || !replay_allowed(stream)) return enqueue(stream);
    if (r.exec == nullptr) {
        if (!r.seen) {
            r.seen = true;
            return enqueue(stream);
        }
        capture(r, node_args, follow, enqueue);
        if (r.failed) return enqueue(stream);
    }
    if (!point_nodes(r, node_args, follow)) return enqueue(stream);
    return cudaGraphLaunch(r.exec, stream);
}

}   // namespace

LaunchGraphs::LaunchGraphs() = default;
LaunchGraphs::~LaunchGraphs() = default;

int LaunchGraphs::forward(const KernelPolicy& policy, const KernelArgs& args, void* stream) {
    // The lean kernel's scalar form (unaligned arrays) runs directly: the graph holds the
    // vector form.
    const bool scalar = policy.forward.lean_scalar.launched() && !lean_arrays_aligned(args);
    const size_t repeats = offsetof(KernelArgs, out) + offsetof(OutputBuffers, repeats);
    return run_sequence(forward_, args, repeats, scalar, static_cast<cudaStream_t>(stream),
                        [&](cudaStream_t s) { return launch(policy, args, s); });
}

int LaunchGraphs::backward(const KernelPolicy& policy, const BackwardArgs& args, void* stream) {
    const size_t none = sizeof(BackwardArgs);   // the backward's memsets are the workspace's
    return run_sequence(backward_[static_cast<int>(backward_sequence(policy, args))],
                        backward_kernel_args(policy, args), none, false, static_cast<cudaStream_t>(stream),
                        [&](cudaStream_t s) { return launch_backward(policy, args, s); });
}

}   // namespace cuda
}   // namespace sdm_p1
