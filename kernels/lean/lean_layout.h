// The lean kernel's plan-time facts: which plans it serves, its block size and where its
// arrays lie in a block's shared memory. Plain C++ (no CUDA headers): the host side decides
// and the kernel reads the same struct (kernels/lean/README.md says what the kernel is).
// Twins: array_layout in kernels/common/chunk_context.cuh (the general kernel's), ChunkScratch::bind
// in src/cpu/chunk.cpp.
#ifndef SDM_P1_KERNELS_LEAN_LEAN_LAYOUT_H
#define SDM_P1_KERNELS_LEAN_LEAN_LAYOUT_H

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../common/smem_offsets.h"

namespace sdm_p1 {
namespace cuda {

// A lean block sorts at most this many keys a thread (held in registers through the sort).
constexpr int kLeanKeysPerThread = 16;
// Bucket counters a thread scans: the buckets are 16 a thread, so the bucket count is a
// power of two of 16 * threads (at least the chunk's entries: about one key a bucket).
constexpr int kLeanBucketsPerThread = 16;
// A bucket of more keys than this sends its chunk to the general kernel (the keys of a
// bucket are ordered by one thread's insertion sort).
constexpr int kLeanBucketLimit = 16;
// A unit's pair terms at most (its cells are summed by one thread, quadratic in these).
constexpr uint32_t kLeanUnitTerms = 64;
constexpr int kLeanMaxThreads = 1024;
// Blocks of up to this many threads (chunks of up to 4096 entries) run three to an SM.
constexpr int kLeanSmallBlock = 256;
constexpr int kLeanMinThreads = 64;
// Bytes of shared memory per grouped entry: its compact log (8), five record words and its
// pair-term count.
constexpr size_t kLeanGroupedBytes = 8 + 5 * 4 + 1;

// Byte offsets of the lean kernel's arrays in a block's dynamic shared memory, with the
// plan's choices; threads == 0: the plan has no lean kernel. n = C * (W + R) entries,
// row = n rounded up to kRowAlign, NB = 16 * threads buckets.
struct LeanLayout {
    int threads;              // block size: a power of two, n <= 16 * threads
    int blocks_per_sm;        // resident blocks an SM the layout was sized for
    int grid;                 // blocks (persistent: each loops over chunks)
    int bucket_shift;         // a 32-bit sort key >> bucket_shift is its bucket
    uint32_t max_grouped;     // grouped entries a chunk at most (records' room)
    bool row_fields;          // a row field beyond the spay rows requested (krec, kspa, qrec,
                              // qrec8, the tile and dc indices): stage "records" runs, in
                              // the kernel's RowFields instantiation
    uint32_t term_capacity;   // pair terms a chunk at most (they take the sort's room)
    // uint32[row] by sorted position: the sort keys, then the payload words
    uint32_t pay;
    // uint16[n] by entry: its sorted position (alone) or 0x8000 | its grouped-list index
    uint32_t info;
    // uint32[NB / 2 + 1]: two 16-bit bucket counters a word, then the buckets' starts
    uint32_t starts;
    // the pair terms (PairTerm[term_capacity], then uint8 cells) in the bytes of starts
    uint32_t terms;
    // the buckets of two keys, of three and of more (uint16[sized_room[0]], [1], [2]; more: the
    // chunk goes to the general kernel), in the bytes of glog until stage "groups" starts
    uint32_t sized_room[3];
    // by grouped-list index: int64 compact log, then uint32 / float records: packed position,
    // log, scaled value (k_eff or q_w as float), rex, cpe, and uint8 pair terms (a walker's).
    // Until stage "groups" has summed the groups, rlog and rscaled hold the group list
    // (uint2[max_grouped / 2]: first position | size << 16, first list index), and rrex and
    // rcpe each entry's group total (the int64 compact log of the group's last entry).
    uint32_t glog, rpos, rlog, rscaled, rrex, rcpe, gterms;
    // uint32[C][words(W) + words(R)]: per token, its write and read lanes with pair terms
    uint32_t wmask;
    // uint32[2 C + 1]: pair terms a unit, then their offsets
    uint32_t units;
    // uint32[row / 32] each: the write entries among 32 sorted positions, and before them
    uint32_t kmask, kpre;
    // uint32[row / 32] each: likewise the first valid write entries of groups (tile and dc
    // indices only)
    uint32_t fmask, fpre;
    // per-token gates: float[C] log (fix_to_f32), double[C] exp (exp_fix), float[C] cpe
    // (to_f32 of the exp) and Fix[C] the gate
    uint32_t gate_f32, gate_exp, gate_cpe, gate_fix;
    uint32_t smem_bytes;
};

// The smallest block that holds a chunk of n entries in registers.
inline int lean_threads(int n) {
    int t = kLeanMinThreads;
    while (t * kLeanKeysPerThread < n) t *= 2;
    return t;
}

// What a plan's fields ask of the lean kernel's layout.
struct LeanFields {
    bool row_fields;     // stage "records" runs (LeanLayout::row_fields)
    bool group_firsts;   // tile or dc indices: the groups' first writes are counted (fmask, fpre)
};

// The layout of a chunk of n = C (W + R) entries for blocks of `threads`, with room for
// `max_grouped` grouped entries; gate tables where gates are per token.
inline LeanLayout lean_layout(int C, int W, int R, bool per_token_gates, int threads, uint32_t max_grouped,
                              const LeanFields& fields) {
    const size_t n = static_cast<size_t>(C) * (W + R);
    const size_t row = (n + 15) / 16 * 16;
    const size_t buckets = static_cast<size_t>(kLeanBucketsPerThread) * threads;
    const size_t mask_words = static_cast<size_t>(C) * ((W + 31) / 32 + (R + 31) / 32);
    LeanLayout l{};
    l.threads = threads;
    l.max_grouped = max_grouped;
    l.row_fields = fields.row_fields;
    SmemOffsets at;
    l.pay = at.take(4 * row);
    l.info = at.take(2 * n);
    l.starts = at.take(4 * (buckets / 2 + 1));
    l.terms = l.starts;
    l.term_capacity = static_cast<uint32_t>((at.end - l.starts) / (16 + 1));
    // Uniform ids fill about n / 5.4, n / 16 and n / 50 buckets of these sizes (a bucket a key).
    l.sized_room[0] = static_cast<uint32_t>(n / 4 + 1);
    l.sized_room[1] = static_cast<uint32_t>(n / 8 + 1);
    l.sized_room[2] = static_cast<uint32_t>(n / 16 + 1);
    const size_t sized_bytes = 2 * (static_cast<size_t>(l.sized_room[0]) + l.sized_room[1] + l.sized_room[2]);
    l.glog = at.take(std::max(8 * static_cast<size_t>(max_grouped), sized_bytes));
    l.rpos = at.take(4 * static_cast<size_t>(max_grouped));
    l.rlog = at.take(4 * static_cast<size_t>(max_grouped));
    l.rscaled = at.take(4 * static_cast<size_t>(max_grouped));
    l.rrex = at.take(4 * static_cast<size_t>(max_grouped));
    l.rcpe = at.take(4 * static_cast<size_t>(max_grouped));
    l.gterms = at.take(static_cast<size_t>(max_grouped));
    l.wmask = at.take(4 * mask_words);
    l.units = at.take(4 * (2 * static_cast<size_t>(C) + 1));
    l.kmask = at.take(4 * (row / 32 + 1));
    l.kpre = at.take(4 * (row / 32 + 1));
    l.fmask = at.take(fields.group_firsts ? 4 * (row / 32 + 1) : 0);
    l.fpre = at.take(fields.group_firsts ? 4 * (row / 32 + 1) : 0);
    l.gate_f32 = at.take(per_token_gates ? 4 * static_cast<size_t>(C) : 0);
    l.gate_exp = at.take(per_token_gates ? 8 * static_cast<size_t>(C) : 0);
    l.gate_cpe = at.take(per_token_gates ? 4 * static_cast<size_t>(C) : 0);
    l.gate_fix = at.take(per_token_gates ? 16 * static_cast<size_t>(C) : 0);
    l.smem_bytes = static_cast<uint32_t>(at.end);
    return l;
}

// Shared memory of the layout's arrays other than the grouped entries' records.
inline size_t lean_fixed_bytes(int C, int W, int R, bool per_token_gates, int threads, const LeanFields& fields) {
    return lean_layout(C, W, R, per_token_gates, threads, 0, fields).smem_bytes;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_LEAN_LEAN_LAYOUT_H
