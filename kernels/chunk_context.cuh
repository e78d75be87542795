// One thread block's view of the chunk it is computing: the chunk's constants and its arrays
// (in shared memory when they fit, else in the block's slice of global scratch).
#ifndef SDM_P1_KERNELS_CHUNK_CONTEXT_CUH
#define SDM_P1_KERNELS_CHUNK_CONTEXT_CUH

#include <cstddef>
#include <cstdint>

#include "../src/phase1_shared.h"
#include "launch.h"

namespace sdm_p1 {
namespace cuda {

constexpr int kThreads = 512;             // threads per block
constexpr int kItems = 8;                 // keys per thread in a tile of the sort
constexpr int kTile = kThreads * kItems;  // keys per tile of the sort
constexpr int kScanItems = 8;             // positions per thread in a tile of the scans
constexpr int kScanTile = kThreads * kScanItems;
constexpr uint32_t kNoError = 0xFFFFFFFFu;

SDM_HD size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Words of a lane mask over `lanes` lanes.
SDM_HD int mask_words(int lanes) { return (lanes + 31) / 32; }

// Index of the first walker-mask word of token t's write (or read) lanes (ArrayLayout::walk_mask).
SDM_HD int walk_mask_base(int W, int R, int t, bool is_q) {
    return t * (mask_words(W) + mask_words(R)) + (is_q ? mask_words(W) : 0);
}

// An array of the chunk indexed by sorted position, stored as 8 rows of `stride` elements:
// position r at (r % 8) * stride + r / 8. The sort and the scans give each thread 8
// consecutive positions (blocked order), so at each step a warp touches 32 consecutive
// elements: coalesced in global scratch, free of bank conflicts in shared memory. A stride of
// 4 (mod 32) keeps the striped order (a warp on 32 consecutive positions) free of conflicts
// as well.
template <typename T>
struct Interleaved {
    T* base;
    uint32_t stride;
    SDM_HD T& operator[](uint32_t r) const { return base[(r & 7u) * stride + (r >> 3)]; }
    SDM_HD explicit operator bool() const { return base != nullptr; }
};

// The rows of the blocked order are kItems = kScanItems = 8 positions long.
static_assert(kItems == 8 && kScanItems == 8, "Interleaved assumes 8 positions per thread");

// The stride of an interleaved array of n elements (it holds 8 * stride).
SDM_HD uint32_t interleave_stride(int n) {
    const uint32_t rows = (static_cast<uint32_t>(n) + 7u) / 8u;
    return (rows + 27u) / 32u * 32u + 4u;
}

using InterleavedWords = Interleaved<uint32_t>;
using InterleavedKeys = Interleaved<uint64_t>;
using InterleavedLogs = Interleaved<Fix>;

// Where one of the chunk's arrays lives: `bytes` at `offset` in the block's shared memory or
// in its slice of global scratch. bytes 0: the plan does not need the array.
struct Place {
    size_t offset;
    size_t bytes;
    bool in_smem;
};

// The chunk's arrays (n = C * (W + R) entries). All but position and value are indexed by
// sorted position; ids are read from global memory where needed. Each array is in shared
// memory where it fits, else in global scratch (array_layout says which).
struct ArrayLayout {
    uint32_t stride;    // of the interleaved arrays (log to firsts)
    Place log;          // Fix[n] inclusive log-cumsum of the group; before the scans: the sort
                        // keys, uint64[n] twice (two buffers). Interleaved, as the next five.
    Place payload;      // uint32[n] payload words, group heads set
    Place writes;       // uint32[n] write entries (valid or padding) before the position
    Place before;       // uint32[n] peers (valid entries of its kind) before it in its group
    Place end;          // uint32[n] last position of its group
    Place firsts;       // uint32[n] valid first writes of groups at or after it (tiles,
                        // dc_kpos / dc_bpre only)
    Place position;     // uint32[n] by entry: its sorted position
    Place value;        // float[n] by entry: its k_val / q_val (0 for padding tokens)
    Place gate;         // Fix[C * gate_width] the chunk's gates in fixed point
    Place gate_exp;     // double[C] exp of each token's gate (per-token gates only)
    Place walk_mask;    // uint32[C][mask_words(W) + mask_words(R)] per token: its write lanes,
                        // then its read lanes, that have an earlier entry in their group
    // The stage temporaries (the sort's, the pair sums'), always in shared memory at
    // [stage, stage + stage_room). writes, before, end and firsts are written by the scans
    // and dead in the sort and the pair sums, so where they are in shared memory the stage
    // shares their bytes.
    size_t stage;
    size_t stage_room;
    size_t smem_bytes;     // dynamic shared memory a block needs
    size_t global_bytes;   // global scratch a block needs (0: none)
};

// The layout of a chunk's arrays with `smem_limit` bytes of shared memory a block, of which
// the stage temporaries need `stage_bytes`. The scans' arrays, which hold the stage, go first;
// then the others, first fit in the order of how often they are read.
inline ArrayLayout array_layout(int C, int W, int R, int gate_width, bool group_counts, size_t stage_bytes,
                                size_t smem_limit) {
    const int n = C * (W + R);
    const size_t words = align16(4 * static_cast<size_t>(n));
    ArrayLayout l{};
    l.stride = interleave_stride(n);
    const size_t elements = 8 * static_cast<size_t>(l.stride);
    const size_t interleaved_words = align16(4 * elements);
    size_t smem = 0, global = 0;
    const auto place = [&](Place& p, size_t bytes, bool in_smem) {
        size_t& at = in_smem ? smem : global;
        p = Place{at, bytes, in_smem};
        at += bytes;
    };
    stage_bytes = align16(stage_bytes);
    const size_t scan_arrays = (group_counts ? 4 : 3) * interleaved_words;
    const bool scans_in_smem = (scan_arrays > stage_bytes ? scan_arrays : stage_bytes) <= smem_limit;
    place(l.writes, interleaved_words, scans_in_smem);
    place(l.before, interleaved_words, scans_in_smem);
    place(l.end, interleaved_words, scans_in_smem);
    place(l.firsts, group_counts ? interleaved_words : 0, scans_in_smem);
    l.stage = 0;
    if (smem < stage_bytes) smem = stage_bytes;
    l.stage_room = smem;
    Place* const rest[] = {&l.payload, &l.log, &l.position, &l.value, &l.gate, &l.gate_exp, &l.walk_mask};
    const size_t rest_bytes[] = {
        interleaved_words,
        align16(16 * elements),   // as many bytes as two key buffers
        words,
        words,
        align16(16 * static_cast<size_t>(C) * gate_width),
        gate_width == 1 ? align16(8 * static_cast<size_t>(C)) : 0,
        align16(4 * static_cast<size_t>(C) * (mask_words(W) + mask_words(R))),
    };
    for (int i = 0; i < 7; ++i) place(*rest[i], rest_bytes[i], smem + rest_bytes[i] <= smem_limit);
    l.smem_bytes = smem;
    l.global_bytes = global;
    return l;
}

struct ChunkArrays {
    InterleavedKeys keys;       // aliases log: the first key buffer (stage "load" fills it)
    InterleavedKeys keys_alt;   // aliases log: the second key buffer
    InterleavedLogs log;
    InterleavedWords payload;
    InterleavedWords writes;
    InterleavedWords before;
    InterleavedWords end;
    InterleavedWords firsts;   // null when the plan needs no group counts
    uint32_t* position;
    float* value;
    Fix* gate;
    double* gate_exp;   // null with per-write gates
    uint32_t* walk_mask;
};

// The address of an array placed at p (null for an array of 0 bytes).
template <typename T>
__device__ T* array_at(const Place& p, char* smem, char* global) {
    return p.bytes == 0 ? nullptr : reinterpret_cast<T*>((p.in_smem ? smem : global) + p.offset);
}

// smem: the block's dynamic shared memory; global: its slice of global scratch.
__device__ ChunkArrays bind_arrays(char* smem, char* global, const ArrayLayout& l) {
    ChunkArrays a;
    const uint32_t st = l.stride;
    uint64_t* const key_area = array_at<uint64_t>(l.log, smem, global);
    a.keys = InterleavedKeys{key_area, st};
    a.keys_alt = InterleavedKeys{key_area + 8 * static_cast<size_t>(st), st};
    a.log = InterleavedLogs{array_at<Fix>(l.log, smem, global), st};
    a.payload = InterleavedWords{array_at<uint32_t>(l.payload, smem, global), st};
    a.writes = InterleavedWords{array_at<uint32_t>(l.writes, smem, global), st};
    a.before = InterleavedWords{array_at<uint32_t>(l.before, smem, global), st};
    a.end = InterleavedWords{array_at<uint32_t>(l.end, smem, global), st};
    a.firsts = InterleavedWords{array_at<uint32_t>(l.firsts, smem, global), st};
    a.position = array_at<uint32_t>(l.position, smem, global);
    a.value = array_at<float>(l.value, smem, global);
    a.gate = array_at<Fix>(l.gate, smem, global);
    a.gate_exp = array_at<double>(l.gate_exp, smem, global);
    a.walk_mask = array_at<uint32_t>(l.walk_mask, smem, global);
    return a;
}

// Inputs, outputs and constants of one launch.
struct KernelArgs {
    KernelShape s;
    const void* k_idx;
    const void* q_idx;
    const void* k_val;
    const void* q_val;
    const float* g;
    const float* beta;
    OutputBuffers out;
    char* scratch;              // global scratch (for the arrays not in shared memory), else null
    size_t scratch_per_block;
    ArrayLayout layout;
    int entry_bits;             // bits of an entry index in a sort key
    int key_bits;               // significant bits of a sort key
    DeviceStatus* status;
    uint64_t* chunk_value;
};

// The chunk a block is computing.
struct Chunk {
    int64_t c;
    int t_valid;        // valid tokens
    int n;              // entries
    int64_t id_base;    // first slot id of its stream
};

// Block-wide scalars of the current chunk.
struct ChunkShared {
    uint32_t error_code;     // first bad input (kNoError: none)
    uint32_t repeats;        // K entries repeating a slot of their token
    uint32_t valid_groups;   // groups with a valid K entry (their first K entries)
};

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_CHUNK_CONTEXT_CUH
