// Lean backward stage "front": the payload check and decode (against the ids, where given),
// the gates, the row's masks and the hot groups' list. CPU twins: check_payload,
// check_payload_order, load_gates and decode_payload (src/cpu/chunk_backward.cpp,
// chunk_stages.h), scan_forward's write counts. The check only
// finds whether the chunk's data has a problem (a payload word naming no entry, one named
// twice, a padding bit that disagrees with the valid tokens, padding before a valid entry, no
// head first; a bad gate): such a chunk, like one whose log-cumsums need the wide form, goes
// to the general backward, which finds the CPU's first offender and reports it.
#ifndef SDM_P1_KERNELS_BACKWARD_LEAN_LB_FRONT_CUH
#define SDM_P1_KERNELS_BACKWARD_LEAN_LB_FRONT_CUH

#include <utility>

#include "../../../canon/field_members.h"
#include "../../common/stage_load.cuh"
#include "../../common/warp_scan.cuh"
#include "lb_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lbwd {

// Sets the chunk's scalars and clears the payload check's bits. Ends with a barrier.
__device__ __forceinline__ void begin_chunk(const LbChunk& k, const LbArrays& arr, LbShared& sh) {
    if (threadIdx.x == 0) {
        sh.bad = 0;
        sh.gate_lowest_bit = 128;
        sh.gate_bits = 0;
        sh.hot_count = 0;
        sh.hot_next = 0;
        sh.small_count = 0;
        sh.small_next = 0;
        for (int c = 0; c < kSmallClasses; ++c) sh.small_class[c] = 0;
        sh.lone_next = 0;
    }
    for (int x = threadIdx.x; x < (k.n + 31) / 32; x += blockDim.x) arr.seen[x] = 0u;
    __syncthreads();
}

// The record gradients (canon/field_sets.h: read by sorted row), in ascending field order.
constexpr FieldList kRecordGrads = record_gradients();

// Chunk c's rows of each record gradient given, brought into L2 (nk write rows, nq read rows).
template <size_t... I>
__device__ __forceinline__ void prefetch_record_grads(const UpstreamGrads& up, int64_t c, size_t nk, size_t nq,
                                                      std::index_sequence<I...>) {
    const struct {
        const void* p;
        size_t bytes;   // a chunk's
    } fields[] = {{upstream_pointer<kRecordGrads.field[I]>(up),
                   (upstream_grad(kRecordGrads.field[I]).index == UpstreamIndex::kWriteRows ? nk : nq) *
                       (4 * upstream_grad(kRecordGrads.field[I]).words)}...};
    for (const auto& f : fields) {
        if (f.p != nullptr) prefetch_l2(static_cast<const char*>(f.p) + c * f.bytes, f.bytes);
    }
}

// Chunk c's payload row, values, gates and upstream records (read by sorted row, gathered) are
// brought into L2 while the block works on its current chunk.
__device__ __forceinline__ void prefetch_backward_chunk(const BackwardArgs& b, int64_t c) {
    const KernelShape& s = b.k.s;
    if (c >= s.N) return;
    const size_t value_size = s.bf16 ? 2 : 4, nk = static_cast<size_t>(s.C) * s.W, nq = static_cast<size_t>(s.C) * s.R;
    const UpstreamGrads& up = b.up;
    prefetch_l2(b.payload + c * b.row, 4 * (nk + nq));
    prefetch_l2(static_cast<const char*>(b.k.k_val) + c * nk * value_size, nk * value_size);
    prefetch_l2(static_cast<const char*>(b.k.q_val) + c * nq * value_size, nq * value_size);
    prefetch_l2(b.k.g + c * s.C * s.gate_width, static_cast<size_t>(s.C) * s.gate_width * 4);
    if (b.k.k_idx != nullptr) {   // the ids given: the payload's check reads them (check_order)
        const size_t id_size = s.idx64 ? 8 : 4;
        prefetch_l2(static_cast<const char*>(b.k.k_idx) + c * nk * id_size, nk * id_size);
        prefetch_l2(static_cast<const char*>(b.k.q_idx) + c * nq * id_size, nq * id_size);
    }
    prefetch_record_grads(up, c, nk, nq, std::make_index_sequence<kRecordGrads.count>());
}

