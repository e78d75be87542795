// The interface between the CUDA backend's host code (src/cuda/) and its kernels: plain
// structs and the host functions implemented in phase1.cu. Plain C++ (no CUDA headers), so
// host code compiled by the C++ compiler includes it as well.
#ifndef SDM_P1_KERNELS_LAUNCH_H
#define SDM_P1_KERNELS_LAUNCH_H

#include <cstddef>
#include <cstdint>

#include "../src/phase1_shared.h"
#include "lean/lean_layout.h"

namespace sdm_p1 {
namespace cuda {

// A plan's shapes and options as the kernels see them.
struct KernelShape {
    int64_t N;
    int C, W, R;
    int64_t P;               // streams (num_parallel)
    int64_t stream_offset;
    int64_t num_keys;
    int valid_last;
    int gate_width;          // 1 or W
    int rec_tile;            // L
    bool idx64;              // int64 ids (else int32)
    bool bf16;               // bfloat16 values and value-typed outputs (else float32)
    bool group_counts;       // tiles or dc fields requested: the kernel counts groups
    bool slots;              // sorted_rows with records: the kernel keeps each sorted position's slot
    bool sorted_rows;        // the row fields in a pass of their own in sorted order, by a
                             // kernel of its own (stage "records"); never set unless the
                             // records or kspa are requested (cuda_backend.cpp decides)
    bool shipped_fields;     // no field beyond SDM_P1_DET_SHIPPED's set: the main kernel
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
// lean kernel left to the main kernel. One memset of 0xFF bytes clears all four words.
constexpr int kStatusCodeBits = 20;
struct DeviceStatus {
    unsigned long long key;
    unsigned long long bad_stream;
    unsigned long long wide_left;
    unsigned long long general_left;
};

// How the kernel runs a plan's shape on one device (chosen at plan creation).
struct LaunchConfig {
    int grid;                 // blocks; each loops over chunks blockIdx.x, + gridDim.x, ...
    int threads;              // per block: 512, or 256 for two blocks an SM
    bool narrow_counts;       // the chunk's counts and positions in 16 bits (n < 2^16)
    bool on_chip;             // the core arrays in shared memory (the kernel knows it)
    bool sorted_rows;         // KernelShape::sorted_rows
    bool shipped_fields;      // KernelShape::shipped_fields
    bool dependent_launch;    // the wide-log kernel as a programmatic dependent launch (sm_90 on)
    size_t smem_bytes;        // dynamic shared memory per block
    size_t smem_limit;        // the most dynamic shared memory a block may have (the arrays
                              // that do not fit in it go to global scratch)
    size_t scratch_per_block; // bytes of global scratch per block (0: every array in shared memory)
    LeanLayout lean;          // the lean kernel, launched first where lean.threads != 0
                              // (kernels/lean/README.md); it leaves the chunks it cannot take
                              // to the main kernel
};

// Chooses the launch configuration of `shape` for `device`, within `output_bytes` (the
// global scratch, when needed, stays no larger) and sets the kernel's shared-memory limit.
// Returns a cudaError_t value (0: success).
int configure(const KernelShape& shape, int device, size_t output_bytes, LaunchConfig* config);

// Enqueues one execute on `stream`: clears the status and repeats, then runs the lean kernel
// (where the configuration has one), the main kernel and the wide-log kernel. `scratch` is
// the global scratch (config.grid * config.scratch_per_block bytes, or null), `chunk_value`,
// `wide_chunks` and `general_chunks` N words each;
// `stream_lengths` P lengths (int64 where lengths64, else int32) or null (the valid_last
// rule). Returns a cudaError_t value (0: success).
int launch(const KernelShape& shape, const LaunchConfig& config, const void* k_idx,
           const void* q_idx, const void* k_val, const void* q_val, const float* g,
           const float* beta, const void* stream_lengths, bool lengths64, const OutputBuffers& out,
           void* scratch, DeviceStatus* status, uint64_t* chunk_value, uint64_t* wide_chunks,
           uint64_t* general_chunks, void* stream);

// The name of the kernel that computes a plan's chunks first ("lean" or "general"), for the
// benchmark and the logs.
const char* kernel_name(const LaunchConfig& config);

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_LAUNCH_H
