// The lean backward: one thread block a chunk (a persistent grid), from the forward's payload
// to the input gradients, every array in shared memory (kernels/backward/lean/README.md).
// Twins: backward_kernel in kernels/backward/backward_kernel.cuh (the general backward), backward_chunk
// in src/cpu/chunk_backward.cpp. A chunk it cannot take (bad data, log-cumsums of the wide form,
// a group of more than hot_max entries) it lists for the general backward, launched after it.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_KERNEL_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_KERNEL_CUH

#include "lb_front.cuh"
#include "lb_hot_groups.cuh"
#include "lb_lone.cuh"
#include "lb_small_groups.cuh"
#include "lb_tokens.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// PerWrite: gates per write lane (else per token). Threads: the block size, 256 (chunks of up
// to 8192 entries, up to three blocks an SM: 80 registers) or 512 (128 registers).
template <bool PerWrite, int Threads>
__global__ void __launch_bounds__(Threads, Threads == 256 ? 3 : 1)
    lean_backward_kernel(const __grid_constant__ BackwardArgs b) {
    extern __shared__ __align__(16) char smem[];
    __shared__ LbShared sh;
    const KernelArgs& a = b.k;
    const KernelShape& s = a.s;
    const LeanBackwardLayout& l = b.lean;
    char* const slice =
        b.lean_slices != nullptr ? b.lean_slices + static_cast<size_t>(blockIdx.x) * l.slice_bytes : nullptr;
    const LbArrays arr = bind_lb_arrays(smem, slice, l);
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    const int WR = s.W + s.R;
    for (int64_t c = blockIdx.x; c < s.N; c += gridDim.x) {
        const int t_valid = valid_tokens(a, c);
        const LbChunk k{c, t_valid, s.C * WR, t_valid * WR, reinterpret_cast<const uint32_t*>(b.payload + c * b.row)};
        begin_chunk(k, arr, sh);
        prefetch_backward_chunk(b, c + gridDim.x);
        decode_payload(s, k, arr, sh);
        load_gates<PerWrite>(a, k, arr, sh);
        __syncthreads();
        if (threadIdx.x == 0) sh.shift = log_shift(sh.gate_lowest_bit, sh.gate_bits, s.C);
        if (a.k_idx != nullptr && sh.bad == 0u) check_order(a, k, sh);   // the ids given: the payload is their sort
        list_groups(l, k, arr, sh);
        __syncthreads();
        if (sh.bad != 0u || sh.shift < 0) {
            if (threadIdx.x == 0) list_general_chunk(a, c);
            __syncthreads();   // sh is reset for the next chunk
            continue;
        }
        if (b.compute) {
            list_small_groups(k, arr, sh);
            __syncthreads();
            if (warp_id() < l.hot_warps) hot_groups<PerWrite>(b, k, arr, sh);
            small_groups<PerWrite>(b, k, arr, sh);
            lone_entries<PerWrite, Threads == 256 ? 2 : 4>(b, k, arr, sh);   // 256: no spills at 80 registers
            __syncthreads();
            token_sums<PerWrite>(b, k, arr);
        }
        __syncthreads();
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_KERNEL_CUH
