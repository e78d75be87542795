// Stages "payload check", "load" (the gates alone) and "payload decode" of the backward given
// the forward's payload. CPU twins: check_payload, load_gates (src/cpu/chunk_stages.h) and
// decode_payload in src/cpu/chunk_backward.cpp. The check finds the same first bad word as the
// CPU's serial walk: a word names an entry "an earlier word named" where a smaller position
// names it too (the least position of each entry, by an integer atomicMin), which for the
// first bad word is exactly what the serial walk has seen.
#ifndef SDM_P1_KERNELS_BACKWARD_BWD_PAYLOAD_CUH
#define SDM_P1_KERNELS_BACKWARD_BWD_PAYLOAD_CUH

#include "bwd_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace bwd {

// The chunk's first bad payload word, if any, recorded for sdm_p1_execute_status.
__device__ __forceinline__ void report_payload_error(const BackwardArgs& b, const Chunk& k, const BackwardShared& bsh) {
    if (threadIdx.x == 0 && bsh.payload_error != kNoPayloadError) {
        const uint32_t* const row = reinterpret_cast<const uint32_t*>(b.payload + k.c * b.row);
        b.payload_value[k.c] = static_cast<uint64_t>(k.t_valid) << 32 | row[bsh.payload_error >> 3];
        atomicMin(&b.k.status->payload_key,
                  static_cast<unsigned long long>(k.c) << kStatusCodeBits | bsh.payload_error);
    }
}

// What the check finds wrong with the word w at position r (the CPU's order of tests), or
// kNoPayloadError; first_r: the least position of a word that names the same entry.
__device__ __forceinline__ uint32_t payload_problem(const KernelShape& s, const Chunk& k, uint32_t w, int r,
                                                    const int32_t* first) {
    const int W = s.W, R = s.R, WR = W + R;
    const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
    const bool is_q = (w & kIsQ) != 0u, padding = (w & kInvalid) != 0u;
    if (t >= s.C || lane >= (is_q ? R : W)) return kPayloadNoEntry;
    if (padding != (t >= k.t_valid)) return kPayloadPaddingBit;
    if (first[entry_of(W, WR, t, lane, is_q)] < r) return kPayloadTwice;
    if (padding && r < k.t_valid * WR) return kPayloadPaddingFirst;
    if (r == 0 && !padding && !(w & kHead)) return kPayloadNoHead;
    return kNoPayloadError;
}

// Stage "payload check": the first bad word of the chunk's row (bsh.payload_error), recorded
// for sdm_p1_execute_status. Ends with a barrier.
__device__ __forceinline__ void check_payload(const BackwardArgs& b, const Chunk& k, const Arrays& arr,
                                              BackwardShared& bsh) {
    const KernelShape& s = b.k.s;
    const int W = s.W, R = s.R, WR = W + R;
    const uint32_t* const row = reinterpret_cast<const uint32_t*>(b.payload + k.c * b.row);
    int32_t* const first = arr.head;   // the least position naming each entry
    for (int e = threadIdx.x; e < k.n; e += blockDim.x) first[e] = k.n;
    __syncthreads();
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t w = row[r];
        const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
        const bool is_q = (w & kIsQ) != 0u;
        if (t < s.C && lane < (is_q ? R : W)) atomicMin(&first[entry_of(W, WR, t, lane, is_q)], r);
    }
    __syncthreads();
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t problem = payload_problem(s, k, row[r], r, first);
        if (problem != kNoPayloadError) atomicMin(&bsh.payload_error, static_cast<uint32_t>(r) << 3 | problem);
    }
    __syncthreads();
    report_payload_error(b, k, bsh);
}

// Stage "payload check", with the ids given (after check_payload and stage "load and check"
// passed, which made the keys by entry from the ids): each word's key above the previous
// word's, and each valid entry's head bit exactly where its slot differs from the previous
// word's (CPU twin: check_payload_order). Each position is checked on its own; the least bad
// one is the CPU's first. Ends with a barrier.
__device__ __forceinline__ void check_payload_order(const BackwardArgs& b, const Chunk& k, const Arrays& arr,
                                                    BackwardShared& bsh) {
    const KernelShape& s = b.k.s;
    const int W = s.W, WR = W + s.R, valid_entries = k.t_valid * WR;
    const uint32_t* const row = reinterpret_cast<const uint32_t*>(b.payload + k.c * b.row);
    const auto key_at = [&](int r) {
        const uint32_t w = row[r];
        return arr.keys[entry_of(W, WR, payload_token(w), static_cast<int>(w & kLaneMask), (w & kIsQ) != 0u)];
    };
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t w = row[r];
        const uint64_t key = key_at(r), before = r > 0 ? key_at(r - 1) : 0u;
        const bool starts = r == 0 || (key >> b.k.entry_bits) != (before >> b.k.entry_bits);
        uint32_t problem = kNoPayloadError;
        if (r > 0 && key <= before) {
            problem = kPayloadOrder;
        } else if (r < valid_entries && ((w & kHead) != 0u) != starts) {
            problem = kPayloadGroupHead;
        }
        if (problem != kNoPayloadError) atomicMin(&bsh.payload_error, static_cast<uint32_t>(r) << 3 | problem);
    }
    __syncthreads();
    report_payload_error(b, k, bsh);
}

// Stage "load" without ids: the valid tokens' gates in fixed point (padding tokens' and bad
// ones are 0), the first bad one in sh.error_code as the forward's stage "load and check"
// codes it.
__device__ __forceinline__ void load_gates(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R, gw = s.gate_width;
    const uint32_t code_stride = static_cast<uint32_t>(WR + gw);
    for (int x = threadIdx.x; x < s.C * gw; x += blockDim.x) {
        const int t = a.div.gate_width.div(x), lane = x - t * gw;
        Fix f = fix_zero();
        if (t < k.t_valid && !gate_to_fix(a.g[k.c * s.C * gw + x], &f)) {
            f = fix_zero();
            atomicMin(&sh.error_code, static_cast<uint32_t>(t) * code_stride + static_cast<uint32_t>(WR + lane));
        }
        arr.gate[x] = f;
    }
}

// Stage "payload decode" (the chunk's check passed): the sorted row's payload words with the
// payload's group heads (every padding entry a head of its own), values, each entry's
// position.
__device__ __forceinline__ void decode_payload(const BackwardArgs& b, const Chunk& k, const Arrays& arr) {
    const KernelShape& s = b.k.s;
    const int W = s.W, WR = W + s.R;
    const uint32_t* const row = reinterpret_cast<const uint32_t*>(b.payload + k.c * b.row);
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t w = row[r];
        const int t = payload_token(w), lane = static_cast<int>(w & kLaneMask);
        const bool is_q = (w & kIsQ) != 0u, valid = !(w & kInvalid);
        arr.payload[r] = payload_word(t, lane, is_q, valid) | ((w & kHead) || !valid ? kHead : 0u);
        arr.position[entry_of(W, WR, t, lane, is_q)] = r;
        arr.value[r] = entry_value(b.k, k, t, lane, is_q);
    }
}

}   // namespace bwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_BWD_PAYLOAD_CUH
