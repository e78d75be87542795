// The lean backward's instantiations (per-token and per-write gates), its plan-time choice of
// layout and its launch (backward_launch.h).
#include <cuda_runtime.h>

#include <algorithm>

#include "../../common/smem_limits.cuh"
#include "lb_kernel.cuh"

namespace sdm_p1 {
namespace cuda {

namespace {

using LeanBackwardFn = void (*)(BackwardArgs);

// Blocks of 256 threads for chunks of up to 8192 entries (two or three an SM: each overlaps
// the others' barriers and memory waits), else of 512.
int lean_backward_threads(const KernelShape& s) { return s.C * (s.W + s.R) <= 8192 ? 256 : 512; }

LeanBackwardFn lean_backward_for(const KernelShape& s) {
    const bool small = lean_backward_threads(s) == 256;
    if (s.gate_width == 1)
        return small ? lbwd::lean_backward_kernel<false, 256> : lbwd::lean_backward_kernel<false, 512>;
    return small ? lbwd::lean_backward_kernel<true, 256> : lbwd::lean_backward_kernel<true, 512>;
}

// The most warps that take hot groups: half the block's, at least two (fewer where
// shared memory would otherwise hold fewer blocks an SM: one at least).
int hot_warp_target(int threads) { return std::max(2, threads / 32 / 2); }

}   // namespace

int lean_backward_configure(const KernelShape& s, int device, int sms, LeanBackwardLayout* layout) {
    *layout = LeanBackwardLayout{};
    const int n = s.C * (s.W + s.R);
    if (n > kLeanBackwardMaxEntries) return cudaSuccess;
    const LeanBackwardFn kernel = lean_backward_for(s);
    SmemLimits limits{};
    cudaError_t e = raise_smem_limit(reinterpret_cast<const void*>(kernel), device, &limits);
    if (e != cudaSuccess) return e;
    const int threads = lean_backward_threads(s);
    // A hot group of distinct ids in each token holds at most one write and one read a token.
    const int hot_max = std::min((n + 31) / 32 * 32, std::max(64, (2 * s.C + 31) / 32 * 32));
    const bool per_token = s.gate_width == 1;
    for (int blocks = 4; blocks >= 1; --blocks) {
        const size_t room = limits.room(blocks);
        for (int hot = hot_warp_target(threads); hot >= 1; --hot) {
            LeanBackwardLayout l = lean_backward_layout(s.C, s.W, s.R, per_token, threads, hot, hot_max, room);
            if (l.smem_bytes > room) continue;
            int resident = 0;
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, l.smem_bytes);
            if (e != cudaSuccess) return e;
            if (resident < blocks) break;   // fewer hot warps do not free registers
            l.blocks_per_sm = blocks;
            l.grid = static_cast<int>(std::min<int64_t>(s.N, static_cast<int64_t>(sms) * blocks));
            *layout = l;
            return cudaSuccess;
        }
    }
    return cudaSuccess;   // no room: the general backward computes every chunk
}

int lean_backward_launch(const BackwardArgs& b, void* stream) {
    const LeanBackwardLayout& l = b.lean;
    lean_backward_for(b.k.s)<<<l.grid, l.threads, l.smem_bytes, static_cast<cudaStream_t>(stream)>>>(b);
    return cudaGetLastError();
}

}   // namespace cuda
}   // namespace sdm_p1