// The payload row checked and decoded, a warp four blocks of 32 positions at a time (their
// words loaded first): each valid entry's position, the head and write bits of every position.
// Besides the checks every backward makes, the lean backward takes only groups whose entries
// ascend (as every forward's payload has them): its pair sums count a pair for both entries
// or for neither, which the canon's walks do only where a token's entries of a group are
// adjacent. A payload in another order (valid, but not a forward's) goes to the general
// backward, which follows the canon in any order (sh.bad).
__device__ __forceinline__ void decode_payload(const KernelShape& s, const LbChunk& k, const LbArrays& arr,
                                               LbShared& sh) {
    constexpr int kBlocks = 4;
    const int W = s.W, R = s.R, WR = W + R;
    const int words = (k.n + 31) / 32;
    bool bad = false;
    for (int w0 = kBlocks * warp_id(); w0 < words; w0 += kBlocks * warp_count()) {
        uint32_t p[kBlocks];
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            const int r = 32 * (w0 + j) + lane_id();
            p[j] = r < k.n ? k.row[r] : kTailPayload;
        }
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            const int r = 32 * (w0 + j) + lane_id();
            const LbEntry x = entry_of_word(p[j]);
            const bool padding = (p[j] & kInvalid) != 0u;
            const int e = x.t * WR + (x.is_q ? W + x.lane : x.lane);
            // the entry at r - 1: the lane before's, or for lane 0 the block before's last
            int before = __shfl_up_sync(kFullWarp, e, 1);
            if (lane_id() == 0 && r > 0 && r < k.n) {
                const LbEntry y = entry_of_word(k.row[r - 1]);
                before = y.t * WR + (y.is_q ? W + y.lane : y.lane);
            }
            if (r < k.n) {
                bool ok = x.t < s.C && x.lane < (x.is_q ? R : W) && padding == (x.t >= k.t_valid) &&
                          !(padding && r < k.nv) && !(r == 0 && !padding && !(p[j] & kHead)) &&
                          !(r > 0 && r < k.nv && !(p[j] & kHead) && e <= before);   // ascending in its group
                if (ok) {
                    const uint32_t bit = 1u << (e & 31);
                    if (atomicOr(&arr.seen[e >> 5], bit) & bit) ok = false;   // named twice
                    if (!padding) arr.position[e] = static_cast<uint16_t>(r);
                }
                bad |= !ok;
            }
            // positions past the row count as heads of padding
            const uint32_t heads = __ballot_sync(kFullWarp, padding || (p[j] & kHead) != 0u);
            const uint32_t writes = __ballot_sync(kFullWarp, r < k.n && !x.is_q);
            if (lane_id() == 0 && w0 + j < words) {
                arr.heads[w0 + j] = heads;
                arr.writes[w0 + j] = writes;
            }
        }
    }
    if (__any_sync(kFullWarp, bad) && lane_id() == 0) sh.bad = 1u;
}

// The sort key (slot << entry_bits | entry, canon/chunk_arrays.h) that the ids give the entry of
// payload word w (whose check passed), or false where its id is bad.
__device__ __forceinline__ bool word_key(const KernelArgs& a, const LbChunk& k, uint32_t w, uint64_t* key) {
    const KernelShape& s = a.s;
    const LbEntry x = entry_of_word(w);
    const int e = x.t * (s.W + s.R) + (x.is_q ? s.W + x.lane : x.lane);
    uint64_t slot = (uint64_t{1} << (a.key_bits - a.entry_bits)) - 1u;   // padding's
    if (x.t < k.t_valid) {
        const int64_t base = (k.c % s.P) * s.stream_offset, tok = k.c * s.C + x.t;
        const int64_t id =
            x.is_q ? load_id(a.q_idx, s.idx64, tok * s.R + x.lane) : load_id(a.k_idx, s.idx64, tok * s.W + x.lane);
        slot = slot_of_id(id, base);
        if (slot >= static_cast<uint64_t>(s.num_keys)) return false;
    }
    *key = slot << a.entry_bits | static_cast<uint64_t>(e);
    return true;
}

// With the ids given (after decode_payload passed the row): the row must be their sort, each
// word's key above the previous word's and each valid entry's head bit exactly where its slot
// changes (CPU twin: check_payload_order). A chunk that fails, or has a bad id, goes to the
// general backward (sh.bad), which reports the CPU's first offender. A warp takes kBlocks
// blocks of 32 positions at a time, their words and then their ids loaded together (the
// loads' latency, not their bytes, is the check's cost: S1's backward went 1.04 -> 1.59 ms
// with one position a thread at a time); the previous position's key comes from the lane
// before, or from the block before for lane 0.
__device__ __forceinline__ void check_order(const KernelArgs& a, const LbChunk& k, LbShared& sh) {
    constexpr int kBlocks = 4;
    bool bad = false;
    for (int r0 = 32 * kBlocks * warp_id(); r0 < k.n; r0 += 32 * kBlocks * warp_count()) {
        uint32_t w[kBlocks];
        uint64_t key[kBlocks];
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            const int r = r0 + 32 * j + lane_id();
            w[j] = r < k.n ? k.row[r] : 0u;
        }
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            const int r = r0 + 32 * j + lane_id();
            key[j] = ~uint64_t{0};   // past the row: above every key
            if (r < k.n) bad |= !word_key(a, k, w[j], &key[j]);
        }
        uint64_t last = 0;   // the key at r0 - 1
        if (lane_id() == 0 && r0 > 0) bad |= !word_key(a, k, k.row[r0 - 1], &last);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            const int r = r0 + 32 * j + lane_id();
            uint64_t before = __shfl_up_sync(kFullWarp, key[j], 1);
            const uint64_t block_last = __shfl_sync(kFullWarp, key[j], 31);
            if (lane_id() == 0) before = last;
            last = block_last;
            if (r > 0 && r < k.n) {
                const bool starts = (key[j] >> a.entry_bits) != (before >> a.entry_bits);
                bad |= key[j] <= before || (r < k.nv && ((w[j] & kHead) != 0u) != starts);
            }
        }
    }
    if (__any_sync(kFullWarp, bad) && lane_id() == 0) sh.bad = 1u;
}

