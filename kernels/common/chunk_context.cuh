// One thread block's view of the chunk it is computing: the chunk's constants and its arrays
// (in shared memory when they fit, else in the block's slice of global scratch). CPU twin:
// ChunkScratch in src/cpu/chunk.h, the same arrays under the same names (docs/design.md,
// "The stages", says which stage writes each); lean: kernels/lean/lean_context.cuh.
#ifndef SDM_P1_KERNELS_CHUNK_CONTEXT_CUH
#define SDM_P1_KERNELS_CHUNK_CONTEXT_CUH

#include <cstddef>
#include <cstdint>

#include "../../canon/phase1_shared.h"
#include "kernel_args.h"

namespace sdm_p1 {
namespace cuda {

// Threads per block: kMaxThreads, or half as many for chunks small enough that two blocks
// share an SM (the policy: kernels/policy/kernel_policy.cu). Static temporaries are sized for kMaxThreads.
constexpr int kMaxThreads = 512;
constexpr int kSortTile = 4096;   // 64-bit keys per tile of the sort, whatever the block size
constexpr int kScanItems = 8;     // positions per thread in a tile of the scans
constexpr uint32_t kNoError = 0xFFFFFFFFu;

SDM_HD size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// An array of the chunk indexed by sorted position, stored as 8 rows of `stride` elements:
// position r at (r % 8) * stride + r / 8. The scans and the full-size kernel's sort give each
// thread 8 consecutive positions (blocked order), so at each step a warp touches 32
// consecutive elements: coalesced in global scratch, free of bank conflicts in shared memory
// (the half-size kernel's sort gives 16: 64 elements a step, two words a bank). A stride of
// 4 (mod 32) keeps the striped order (a warp on 32 consecutive positions) free of conflicts
// as well.
template <typename T>
struct Interleaved {
    T* base;
    uint32_t stride;
    SDM_HD T& operator[](uint32_t r) const { return base[(r & 7u) * stride + (r >> 3)]; }
    // Position col * 8 + i: item i of the blocked order's thread (tile column) col, without
    // the split of a position into row and column.
    SDM_HD T& at(uint32_t col, int i) const { return base[i * stride + col]; }
    SDM_HD explicit operator bool() const { return base != nullptr; }
};

// The rows of the scans' blocked order are kScanItems = 8 positions long.
static_assert(kScanItems == 8, "Interleaved assumes 8 positions per thread");

// The stride of an interleaved array of n elements (it holds 8 * stride).
SDM_HD uint32_t interleave_stride(int n) {
    const uint32_t rows = (static_cast<uint32_t>(n) + 7u) / 8u;
    return (rows + 27u) / 32u * 32u + 4u;
}

using InterleavedWords = Interleaved<uint32_t>;
using InterleavedKeys = Interleaved<uint64_t>;

// Marks a chunk whose log-cumsums do not fit the compact form (LogArray::shift).
constexpr int kWideLog = -1;

// The shift of a chunk's compact log-cumsums, from the lowest set bit of its gates (the least
// over its non-zero gates) and their magnitude bits (the most): every sum is then a multiple
// of 2^lowest, and a group sums at most one gate per token, so |sum| < C * 2^bits. kWideLog
// when sum >> lowest might not fit 64 signed bits; 0 when every gate is 0.
SDM_HD int log_shift(int lowest, int bits, int C) {
    if (bits == 0) return 0;
    return bits - lowest + bit_width(static_cast<uint64_t>(C)) <= 63 ? lowest : kWideLog;
}

// The chunk's inclusive log-cumsums by sorted position, exact. Where the chunk allows
// (log_shift), each is kept in 8 bytes, as fix_shift_down(sum, shift); else its low word is
// in `low` and its high word in `high`. Chunks with typical gates use `low` alone, which is
// why `high` may be placed in global scratch at little cost.
struct LogArray {
    Interleaved<uint64_t> low;
    Interleaved<uint64_t> high;
    int shift;   // the compact form's shift, or kWideLog
    __device__ Fix get(uint32_t r) const { return shift >= 0 ? fix_shift_up(low[r], shift) : Fix{low[r], high[r]}; }
    // The stored words at r (the compact form: the low word alone).
    __device__ Fix raw(uint32_t r) const { return shift >= 0 ? Fix{low[r], 0u} : Fix{low[r], high[r]}; }
    // exp(log_i - log_j) of two stored values of one group (their difference, a sum of at
    // most C gates, fits the compact form too), as exp_fix of the exact difference.
    __device__ double exp_diff(Fix raw_i, Fix raw_j) const {
        if (shift >= 0) return exp_compact(static_cast<int64_t>(raw_i.lo - raw_j.lo), shift);
        return exp_fix(fix_sub(raw_i, raw_j));
    }
    __device__ void set(uint32_t r, Fix x) const {
        if (shift >= 0) {
            low[r] = fix_shift_down(x, shift);
        } else {
            low[r] = x.lo;
            high[r] = x.hi;
        }
    }
};

// The arrays a block needs on chip to run two to an SM: all but the gates (read once an
// entry, in the forward scan) and log_high (read only by merge rounds, which chunks of up to
// kSortTile entries do not have, and by chunks whose gates span over 63 bits).
inline bool core_arrays_in_smem(const ArrayLayout& l) {
    const Place* const core[] = {&l.writes,  &l.before,   &l.end,   &l.firsts,   &l.payload,
                                 &l.log_low, &l.position, &l.value, &l.walk_mask};
    for (const Place* p : core) {
        if (p->bytes != 0 && !p->in_smem) return false;
    }
    return true;
}

// Bytes of ArrayLayout::runs.
SDM_HD size_t runs_bytes(int C, int W, int count_bytes) {
    const size_t nk = static_cast<size_t>(C) * W;
    return align16(4 * nk) + align16(static_cast<size_t>(count_bytes) * (2 * nk + 1));
}

// The layout of a chunk's arrays with `smem_limit` bytes of shared memory a block, of which
// the sort's temporaries need at least `sort_bytes` and the pair sums' `pair_bytes`, with
// counts of `count_bytes` (2 or 4); group_counts and slots: the plan needs firsts and slot.
// The scans' arrays, which hold the stage, go first; then the others, first fit in the order
// of how often they are read; the stage then grows into the room left.
inline ArrayLayout array_layout(int C, int W, int R, int gate_width, bool group_counts, bool slots, int count_bytes,
                                size_t sort_bytes, size_t pair_bytes, size_t smem_limit) {
    const int n = C * (W + R);
    const size_t counts = align16(static_cast<size_t>(count_bytes) * n);
    ArrayLayout l{};
    l.stride = interleave_stride(n);
    const size_t elements = 8 * static_cast<size_t>(l.stride);
    const size_t interleaved_counts = align16(count_bytes * elements);
    size_t smem = 0, global = 0;
    const auto place = [&](Place& p, size_t bytes, bool in_smem) {
        size_t& at = in_smem ? smem : global;
        p = Place{at, bytes, in_smem};
        at += bytes;
    };
    sort_bytes = align16(sort_bytes);
    pair_bytes = align16(pair_bytes);
    const size_t scan_arrays = (group_counts ? 4 : 3) * interleaved_counts;
    // writes, before, the write row
    const size_t write_row_bytes = align16(static_cast<size_t>(count_bytes) * C * W);
    const size_t live_in_pairs = 2 * interleaved_counts + write_row_bytes;
    const auto most = [](size_t x, size_t y) { return x > y ? x : y; };
    const bool scans_in_smem = most(most(scan_arrays, sort_bytes), live_in_pairs + pair_bytes) <= smem_limit;
    place(l.writes, interleaved_counts, scans_in_smem);
    place(l.before, interleaved_counts, scans_in_smem);
    place(l.end, interleaved_counts, scans_in_smem);
    place(l.firsts, group_counts ? interleaved_counts : 0, scans_in_smem);
    l.stage = 0;
    l.pair = scans_in_smem ? 2 * interleaved_counts : 0;
    l.pair_rows = scans_in_smem ? live_in_pairs : 0;
    smem = most(most(smem, sort_bytes), l.pair_rows + pair_bytes);
    l.stage_room = smem;
    Place* const rest[] = {&l.payload,  &l.log_low,   &l.position, &l.value, &l.gate,
                           &l.gate_exp, &l.walk_mask, &l.log_high, &l.slot};
    const size_t rest_bytes[] = {
        align16(4 * elements),
        align16(8 * elements),
        counts,
        align16(4 * static_cast<size_t>(n)),
        align16(16 * static_cast<size_t>(C) * gate_width),
        gate_width == 1 ? align16(8 * static_cast<size_t>(C)) : 0,
        align16(4 * static_cast<size_t>(C) * (mask_words(W) + mask_words(R))),
        align16(8 * elements),
        slots ? align16(4 * static_cast<size_t>(n)) : 0,
    };
    for (int i = 0; i < 9; ++i) place(*rest[i], rest_bytes[i], smem + rest_bytes[i] <= smem_limit);
    place(l.runs, runs_bytes(C, W, count_bytes), false);   // used only where slots repeat in tokens
    // Where the core arrays are on chip, the room left goes to the stage (a longer one-batch
    // term list); else it is left to the L1 cache, which the arrays in global scratch use.
    const size_t spare = core_arrays_in_smem(l) && smem <= smem_limit ? (smem_limit - smem) / 16 * 16 : 0;
    for (Place* p : rest) {
        if (p->in_smem) p->offset += spare;
    }
    l.stage_room += spare;
    l.smem_bytes = smem + spare;
    l.global_bytes = global;
    return l;
}

template <typename CountT>
struct ChunkArrays {
    using Count = CountT;
    InterleavedKeys keys;       // aliases log.low: the first key buffer (stage "load" fills it)
    InterleavedKeys keys_alt;   // aliases log.high: the second key buffer
    LogArray log;               // log.shift is set per chunk (after stage "load")
    InterleavedWords payload;
    Interleaved<Count> writes;
    Interleaved<Count> before;
    Interleaved<Count> end;
    Interleaved<Count> firsts;   // null when the plan needs no group counts
    Count* write_row;            // end's bytes, in stage "pair sums" (ArrayLayout::end)
    Count* position;
    float* value;
    Fix* gate;
    double* gate_exp;   // null with per-write gates
    uint32_t* walk_mask;
};

// The address of an array placed at p (null for an array of 0 bytes).
template <typename T>
__device__ T* array_at(const Place& p, char* smem, char* global) {
    return p.bytes == 0 ? nullptr : reinterpret_cast<T*>((p.in_smem ? smem : global) + p.offset);
}

// The address of a core array (core_arrays_in_smem) placed at p. With OnChip (the layout
// keeps every core array in shared memory) it is known to be in shared memory, so the
// compiler emits shared-memory accesses with 32-bit addresses instead of generic ones.
template <typename T, bool OnChip>
__device__ T* core_array_at(const Place& p, char* smem, char* global) {
    if (OnChip) return p.bytes == 0 ? nullptr : reinterpret_cast<T*>(smem + p.offset);
    return array_at<T>(p, smem, global);
}

// smem: the block's dynamic shared memory; global: its slice of global scratch.
template <typename Count, bool OnChip>
__device__ ChunkArrays<Count> bind_arrays(char* smem, char* global, const ArrayLayout& l) {
    ChunkArrays<Count> a;
    const uint32_t st = l.stride;
    a.keys = InterleavedKeys{core_array_at<uint64_t, OnChip>(l.log_low, smem, global), st};
    a.keys_alt = InterleavedKeys{array_at<uint64_t>(l.log_high, smem, global), st};
    a.log = LogArray{a.keys, a.keys_alt, kWideLog};
    a.payload = InterleavedWords{core_array_at<uint32_t, OnChip>(l.payload, smem, global), st};
    a.writes = Interleaved<Count>{core_array_at<Count, OnChip>(l.writes, smem, global), st};
    a.before = Interleaved<Count>{core_array_at<Count, OnChip>(l.before, smem, global), st};
    a.end = Interleaved<Count>{core_array_at<Count, OnChip>(l.end, smem, global), st};
    a.write_row = a.end.base;
    a.firsts = Interleaved<Count>{core_array_at<Count, OnChip>(l.firsts, smem, global), st};
    a.position = core_array_at<Count, OnChip>(l.position, smem, global);
    a.value = core_array_at<float, OnChip>(l.value, smem, global);
    a.gate = array_at<Fix>(l.gate, smem, global);
    a.gate_exp = array_at<double>(l.gate_exp, smem, global);
    a.walk_mask = core_array_at<uint32_t, OnChip>(l.walk_mask, smem, global);
    return a;
}

// The main kernel leaves chunk c to the wide-log kernel (one thread of the block).
__device__ __forceinline__ void list_wide_chunk(const KernelArgs& a, int64_t c) {
    const unsigned long long left = atomicAdd(&a.status->wide_left, ~0ull);   // minus one
    a.wide_chunks[~left] = static_cast<unsigned long long>(c);
}

// The lean kernel leaves chunk c to the main kernel (one thread of the block).
__device__ __forceinline__ void list_general_chunk(const KernelArgs& a, int64_t c) {
    const unsigned long long left = atomicAdd(&a.status->general_left, ~0ull);   // minus one
    a.general_chunks[~left] = static_cast<unsigned long long>(c);
}

// The chunks the lean kernel left to the main kernel (read by the main kernel).
__device__ __forceinline__ unsigned long long general_chunk_count(const DeviceStatus& status) {
    return ~status.general_left;
}

// The chunks the main kernel left to the wide-log kernel (read by the wide-log kernel).
__device__ __forceinline__ unsigned long long wide_chunk_count(const DeviceStatus& status) { return ~status.wide_left; }

// The chunk a block is computing.
struct Chunk {
    int64_t c;
    int t_valid;       // valid tokens
    int n;             // entries
    int64_t id_base;   // first slot id of its stream
};

// The block's slot array (ArrayLayout::slot), null where the plan has none. Found from the
// launch's constants where it is used rather than kept in ChunkArrays: one more pointer
// live through the kernel made the scans spill.
__device__ __forceinline__ uint32_t* slot_array(const KernelArgs& a) {
    extern __shared__ __align__(16) char smem[];
    const Place& p = a.layout.slot;
    if (p.bytes == 0) return nullptr;
    char* const base = p.in_smem ? smem : a.scratch + static_cast<size_t>(blockIdx.x) * a.scratch_per_block;
    return reinterpret_cast<uint32_t*>(base + p.offset);
}

// The block's run lists (ArrayLayout::runs, in global scratch), found where used, as
// slot_array.
template <typename T>
__device__ __forceinline__ T* runs_array(const KernelArgs& a) {
    return reinterpret_cast<T*>(a.scratch + static_cast<size_t>(blockIdx.x) * a.scratch_per_block +
                                a.layout.runs.offset);
}

// Chunk c's valid tokens: by its stream's length where the launch has lengths (as the CPU
// backend's valid_tokens), else all but in the streams' last chunks. A length outside
// 0..steps * C is recorded by the block of the stream's first chunk (DeviceStatus), and
// every chunk of that stream then counts as padding: no input is read, no index leaves range.
__device__ __forceinline__ int valid_tokens(const KernelArgs& a, int64_t c) {
    const KernelShape& s = a.s;
    if (a.stream_lengths == nullptr) return c >= s.N - s.P ? s.valid_last : s.C;
    const int64_t stream = c % s.P;
    const int64_t length = load_id(a.stream_lengths, a.lengths64, stream);
    if (length < 0 || length > s.N / s.P * s.C) {
        if (c == stream && threadIdx.x == 0) {
            a.chunk_value[c] = static_cast<uint64_t>(length);
            atomicMin(&a.status->bad_stream, static_cast<unsigned long long>(stream));
        }
        return 0;
    }
    return chunk_valid_tokens(length, c / s.P, s.C);
}

// Block-wide scalars of the current chunk.
struct ChunkShared {
    uint32_t error_code;     // first bad input (kNoError: none)
    uint32_t repeats;        // K entries repeating a slot of their token
    uint32_t valid_groups;   // groups with a valid K entry (their first K entries)
    uint32_t walkers;        // valid entries with an earlier entry in their group
    int gate_lowest_bit;     // least lowest set bit of the chunk's non-zero gates (128: none)
    int gate_bits;           // most magnitude bits of its gates (log_shift)
    // The spread path's hand-over (kernels/spread/spread_export.cuh): the chunk's pair terms,
    // and the slot it took.
    unsigned long long pair_terms;
    long long spread_slot;
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_CHUNK_CONTEXT_CUH
