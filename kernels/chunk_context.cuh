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
constexpr size_t kPairBudget = 32 * 1024; // bytes of double row sums per pair-sum wave
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

// Byte offsets of the chunk's arrays (n = C * (W + R) entries). All but position and value
// are indexed by sorted position; ids are read from global memory where needed.
struct ArrayLayout {
    uint32_t stride;    // of the interleaved arrays (log to firsts)
    size_t log;         // Fix[n] inclusive log-cumsum of the group; before the scans: the sort
                        // keys, uint64[n] twice (two buffers). Interleaved, as the next five.
    size_t payload;     // uint32[n] payload words, group heads set
    // writes, before, end and firsts are written by the scans and dead in the pair sums; so
    // with the arrays in shared memory, the stage temporaries (the sort's, the pair sums')
    // share their bytes: [stage, stage + stage_room).
    size_t stage;
    size_t stage_room;
    size_t writes;      // uint32[n] write entries (valid or padding) before the position
    size_t before;      // uint32[n] peers (valid entries of its kind) before it in its group
    size_t end;         // uint32[n] last position of its group
    size_t firsts;      // uint32[n] valid first writes of groups at or after it (tiles,
                        // dc_kpos / dc_bpre only; else 0 bytes)
    size_t position;    // uint32[n] by entry: its sorted position
    size_t value;       // float[n] by entry: its k_val / q_val (0 for padding tokens)
    size_t gate;        // Fix[C * gate_width] the chunk's gates in fixed point
    size_t gate_exp;    // double[C] exp of each token's gate (per-token gates; else 0 bytes)
    size_t walk_mask;   // uint32[C][mask_words(W) + mask_words(R)] per token: its write lanes,
                        // then its read lanes, that have an earlier entry in their group
    size_t bytes;
};

// stage_bytes: the room the stage temporaries need among the arrays (0: they live elsewhere).
SDM_HD ArrayLayout array_layout(int C, int W, int R, int gate_width, bool group_counts, size_t stage_bytes) {
    const int n = C * (W + R);
    const size_t words = align16(4 * static_cast<size_t>(n));
    ArrayLayout l{};
    l.stride = interleave_stride(n);
    const size_t elements = 8 * static_cast<size_t>(l.stride);
    const size_t interleaved_words = align16(4 * elements);
    size_t at = 0;
    l.log = at;
    at += align16(16 * elements);   // as many bytes as two key buffers
    l.payload = at;
    at += interleaved_words;
    l.stage = at;
    l.writes = at;
    at += interleaved_words;
    l.before = at;
    at += interleaved_words;
    l.end = at;
    at += interleaved_words;
    l.firsts = at;
    at += group_counts ? interleaved_words : 0;
    if (at - l.stage < stage_bytes) at = l.stage + align16(stage_bytes);
    l.stage_room = at - l.stage;
    l.position = at;
    at += words;
    l.value = at;
    at += words;
    l.gate = at;
    at += align16(16 * static_cast<size_t>(C) * gate_width);
    l.gate_exp = at;
    at += gate_width == 1 ? align16(8 * static_cast<size_t>(C)) : 0;
    l.walk_mask = at;
    at += align16(4 * static_cast<size_t>(C) * (mask_words(W) + mask_words(R)));
    l.bytes = at;
    return l;
}

// Pair-sum units (a row of a or of qk) summed at once: their double rows fill kPairBudget.
SDM_HD int pair_units_per_wave(int C) {
    int u = static_cast<int>(kPairBudget / (8 * static_cast<size_t>(C)));
    if (u > 2 * C) u = 2 * C;
    if (u > kThreads) u = kThreads;
    return u < 1 ? 1 : u;
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

SDM_HD ChunkArrays bind_arrays(char* base, const ArrayLayout& l, bool group_counts) {
    ChunkArrays a;
    const uint32_t st = l.stride;
    uint64_t* const key_area = reinterpret_cast<uint64_t*>(base + l.log);
    a.keys = InterleavedKeys{key_area, st};
    a.keys_alt = InterleavedKeys{key_area + 8 * static_cast<size_t>(st), st};
    a.log = InterleavedLogs{reinterpret_cast<Fix*>(base + l.log), st};
    a.payload = InterleavedWords{reinterpret_cast<uint32_t*>(base + l.payload), st};
    a.writes = InterleavedWords{reinterpret_cast<uint32_t*>(base + l.writes), st};
    a.before = InterleavedWords{reinterpret_cast<uint32_t*>(base + l.before), st};
    a.end = InterleavedWords{reinterpret_cast<uint32_t*>(base + l.end), st};
    a.firsts = InterleavedWords{group_counts ? reinterpret_cast<uint32_t*>(base + l.firsts) : nullptr, st};
    a.position = reinterpret_cast<uint32_t*>(base + l.position);
    a.value = reinterpret_cast<float*>(base + l.value);
    a.gate = reinterpret_cast<Fix*>(base + l.gate);
    a.gate_exp = l.walk_mask > l.gate_exp ? reinterpret_cast<double*>(base + l.gate_exp) : nullptr;
    a.walk_mask = reinterpret_cast<uint32_t*>(base + l.walk_mask);
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
    char* scratch;              // global scratch (arrays not in shared memory), else null
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
