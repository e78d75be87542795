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

// Byte offsets of the chunk's arrays (n = C * (W + R) entries). All but position are indexed
// by sorted position; k_val, q_val and ids are read from global memory where needed.
struct ArrayLayout {
    size_t log;         // Fix[n] inclusive log-cumsum of the group; before the scans: the sort
                        // keys, uint64[2n] (two buffers)
    size_t payload;     // uint32[n] payload words, group heads set
    size_t writes;      // uint32[n] write entries (valid or padding) before the position
    size_t before;      // uint32[n] peers (valid entries of its kind) before it in its group
    size_t end;         // uint32[n] last position of its group
    size_t firsts;      // uint32[n] valid first writes of groups at or after it (tiles,
                        // dc_kpos / dc_bpre only; else 0 bytes)
    size_t position;    // uint32[n] by entry: its sorted position
    size_t gate;        // Fix[C * gate_width] the chunk's gates in fixed point
    size_t gate_exp;    // double[C] exp of each token's gate (per-token gates; else 0 bytes)
    size_t bytes;
};

SDM_HD ArrayLayout array_layout(int n, int C, int gate_width, bool group_counts) {
    const size_t words = align16(4 * static_cast<size_t>(n));
    ArrayLayout l{};
    size_t at = 0;
    l.log = at;
    at += align16(16 * static_cast<size_t>(n));
    l.payload = at;
    at += words;
    l.writes = at;
    at += words;
    l.before = at;
    at += words;
    l.end = at;
    at += words;
    l.firsts = at;
    at += group_counts ? words : 0;
    l.position = at;
    at += words;
    l.gate = at;
    at += align16(16 * static_cast<size_t>(C) * gate_width);
    l.gate_exp = at;
    at += gate_width == 1 ? align16(8 * static_cast<size_t>(C)) : 0;
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
    uint64_t* keys;   // aliases log
    Fix* log;
    uint32_t* payload;
    uint32_t* writes;
    uint32_t* before;
    uint32_t* end;
    uint32_t* firsts;   // null when the plan needs no group counts
    uint32_t* position;
    Fix* gate;
    double* gate_exp;   // null with per-write gates
};

SDM_HD ChunkArrays bind_arrays(char* base, const ArrayLayout& l) {
    ChunkArrays a;
    a.keys = reinterpret_cast<uint64_t*>(base + l.log);
    a.log = reinterpret_cast<Fix*>(base + l.log);
    a.payload = reinterpret_cast<uint32_t*>(base + l.payload);
    a.writes = reinterpret_cast<uint32_t*>(base + l.writes);
    a.before = reinterpret_cast<uint32_t*>(base + l.before);
    a.end = reinterpret_cast<uint32_t*>(base + l.end);
    a.firsts = l.position > l.firsts ? reinterpret_cast<uint32_t*>(base + l.firsts) : nullptr;
    a.position = reinterpret_cast<uint32_t*>(base + l.position);
    a.gate = reinterpret_cast<Fix*>(base + l.gate);
    a.gate_exp = l.bytes > l.gate_exp ? reinterpret_cast<double*>(base + l.gate_exp) : nullptr;
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
