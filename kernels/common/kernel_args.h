// The arguments of the CUDA backend's kernels: the plan's shape, the layout of a chunk's
// arrays and the pointers of one execute, as one plain struct (no CUDA headers). The plan
// fixes everything but the pointers once, at creation (launch.h: plan_arguments); an execute sets
// the pointers of its inputs, outputs and workspace (src/cuda/cuda_backend.cpp).
#ifndef SDM_P1_KERNELS_KERNEL_ARGS_H
#define SDM_P1_KERNELS_KERNEL_ARGS_H

#include <cstddef>
#include <cstdint>

#include "../../canon/phase1_shared.h"
#include "../lean/lean_layout.h"
#include "../spread/spread_layout.h"

namespace sdm_p1 {
namespace cuda {

// A plan's shapes and options as the kernels see them.
struct KernelShape {
    int64_t N;
    int C, W, R;
    int64_t P;   // streams (num_parallel)
    int64_t stream_offset;
    int64_t num_keys;
    int valid_last;
    int gate_width;        // 1 or W
    int rec_tile;          // L
    bool idx64;            // int64 ids (else int32)
    bool bf16;             // bfloat16 values and value-typed outputs (else float32)
    bool group_counts;     // tiles or dc fields requested: the kernel counts groups
    bool slots;            // sorted_rows with records: the kernel keeps each sorted position's slot
    bool sorted_rows;      // the row fields in a pass of their own in sorted order, by a
                           // kernel of its own (stage "records"); never set unless the
                           // records or kspa are requested (src/cuda/cuda_backend.cpp decides)
    bool shipped_fields;   // no field beyond SDM_P1_DET_SHIPPED's set: the main kernel
                           // without the others' code
};

// The first bad input of an execute, on the device. `key` is UINT64_MAX when none was found,
// else chunk << kStatusCodeBits | code with code = token * (W + R + gate_width) + column,
// column = the entry's index in its token (W writes, then R reads) for an id, W + R + lane
// for a gate: so the smallest key is the first offender in the CPU backend's order.
// chunk_value[c] holds the raw bits of chunk c's first offender (the int64 id, or the float
// bits of the gate), written only by the block that found it.
// `bad_stream` is UINT64_MAX, or the smallest stream whose length (per-stream lengths) lies
// outside 0..steps * C; its length is then in chunk_value[bad_stream], written by the block
// of chunk bad_stream (the stream's first), which reads no input of a stream with a bad
// length and so records no other offender there. A bad length is reported before `key`.
// wide_left counts the chunks the main kernel left to the wide-log kernel (their
// log-cumsums need the wide form), down from UINT64_MAX; general_left likewise the chunks the
// lean kernel left to the main kernel. One memset of 0xFF bytes clears every word.
// The backward (kernels/backward/) uses key and bad_stream as the forward does (ids and gates,
// lengths) and two words more: `payload_key`, UINT64_MAX or chunk << kStatusCodeBits |
// position << 3 | problem (PayloadError::Problem) of the first bad payload word of the
// smallest such chunk (that chunk's word and valid tokens in the backward's payload_value
// array); `backward`, UINT64_MAX after a forward, 0 after a backward (its launch sets it), so
// that sdm_p1_execute_status names the call that ran last.
// The spread path (kernels/spread/): ~spread_taken is the slots the main kernel's chunks took,
// whole chunks' in its low 32 bits (slots 0, 1, ... of the pool) and split ones' in its high
// 32 (slots capacity - 1, capacity - 2, ...; SpreadLayout); spread_claimed and
// spread_split_claimed count the items the two spread kernels' warps have taken, down from
// UINT64_MAX.
constexpr int kStatusCodeBits = 20;
struct DeviceStatus {
    unsigned long long key;
    unsigned long long bad_stream;
    unsigned long long wide_left;
    unsigned long long general_left;
    unsigned long long payload_key;
    unsigned long long backward;
    unsigned long long spread_taken;
    unsigned long long spread_claimed;
    unsigned long long spread_split_claimed;
};

// Where one of the chunk's arrays lives: `bytes` at `offset` in the block's shared memory or
// in its slice of global scratch. bytes 0: the plan does not need the array.
struct Place {
    size_t offset;
    size_t bytes;
    bool in_smem;
};

// The chunk's arrays (n = C * (W + R) entries). All but position and value are indexed by
// sorted position; ids are read from global memory where needed. Each array is in shared
// memory where it fits, else in global scratch (array_layout says which). Counts and
// positions are `Count`s: 16-bit words where n < 2^16, else 32-bit.
struct ArrayLayout {
    uint32_t stride;   // of the interleaved arrays (log_low to firsts)
    Place log_low;     // uint64[n] LogArray::low; before the scans: the first buffer of
                       // the sort keys (uint64). Interleaved, as the next six.
    Place log_high;    // uint64[n] LogArray::high; before the scans: the second key buffer
    Place payload;     // uint32[n] payload words, group heads set
    Place writes;      // Count[n] write entries (valid or padding) before the position
    Place before;      // Count[n] peers (valid entries of its kind) before it in its group
    Place end;         // Count[n] last position of its group; in stage "pair sums", from
                       // its start: the write row (Count[C * W], not interleaved: the
                       // sorted position of each write entry, in order)
    Place firsts;      // Count[n] valid first writes of groups at or after it (tiles,
                       // dc_kpos / dc_bpre only)
    Place position;    // Count[n] by entry: its sorted position
    Place value;       // float[n] by entry: its k_val / q_val (0 for padding tokens)
    Place gate;        // Fix[C * gate_width] the chunk's gates in fixed point
    Place gate_exp;    // double[C] exp of each token's gate (per-token gates only)
    Place walk_mask;   // uint32[C][mask_words(W) + mask_words(R)] per token: its write lanes,
                       // then its read lanes, that have an earlier entry in their group
    Place slot;        // uint32[n] by sorted position: its slot - id_base (KernelShape::slots)
    Place runs;        // stage "pair sums", where writes repeat slots of their tokens
                       // (ChunkRuns), always in global scratch: float[C * W] each write's
                       // value by write-row index, then Count[C * W] its run, then
                       // Count[C * W + 1] each run's first write-row index
    // The stage temporaries (the sort's, the pair sums'), always in shared memory at
    // [stage, stage + stage_room). writes, before, end and firsts are written by the scans,
    // so where they are in shared memory the sort's temporaries share their bytes; the pair
    // sums' start at stage + pair, past writes and before, which they read, and on their warp
    // path at stage + pair_rows, past the write row too (in end's first bytes); both are 0
    // where those arrays are in global scratch. The stage also takes whatever room the other
    // arrays leave.
    size_t stage;
    size_t stage_room;
    size_t pair;
    size_t pair_rows;
    size_t smem_bytes;     // dynamic shared memory a block needs
    size_t global_bytes;   // global scratch a block needs (0: none)
};

// Divisions by a launch's run-time constants (Divider: a multiply and a shift each).
struct Dividers {
    Divider W, R, WR;   // W, R, W + R
    Divider C;
    Divider gate_width;
    Divider tile;   // rec_tile
};

// Inputs, outputs and constants of one launch.
struct KernelArgs {
    KernelShape s;
    const void* k_idx;
    const void* q_idx;
    const void* k_val;
    const void* q_val;
    const float* g;
    const float* beta;
    const void* stream_lengths;   // per-stream lengths, or null (the valid_last rule)
    bool lengths64;               // stream_lengths are int64 (else int32)
    OutputBuffers out;
    char* scratch;   // global scratch (for the arrays not in shared memory), else null
    size_t scratch_per_block;
    ArrayLayout layout;
    int entry_bits;   // bits of an entry index in a sort key
    int key_bits;     // significant bits of a sort key
    Dividers div;
    DeviceStatus* status;
    uint64_t* chunk_value;
    unsigned long long* wide_chunks;   // N words: the chunks left to the wide-log kernel
    // Plans with a lean kernel (kernels/lean/): the chunks it left to the main kernel (N
    // words), which then computes only those; null: the main kernel computes every chunk.
    unsigned long long* general_chunks;
    LeanLayout lean;   // the lean kernel's layout (lean.threads == 0: none)
    // The spread path (kernels/spread/README.md): its layout (spread.capacity == 0: none) and
    // its slots (spread.capacity * spread.slot_bytes bytes of the workspace).
    SpreadLayout spread;
    char* spread_slots;
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_KERNEL_ARGS_H
