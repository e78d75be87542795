// Stage "load and check" (CPU twin: load_and_check in src/cpu/chunk_stages.h; lean:
// kernels/lean/lean_load.cuh): the chunk's ids become sort keys by entry (slot << entry_bits
// | entry, canon/chunk_arrays.h: the keys are distinct and their order is the stable order
// by slot), its values are kept by entry, its gates become fixed-point numbers (with
// per-token gates also their exponentials; their lowest and highest bits decide the
// log-cumsums' form, log_shift), and the walker masks are cleared. Bad ids and gates are
// recorded, never used: such an id sorts as padding, such a gate counts as 0, so every later
// index stays in range.
#ifndef SDM_P1_KERNELS_STAGE_LOAD_CUH
#define SDM_P1_KERNELS_STAGE_LOAD_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

constexpr int kLoadBatch = 4;

// A value as float (the load stage reads bfloat16 bits or floats).
__device__ __forceinline__ float value_of(uint16_t bf16) { return bf16_to_f32(bf16); }
__device__ __forceinline__ float value_of(float f) { return f; }

// V consecutive elements of type T, loaded by one instruction (16 bytes or less).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
    T v[V];
};

// Whether p is aligned for Vec<T, V> loads.
template <typename T, int V>
__device__ __forceinline__ bool vec_aligned(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & (sizeof(T) * V - 1)) == 0u;
}

// The chunk's entries of one kind (lanes = W for the writes, whose ids are at `ids`, R for the
// reads; `column0` is the kind's first column in a token, 0 or W) become sort keys, with
// their ids as Id (int32_t or int64_t), and their values (as Value: uint16_t bfloat16 bits or
// float) are kept by entry. A thread takes V consecutive lanes of a token (load_entries
// decides V) and kBatch such vectors, whose loads are issued back to back and used after the
// last one; the element types are template parameters so that the compiler does not
// convert each load right after issuing it (waiting out every load's latency in turn).
template <typename Id, typename Value, int V, class Arrays>
__device__ __forceinline__ void load_kind(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh,
                                          const void* ids, const void* vals, int lanes, const Divider& by_lanes,
                                          int column0) {
    const KernelShape& s = a.s;
    const int WR = s.W + s.R;
    const uint32_t code_stride = static_cast<uint32_t>(WR + s.gate_width);
    // The largest slot the keys hold (launch: key_bits): padding sorts after every valid
    // entry, with a larger entry index where a valid entry has this slot.
    const uint64_t padding_slot = (uint64_t{1} << (a.key_bits - a.entry_bits)) - 1u;
    const int64_t first = k.c * s.C * lanes;   // the chunk's first entry of the kind
    const auto* const id_vec = reinterpret_cast<const Vec<Id, V>*>(static_cast<const Id*>(ids) + first);
    const auto* const val_vec = reinterpret_cast<const Vec<Value, V>*>(static_cast<const Value*>(vals) + first);
    const int vectors = s.C * lanes / V, valid_vectors = k.t_valid * lanes / V;
    // kLoadBatch ids in flight a thread (measured: two 16-byte vectors of ids a thread were
    // 1-2 % slower on S2 and S3 than one)
    constexpr int kBatch = kLoadBatch / V;
    for (int x0 = threadIdx.x; x0 < vectors; x0 += kBatch * blockDim.x) {
        Id id[kBatch][V];
        Value value[kBatch][V];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int x = x0 + b * blockDim.x;
            // Padding tokens' ids and values are not read.
            const Vec<Id, V> iv = x < valid_vectors ? id_vec[x] : Vec<Id, V>{};
            const Vec<Value, V> vv = x < valid_vectors ? val_vec[x] : Vec<Value, V>{};
#pragma unroll
            for (int v = 0; v < V; ++v) {
                id[b][v] = iv.v[v];
                value[b][v] = vv.v[v];
            }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int x = x0 + b * blockDim.x;
            if (x < vectors) {
                const int t = by_lanes.div(x * V), j0 = column0 + x * V - t * lanes;   // the first lane's column
                const int e0 = t * WR + j0;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    uint64_t slot = padding_slot;
                    if (t < k.t_valid) {
                        const int64_t slot_id = static_cast<int64_t>(id[b][v]);
                        if (slot_id < k.id_base || slot_id - k.id_base >= s.num_keys) {
                            atomicMin(&sh.error_code,
                                      static_cast<uint32_t>(t) * code_stride + static_cast<uint32_t>(j0 + v));
                        } else {
                            slot = static_cast<uint64_t>(slot_id - k.id_base);
                        }
                    }
                    arr.keys[e0 + v] = slot << a.entry_bits | static_cast<uint64_t>(e0 + v);
                    arr.value[e0 + v] = value_of(value[b][v]);
                }
            }
        }
    }
}

// Both kinds of entries (load_kind), V = 16 / sizeof(Id) lanes a thread (16-byte loads of
// the ids) where the kind's lanes and arrays allow, else one. The kinds share one copy of
// each loop (not unrolled).
template <typename Id, typename Value, class Arrays>
__device__ __forceinline__ void load_entries(const KernelArgs& a, const Chunk& k, const Arrays& arr, ChunkShared& sh) {
    const KernelShape& s = a.s;
    constexpr int V = 16 / sizeof(Id);
#pragma unroll 1
    for (int kind = 0; kind < 2; ++kind) {
        const bool q = kind == 1;
        const void* const ids = q ? a.q_idx : a.k_idx;
        const void* const vals = q ? a.q_val : a.k_val;
        const int lanes = q ? s.R : s.W;
        const Divider& by_lanes = q ? a.div.R : a.div.W;
        if (lanes % V == 0 && vec_aligned<Id, V>(ids) && vec_aligned<Value, V>(vals)) {
            load_kind<Id, Value, V>(a, k, arr, sh, ids, vals, lanes, by_lanes, q ? s.W : 0);
        } else {
            load_kind<Id, Value, 1>(a, k, arr, sh, ids, vals, lanes, by_lanes, q ? s.W : 0);
        }
    }
}

