// Lean stage "load and check" (the twin of kernels/common/stage_load.cuh and the CPU's
// load_and_check in src/cpu/chunk_stages.h): the chunk's ids become 32-bit sort keys held in the thread's registers
// (slot << entry_bits | entry), its gates are checked and, per token, tabled as the log and
// exp an entry alone in its group takes; the a and qk rows are zeroed (the pair stage then
// stores only the cells that have terms). Bad ids and gates are recorded as the general
// kernel records them (report_chunk_error); such a chunk's outputs are unspecified.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_LOAD_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_LOAD_CUH

#include "../common/stage_load.cuh"
#include "lean_context.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// A thread's keys, kept in registers from stage "load" to the scatter of stage "sort".
// Slot x of thread i is entry vector i + (x / V) * blockDim.x of the chunk (the write
// entries' vectors, then the reads'), element x % V (V: lanes a load).
struct ThreadKeys {
    uint32_t key[kLeanKeysPerThread];        // a valid entry's sort key; a padding entry's index
    uint32_t present;                        // bit x: slot x holds an entry
    uint32_t valid;                          // bit x: ... of a valid token
    uint32_t rank[kLeanKeysPerThread / 8];   // 4 bits a slot: its arrival in its bucket
};

// Sets the chunk's block-wide scalars and clears the arrays that are summed into.
__device__ __forceinline__ void begin_chunk(const KernelArgs& a, const LeanArrays& arr, LeanShared& sh) {
    if (threadIdx.x == 0) {
        sh.base.error_code = kNoError;
        sh.base.repeats = 0;
        sh.base.gate_lowest_bit = 128;
        sh.base.gate_bits = 0;
        sh.overflow = 0;
        sh.bad_ids = 0;
        sh.grouped = 0;
        sh.groups = 0;
        sh.sized[0] = sh.sized[1] = sh.sized[2] = 0;
    }
    const int buckets = kLeanBucketsPerThread * static_cast<int>(blockDim.x);
    for (int x = threadIdx.x; x <= buckets / 2; x += blockDim.x) arr.starts[x] = 0u;
    const int masks = a.s.C * (mask_words(a.s.W) + mask_words(a.s.R));
    for (int x = threadIdx.x; x < masks; x += blockDim.x) arr.wmask[x] = 0u;
    for (int x = threadIdx.x; x <= 2 * a.s.C; x += blockDim.x) arr.units[x] = 0u;
}

// After a chunk's load found a bad id (sh.bad_ids, read after a barrier): its ids checked
// again, the block's threads striding over them, each bad one recorded as the general kernel
// records it. Kept out of load_keys, which only raises the flag: its registers hold the keys.
__device__ __forceinline__ void record_bad_ids(const KernelArgs& a, const Chunk& k, LeanShared& sh) {
    const KernelShape& s = a.s;
    const uint32_t code_stride = static_cast<uint32_t>(s.W + s.R + s.gate_width);
    const int nk = k.t_valid * s.W, n = nk + k.t_valid * s.R;
    for (int x = threadIdx.x; x < n; x += blockDim.x) {
        const bool is_q = x >= nk;
        const int i = is_q ? x - nk : x;   // the entry's index among its kind's
        const int t = static_cast<int>(is_q ? a.div.R.div(i) : a.div.W.div(i));
        const int column = is_q ? s.W + i - t * s.R : i - t * s.W;
        const int64_t id =
            is_q ? load_id(a.q_idx, s.idx64, k.c * s.C * s.R + i) : load_id(a.k_idx, s.idx64, k.c * s.C * s.W + i);
        if (slot_of_id(id, k.id_base) >= static_cast<uint64_t>(s.num_keys)) {
            atomicMin(&sh.base.error_code, static_cast<uint32_t>(t) * code_stride + static_cast<uint32_t>(column));
        }
    }
}

