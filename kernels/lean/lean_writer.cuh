// Lean stage "entries" (the twin of the entry fields of the general kernel's stage "records",
// kernels/general/stage_records.cuh, and of the CPU's write_records in src/cpu/chunk_stages.h): every per-entry output in entry order, V consecutive lanes
// a thread (4 in the vector instantiations: one 16-, 8- or 4-byte store a field per four
// entries; 1 in the scalar ones). An entry alone in its group is served from its token's gate (the table,
// or its own gate with per-write gates): log = the gate, rex = 0, cpe and k_eff from exp of
// the gate; a read alone has log 0, so q_w is its value (rounded as the general path rounds
// it: scaled_f32(v, 1.0)). A grouped entry reads its records (stage "groups"); a padding
// entry gets the neutral outputs. The bits are those of write_entry_outputs: the same
// functions of the same exact values.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_WRITER_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_WRITER_CUH

#include "lean_load.cuh"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// One write entry's outputs.
struct WriteOut {
    float log, rex, cpe, k_eff;
    int32_t pos;
    int8_t last, only;
};

// One read entry's outputs.
struct ReadOut {
    float log, q_w;
    int32_t pos;
    int8_t last, only;
};

// An entry's packed position and flags from its info word (valid entries).
__device__ __forceinline__ void position_of(const LeanArrays& arr, uint16_t info, int32_t* pos, int8_t* last,
                                            int8_t* only) {
    if (info & kGrouped) {
        const uint32_t p = arr.rpos[info & 0x7FFFu];
        *pos = static_cast<int32_t>(p);
        *last = packed_after(p) == 0u ? 1 : 0;
        *only = *last && packed_before(p) == 0u ? 1 : 0;
    } else {
        *pos = pack_position(info, 0u, 0u, true);
        *last = *only = 1;
    }
}

// Write entry e with value v, its token's gate tables (per-token gates: the gate's log,
// exp and cpe) or its own gate g (per-write gates).
template <bool PerWrite>
__device__ __forceinline__ WriteOut write_entry(const LeanArrays& arr, int e, bool valid, float v, float g,
                                                float gate_log, double gate_exp, float gate_cpe) {
    WriteOut o;
    if (!valid) {
        o.log = o.rex = 0.0f;
        o.cpe = to_f32(1.0);
        o.k_eff = scaled_f32(0.0f, 1.0);
        o.pos = e;
        o.last = o.only = 0;
        return o;
    }
    const uint16_t info = arr.info[e];
    position_of(arr, info, &o.pos, &o.last, &o.only);
    if (info & kGrouped) {
        const uint32_t x = info & 0x7FFFu;
        o.log = arr.rlog[x];
        o.rex = arr.rrex[x];
        o.cpe = arr.rcpe[x];
        o.k_eff = arr.rscaled[x];
        return o;
    }
    if (PerWrite) {
        Fix f;
        gate_to_fix(g, &f);   // checked in stage "load"
        gate_log = fix_to_f32(f);
        gate_exp = exp_fix(f);
        gate_cpe = to_f32(gate_exp);
    }
    o.log = gate_log;
    o.rex = fix_to_f32(fix_zero());
    o.cpe = gate_cpe;
    o.k_eff = scaled_f32(v, gate_exp);
    return o;
}

// Read entry e with value v.
__device__ __forceinline__ ReadOut read_entry(const LeanArrays& arr, int e, bool valid, float v) {
    ReadOut o;
    if (!valid) {
        o.log = 0.0f;
        o.q_w = scaled_f32(0.0f, 1.0);
        o.pos = e;
        o.last = o.only = 0;
        return o;
    }
    const uint16_t info = arr.info[e];
    position_of(arr, info, &o.pos, &o.last, &o.only);
    if (info & kGrouped) {
        o.log = arr.rlog[info & 0x7FFFu];
        o.q_w = arr.rscaled[info & 0x7FFFu];
    } else {
        o.log = fix_to_f32(fix_zero());
        o.q_w = scaled_f32(v, 1.0);
    }
    return o;
}

// A float as the value dtype's bits (Value: uint16_t bfloat16 or float).
__device__ __forceinline__ uint16_t as_value(float f, uint16_t) { return bf16_from_f32(f); }
__device__ __forceinline__ float as_value(float f, float) { return f; }

// V elements at p + i (p + i aligned for V of them).
template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, int64_t i, const T (&v)[V]) {
    Vec<T, V> x;
#pragma unroll
    for (int j = 0; j < V; ++j) x.v[j] = v[j];
    *reinterpret_cast<Vec<T, V>*>(p + i) = x;
}

