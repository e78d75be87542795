// The CPU backend's computation of one chunk: every output of the chunk, with the canonical
// arithmetic of canon/phase1_shared.h, in the stages of chunk_stages.h (the twin of the general
// CUDA kernel, kernels/general/phase1_kernel.cuh).
#ifndef SDM_P1_CPU_CHUNK_H
#define SDM_P1_CPU_CHUNK_H

#include <cstddef>
#include <cstdint>

#include "../input_error.h"
#include "../input_record.h"
#include "../options.h"
#include "../outputs.h"
#include "../../canon/phase1_shared.h"
#include "sdm/phase1.h"

namespace sdm_p1 {
namespace cpu {

// One worker's scratch: the chunk's stage arrays, carved from the plan's workspace. Names,
// indices and the stage that writes each are those of the general kernel's arrays
// (kernels/common/chunk_context.cuh: ChunkArrays; the table in docs/design.md, "The stages"). n = C *
// (W + R) entries; indexed by entry e = t * (W + R) + j, by sorted position r, by token t, or
// by write-row index (the write entries in sorted order). Counts and positions are uint32 (the
// kernel's Count: 16 bits where n < 2^16).
struct ChunkScratch {
    uint64_t* keys;        // n: sort keys (slot << entry_bits | e), by e; by r once sorted
    float* value;          // n, by e: its k_val / q_val as float (0 for padding)
    Fix* gate;             // C * gate_width: the gates in fixed point (0 for padding tokens)
    double* gate_exp;      // C, by t: exp of its gate (per-token gates; else null)
    uint32_t* walk_mask;   // C * (mask_words(W) + mask_words(R)): per token, its walkers' lanes
    uint32_t* payload;     // n, by r: payload words, group heads set; kLastK from the scans
    uint32_t* position;    // n, by e: its sorted position
    uint32_t* slot;        // n, by r: its slot (id - id_base)
    Fix* log;              // n, by r: the inclusive log-cumsum of its group
    uint32_t* before;      // n, by r: peers (valid entries of its kind) before it in its group
    uint32_t* writes;      // n, by r: write entries (valid or padding) before it in the row
    uint32_t* end;         // n, by r: the last position of its group
    uint32_t* firsts;      // n, by r: valid first writes of groups at or after it
    uint32_t* write_row;   // C * W, by write-row index: the sorted position of each write entry
    double* row_sums;      // 2 * C: stage "pair sums"' row of a, then of qk
    // Stage "pair sums"' exps kept for reuse (RowExps in chunk_stages.h), each with the row
    // (token) it was taken for:
    double* run_exp;   // C * W, by write-row index of a run's nearest write: its exp
    int32_t* run_row;
    Fix* token_arg;      // C, by token j: the last argument taken for a run of token j
    double* token_exp;   // C, by token j: its exp
    int32_t* token_row;

    static size_t bytes(const Options& opt);
    // Lays the arrays out from `base` (16-byte aligned, bytes(opt) long).
    void bind(void* base, const Options& opt);
};

struct ChunkResult {
    int64_t repeats;
    InputError error;   // when found, the chunk's outputs are unspecified
};

ChunkResult compute_chunk(const Options& opt, const InputRecord& in, const OutputBuffers& out, int64_t chunk,
                          const ChunkScratch& s);

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_CHUNK_H
