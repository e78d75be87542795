// The interface between the CUDA backend's host code (src/cuda/cuda_backend.cpp) and the
// backward's kernel (kernels/backward/): its arguments, the layout of a block's slice of the
// workspace, its launch configuration and the two host functions of backward.cu. Plain C++
// (no CUDA headers), as launch.h.
#ifndef SDM_P1_KERNELS_BACKWARD_LAUNCH_H
#define SDM_P1_KERNELS_BACKWARD_LAUNCH_H

#include <cstddef>
#include <cstdint>

#include "../common/kernel_args.h"
#include "lean/lean_backward_layout.h"

namespace sdm_p1 {
namespace cuda {

// Threads of a backward block (one block computes one chunk at a time).
constexpr int kBackwardThreads = 256;

// The problems of a bad payload word, numbered as PayloadError::Problem numbers them
// (src/payload_error.h; cuda_backend.cpp asserts they agree).
constexpr uint32_t kPayloadNoEntry = 0, kPayloadTwice = 1, kPayloadPaddingBit = 2, kPayloadPaddingFirst = 3,
                   kPayloadNoHead = 4;

// Where each of a chunk's arrays lies in a block's slice of the workspace (byte offsets; n =
// C * (W + R) entries, nw = C * W writes). The names are those of the CPU backend's
// BackwardScratch and ChunkScratch (src/cpu/chunk_backward.h, chunk.h).
struct BackwardSlice {
    size_t payload;         // uint32[n] by sorted position: payload words, group heads set
    size_t value;           // float[n] by sorted position: k_val / q_val (0 for padding)
    size_t position;        // int32[n] by entry: its sorted position
    size_t log;             // Fix[n] the inclusive log-cumsum of its group
    size_t rex;             // Fix[n] the gates after it in its group
    size_t writes_before;   // uint32[n] write entries before it in the sorted row
    size_t own_writes;      // uint32[n] K entries: earlier K entries of its token in its group
    size_t head;            // int32[n] its group's first position; the payload check's first
                            // word naming each entry before that
    size_t write_row;       // uint32[nw] the sorted positions of the write entries, in order
    size_t gate;            // Fix[C * gate_width] the chunk's gates in fixed point
    size_t rho;             // double[n] the row sum of each valid entry
    size_t gamma;           // double[n] the column sum of each valid K entry
    size_t e_log;           // double[n] exp(log) of each valid entry
    size_t gbar;            // double[n] the adjoint of its log-cumsum
    size_t rbar_before;     // double[n] K entries: the sum of rbar over its group's earlier K entries
    size_t xbar;            // double[nw] each non-repeat K entry's gate adjoint, by token and lane
    // Payload NULL (the chunk is sorted again, with the forward's stages):
    size_t keys;          // uint64[8 * stride] the sort keys (interleaved, as the forward's)
    size_t keys_alt;      // uint64[8 * stride] the merge rounds' second buffer
    size_t entry_value;   // float[n] by entry: its value (stage "load")
    size_t walk_mask;     // uint32[C * (mask words)] written by stage "load", not used
    size_t bytes;         // the slice, a multiple of 256
};

// The backward's arguments. `k` is the forward's (the plan's constants and the execute's
// input pointers; its outputs are null): the forward's stages "load and check", "sort" and
// "decode", valid_tokens and report_chunk_error read it, status and chunk_value included.
struct BackwardArgs {
    KernelArgs k;
    const int32_t* payload;   // [N, row] the forward's sort, or null: sort again from the ids
    int row;                  // a chunk's payload words (n rounded up to 16)
    bool grad_bf16;           // k_val / q_val gradients in bfloat16 (else float32)
    bool compute;             // false: no gradient requested, the data check alone
    UpstreamGrads up;
    InputGradBuffers grads;
    char* slices;   // grid slices of layout.bytes
    BackwardSlice layout;
    uint64_t* payload_value;   // N words: chunk c's first bad payload word | valid tokens << 32
    // The lean backward (kernels/backward/lean/; lean.threads == 0: none), run first where the
    // payload is given: its layout and its blocks' slices (lean.grid * lean.slice_bytes bytes).
    // It lists the chunks it leaves in k.general_chunks (k.status->general_left counts them),
    // and the general backward then computes those alone; with k.general_chunks null, every
    // chunk.
    LeanBackwardLayout lean;
    char* lean_slices;
};

// How the backward runs a plan's shape on one device (chosen at plan creation).
struct BackwardConfig {
    int grid;        // blocks, each owning a slice and looping over chunks blockIdx.x, + grid, ...
    int grid_sort;   // blocks of the kernel that sorts again (payload NULL), <= grid
    BackwardSlice layout;
    LeanBackwardLayout lean;   // the lean backward's (lean.threads == 0: none)
    bool dependent_launch;     // the general backward as a programmatic dependent of the lean one
};

// Chooses the backward's configuration of `shape` on `device`: the lean backward's layout
// where it serves the shape (lean_backward_configure), and the general backward's grid: as
// many blocks as the device holds at once, no more than N, and no more than `slice_budget`
// bytes of slices (at least one block). Returns a cudaError_t value (0: success).
int backward_configure(const KernelShape& shape, int device, size_t slice_budget, BackwardConfig* config);

// The lean backward's layout for `shape` on a device of `sms` multiprocessors (threads == 0:
// it does not serve the shape), in kernels/backward/lean/lean_backward.cu.
int lean_backward_configure(const KernelShape& shape, int device, int sms, LeanBackwardLayout* layout);

// Enqueues the lean backward's kernel (lean_backward.cu).
int lean_backward_launch(const BackwardArgs& args, void* stream);

// Enqueues one backward on `stream`: clears the status (and marks it a backward's), then runs
// the lean backward (payload given, a plan it serves) and the general backward on the chunks
// it leaves, or the general backward on every chunk. `args` has the execute's pointers set,
// slices config.grid * layout.bytes bytes, lean_slices config.lean.grid *
// config.lean.slice_bytes bytes and k.general_chunks N words where the plan has a lean
// backward. Returns a cudaError_t value (0: success).
int backward_launch(const BackwardConfig& config, const BackwardArgs& args, void* stream);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LAUNCH_H