template <class Arrays>
__device__ __forceinline__ void load_and_check(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                               ChunkShared& sh) {
    const KernelShape& s = a.s;
    const int W = s.W, R = s.R, WR = W + R, gw = s.gate_width;
    const uint32_t code_stride = static_cast<uint32_t>(WR + gw);
    const int64_t tok0 = k.c * s.C;
    if (s.idx64) {
        if (s.bf16) {
            load_entries<int64_t, uint16_t>(a, k, arr, sh);
        } else {
            load_entries<int64_t, float>(a, k, arr, sh);
        }
    } else if (s.bf16) {
        load_entries<int32_t, uint16_t>(a, k, arr, sh);
    } else {
        load_entries<int32_t, float>(a, k, arr, sh);
    }
    int lowest = 128, bits = 0;   // over this thread's non-zero gates (log_shift)
    const int gates = s.C * gw;
    for (int x0 = threadIdx.x; x0 < gates; x0 += kLoadBatch * blockDim.x) {
        float g[kLoadBatch];   // loaded together, as the ids (padding tokens' are not read)
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int x = x0 + b * blockDim.x;
            const int t = a.div.gate_width.div(x);
            g[b] = x < gates && t < k.t_valid ? a.g[tok0 * gw + x] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int x = x0 + b * blockDim.x;
            if (x >= gates) break;
            const int t = a.div.gate_width.div(x), lane = x - t * gw;
            Fix f = fix_zero();
            if (t < k.t_valid && !gate_to_fix(g[b], &f)) {
                atomicMin(&sh.error_code, static_cast<uint32_t>(t) * code_stride + static_cast<uint32_t>(WR + lane));
            }
            arr.gate[x] = f;
            if (!fix_is_zero(f)) {
                lowest = min(lowest, fix_lowest_bit(f));
                bits = max(bits, fix_magnitude_bits(f));
            }
            // A token's first write of a slot has its gate as log-cumsum: its exp, once per token.
            if (arr.gate_exp) arr.gate_exp[x] = exp_fix(f);
        }
    }
    if (bits != 0) {
        atomicMin(&sh.gate_lowest_bit, lowest);
        atomicMax(&sh.gate_bits, bits);
    }
    const int mask_total = s.C * (mask_words(W) + mask_words(R));
    for (int x = threadIdx.x; x < mask_total; x += blockDim.x) arr.walk_mask[x] = 0u;
}

// Asks L2 for the bytes [p, p + bytes), a 128-byte line a thread at a time.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes) {
    const char* base = static_cast<const char*>(p);
    for (size_t off = threadIdx.x * size_t{128}; off < bytes; off += blockDim.x * size_t{128}) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
    }
}

// Chunk c's ids, values and gates are brought into L2 while the block works on its current
// chunk, so stage "load" of chunk c waits on L2 rather than on device memory.
__device__ __forceinline__ void prefetch_chunk(const KernelArgs& a, int64_t c) {
    const KernelShape& s = a.s;
    if (c >= s.N) return;
    const size_t id_size = s.idx64 ? 8 : 4, value_size = s.bf16 ? 2 : 4;
    const int64_t kw = c * s.C * s.W, kr = c * s.C * s.R;
    prefetch_l2(static_cast<const char*>(a.k_idx) + kw * id_size, static_cast<size_t>(s.C) * s.W * id_size);
    prefetch_l2(static_cast<const char*>(a.q_idx) + kr * id_size, static_cast<size_t>(s.C) * s.R * id_size);
    prefetch_l2(static_cast<const char*>(a.k_val) + kw * value_size, static_cast<size_t>(s.C) * s.W * value_size);
    prefetch_l2(static_cast<const char*>(a.q_val) + kr * value_size, static_cast<size_t>(s.C) * s.R * value_size);
    prefetch_l2(a.g + c * s.C * s.gate_width, static_cast<size_t>(s.C) * s.gate_width * 4);
}

// After load_and_check and a barrier: one thread publishes the chunk's first offender, if any.
__device__ __forceinline__ void report_chunk_error(const KernelArgs& a, const Chunk& k, const ChunkShared& sh) {
    if (threadIdx.x != 0 || sh.error_code == kNoError) return;
    const KernelShape& s = a.s;
    const int W = s.W, R = s.R, WR = W + R;
    const uint32_t code_stride = static_cast<uint32_t>(WR + s.gate_width);
    const int t = static_cast<int>(sh.error_code / code_stride);
    const int col = static_cast<int>(sh.error_code % code_stride);
    const int64_t tok = k.c * s.C + t;
    uint64_t bits;
    if (col < W) {
        bits = static_cast<uint64_t>(load_id(a.k_idx, s.idx64, tok * W + col));
    } else if (col < WR) {
        bits = static_cast<uint64_t>(load_id(a.q_idx, s.idx64, tok * R + (col - W)));
    } else {
        bits = f32_bits(a.g[tok * s.gate_width + (col - WR)]);
    }
    a.chunk_value[k.c] = bits;
    atomicMin(&a.status->key, static_cast<unsigned long long>(k.c) << kStatusCodeBits | sh.error_code);
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_STAGE_LOAD_CUH
