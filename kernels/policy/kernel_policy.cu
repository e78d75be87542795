// The kernel policy (kernel_policy.h): a plan's kernels, stage by stage, each a case of its
// own below, and the workspace they need. Host code only; compiled by nvcc because the
// layouts are sized from the kernels' own types (their stage temporaries).
#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "../../canon/field_sets.h"
#include "../backward/backward_slice.cuh"
#include "../general/general_layout.cuh"
#include "../lean/lean_layout.h"
#include "../spread/spread_slots.cuh"
#include "kernel_policy.h"

namespace sdm_p1 {
namespace cuda {

namespace {

// printf into a std::string (the policy's reasons).
std::string format(const char* fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    return text;
}

const char* boolean(bool b) { return b ? "true" : "false"; }

// "1 block", "3 blocks".
std::string count(int n, const char* noun) { return format("%d %s%s", n, noun, n == 1 ? "" : "s"); }

// The bits of a positive value below 2^63 (bit_width(4096) = 13).
int bits_of(int64_t v) {
    int b = 0;
    for (; v != 0; v >>= 1) ++b;
    return b;
}

// ---- the forms of the general kernel ----------------------------------------------------

// The plan's shape with the forms its kernels are compiled for (kernels/general/README.md).
KernelShape with_forms(const PlanRequest& p) {
    KernelShape s = p.shape;
    const auto has = [&p](int64_t bit) { return (p.det_fields & bit) != 0; };
    s.group_counts = has(SDM_P1_DET_TILES) || has(SDM_P1_DET_DC_GIDX);
    const bool records = has(SDM_P1_DET_KREC) || has(SDM_P1_DET_QREC) || has(SDM_P1_DET_QREC8);
    // The row pass finds each entry's exponentials again; where the slots are fewer than the
    // entries (long groups: most logs are not an entry's own gate) that costs more than the
    // scattered stores it saves (measured: S4 3.83 -> 4.06 ms with every field, S1 2.77 -> 2.22).
    s.sorted_rows = (records || has(SDM_P1_DET_KSPA)) && s.num_keys >= s.C * (s.W + s.R);
    s.slots = records && s.sorted_rows;
    // The usual plans (the spec's default fields or fewer) get a kernel without the other
    // fields' code.
    s.shipped_fields = within_shipped(p.det_fields);
    return s;
}

// The general kernel's instantiation: phase1_kernel<Threads, Count, OnChip, SortedRows,
// WideLog, ShippedFields, Spread> (kernels/instantiations.txt). The half-size block always has
// its core arrays on chip; 32-bit counts mean a chunk too large for shared memory.
std::string general_kernel(const ForwardKernels& f, int threads, bool wide_log, bool shipped, bool spread) {
    const bool half = threads != kMaxThreads;
    const char* count = half || f.narrow_counts ? "uint16_t" : "uint32_t";
    const bool on_chip = half || (f.narrow_counts && f.on_chip);
    return format("phase1_kernel<%d, %s, %s, %s, %s, %s, %s>", threads, count, boolean(on_chip),
                  boolean(f.shape.sorted_rows), boolean(wide_log), boolean(shipped), boolean(spread));
}

// The main kernel of `f` before its spread slots are known (the shipped-fields form never
// sorts its rows: sorted rows mean records or kspa).
std::string main_kernel(const ForwardKernels& f, int threads) {
    return general_kernel(f, threads, false, f.shape.shipped_fields && !f.shape.sorted_rows, false);
}

// The wide-log kernel shares the main kernel's layout, in every field's form.
std::string wide_log_kernel(const ForwardKernels& f, int threads) {
    return general_kernel(f, threads, true, false, false);
}

// ---- stage: general --------------------------------------------------------------------

// Sizes the general (and wide-log) kernel for `blocks` blocks an SM of `threads`: the
// shared memory both kernels have room for, and the main kernel's blocks an SM (*per_sm).
// *fits: the core arrays are on chip and the device holds that many such blocks.
int size_general(const ForwardKernels& f, KernelFacts& facts, int threads, int blocks, size_t* smem_limit, int* per_sm,
                 bool* fits) {
    SmemLimits main{}, wide{};
    int e = facts.raise_smem_limit(main_kernel(f, threads), &main);
    if (e == 0) e = facts.raise_smem_limit(wide_log_kernel(f, threads), &wide);
    *smem_limit = std::min(main.room(blocks), wide.room(blocks));
    const ArrayLayout l = general_layout(f.shape, threads, *smem_limit);
    if (e == 0) e = facts.blocks_per_sm(main_kernel(f, threads), threads, l.smem_bytes, per_sm);
    *fits = core_arrays_in_smem(l) && *per_sm >= blocks;
    return e;
}

// The general kernel's block, layout and grid: two half-size blocks an SM run two chunks at
// once, each overlapping the other's barriers and memory waits (measured: S1 1.05x, S4 1.08x
// faster than one full block), where every SM gets two chunks and both blocks keep their core
// arrays on chip; else one full-size block, its core arrays on chip where they fit.
int general_stage(const PlanRequest& p, const DeviceFacts& d, KernelFacts& facts, ForwardKernels* f) {
    const KernelShape& s = f->shape;
    const int n = s.C * (s.W + s.R);
    f->narrow_counts = narrow_counts(s);
    int threads = kMaxThreads, per_sm = 0;
    std::string block;
    bool half = false;
    if (f->narrow_counts && s.N >= 2 * static_cast<int64_t>(d.sms)) {
        f->on_chip = true;
        const int e = size_general(*f, facts, kMaxThreads / 2, 2, &f->smem_limit, &per_sm, &half);
        if (e != 0) return e;
        if (half) {
            threads = kMaxThreads / 2;
            block = format(
                "two 256-thread blocks an SM (N = %lld >= 2 x %d SMs, 16-bit counts, the core arrays on "
                "chip at two blocks an SM)",
                static_cast<long long>(s.N), d.sms);
        } else {
            block = "one 512-thread block an SM (two 256-thread ones do not fit an SM with their core arrays on chip)";
        }
    } else if (!f->narrow_counts) {
        block = format("one 512-thread block an SM (n = %d entries a chunk: 32-bit counts)", n);
    } else {
        block = format("one 512-thread block an SM (N = %lld < 2 x %d SMs)", static_cast<long long>(s.N), d.sms);
    }
    if (!half) {
        bool on_chip;   // the full-size block runs whether or not its arrays fit on chip
        f->on_chip = false;
        int e = size_general(*f, facts, kMaxThreads, 1, &f->smem_limit, &per_sm, &on_chip);
        if (e != 0) return e;
        if (on_chip && f->narrow_counts) {
            // The kernel that knows its core arrays are on chip, where its own limits (its
            // static shared memory) still hold them.
            const size_t generic_limit = f->smem_limit;
            const int generic_per_sm = per_sm;
            f->on_chip = true;
            e = size_general(*f, facts, kMaxThreads, 1, &f->smem_limit, &per_sm, &on_chip);
            if (e != 0) return e;
            if (!on_chip) {
                f->on_chip = false;
                f->smem_limit = generic_limit;
                per_sm = generic_per_sm;
            }
        }
        block += f->on_chip ? ", its core arrays on chip" : ", its core arrays not all on chip";
    }
    f->arrays = general_layout(s, threads, f->smem_limit);
    const int64_t resident = static_cast<int64_t>(d.sms) * std::max(per_sm, 1);
    int64_t grid = std::min<int64_t>(s.N, resident);
    std::string scratch;
    if (f->arrays.global_bytes != 0) {
        // Each resident block gets its slice of global scratch, which stays no larger than
        // the outputs.
        f->scratch_per_block = (f->arrays.global_bytes + 255) / 256 * 256;
        grid = std::min<int64_t>(grid, std::max<int64_t>(1, p.output_bytes / f->scratch_per_block));
        scratch = format("; %zu B of global scratch a block", f->scratch_per_block);
    }
    f->general.grid = f->wide_log.grid = static_cast<int>(grid);
    f->general.threads = f->wide_log.threads = threads;
    f->general.smem_bytes = f->wide_log.smem_bytes = f->arrays.smem_bytes;
    f->general.kernel = main_kernel(*f, threads);
    const char* form = s.shipped_fields ? "the shipped fields only" : "every field";
    const char* rows =
        s.sorted_rows ? "the rows in sorted order (records or kspa, num_keys >= n)" : "the rows in entry order";
    f->general.why = format("%s; %s; %s%s", block.c_str(), form, rows, scratch.c_str());
    f->wide_log.kernel = wide_log_kernel(*f, threads);
    f->wide_log.why =
        "the chunks the general kernel lists (gates too wide for the compact log-cumsums), in its "
        "layout and every field's form";
    return 0;
}

// ---- stage: lean -----------------------------------------------------------------------

// The lean kernel's instantiation: lean::lean_kernel<Id, Value, PerWrite, Threads[, RowFields
// [, false]]>, by the plan's form (id type, value type, gate width), block bound, whether stage
// "records" writes fields past the shipped set, and the vector width (16-byte id loads and
// four-lane entry stores, or the scalar form: `vectors` false).
std::string lean_kernel(const KernelShape& s, bool row_fields, bool vectors) {
    const bool small = lean_threads(s.C * (s.W + s.R)) <= kLeanSmallBlock;
    const char* const tail = vectors ? (row_fields ? ", true" : "") : (row_fields ? ", true, false" : ", false, false");
    return format("lean::lean_kernel<%s, %s, %s, %d%s>", s.idx64 ? "int64_t" : "int32_t", s.bf16 ? "uint16_t" : "float",
                  boolean(s.gate_width != 1), small ? kLeanSmallBlock : kLeanMaxThreads, tail);
}

// Whether a plan's lean kernel is the vector form: every token's lanes in whole vectors of
// four entries (and of 16 bytes of ids: 4 int32 or 2 int64 ids).
bool lean_vectors(const KernelShape& s) { return s.W % 4 == 0 && s.R % 4 == 0; }

// The lean kernel serves plans whose slots outnumber a chunk's entries eightfold (uniform ids
// then leave about a ninth of the entries in groups), with chunks of up to 16 * kLeanMaxThreads
// entries and 32-bit sort keys whose bucket bits are slot bits (so a slot's entries share a
// bucket), whatever their fields (but kspa with qrec: lean_stage). Other data (hot or skewed slots in such a plan) is found per
// chunk and left to the general kernel. Empty: it serves the plan; else why not.
std::string lean_refusal(const KernelShape& s) {
    const int64_t n = static_cast<int64_t>(s.C) * (s.W + s.R);
    if (n > static_cast<int64_t>(kLeanKeysPerThread) * kLeanMaxThreads) {
        return format("n = %lld entries a chunk > %d", static_cast<long long>(n), kLeanKeysPerThread * kLeanMaxThreads);
    }
    if (s.num_keys < 8 * n) {
        return format("num_keys = %lld < 8 n = %lld", static_cast<long long>(s.num_keys),
                      static_cast<long long>(8 * n));
    }
    const int entry_bits = std::max(1, bits_of(n - 1)), slot_bits = bits_of(s.num_keys - 1);
    const int bucket_bits = bits_of(kLeanBucketsPerThread * lean_threads(static_cast<int>(n)) - 1);
    if (entry_bits + slot_bits > 32) {
        return format("%d slot bits + %d entry bits > 32-bit sort keys", slot_bits, entry_bits);
    }
    if (slot_bits < bucket_bits) return format("%d slot bits < %d bucket bits", slot_bits, bucket_bits);
    return std::string();
}

// What the plan's det_fields ask of the lean layout: the row fields past the spay rows run
// stage "records"; the tile and dc indices count the groups' first writes.
LeanFields lean_fields(int64_t det_fields) {
    const auto has = [det_fields](int64_t bits) { return (det_fields & bits) != 0; };
    LeanFields f{};
    f.group_firsts = has(SDM_P1_DET_TILES | SDM_P1_DET_DC_GIDX);
    f.row_fields = f.group_firsts || has(SDM_P1_DET_KREC | SDM_P1_DET_KSPA | SDM_P1_DET_QREC | SDM_P1_DET_QREC8);
    return f;
}

// The lean kernel's layout: the most blocks an SM whose shares of shared memory hold the
// arrays and at least n / 8 grouped entries (n / 4 wanted).
int lean_stage(const PlanRequest& p, const DeviceFacts& d, KernelFacts& facts, ForwardKernels* f) {
    const KernelShape& s = f->shape;
    f->lean_layout = LeanLayout{};
    f->lean_scalar = KernelChoice{};
    f->lean_scalar.why = lean_vectors(s) ? "none: no lean kernel" : "none: the lean kernel is the scalar form itself";
    const std::string refusal = lean_refusal(s);
    if (!refusal.empty()) {
        f->lean.why = "none: " + refusal;
        return 0;
    }
    // Measured (H100, stop 54: the lean kernel against the general one for each set): the
    // lean kernel wins every set on the 1,024-thread form (S6: kspa alone -57 %, every field
    // -10 %) and kspa without qrec on the 256-thread form (S1 det_fields 95: 1.40 against
    // 1.87 ms), but loses where kspa and qrec come together on that form (S1 511: 2.52 against
    // 2.17 ms; every field 3.07 against 2.21); so only those plans keep the general kernel.
    const int n = s.C * (s.W + s.R), threads = lean_threads(n);
    const bool qrec = (p.det_fields & (SDM_P1_DET_QREC | SDM_P1_DET_QREC8)) != 0;
    if ((p.det_fields & SDM_P1_DET_KSPA) != 0 && qrec && threads <= kLeanSmallBlock) {
        f->lean.why =
            "none: kspa with qrec in the 256-thread form (the general kernel writes them faster: "
            "S1 every field 2.21 against 3.07 ms)";
        return 0;
    }
    const LeanFields fields = lean_fields(p.det_fields);
    const bool vectors = lean_vectors(s);
    const std::string kernel = lean_kernel(s, fields.row_fields, vectors);
    SmemLimits limits{};
    int e = facts.raise_smem_limit(kernel, &limits);
    if (e != 0) return e;
    // The scalar form beside a vector one, for executes on arrays that are not 16-byte
    // aligned: the same layout (its registers may differ; the grid is persistent either way).
    const std::string scalar = vectors ? lean_kernel(s, fields.row_fields, false) : std::string();
    if (vectors) {
        SmemLimits scalar_limits{};
        e = facts.raise_smem_limit(scalar, &scalar_limits);
        if (e != 0) return e;
    }
    const bool per_token = s.gate_width == 1;
    const size_t fixed = lean_fixed_bytes(s.C, s.W, s.R, per_token, threads, fields);
    const uint32_t want = static_cast<uint32_t>(std::max(n / 4, 4)), least = static_cast<uint32_t>(std::max(n / 8, 1));
    for (int blocks = 4; blocks >= 1; --blocks) {
        const size_t room = limits.room(blocks);
        if (room <= fixed) continue;
        const uint32_t grouped = static_cast<uint32_t>(std::min<size_t>(want, (room - fixed) / kLeanGroupedBytes));
        if (grouped < least) continue;
        LeanLayout l = lean_layout(s.C, s.W, s.R, per_token, threads, grouped, fields);
        while (l.smem_bytes > room && l.max_grouped > least) {   // the records' alignment
            l = lean_layout(s.C, s.W, s.R, per_token, threads, l.max_grouped - 4, fields);
        }
        if (l.smem_bytes > room) continue;
        int resident = 0;
        e = facts.blocks_per_sm(kernel, threads, l.smem_bytes, &resident);
        if (e != 0) return e;
        if (resident < blocks) continue;
        const int entry_bits = std::max(1, bits_of(n - 1)), slot_bits = bits_of(s.num_keys - 1);
        l.bucket_shift = entry_bits + slot_bits - bits_of(kLeanBucketsPerThread * threads - 1);
        l.blocks_per_sm = blocks;
        l.grid = static_cast<int>(std::min<int64_t>(s.N, static_cast<int64_t>(d.sms) * blocks));
        f->lean_layout = l;
        f->lean.kernel = kernel;
        f->lean.grid = l.grid;
        f->lean.threads = l.threads;
        f->lean.smem_bytes = l.smem_bytes;
        if (vectors) {
            f->lean_scalar = f->lean;
            f->lean_scalar.kernel = scalar;
            f->lean_scalar.why = "the lean kernel's scalar form, for arrays that are not 16-byte aligned";
        }
        f->lean.why = format(
            "%s, n = %d <= %d, num_keys = %lld >= 8 n, %d-bit sort keys; %s an SM, room for %u "
            "grouped entries a chunk; %s",
            fields.row_fields ? "fields past the shipped set (stage records)" : "the shipped fields", n,
            kLeanKeysPerThread * kLeanMaxThreads, static_cast<long long>(s.num_keys), entry_bits + slot_bits,
            count(blocks, "block").c_str(), l.max_grouped,
            vectors ? "16-byte loads and stores (W and R multiples of 4)" : "scalar (W or R not a multiple of 4)");
        return 0;
    }
    f->lean.why = "none: no block's share of shared memory holds the arrays and n / 8 grouped entries";
    return 0;   // the general kernel computes every chunk
}

// ---- stage: spread ---------------------------------------------------------------------

// The spread kernel's instantiation, by the chunk's count type, for whole or split chunks.
std::string spread_kernel(bool narrow_counts, bool split) {
    return format("spread_kernel<%s, %s>", narrow_counts ? "uint16_t" : "uint32_t", boolean(split));
}

// The spread slots: a slot for every chunk, in plans of at most two chunks a general block
// (with more, every SM has chunks of its own to compute, and handing chunks over lost: S4
// 2.52 -> 2.66 ms, S7 4.50 -> 4.72 with every chunk of the warp path handed over;
// kernels/spread/README.md), within twice the outputs' bytes (or kSpreadSlotsFloor): the
// workspace stays proportionate to them. The general kernel of such a plan is the one
// compiled with the hand-over.
int spread_stage(const PlanRequest& p, const DeviceFacts& d, KernelFacts& facts, ForwardKernels* f) {
    const KernelShape& s = f->shape;
    f->spread_layout = SpreadLayout{};
    f->spread_split.why = "none: no spread slots";
    // Full-size blocks, rows not in sorted order: the general kernels compiled with the path.
    if (f->general.threads != kMaxThreads) {
        f->spread.why = "none: 256-thread general blocks (the hand-over is compiled into 512-thread ones)";
        return 0;
    }
    if (s.sorted_rows) {
        f->spread.why = "none: the rows in sorted order (the hand-over is compiled into entry-order kernels)";
        return 0;
    }
    SpreadLayout l = spread_slot_layout(s, f->arrays, f->narrow_counts);
    l.min_terms = p.spread_min_terms;
    const int main_grid = f->general.grid;
    const size_t budget = std::max(2 * p.output_bytes, kSpreadSlotsFloor);
    const int64_t by_bytes = static_cast<int64_t>(budget / l.slot_bytes);
    l.capacity = s.N <= 2 * static_cast<int64_t>(main_grid) ? std::min({s.N, by_bytes, p.spread_max_slots}) : 0;
    const std::string kernel = spread_kernel(f->narrow_counts, false), split = spread_kernel(f->narrow_counts, true);
    l.smem_bytes = spread_smem_bytes(s.C);
    int e = facts.set_smem_limit(kernel, l.smem_bytes);
    if (e == 0) e = facts.set_smem_limit(split, l.smem_bytes);
    int per_sm = 0, split_per_sm = 0;
    if (e == 0) e = facts.blocks_per_sm(kernel, kSpreadThreads, l.smem_bytes, &per_sm);
    if (e == 0) e = facts.blocks_per_sm(split, kSpreadThreads, l.smem_bytes, &split_per_sm);
    if (e != 0) return e;
    l.grid = d.sms * std::max(per_sm, 1);
    if (l.capacity < 1) {   // no slot: the general kernel sums every chunk
        f->spread.why =
            s.N > 2 * static_cast<int64_t>(main_grid)
                ? format("none: N = %lld > 2 x the general grid (%d)", static_cast<long long>(s.N), main_grid)
                : format("none: no room for a %zu B slot", l.slot_bytes);
        return 0;
    }
    // The general kernel with the path has the same static shared memory (ChunkShared holds
    // its scalars), so the layout holds; its limit is raised as the others' were.
    const std::string handing_over = general_kernel(*f, kMaxThreads, false, s.shipped_fields, true);
    SmemLimits limits{};
    e = facts.raise_smem_limit(handing_over, &limits);
    if (e != 0) return e;
    if (limits.limit < f->general.smem_bytes) {
        f->spread.why = "none: the general kernel with the hand-over has less shared memory than its layout";
        return 0;
    }
    f->spread_layout = l;
    f->spread.kernel = kernel;
    f->spread.grid = l.grid;
    f->spread.threads = kSpreadThreads;
    f->spread.smem_bytes = l.smem_bytes;
    f->spread.why = format(
        "N = %lld <= 2 x the general grid (%d): %lld slots of %zu B (within %zu B), the pair sums "
        "of chunks of %llu terms or more handed over",
        static_cast<long long>(s.N), main_grid, static_cast<long long>(l.capacity), l.slot_bytes, budget,
        static_cast<unsigned long long>(l.min_terms));
    // Its blocks return at once where no slot was split.
    f->spread_split.kernel = split;
    f->spread_split.grid = d.sms * std::max(split_per_sm, 1);
    f->spread_split.threads = kSpreadThreads;
    f->spread_split.smem_bytes = l.smem_bytes;
    f->spread_split.why = format("the slots of chunks of %llu terms a cell or more (C x C cells), their units split",
                                 static_cast<unsigned long long>(kSpreadSplitTermsPerCell));
    f->general.kernel = handing_over;
    f->general.why += "; compiled with the hand-over to the spread kernel";
    return 0;
}

// ---- stage: backward -------------------------------------------------------------------

// Backward plans: the backward's slices may take the plan's outputs' bytes, and at least this
// many (the backward's gradients are small next to its slices, 130 bytes or so an entry).
constexpr size_t kBackwardSliceFloor = size_t{64} << 20;

// The lean backward: blocks of 256 threads for chunks of up to 8192 entries (two or three an
// SM: each overlaps the others' barriers and memory waits), else of 512; the most blocks an
// SM, then the most hot warps (half the block's, at least two), whose shares of shared memory
// hold its arrays.
int lean_backward_stage(const DeviceFacts& d, KernelFacts& facts, const KernelShape& s, BackwardKernels* b) {
    b->lean_layout = LeanBackwardLayout{};
    const int n = s.C * (s.W + s.R);
    if (n > kLeanBackwardMaxEntries) {
        b->lean.why = format("none: n = %d entries a chunk > %d (16-bit positions)", n, kLeanBackwardMaxEntries);
        return 0;
    }
    const int threads = n <= 8192 ? 256 : 512;
    const std::string kernel = format("lbwd::lean_backward_kernel<%s, %d>", boolean(s.gate_width != 1), threads);
    SmemLimits limits{};
    int e = facts.raise_smem_limit(kernel, &limits);
    if (e != 0) return e;
    // A hot group of distinct ids in each token holds at most one write and one read a token.
    const int hot_max = std::min((n + 31) / 32 * 32, std::max(64, (2 * s.C + 31) / 32 * 32));
    const bool per_token = s.gate_width == 1;
    const int hot_target = std::max(2, threads / 32 / 2);
    for (int blocks = 4; blocks >= 1; --blocks) {
        const size_t room = limits.room(blocks);
        for (int hot = hot_target; hot >= 1; --hot) {
            LeanBackwardLayout l = lean_backward_layout(s.C, s.W, s.R, per_token, threads, hot, hot_max, room);
            if (l.smem_bytes > room) continue;
            int resident = 0;
            e = facts.blocks_per_sm(kernel, threads, l.smem_bytes, &resident);
            if (e != 0) return e;
            if (resident < blocks) break;   // fewer hot warps do not free registers
            l.blocks_per_sm = blocks;
            l.grid = static_cast<int>(std::min<int64_t>(s.N, static_cast<int64_t>(d.sms) * blocks));
            b->lean_layout = l;
            b->lean.kernel = kernel;
            b->lean.grid = l.grid;
            b->lean.threads = threads;
            b->lean.smem_bytes = l.smem_bytes;
            b->lean.why =
                format("n = %d <= %d; %s an SM with %s (hot groups of up to %d entries)", n, kLeanBackwardMaxEntries,
                       count(blocks, "block").c_str(), count(hot, "hot warp").c_str(), hot_max);
            return 0;
        }
    }
    b->lean.why = "none: no block's share of shared memory holds the arrays and a hot warp's";
    return 0;   // the general backward computes every chunk
}

// The general backward: as many blocks as the device holds at once, no more than N, and no
// more than `slice_budget` bytes of slices (at least one block).
int backward_stage(const PlanRequest& p, const DeviceFacts& d, KernelFacts& facts, const KernelShape& s,
                   BackwardKernels* b) {
    int per_sm = 0, per_sm_sort = 0;
    b->general.kernel = "backward_kernel<false>";
    b->general_sort.kernel = "backward_kernel<true>";
    int e = facts.blocks_per_sm(b->general.kernel, kBackwardThreads, 0, &per_sm);
    if (e == 0) e = facts.blocks_per_sm(b->general_sort.kernel, kBackwardThreads, 0, &per_sm_sort);
    if (e == 0) e = lean_backward_stage(d, facts, s, b);
    if (e != 0) return e;
    b->dependent_launch = d.cc_major >= 9;
    b->layout = backward_slice(s);
    const size_t slice_budget = std::max(p.output_bytes, kBackwardSliceFloor);
    const int64_t affordable = std::max<int64_t>(1, static_cast<int64_t>(slice_budget / b->layout.bytes));
    const int64_t resident = static_cast<int64_t>(d.sms) * std::max(per_sm, 1);
    const int64_t grid = std::min<int64_t>(std::min<int64_t>(s.N, resident), affordable);
    b->general.grid = static_cast<int>(grid);
    b->general_sort.grid =
        static_cast<int>(std::min<int64_t>(grid, static_cast<int64_t>(d.sms) * std::max(per_sm_sort, 1)));
    b->general.threads = b->general_sort.threads = kBackwardThreads;
    b->general.why = b->lean.launched() ? "the payload given: the chunks the lean backward leaves"
                                        : "the payload given: every chunk";
    b->general_sort.why = "the payload NULL: every chunk, sorted again";
    return 0;
}

// ---- the workspace ---------------------------------------------------------------------

// Sizes with overflow checks: past PTRDIFF_MAX, `too_large` is set (src/checked_size.h's
// rule, which the host code reports).
struct Sizes {
    bool too_large = false;
    static constexpr size_t kMax =
        static_cast<uintmax_t>(PTRDIFF_MAX) < SIZE_MAX ? static_cast<size_t>(PTRDIFF_MAX) : SIZE_MAX;
    size_t add(size_t a, size_t b) {
        if (a > kMax || b > kMax - a) too_large = true;
        return too_large ? 0 : a + b;
    }
    size_t mul(size_t a, size_t b) {
        if (b != 0 && a > kMax / b) too_large = true;
        return too_large ? 0 : a * b;
    }
    size_t align_up(size_t bytes, size_t align) { return add(bytes, align - 1) / align * align; }
};

// Where each part of the workspace lies: the status, three words a chunk, the general
// kernel's scratch (a backward plan's slices share it: a plan runs one at a time), the
// spread slots (where the lean backward's slices go when they fit).
WorkspaceLayout carve_workspace(const PlanRequest& p, const KernelPolicy& k) {
    const ForwardKernels& f = k.forward;
    Sizes z;
    WorkspaceLayout w{};
    w.chunk_value = z.align_up(sizeof(DeviceStatus), 256);
    const size_t values = z.align_up(z.mul(static_cast<size_t>(f.shape.N), sizeof(uint64_t)), 256);
    w.wide_chunks = z.add(w.chunk_value, values);
    w.general_chunks = z.add(w.wide_chunks, values);
    w.scratch = z.add(w.general_chunks, values);
    size_t scratch = z.mul(static_cast<size_t>(f.general.grid), f.scratch_per_block);
    const size_t slots = z.mul(static_cast<size_t>(f.spread_layout.capacity), f.spread_layout.slot_bytes);
    bool lean_in_slots = false;
    if (p.backward) {
        const BackwardKernels& b = k.backward_kernels;
        w.payload_value = w.scratch;
        w.scratch = z.add(w.payload_value, values);
        const size_t general = z.mul(static_cast<size_t>(b.general.grid), b.layout.bytes);
        const size_t lean = z.mul(static_cast<size_t>(b.lean_layout.grid), b.lean_layout.slice_bytes);
        lean_in_slots = lean <= slots;
        w.lean_slices = z.add(w.scratch, z.align_up(general, 256));
        const size_t slices = z.add(z.align_up(general, 256), lean_in_slots ? 0 : lean);
        if (slices > scratch) scratch = slices;
    }
    w.spread_slots = z.align_up(z.add(w.scratch, scratch), 256);
    if (lean_in_slots) w.lean_slices = w.spread_slots;
    w.bytes = z.add(w.spread_slots, slots);
    w.too_large = z.too_large;
    return w;
}

}   // namespace

int choose_policy(const PlanRequest& p, const DeviceFacts& d, KernelFacts& facts, KernelPolicy* out,
                  bool* in_backward) {
    KernelPolicy k{};
    ForwardKernels& f = k.forward;
    f.shape = with_forms(p);
    f.dependent_launch = d.cc_major >= 9;
    int e = general_stage(p, d, facts, &f);
    if (e == 0) e = lean_stage(p, d, facts, &f);
    if (e == 0) e = spread_stage(p, d, facts, &f);
    if (e != 0) return e;
    f.general.why = (f.lean.launched() ? "the chunks the lean kernel leaves; " : "every chunk; ") + f.general.why;
    k.backward = p.backward;
    if (p.backward) {
        e = backward_stage(p, d, facts, f.shape, &k.backward_kernels);
        if (e != 0) {
            if (in_backward != nullptr) *in_backward = true;
            return e;
        }
    }
    k.workspace = carve_workspace(p, k);
    *out = k;
    return 0;
}

}   // namespace cuda
}   // namespace sdm_p1
