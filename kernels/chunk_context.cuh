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
constexpr int kItems = 8;                 // sorted positions per thread in a tile
constexpr int kTile = kThreads * kItems;  // positions per tile of the sort and the scans
constexpr size_t kPairBudget = 32 * 1024; // bytes of double row sums per pair-sum wave
constexpr uint32_t kNoError = 0xFFFFFFFFu;

SDM_HD size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Byte offsets of the chunk's arrays (n = C * (W + R) entries).
struct ArrayLayout {
    size_t log;        // Fix[n]; before it is written: the sort keys, uint64[2n] (two buffers)
    size_t payload;    // uint32[n] payload words, group heads set
    size_t value;      // float[n] k_val / q_val of the sorted entry (0 for padding)
    size_t slot;       // uint32[n] slot id - id_base of the sorted entry
    size_t before;     // uint32[n] peers before the entry in its group
    size_t position;   // uint32[n] by entry: its sorted position
    size_t gate;       // Fix[C * gate_width] the chunk's gates in fixed point
    size_t bytes;
};

SDM_HD ArrayLayout array_layout(int n, int C, int gate_width) {
    ArrayLayout l{};
    size_t at = 0;
    l.log = at;
    at += align16(16 * static_cast<size_t>(n));
    l.payload = at;
    at += align16(4 * static_cast<size_t>(n));
    l.value = at;
    at += align16(4 * static_cast<size_t>(n));
    l.slot = at;
    at += align16(4 * static_cast<size_t>(n));
    l.before = at;
    at += align16(4 * static_cast<size_t>(n));
    l.position = at;
    at += align16(4 * static_cast<size_t>(n));
    l.gate = at;
    at += align16(16 * static_cast<size_t>(C) * gate_width);
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
    float* value;
    uint32_t* slot;
    uint32_t* before;
    uint32_t* position;
    Fix* gate;
};

SDM_HD ChunkArrays bind_arrays(char* base, const ArrayLayout& l) {
    ChunkArrays a;
    a.keys = reinterpret_cast<uint64_t*>(base + l.log);
    a.log = reinterpret_cast<Fix*>(base + l.log);
    a.payload = reinterpret_cast<uint32_t*>(base + l.payload);
    a.value = reinterpret_cast<float*>(base + l.value);
    a.slot = reinterpret_cast<uint32_t*>(base + l.slot);
    a.before = reinterpret_cast<uint32_t*>(base + l.before);
    a.position = reinterpret_cast<uint32_t*>(base + l.position);
    a.gate = reinterpret_cast<Fix*>(base + l.gate);
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
    KernelOutputs out;
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