// The valid tokens' gates checked, their lowest and highest bits gathered (log_shift), and
// with per-token gates tabled in fixed point and as exps.
template <bool PerWrite>
__device__ __forceinline__ void load_gates(const KernelArgs& a, const LbChunk& k, const LbArrays& arr, LbShared& sh) {
    const KernelShape& s = a.s;
    const int gw = PerWrite ? s.W : 1;
    const int gates = (PerWrite ? k.t_valid : s.C) * gw;
    const float* const g = a.g + k.c * s.C * gw;
    int lowest = 128, bits = 0;
    bool bad = false;
    for (int x = threadIdx.x; x < gates; x += blockDim.x) {
        const int t = PerWrite ? x / gw : x;
        Fix f = fix_zero();
        if (t < k.t_valid && !gate_to_fix(g[x], &f)) {
            bad = true;
            f = fix_zero();
        }
        if (!fix_is_zero(f)) {
            lowest = min(lowest, fix_lowest_bit(f));
            bits = max(bits, fix_magnitude_bits(f));
        }
        if (!PerWrite) {
            arr.gate_fix[t] = f;
            arr.gate_exp[t] = exp_fix(f);
        }
    }
    lowest = __reduce_min_sync(kFullWarp, lowest);
    bits = __reduce_max_sync(kFullWarp, bits);
    if (lane_id() == 0) {
        if (bits != 0) {
            atomicMin(&sh.gate_lowest_bit, lowest);
            atomicMax(&sh.gate_bits, bits);
        }
    }
    if (__any_sync(kFullWarp, bad) && lane_id() == 0) sh.bad = 1u;
}

// After a barrier: the write entries before each block of 32 positions (one warp), and the
// groups of several entries found (every warp, a block of positions a warp at a time): the
// hot ones (more than kSmallGroup entries) listed, the small ones counted by size class; one
// of more than hot_max entries sends the chunk to the general backward.
__device__ __forceinline__ void list_groups(const LeanBackwardLayout& l, const LbChunk& k, const LbArrays& arr,
                                            LbShared& sh) {
    const int words = (k.n + 31) / 32;
    if (warp_id() == 0) {
        uint32_t carry = 0;
        for (int w0 = 0; w0 < words; w0 += 32) {
            const int w = w0 + lane_id();
            const uint32_t x = w < words ? __popc(arr.writes[w]) : 0u;
            const uint32_t incl = warp_inclusive_sum(x, lane_id());
            if (w < words) arr.writes_before[w] = carry + incl - x;
            carry += __shfl_sync(kFullWarp, incl, 31);
        }
    }
    bool over = false;
    for (int w = warp_id(); w < (k.nv + 31) / 32; w += warp_count()) {
        const int r = 32 * w + lane_id(), m = group_at(arr, k, r);
        if (m == 0) continue;
        if (m <= kSmallGroup) {
            atomicAdd(&sh.small_class[small_class(m)], 1u);
        } else if (m <= l.hot_max) {
            arr.hot_list[atomicAdd(&sh.hot_count, 1u)] = static_cast<uint32_t>(r) | static_cast<uint32_t>(m) << 16;
        } else {
            over = true;
        }
    }
    if (__any_sync(kFullWarp, over) && lane_id() == 0) sh.bad = 1u;
}

// After list_groups and a barrier: the small groups listed, the classes in order of size
// (each thread turns the counts into the classes' first places; the groups of a class take
// places after them by an atomic count, which now starts from the class's first place).
__device__ __forceinline__ void list_small_groups(const LbChunk& k, const LbArrays& arr, LbShared& sh) {
    uint32_t first = 0, total = 0;   // thread c < kSmallClasses: class c's first place
#pragma unroll
    for (int c = 0; c < kSmallClasses; ++c) {
        if (c < static_cast<int>(threadIdx.x)) first += sh.small_class[c];
        total += sh.small_class[c];
    }
    __syncthreads();   // every thread has read the counts before they are reused
    if (threadIdx.x < kSmallClasses) sh.small_class[threadIdx.x] = first;
    if (threadIdx.x == 0) sh.small_count = total;
    __syncthreads();
    for (int w = warp_id(); w < (k.nv + 31) / 32; w += warp_count()) {
        const int r = 32 * w + lane_id(), m = group_at(arr, k, r);
        if (m == 0 || m > kSmallGroup) continue;
        arr.small_list[atomicAdd(&sh.small_class[small_class(m)], 1u)] =
            static_cast<uint32_t>(r) | static_cast<uint32_t>(m) << 16;
    }
}

}   // namespace lbwd
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_BACKWARD_LEAN_LB_FRONT_CUH
