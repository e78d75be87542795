// The CUDA backend's kernel: one thread block per chunk, from the ids to the last output,
// with the chunk's arrays on chip where they fit. The stages are those of the CPU backend
// (src/cpu/chunk.cpp), under the same names, each in its own header.
#include <cuda_runtime.h>

#include <algorithm>

#include "chunk_context.cuh"
#include "launch.h"
#include "stage_decode.cuh"
#include "stage_load.cuh"
#include "stage_pairs.cuh"
#include "stage_records.cuh"
#include "stage_scans.cuh"
#include "stage_sort.cuh"

namespace sdm_p1 {
namespace cuda {

namespace {

// The stage temporaries that need room of their own: the sort's and the pair sums'. (The
// scans' are small and static.) They share bytes with the arrays that are dead meanwhile
// where those are in shared memory (ArrayLayout::stage).
__host__ __device__ size_t stage_bytes() {
    const size_t sort = sizeof(SortTemp), pairs = pair_temp_bytes();
    return align16(sort > pairs ? sort : pairs);
}

ArrayLayout chunk_layout(const KernelShape& s, size_t smem_limit) {
    return array_layout(s.C, s.W, s.R, s.gate_width, s.group_counts, stage_bytes(), smem_limit);
}

union ScanTemp {
    BlockScanTemp<ForwardItem> forward;
    BlockScanTemp<BackwardItem> backward;
    BlockScanTemp<uint32_t> pairs;
};

int bit_width(uint64_t v) {
    int b = 0;
    while (v) {
        ++b;
        v >>= 1;
    }
    return b;
}

__global__ void __launch_bounds__(kThreads, 1) phase1_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
    __shared__ ChunkShared sh;
    __shared__ ScanTemp scan_temp;
    const KernelShape& s = a.s;
    char* const global = a.scratch != nullptr
                             ? a.scratch + static_cast<size_t>(blockIdx.x) * a.scratch_per_block
                             : nullptr;
    char* const stage = smem + a.layout.stage;
    const size_t stage_room = a.layout.stage_room;
    const ChunkArrays arr = bind_arrays(smem, global, a.layout);
    auto& sort_temp = *reinterpret_cast<SortTemp*>(stage);
    // Room on chip for the merge rounds' searches, where the key buffers are in global scratch.
    const bool stage_keys = !a.layout.log.in_smem && stage_room >= 8 * sizeof(uint64_t) * a.layout.stride;
    const InterleavedKeys staged{stage_keys ? reinterpret_cast<uint64_t*>(stage) : nullptr, a.layout.stride};
    const int n = s.C * (s.W + s.R);
    for (int64_t c = blockIdx.x; c < s.N; c += gridDim.x) {
        const Chunk k{c, c >= s.N - s.P ? s.valid_last : s.C, n, (c % s.P) * s.stream_offset};
        if (threadIdx.x == 0) {
            sh.error_code = kNoError;
            sh.repeats = 0;
            sh.valid_groups = 0;
        }
        __syncthreads();
        load_and_check(a, k, arr, sh);
        prefetch_chunk(a, c + gridDim.x);
        __syncthreads();
        report_chunk_error(a, k, sh);
        const InterleavedKeys sorted = sort_entries(a, k, arr.keys, arr.keys_alt, staged, sort_temp);
        decode(a, k, sorted, arr);
        __syncthreads();
        scan_forward(a, k, arr, sh, scan_temp.forward);
        scan_backward(a, k, arr, sh, scan_temp.backward);
        write_records(a, k, arr, sh);
        pair_sums(a, k, arr, stage, stage_room, scan_temp.pairs);
        if (threadIdx.x == 0 && sh.repeats != 0u) {
            atomicAdd(reinterpret_cast<unsigned long long*>(a.out.repeats),
                      static_cast<unsigned long long>(sh.repeats));
        }
        __syncthreads();
    }
}

}  // namespace

int configure(const KernelShape& s, int device, size_t output_bytes, LaunchConfig* config) {
    int optin = 0, sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaFuncAttributes attr{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, phase1_kernel);
    if (e != cudaSuccess) return e;
    // Every plan on the device may then launch with any amount up to the device's limit.
    const size_t limit = static_cast<size_t>(optin) - attr.sharedSizeBytes;
    e = cudaFuncSetAttribute(phase1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(limit));
    if (e != cudaSuccess) return e;
    LaunchConfig c{};
    c.threads = kThreads;
    c.smem_limit = limit;
    const ArrayLayout layout = chunk_layout(s, limit);
    c.smem_bytes = layout.smem_bytes;
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, phase1_kernel, kThreads, c.smem_bytes);
    if (e != cudaSuccess) return e;
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    int64_t grid = std::min<int64_t>(s.N, resident);
    if (layout.global_bytes != 0) {
        // Each resident block gets its slice of global scratch, which stays no larger than
        // the outputs.
        c.scratch_per_block = (layout.global_bytes + 255) / 256 * 256;
        grid = std::min<int64_t>(grid, std::max<int64_t>(1, output_bytes / c.scratch_per_block));
    }
    c.grid = static_cast<int>(grid);
    *config = c;
    return cudaSuccess;
}

int launch(const KernelShape& s, const LaunchConfig& config, const void* k_idx, const void* q_idx,
           const void* k_val, const void* q_val, const float* g, const float* beta,
           const OutputBuffers& out, void* scratch, DeviceStatus* status, uint64_t* chunk_value,
           void* stream) {
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(out.repeats, 0, sizeof(int64_t), st);
    if (e != cudaSuccess) return e;
    const int n = s.C * (s.W + s.R);
    KernelArgs a{};
    a.s = s;
    a.k_idx = k_idx;
    a.q_idx = q_idx;
    a.k_val = k_val;
    a.q_val = q_val;
    a.g = g;
    a.beta = beta;
    a.out = out;
    a.scratch = config.scratch_per_block != 0 ? static_cast<char*>(scratch) : nullptr;
    a.scratch_per_block = config.scratch_per_block;
    a.layout = chunk_layout(s, config.smem_limit);
    a.entry_bits = std::max(1, bit_width(static_cast<uint64_t>(n - 1)));
    // Slots run to num_keys (padding), so the keys need bit_width(num_keys) more bits.
    a.key_bits = a.entry_bits + bit_width(static_cast<uint64_t>(s.num_keys));
    a.status = status;
    a.chunk_value = chunk_value;
    phase1_kernel<<<config.grid, config.threads, config.smem_bytes, st>>>(a);
    return cudaGetLastError();
}

}  // namespace cuda
}  // namespace sdm_p1