// The keys with V lanes a load (Vec<Id, V>: 16 bytes, or one id), in 32-bit arithmetic but
// for the id's slot (slot_of_id: one unsigned compare checks it). A bad id only raises
// sh.bad_ids (record_bad_ids records it): the atomic stays out of the unrolled loop.
template <typename Id, int V>
__device__ __forceinline__ void load_keys_v(const KernelArgs& a, const Chunk& k, LeanShared& sh, ThreadKeys& tk) {
    const KernelShape& s = a.s;
    const int W = s.W, WR = W + s.R;
    const int nk = s.C * W, nq = s.C * s.R;
    const int kvecs = nk / V, vecs = kvecs + nq / V;
    const auto* const kid = reinterpret_cast<const Vec<Id, V>*>(static_cast<const Id*>(a.k_idx) + k.c * nk);
    const auto* const qid = reinterpret_cast<const Vec<Id, V>*>(static_cast<const Id*>(a.q_idx) + k.c * nq);
    const uint64_t num_keys = static_cast<uint64_t>(s.num_keys);
    constexpr int kLoads = kLeanKeysPerThread / V;
    // Four loads in flight a thread, each batch's issued before any of them is used.
    constexpr int kBatch = kLoads < 4 ? kLoads : 4;
    uint32_t present = 0u, valid = 0u;
#pragma unroll
    for (int l0 = 0; l0 < kLoads; l0 += kBatch) {
        Vec<Id, V> ids[kBatch];
        int token[kBatch], column[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int x = static_cast<int>(threadIdx.x) + (l0 + b) * static_cast<int>(blockDim.x);
            const bool is_q = x >= kvecs;
            const int first = (is_q ? x - kvecs : x) * V;   // the vector's first element of its kind
            const int t = static_cast<int>(is_q ? a.div.R.div(first) : a.div.W.div(first));
            token[b] = x < vecs ? t : s.C;
            column[b] = is_q ? W + first - t * s.R : first - t * W;
            ids[b] = x < vecs && t < k.t_valid ? (is_q ? qid[x - kvecs] : kid[x]) : Vec<Id, V>{};
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int t = token[b];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int x = (l0 + b) * V + v;
                const int e = t * WR + column[b] + v;
                tk.key[x] = static_cast<uint32_t>(e);
                if (t >= s.C) continue;
                present |= 1u << x;
                if (t >= k.t_valid) continue;
                valid |= 1u << x;
                const uint64_t slot = slot_of_id(static_cast<int64_t>(ids[b].v[v]), k.id_base);
                if (slot >= num_keys) {
                    sh.bad_ids = 1u;   // recorded by record_bad_ids; sorts as slot 0
                } else {
                    tk.key[x] = static_cast<uint32_t>(slot) << a.entry_bits | static_cast<uint32_t>(e);
                }
            }
        }
    }
    tk.present = present;
    tk.valid = valid;
}

// Vectors: the instantiation's width (16 bytes a load, or one id), chosen by the policy
// from the shape and at launch from the arrays' alignment (kernels/launch.cu).
template <typename Id, bool Vectors>
__device__ __forceinline__ void load_keys(const KernelArgs& a, const Chunk& k, LeanShared& sh, ThreadKeys& tk) {
    load_keys_v<Id, Vectors ? static_cast<int>(16 / sizeof(Id)) : 1>(a, k, sh, tk);
}

// The gates: checked, their lowest and highest bits (the log form, log_shift), and with
// per-token gates the tables of an entry alone in its group (its log is its token's gate).
template <bool PerWrite>
__device__ __forceinline__ void load_gates(const KernelArgs& a, const Chunk& k, const LeanArrays& arr, LeanShared& sh) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R, gw = PerWrite ? s.W : 1;
    const uint32_t code_stride = static_cast<uint32_t>(WR + gw);
    const int gates = s.C * gw;
    const float* const g = a.g + k.c * gates;
    int lowest = 128, bits = 0;
    for (int x0 = threadIdx.x; x0 < gates; x0 += kLoadBatch * blockDim.x) {
        float v[kLoadBatch];
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int x = x0 + b * static_cast<int>(blockDim.x);
            const int t = PerWrite ? static_cast<int>(a.div.W.div(x)) : x;
            v[b] = x < gates && t < k.t_valid ? g[x] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int x = x0 + b * static_cast<int>(blockDim.x);
            if (x >= gates) break;
            const int t = PerWrite ? static_cast<int>(a.div.W.div(x)) : x;
            Fix f = fix_zero();
            if (t < k.t_valid && !gate_to_fix(v[b], &f)) {
                atomicMin(&sh.base.error_code,
                          static_cast<uint32_t>(t) * code_stride + static_cast<uint32_t>(WR + x - t * gw));
            }
            if (!fix_is_zero(f)) {
                lowest = min(lowest, fix_lowest_bit(f));
                bits = max(bits, fix_magnitude_bits(f));
            }
            if (!PerWrite) {
                const double ex = exp_fix(f);
                arr.gate_f32[t] = fix_to_f32(f);
                arr.gate_exp[t] = ex;
                arr.gate_cpe[t] = to_f32(ex);
                arr.gate_fix[t] = f;
            }
        }
    }
    lowest = __reduce_min_sync(kFullWarp, lowest);
    bits = __reduce_max_sync(kFullWarp, bits);
    if ((threadIdx.x & 31u) == 0u && bits != 0) {
        atomicMin(&sh.base.gate_lowest_bit, lowest);
        atomicMax(&sh.base.gate_bits, bits);
    }
}

// k_val or q_val of entry x (a gather: grouped entries and pair terms).
template <typename Value>
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Chunk& k, const KeyEntry& x) {
    const int lanes = x.is_q ? a.s.R : a.s.W;
    const Value* const vals = static_cast<const Value*>(x.is_q ? a.q_val : a.k_val);
    return value_of(vals[(k.c * a.s.C + x.t) * lanes + x.lane]);
}

// The chunk's rows of a and qk set to 0.
__device__ __forceinline__ void zero_pair_rows(const KernelArgs& a, const Chunk& k) {
    const int cells = a.s.C * a.s.C;
    zero_floats(a.out.a + k.c * cells, cells);
    zero_floats(a.out.qk + k.c * cells, cells);
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_LOAD_CUH
