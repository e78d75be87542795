// The interface between the CUDA backend's host code (src/cuda/) and its kernels: plain
// structs and the host functions implemented in phase1.cu. Plain C++ (no CUDA headers), so
// host code compiled by the C++ compiler includes it as well.
#ifndef SDM_P1_KERNELS_LAUNCH_H
#define SDM_P1_KERNELS_LAUNCH_H

#include <cstddef>
#include <cstdint>

#include "common/kernel_args.h"

namespace sdm_p1 {
namespace cuda {

// How the kernel runs a plan's shape on one device (chosen at plan creation).
struct LaunchConfig {
    int grid;                   // blocks; each loops over chunks blockIdx.x, + gridDim.x, ...
    int threads;                // per block: 512, or 256 for two blocks an SM
    bool narrow_counts;         // the chunk's counts and positions in 16 bits (n < 2^16)
    bool on_chip;               // the core arrays in shared memory (the kernel knows it)
    bool sorted_rows;           // KernelShape::sorted_rows
    bool shipped_fields;        // KernelShape::shipped_fields
    bool dependent_launch;      // the wide-log kernel as a programmatic dependent launch (sm_90 on)
    size_t smem_bytes;          // dynamic shared memory per block
    size_t smem_limit;          // the most dynamic shared memory a block may have (the arrays
                                // that do not fit in it go to global scratch)
    size_t scratch_per_block;   // bytes of global scratch per block (0: every array in shared memory)
    LeanLayout lean;            // the lean kernel, launched first where lean.threads != 0
                                // (kernels/lean/README.md); it leaves the chunks it cannot take
                                // to the main kernel
    SpreadLayout spread;        // the spread kernel, launched last where spread.capacity != 0
                                // (kernels/spread/README.md); the main kernel hands it the pair
                                // sums of chunks of many terms
};

// Chooses the launch configuration of `shape` for `device`, within `output_bytes` (the
// global scratch, when needed, stays no larger), sets the kernels' shared-memory limits and
// fills the plan's part of the kernels' arguments (the shape, the chunk layout, key bits,
// dividers and the lean layout; the pointers stay null). Returns a cudaError_t value
// (0: success).
int configure(const KernelShape& shape, int device, size_t output_bytes, LaunchConfig* config, KernelArgs* args);

// Enqueues one execute on `stream`: clears the status and repeats, then runs the lean kernel
// (where the configuration has one), the main kernel, the wide-log kernel and the spread
// kernel (where it has one). `args` is
// configure's with the execute's pointers set: the inputs (stream_lengths null: the
// valid_last rule), the outputs, the global scratch (config.grid * config.scratch_per_block
// bytes, or null), the status, the N words each of chunk_value, wide_chunks and
// general_chunks, and the spread slots (config.spread.capacity * slot_bytes bytes). Returns a cudaError_t value (0: success).
int launch(const LaunchConfig& config, const KernelArgs& args, void* stream);

// The name of the kernel that computes a plan's chunks first ("lean" or "general"), for the
// benchmark and the logs.
const char* kernel_name(const LaunchConfig& config);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LAUNCH_H
