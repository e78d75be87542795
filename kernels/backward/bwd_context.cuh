// One backward block's view of the chunk it is computing: its arrays in the block's slice of
// the workspace (BackwardSlice) and its block-wide scalars. The CPU twin is BackwardScratch
// (src/cpu/chunk_backward.h).
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_CONTEXT_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_CONTEXT_CUH

#include <cstddef>
#include <cstdint>

#include "../common/chunk_context.cuh"
#include "backward_args.h"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

constexpr int kThreads = kBackwardThreads;
constexpr uint32_t kNoPayloadError = 0xFFFFFFFFu;

struct Arrays {
    uint32_t* payload;
    float* value;
    int32_t* position;
    Fix* log;
    Fix* rex;
    uint32_t* writes_before;
    uint32_t* own_writes;
    int32_t* head;
    uint32_t* write_row;
    Fix* gate;
    double* rho;
    double* gamma;
    double* e_log;
    double* gbar;
    double* rbar_before;
    double* xbar;
    InterleavedKeys keys;
    InterleavedKeys keys_alt;
    float* entry_value;
    uint32_t* walk_mask;
};

// The arrays of this block's slice.
__device__ __forceinline__ Arrays bind_arrays(const BackwardArgs& b) {
    char* const base = b.slices + static_cast<size_t>(blockIdx.x) * b.layout.bytes;
    const BackwardSlice& l = b.layout;
    const uint32_t stride = interleave_stride(b.k.s.C * (b.k.s.W + b.k.s.R));
    Arrays a;
    a.payload = reinterpret_cast<uint32_t*>(base + l.payload);
    a.value = reinterpret_cast<float*>(base + l.value);
    a.position = reinterpret_cast<int32_t*>(base + l.position);
    a.log = reinterpret_cast<Fix*>(base + l.log);
    a.rex = reinterpret_cast<Fix*>(base + l.rex);
    a.writes_before = reinterpret_cast<uint32_t*>(base + l.writes_before);
    a.own_writes = reinterpret_cast<uint32_t*>(base + l.own_writes);
    a.head = reinterpret_cast<int32_t*>(base + l.head);
    a.write_row = reinterpret_cast<uint32_t*>(base + l.write_row);
    a.gate = reinterpret_cast<Fix*>(base + l.gate);
    a.rho = reinterpret_cast<double*>(base + l.rho);
    a.gamma = reinterpret_cast<double*>(base + l.gamma);
    a.e_log = reinterpret_cast<double*>(base + l.e_log);
    a.gbar = reinterpret_cast<double*>(base + l.gbar);
    a.rbar_before = reinterpret_cast<double*>(base + l.rbar_before);
    a.xbar = reinterpret_cast<double*>(base + l.xbar);
    a.keys = InterleavedKeys{reinterpret_cast<uint64_t*>(base + l.keys), stride};
    a.keys_alt = InterleavedKeys{reinterpret_cast<uint64_t*>(base + l.keys_alt), stride};
    a.entry_value = reinterpret_cast<float*>(base + l.entry_value);
    a.walk_mask = reinterpret_cast<uint32_t*>(base + l.walk_mask);
    return a;
}

// The forward's stages "load and check", "sort" and "decode" (kernels/common/stage_*.cuh) see the
// slice through these members.
struct SortView {
    using Count = int32_t;
    InterleavedKeys keys;
    float* value;   // by entry
    Fix* gate;
    double* gate_exp;   // null: the forward's lookup of per-token exponentials is not needed
    uint32_t* walk_mask;
    uint32_t* payload;
    int32_t* position;
};

// Block-wide scalars of the backward's current chunk, beside the forward's ChunkShared.
struct BackwardShared {
    uint32_t payload_error;   // position << 3 | problem of the first bad payload word, or kNoPayloadError
};

// The first entry of token t's lane (write lanes, then read lanes).
__device__ __forceinline__ int entry_of(int W, int WR, int t, int lane, bool is_q) {
    return t * WR + (is_q ? W + lane : lane);
}

// The value of an entry of token t (0 for padding): the CPU backend's entry_value.
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Chunk& k, int t, int lane, bool is_q) {
    const KernelShape& s = a.s;
    if (t >= k.t_valid) return 0.0f;
    const int64_t tok = k.c * s.C + t;
    return is_q ? load_value(a.q_val, s.bf16, tok * s.R + lane) : load_value(a.k_val, s.bf16, tok * s.W + lane);
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_CONTEXT_CUH