// Both kinds' entries, V lanes a thread.
template <typename Value, bool PerWrite, int V>
__device__ __forceinline__ void write_entries_v(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    const KernelShape& s = a.s;
    const OutputBuffers& out = a.out;
    const int W = s.W, R = s.R, WR = W + R;
    const int64_t nk = static_cast<int64_t>(s.C) * W, nq = static_cast<int64_t>(s.C) * R;
    const int64_t ok = k.c * nk, oq = k.c * nq;
    const auto* const kv = reinterpret_cast<const Vec<Value, V>*>(static_cast<const Value*>(a.k_val) + ok);
    const auto* const qv = reinterpret_cast<const Vec<Value, V>*>(static_cast<const Value*>(a.q_val) + oq);
    const auto* const gv = reinterpret_cast<const Vec<float, V>*>(a.g + ok);
    for (int x0 = V * static_cast<int>(threadIdx.x); x0 < nk; x0 += V * static_cast<int>(blockDim.x)) {
        // V lanes of one token (the host asks W % 4 == 0 for V = 4)
        const int t = static_cast<int>(a.div.W.div(x0)), lane0 = x0 - t * W;
        const bool valid = t < k.t_valid;   // padding tokens' values and gates are not read
        const Vec<Value, V> vals = valid ? kv[x0 / V] : Vec<Value, V>{};
        const Vec<float, V> gates = PerWrite && valid ? gv[x0 / V] : Vec<float, V>{};
        // The token's gate tables, read once for its V lanes (per-token gates).
        const bool tabled = !PerWrite && valid;
        const float gate_log = tabled ? arr.gate_f32[t] : 0.0f, gate_cpe = tabled ? arr.gate_cpe[t] : 1.0f;
        const double gate_exp = tabled ? arr.gate_exp[t] : 1.0;
        float log[V], rex[V];
        Value cpe[V], k_eff[V];
        int32_t pos[V];
        int8_t last[V], only[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const WriteOut o = write_entry<PerWrite>(arr, t * WR + lane0 + j, valid, value_of(vals.v[j]), gates.v[j],
                                                     gate_log, gate_exp, gate_cpe);
            log[j] = o.log;
            rex[j] = o.rex;
            cpe[j] = as_value(o.cpe, Value{});
            k_eff[j] = as_value(o.k_eff, Value{});
            pos[j] = o.pos;
            last[j] = o.last;
            only[j] = o.only;
        }
        store_vec<float, V>(out.log_k, ok + x0, log);
        store_vec<float, V>(out.rex, ok + x0, rex);
        store_vec<Value, V>(static_cast<Value*>(out.cpe), ok + x0, cpe);
        store_vec<Value, V>(static_cast<Value*>(out.k_eff), ok + x0, k_eff);
        if (out.pos_k) store_vec<int32_t, V>(out.pos_k, ok + x0, pos);
        if (out.is_last) {
            store_vec<int8_t, V>(out.is_last, ok + x0, last);
            store_vec<int8_t, V>(out.is_only, ok + x0, only);
        }
    }
    for (int x0 = V * static_cast<int>(threadIdx.x); x0 < nq; x0 += V * static_cast<int>(blockDim.x)) {
        const int t = static_cast<int>(a.div.R.div(x0)), lane0 = x0 - t * R;
        const bool valid = t < k.t_valid;
        const Vec<Value, V> vals = valid ? qv[x0 / V] : Vec<Value, V>{};
        float log[V];
        Value q_w[V];
        int32_t pos[V];
        int8_t last[V], only[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const ReadOut o = read_entry(arr, t * WR + W + lane0 + j, valid, value_of(vals.v[j]));
            log[j] = o.log;
            q_w[j] = as_value(o.q_w, Value{});
            pos[j] = o.pos;
            last[j] = o.last;
            only[j] = o.only;
        }
        store_vec<float, V>(out.log_q, oq + x0, log);
        store_vec<Value, V>(static_cast<Value*>(out.q_w), oq + x0, q_w);
        if (out.pos_q) store_vec<int32_t, V>(out.pos_q, oq + x0, pos);
        if (out.q_last) {
            store_vec<int8_t, V>(out.q_last, oq + x0, last);
            store_vec<int8_t, V>(out.q_only, oq + x0, only);
        }
    }
}

// Vectors: four lanes a thread, else one (the instantiation's width, as load_keys's).
template <typename Value, bool PerWrite, bool Vectors>
__device__ __forceinline__ void write_entries(const KernelArgs& a, const Chunk& k, const LeanArrays& arr) {
    write_entries_v<Value, PerWrite, Vectors ? 4 : 1>(a, k, arr);
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_WRITER_CUH
