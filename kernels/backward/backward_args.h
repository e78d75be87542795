// The backward's kernels' arguments (kernels/backward/, kernels/backward/lean/) and the layout
// of a general backward block's slice of the workspace. Plain C++ (no CUDA headers), as
// launch.h, which launches them.
#ifndef SDM_P1_KERNELS_BACKWARD_BACKWARD_ARGS_H
#define SDM_P1_KERNELS_BACKWARD_BACKWARD_ARGS_H

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
                   kPayloadNoHead = 4, kPayloadOrder = 5, kPayloadGroupHead = 6;

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

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BACKWARD_ARGS_H
