// The lean kernel's view of the chunk a block computes: its arrays in shared memory (bound
// from LeanLayout), its block-wide scalars, and the one block-wide scan its stages share
// (twins: kernels/common/chunk_context.cuh in the general kernel, ChunkScratch in src/cpu/chunk.h).
#ifndef SDM_P1_KERNELS_LEAN_LEAN_CONTEXT_CUH
#define SDM_P1_KERNELS_LEAN_LEAN_CONTEXT_CUH

#include "../common/chunk_context.cuh"
#include "../common/pair_common.cuh"
#include "../common/warp_scan.cuh"
#include "lean_layout.h"

namespace sdm_p1 {
namespace cuda {
namespace lean {

// Bits 18-25 of a payload word in LeanArrays::pay, which the output's payload never has: a
// grouped entry's peers of its kind before and after it (at most kLeanBucketLimit - 1 each),
// for stage "rows" (the spay elements); an alone entry has 0 for both.
constexpr int kPayBeforeShift = 18;
constexpr int kPayAfterShift = 22;
constexpr uint32_t kPayPeerMask = 0xFu;
constexpr uint32_t kPayPeers = 0xFFu << kPayBeforeShift;

// Marks a grouped entry in LeanArrays::info (else the value is the entry's sorted position).
constexpr uint16_t kGrouped = 0x8000u;

// Block-wide scalars of the current chunk (ChunkShared's fields that report_chunk_error and
// the gates' form read, and the lean stages' own).
struct LeanShared {
    ChunkShared base;    // error_code, repeats, gate_lowest_bit, gate_bits
    int shift;           // the compact log form's shift (log_shift)
    uint32_t overflow;   // the chunk goes to the general kernel
    uint32_t bad_ids;    // an id outside its stream's slots was loaded (record_bad_ids)
    uint32_t grouped;    // grouped entries listed
    uint32_t groups;     // groups of several entries listed
    uint32_t sized[3];   // buckets of two keys, of three, of more
    uint32_t warp_sums[kLeanMaxThreads / 32];
};

// The chunk's arrays (LeanLayout says what each holds).
struct LeanArrays {
    uint32_t* pay;
    uint16_t* info;
    uint32_t* starts;
    uint16_t* sized[3];   // the buckets of two keys, of three, of more (in glog's bytes)
    PairTerm* terms;
    uint8_t* cells;
    int64_t* glog;
    uint32_t* rpos;
    float* rlog;
    float* rscaled;
    float* rrex;
    float* rcpe;
    uint8_t* gterms;
    uint2* glist;          // in rlog and rscaled's bytes, until stage "groups" ends
    uint32_t* gtotal_lo;   // in rrex's bytes, likewise
    uint32_t* gtotal_hi;   // in rcpe's bytes, likewise
    uint32_t* wmask;
    uint32_t* units;
    uint32_t* kmask;
    uint32_t* kpre;
    uint32_t* fmask;   // with the tile or dc indices only
    uint32_t* fpre;
    float* gate_f32;
    double* gate_exp;
    float* gate_cpe;
    Fix* gate_fix;
};

__device__ __forceinline__ LeanArrays bind_lean_arrays(char* smem, const LeanLayout& l) {
    LeanArrays a;
    a.pay = reinterpret_cast<uint32_t*>(smem + l.pay);
    a.info = reinterpret_cast<uint16_t*>(smem + l.info);
    a.starts = reinterpret_cast<uint32_t*>(smem + l.starts);
    a.sized[0] = reinterpret_cast<uint16_t*>(smem + l.glog);
    a.sized[1] = a.sized[0] + l.sized_room[0];
    a.sized[2] = a.sized[1] + l.sized_room[1];
    a.terms = reinterpret_cast<PairTerm*>(smem + l.terms);
    a.cells = reinterpret_cast<uint8_t*>(smem + l.terms + 16 * static_cast<size_t>(l.term_capacity));
    a.glog = reinterpret_cast<int64_t*>(smem + l.glog);
    a.rpos = reinterpret_cast<uint32_t*>(smem + l.rpos);
    a.rlog = reinterpret_cast<float*>(smem + l.rlog);
    a.rscaled = reinterpret_cast<float*>(smem + l.rscaled);
    a.rrex = reinterpret_cast<float*>(smem + l.rrex);
    a.rcpe = reinterpret_cast<float*>(smem + l.rcpe);
    a.gterms = reinterpret_cast<uint8_t*>(smem + l.gterms);
    a.glist = reinterpret_cast<uint2*>(smem + l.rlog);
    a.gtotal_lo = reinterpret_cast<uint32_t*>(smem + l.rrex);
    a.gtotal_hi = reinterpret_cast<uint32_t*>(smem + l.rcpe);
    a.wmask = reinterpret_cast<uint32_t*>(smem + l.wmask);
    a.units = reinterpret_cast<uint32_t*>(smem + l.units);
    a.kmask = reinterpret_cast<uint32_t*>(smem + l.kmask);
    a.kpre = reinterpret_cast<uint32_t*>(smem + l.kpre);
    a.fmask = reinterpret_cast<uint32_t*>(smem + l.fmask);
    a.fpre = reinterpret_cast<uint32_t*>(smem + l.fpre);
    a.gate_f32 = reinterpret_cast<float*>(smem + l.gate_f32);
    a.gate_exp = reinterpret_cast<double*>(smem + l.gate_exp);
    a.gate_cpe = reinterpret_cast<float*>(smem + l.gate_cpe);
    a.gate_fix = reinterpret_cast<Fix*>(smem + l.gate_fix);
    return a;
}

// An entry of a sort key or a payload word: its index, token, lane and kind.
struct KeyEntry {
    int e, t, lane;
    bool is_q;
};

// Entry e's token, lane and kind.
__device__ __forceinline__ KeyEntry index_entry(const KernelArgs& a, int e) {
    KeyEntry k;
    k.e = e;
    k.t = static_cast<int>(a.div.WR.div(static_cast<uint32_t>(e)));
    const int j = e - k.t * (a.s.W + a.s.R);
    k.is_q = j >= a.s.W;
    k.lane = k.is_q ? j - a.s.W : j;
    return k;
}

__device__ __forceinline__ KeyEntry key_entry(const KernelArgs& a, uint32_t key) {
    return index_entry(a, static_cast<int>(key & ((1u << a.entry_bits) - 1u)));
}

// The payload word of entry e (valid or padding), without group bits.
__device__ __forceinline__ uint32_t entry_payload(const KernelArgs& a, int e, bool valid) {
    const KeyEntry k = index_entry(a, e);
    return payload_word(k.t, k.lane, k.is_q, valid);
}

__device__ __forceinline__ KeyEntry payload_entry(const KernelArgs& a, uint32_t p) {
    KeyEntry k;
    k.t = payload_token(p);
    k.lane = static_cast<int>(p & kLaneMask);
    k.is_q = (p & kIsQ) != 0u;
    k.e = k.t * (a.s.W + a.s.R) + (k.is_q ? a.s.W : 0) + k.lane;
    return k;
}

// The packed position's peer counts of an entry of a group of at most 127 of its kind
// (lean chunks: groups of at most kLeanBucketLimit entries, so nothing saturates).
__device__ __forceinline__ uint32_t packed_after(uint32_t pos) { return (pos >> kPosAfterShift) & kPosCountMax; }
__device__ __forceinline__ uint32_t packed_before(uint32_t pos) {
    return ((pos >> kPosSizeShift) & kPosCountMax) - 1u - packed_after(pos);
}

// The exclusive sum of x over the block's threads (in thread order); *total: the sum of all.
// Two barriers; sh.warp_sums is free again after it returns.
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t x, LeanShared& sh, uint32_t* total) {
    const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
    const int warps = static_cast<int>(blockDim.x >> 5);
    const uint32_t incl = warp_inclusive_sum(x, lane);
    if (lane == 31) sh.warp_sums[warp] = incl;
    __syncthreads();
    uint32_t before = 0, all = 0;
    for (int w = 0; w < warps; ++w) {   // every thread reads the few warp totals
        const uint32_t s = sh.warp_sums[w];
        before += w < warp ? s : 0u;
        all += s;
    }
    __syncthreads();
    *total = all;
    return before + incl - x;
}

// An exclusive prefix sum of count words in place, by one warp; returns the total.
__device__ __forceinline__ uint32_t warp_exclusive_scan(uint32_t* words, int count) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
    uint32_t carry = 0;
    for (int b = 0; b < count; b += 32) {
        const uint32_t x = b + lane < count ? words[b + lane] : 0u;
        const uint32_t incl = warp_inclusive_sum(x, lane);
        if (b + lane < count) words[b + lane] = carry + incl - x;
        carry += __shfl_sync(kFullWarp, incl, 31);
    }
    return carry;
}

}   // namespace lean
}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_CONTEXT_CUH
