// The lean backward's plan-time facts: which plans it serves, its block size, how many warps
// sum hot groups, and where its arrays lie in a block's shared memory (or, for the two
// per-write arrays that may not fit there, in the block's slice of the workspace). Plain C++
// (no CUDA headers): the host decides and the kernel reads the same struct
// (kernels/backward/lean/README.md says what the kernel is). Twin: BackwardScratch::bind in
// src/cpu/chunk_backward.cpp.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LEAN_BACKWARD_LAYOUT_H
#define SDM_P1_KERNELS_BACKWARD_LEAN_LEAN_BACKWARD_LAYOUT_H

#include <cstddef>
#include <cstdint>

#include "../../common/smem_offsets.h"

namespace sdm_p1 {
namespace cuda {

// A chunk of more entries than this goes to the general backward (positions are 16-bit).
constexpr int kLeanBackwardMaxEntries = 16384;
// Groups of up to this many entries are summed a lane an entry, several groups a warp; larger
// ones ("hot") by a warp each, in blocks of 32 entries.
constexpr int kSmallGroup = 32;

// Bytes of a hot warp's arrays an entry of its group: the log-cumsum (8), the row sum (8) and
// the column sum (8, by K index), the payload word (4), the value (4), the K entries before
// it (2) and the group index of each K entry (2).
constexpr size_t kHotBytesPerEntry = 36;
// And a tile of 32 x 32 exps (rows padded to 33: no bank conflicts down a column).
constexpr size_t kHotTileBytes = 8 * 32 * 33;

// Byte offsets of the lean backward's arrays; threads == 0: the plan has no lean backward.
// n = C * (W + R) entries, words = ceil(n / 32).
struct LeanBackwardLayout {
    int threads;               // block size (256 or 512)
    int blocks_per_sm;         // resident blocks an SM the layout was sized for
    int grid;                  // blocks (persistent: each loops over chunks)
    int hot_warps;             // warps that take hot groups (the first ones)
    int hot_max;               // entries of a hot group at most (a multiple of 32); a larger one
                               // sends its chunk to the general backward
    uint32_t hot_capacity;     // hot groups a chunk at most (n / 33 + 1)
    uint32_t small_capacity;   // small groups a chunk at most (n / 2 + 1)
    // shared memory
    uint32_t position;        // uint16[n] by entry: its sorted position
    uint32_t heads;           // uint32[words]: bit r: position r starts a group (padding too)
    uint32_t writes;          // uint32[words]: bit r: position r holds a write entry
    uint32_t writes_before;   // uint32[words]: write entries before each word's first position
    uint32_t seen;            // uint32[words]: bit e: the payload check saw entry e
    uint32_t gate_fix;        // Fix[C] per-token gates in fixed point (per-token gates only)
    uint32_t gate_exp;        // double[C] their exps (per-token gates only)
    uint32_t hot_list;        // uint32[hot_capacity]: first position | entries << 16
    uint32_t small_list;      // uint32[small_capacity]: likewise, the groups of 2 to kSmallGroup
    uint32_t batch_gamma;     // double[threads]: each warp's column sums of its batch, by lane
    uint32_t hot_arrays;      // hot_warps * hot_stride bytes: each hot warp's group arrays
    uint32_t hot_stride;      // kHotBytesPerEntry * hot_max + kHotTileBytes
    uint32_t smem_bytes;
    // xbar (double[C * W], per-token gates: each K entry's gate adjoint, by token and lane)
    // and beta_terms (double2[C * W]: each K entry's term of beta's gradient, the factor
    // -dkspa * v and exp(log)): at these offsets in shared memory, or at them in the block's
    // slice of the workspace.
    bool xbar_in_smem, beta_terms_in_smem;
    uint32_t xbar, beta_terms;
    size_t slice_bytes;   // the block's slice of the workspace (0: none)
};

// The layout for chunks of C tokens of W writes and R reads, blocks of `threads` and hot groups
// of up to hot_max entries, with `hot_warps` of them, xbar and beta_terms where `smem_room` allows.
inline LeanBackwardLayout lean_backward_layout(int C, int W, int R, bool per_token_gates, int threads, int hot_warps,
                                               int hot_max, size_t smem_room) {
    const size_t n = static_cast<size_t>(C) * (W + R), words = (n + 31) / 32, nw = static_cast<size_t>(C) * W;
    LeanBackwardLayout l{};
    l.threads = threads;
    l.hot_warps = hot_warps;
    l.hot_max = hot_max;
    l.hot_capacity = static_cast<uint32_t>(n / (kSmallGroup + 1) + 1);
    l.small_capacity = static_cast<uint32_t>(n / 2 + 1);
    SmemOffsets at;
    l.position = at.take(2 * n);
    l.heads = at.take(4 * words);
    l.writes = at.take(4 * words);
    l.writes_before = at.take(4 * words);
    l.seen = at.take(4 * words);
    l.gate_fix = at.take(per_token_gates ? 16 * static_cast<size_t>(C) : 0);
    l.gate_exp = at.take(per_token_gates ? 8 * static_cast<size_t>(C) : 0);
    l.hot_list = at.take(4 * static_cast<size_t>(l.hot_capacity));
    l.small_list = at.take(4 * static_cast<size_t>(l.small_capacity));
    l.batch_gamma = at.take(8 * static_cast<size_t>(threads));
    l.hot_stride = static_cast<uint32_t>(kHotBytesPerEntry * static_cast<size_t>(hot_max) + kHotTileBytes);
    l.hot_arrays = at.take(static_cast<size_t>(hot_warps) * l.hot_stride);
    // xbar, then beta_terms, on chip where they fit; else in the slice.
    size_t slice = 0;
    const auto place = [&](bool* in_smem, uint32_t* offset, size_t bytes_each) {
        const size_t bytes = round_up16(bytes_each * nw);
        *in_smem = at.end + bytes <= smem_room;
        if (*in_smem) {
            *offset = at.take(bytes);
        } else {
            *offset = static_cast<uint32_t>(slice);
            slice += bytes;
        }
    };
    place(&l.xbar_in_smem, &l.xbar, 8);
    place(&l.beta_terms_in_smem, &l.beta_terms, 16);
    l.smem_bytes = static_cast<uint32_t>(at.end);
    l.slice_bytes = (slice + 255) / 256 * 256;
    return l;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LEAN_BACKWARD_LAYOUT_H
