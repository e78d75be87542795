// Lean stage "rows" (the twin of the sorted-row outputs of the general kernel's stage
// "records", kernels/general/stage_records.cuh, and of the CPU's write_records in
// src/cpu/chunk_stages.h): per 32 sorted positions the mask of the write
// entries and the writes before them (the rank table, and each entry's index in its kind's
// row), likewise the groups' first writes where the tile or dc indices are requested (stage
// "records" reads them), then the sorted payloads (16-byte stores), spay_k, spay_q and
// spay_rank.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_ROWS_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_ROWS_CUH

#include "lean_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Whether a plan's fields count the groups' first writes (the tile and dc indices; the
// layout then has fmask and fpre). RowFields: the kernel's form (no other form counts them).
template <bool RowFields>
__device__ __forceinline__ bool counts_firsts(const OutputBuffers& out) {
    return RowFields && (out.tiles_k != nullptr || out.dc_kpos != nullptr);
}

// Whether lean payload word p (its peer bits included) is the first valid write of its group.
__device__ __forceinline__ bool first_write(uint32_t p) {
    return (p & (kInvalid | kIsQ)) == 0u && (p >> kPayBeforeShift & kPayPeerMask) == 0u;
}

// The write-entry mask of each 32 sorted positions (a warp's ballot a block of 32), and where
// the fields count groups, the mask of the groups' first writes.
template <bool RowFields>
__device__ __forceinline__ void mark_writes(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    const int lane = static_cast<int>(threadIdx.x & 31u), warps = static_cast<int>(blockDim.x >> 5);
    const int blocks = (k.n + 31) / 32;
    const bool firsts = counts_firsts<RowFields>(a.out);
    for (int b = static_cast<int>(threadIdx.x >> 5); b < blocks; b += warps) {
        const int r = 32 * b + lane;
        const uint32_t mask = __ballot_sync(kFullWarp, r < k.n && !(arr.pay[r] & kIsQ));
        if (lane == 0) arr.kmask[b] = mask;
        if (firsts) {
            const uint32_t first = __ballot_sync(kFullWarp, r < k.n && first_write(arr.pay[r]));
            if (lane == 0) arr.fmask[b] = first;
        }
    }
}

// Marked positions before each block of 32 (one warp): mask words to their exclusive prefix
// sums in pre; returns the total.
__device__ __forceinline__ uint32_t count_marked(const uint32_t* mask, uint32_t* pre, int blocks) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
    uint32_t carry = 0;
    for (int b = 0; b < blocks; b += 32) {
        const uint32_t x = b + lane < blocks ? __popc(mask[b + lane]) : 0u;
        const uint32_t incl = warp_inclusive_sum(x, lane);
        if (b + lane < blocks) pre[b + lane] = carry + incl - x;
        carry += __shfl_sync(kFullWarp, incl, 31);
    }
    return carry;
}

// The writes before each block of 32 positions and, where the fields count groups, the
// groups' first writes, whose total ends the tile and dc indices (one warp).
template <bool RowFields>
__device__ __forceinline__ void count_writes(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    const int blocks = (k.n + 31) / 32;
    count_marked(arr.kmask, arr.kpre, blocks);
    if (!counts_firsts<RowFields>(a.out)) return;
    const uint32_t valid_groups = count_marked(arr.fmask, arr.fpre, blocks);
    if ((threadIdx.x & 31u) == 0u) {
        const KernelShape& s = a.s;
        const ChunkFacts f{k.c, s.C, s.W, s.R, s.rec_tile, k.id_base, s.bf16, nullptr, a.div.tile};
        write_chunk_tails(a.out, f, static_cast<int32_t>(valid_groups));
    }
}

// The sorted payloads, the row's padding, the sorted write and read rows and the rank table;
// four positions a thread.
__device__ __forceinline__ void write_rows(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    const OutputBuffers& out = a.out;
    const int n = k.n, row = (n + kRowAlign - 1) / kRowAlign * kRowAlign;
    const int64_t nk = static_cast<int64_t>(a.s.C) * a.s.W, nq = static_cast<int64_t>(a.s.C) * a.s.R;
    int32_t* const pay_out = out.payload + k.c * row;
    const bool aligned = (reinterpret_cast<uintptr_t>(pay_out) & 15u) == 0u;
    for (int r0 = 4 * static_cast<int>(threadIdx.x); r0 < row; r0 += 4 * static_cast<int>(blockDim.x)) {
        const uint4 words = *reinterpret_cast<const uint4*>(arr.pay + r0);
        const uint32_t p[4] = {r0 < n ? words.x : kTailPayload, r0 + 1 < n ? words.y : kTailPayload,
                               r0 + 2 < n ? words.z : kTailPayload, r0 + 3 < n ? words.w : kTailPayload};
        const int4 out4 = make_int4(static_cast<int32_t>(p[0] & ~kPayPeers), static_cast<int32_t>(p[1] & ~kPayPeers),
                                    static_cast<int32_t>(p[2] & ~kPayPeers), static_cast<int32_t>(p[3] & ~kPayPeers));
        if (aligned) {
            *reinterpret_cast<int4*>(pay_out + r0) = out4;
        } else {
            pay_out[r0] = out4.x;
            pay_out[r0 + 1] = out4.y;
            pay_out[r0 + 2] = out4.z;
            pay_out[r0 + 3] = out4.w;
        }
        if (r0 >= n) continue;
        const uint32_t mask = arr.kmask[r0 >> 5], writes0 = arr.kpre[r0 >> 5];
        if (out.spay_rank && (r0 & 31) == 0)
            write_rank(out, k.c, (n + 31) / 32, r0 >> 5, static_cast<int32_t>(writes0), mask);
        if (!out.spay_k && !out.spay_q) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = r0 + i;
            if (r >= n) break;
            const bool is_q = (p[i] & kIsQ) != 0u;
            if (is_q ? !out.spay_q : !out.spay_k) continue;
            const uint32_t before = p[i] >> kPayBeforeShift & kPayPeerMask,
                           after = p[i] >> kPayAfterShift & kPayPeerMask;
            const int32_t elem = sorted_element(p[i], before, after, !(p[i] & kInvalid));
            const uint32_t writes = writes0 + __popc(mask & ((1u << (r & 31)) - 1u));   // before r
            if (is_q) {
                out.spay_q[k.c * nq + (r - writes)] = elem;
            } else {
                out.spay_k[k.c * nk + writes] = elem;
            }
        }
    }
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_ROWS_CUH
