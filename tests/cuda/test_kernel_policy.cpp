// The kernel policy (kernels/policy/) on a modelled device, without a GPU: its choices for
// the benchmark's shapes and others against the rules the kernels' READMEs write down
// (kernels/lean/, kernels/spread/, kernels/general/, kernels/backward/lean/), every
// instantiation it names listed in kernels/instantiations.txt, the workspace's parts in
// order, and SDMP1_LOG's lines (policy_log).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../../kernels/kernel_table.h"
#include "../../kernels/policy/kernel_policy.h"
#include "sdm/phase1.h"
#include "test_util.h"

using namespace sdm_p1::cuda;

namespace {

// An H100-like device: 132 SMs, 228 KB of shared memory an SM, 227 KB a block at most, 1 KB
// reserved a block, 64 K registers an SM. Each kernel's registers a thread and static shared
// memory are modelled (its __launch_bounds__ allow them); occupancy is the least of the
// threads', registers' and shared memory's limits.
class ModelDevice final : public KernelFacts {
public:
    static constexpr size_t kOptin = 232448, kPerSm = 233472, kReserved = 1024;
    std::map<std::string, size_t> limit;   // each kernel's dynamic shared-memory limit, as set
    std::set<std::string> asked;           // every kernel the policy asked about

    static int registers(const std::string& k) {
        if (k.rfind("lean::", 0) == 0)
            return k.find(", 256>") != std::string::npos || k.find(", 256,") != std::string::npos ? 80 : 64;
        if (k.rfind("lbwd::", 0) == 0) return k.find(", 256>") != std::string::npos ? 80 : 64;
        if (k.rfind("spread_kernel", 0) == 0) return k.find(", true>") != std::string::npos ? 80 : 60;
        return 128;   // the general kernel (one 512-thread block or two 256-thread ones an SM), the backward
    }
    static size_t static_smem(const std::string& k) { return k.rfind("phase1_kernel", 0) == 0 ? 2048 : 1024; }

    int raise_smem_limit(const std::string& k, SmemLimits* out) override {
        asked.insert(k);
        out->limit = kOptin - static_smem(k);
        out->per_sm = kPerSm;
        out->per_block_overhead = kReserved + static_smem(k);
        limit[k] = out->limit;
        return 0;
    }
    int set_smem_limit(const std::string& k, size_t bytes) override {
        asked.insert(k);
        limit[k] = bytes;
        return 0;
    }
    int blocks_per_sm(const std::string& k, int threads, size_t smem, int* blocks) override {
        asked.insert(k);
        const auto it = limit.find(k);
        const size_t allowed = it != limit.end() ? it->second : 48 * 1024;
        if (smem > allowed) {   // a launch above the kernel's limit fails: no block
            *blocks = 0;
            return 0;
        }
        const int by_threads = 2048 / threads;
        const int by_registers = 65536 / (threads * registers(k));
        const int by_smem = static_cast<int>(kPerSm / (smem + static_smem(k) + kReserved));
        *blocks = std::min({by_threads, by_registers, by_smem, 32});
        return 0;
    }
};

constexpr DeviceFacts kH100{132, 9};

struct Shape {
    int64_t N;
    int C, W, R;
    int64_t num_keys;
    int64_t det_fields = SDM_P1_DET_SHIPPED;
    bool per_write = false, bf16 = false, idx64 = false, backward = false;
};

PlanRequest request(const Shape& x) {
    PlanRequest p{};
    KernelShape& s = p.shape;
    s.N = x.N;
    s.C = x.C;
    s.W = x.W;
    s.R = x.R;
    s.P = 1;
    s.stream_offset = 0;
    s.num_keys = x.num_keys;
    s.valid_last = x.C;
    s.gate_width = x.per_write ? x.W : 1;
    s.rec_tile = 128;
    s.idx64 = x.idx64;
    s.bf16 = x.bf16;
    p.det_fields = x.det_fields;
    // The default fields' bytes, about: a and qk, then 7 words an entry and the payload row.
    const int64_t n = static_cast<int64_t>(x.C) * (x.W + x.R);
    p.output_bytes = static_cast<size_t>(x.N * (8LL * x.C * x.C + 32 * n));
    p.backward = x.backward;
    p.spread_min_terms = 65536;
    p.spread_max_slots = INT64_MAX;
    return p;
}

KernelPolicy choose(const Shape& x, ModelDevice* device = nullptr) {
    ModelDevice own;
    ModelDevice& d = device != nullptr ? *device : own;
    KernelPolicy k{};
    const int e = choose_policy(request(x), kH100, d, &k);
    CHECK_MSG(e == 0, "the model answers every question");
    return k;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool listed(const std::string& kernel) { return kernel_address(kernel) != nullptr; }

// The stages of a policy (the backward's where the plan has one).
std::vector<const KernelChoice*> stages(const KernelPolicy& k) {
    std::vector<const KernelChoice*> v = {&k.forward.lean,     &k.forward.lean_scalar, &k.forward.general,
                                          &k.forward.wide_log, &k.forward.spread,      &k.forward.spread_split};
    if (k.backward) {
        v.insert(v.end(), {&k.backward_kernels.lean, &k.backward_kernels.general, &k.backward_kernels.general_sort});
    }
    return v;
}

// Every stage's instantiation is one kernels/instantiations.txt lists; every stage says why.
void check_listed(const KernelPolicy& k) {
    for (const KernelChoice* c : stages(k)) {
        if (c->launched()) CHECK_MSG(listed(c->kernel), c->kernel.c_str());
        CHECK_MSG(!c->why.empty(), "every stage says why");
    }
}

// The benchmark's S1 (kernels/lean/README.md: "the uniform and sparse data of most plans"):
// the shipped fields, n = 4096 <= 16,384, num_keys >= 8 n: the lean kernel first, blocks of
// up to 256 threads (chunks of up to 4,096 entries); N >= 2 x the SMs with 16-bit counts: the
// general kernel in two half-size blocks an SM; no spread slots (full-size blocks only).
void test_s1_runs_the_lean_kernel() {
    const Shape s1{8192, 64, 32, 32, 65536};
    const KernelPolicy k = choose(s1);
    const ForwardKernels& f = k.forward;
    CHECK(f.lean.kernel == "lean::lean_kernel<int32_t, float, false, 256>");
    CHECK(f.lean_layout.threads == 256 && f.lean.threads == 256);
    CHECK(f.lean_layout.max_grouped >= 4096 / 8 && f.lean_layout.max_grouped <= 4096 / 4);
    CHECK(f.lean_layout.blocks_per_sm >= 1 && f.lean_layout.blocks_per_sm <= 3);   // 80 registers: 3 at most
    CHECK(f.lean.grid == std::min<int64_t>(8192, 132 * f.lean_layout.blocks_per_sm));
    CHECK(f.general.kernel == "phase1_kernel<256, uint16_t, true, false, false, true, false>");
    CHECK(f.general.threads == 256 && f.general.grid == 2 * 132);
    CHECK(f.wide_log.kernel == "phase1_kernel<256, uint16_t, true, false, true, false, false>");
    CHECK(!f.spread.launched() && f.spread_layout.capacity == 0);
    CHECK(f.dependent_launch && f.shape.shipped_fields && !f.shape.sorted_rows);
    check_listed(k);
}

// S4: num_keys = 1024 < 8 n: no lean kernel, the general kernel on every chunk.
void test_s4_runs_the_general_kernel() {
    const KernelPolicy k = choose(Shape{8192, 64, 32, 32, 1024});
    CHECK(!k.forward.lean.launched() && k.forward.lean_layout.threads == 0);
    CHECK(contains(k.forward.lean.why, "num_keys = 1024 < 8 n = 32768"));
    CHECK(k.forward.general.kernel == "phase1_kernel<256, uint16_t, true, false, false, true, false>");
    CHECK(contains(k.forward.general.why, "every chunk"));
    // Every field, but slots fewer than the entries: the rows stay in entry order.
    const KernelPolicy all = choose(Shape{8192, 64, 32, 32, 1024, SDM_P1_DET_ALL});
    CHECK(!all.forward.shape.sorted_rows && !all.forward.shape.shipped_fields);
    CHECK(all.forward.general.kernel == "phase1_kernel<256, uint16_t, true, false, false, false, false>");
    CHECK(contains(all.forward.lean.why, "num_keys = 1024 < 8 n"));
    check_listed(k);
    check_listed(all);
}

// S8 (N = 128, hot chunks; kernels/spread/README.md): N < 2 x the SMs, so full-size blocks,
// and N <= 2 x the general grid: a slot a chunk (within twice the outputs or 64 MB), the
// general kernel compiled with the hand-over, the spread kernel by the count type.
void test_s8_gets_spread_slots() {
    ModelDevice d;
    const Shape s8{128, 128, 64, 64, 262144};
    const KernelPolicy k = choose(s8, &d);
    const ForwardKernels& f = k.forward;
    const PlanRequest p = request(s8);
    CHECK(f.general.threads == 512 && f.general.grid == 128);
    CHECK(f.general.kernel == std::string("phase1_kernel<512, uint16_t, ") + (f.on_chip ? "true" : "false") +
                                  ", false, false, true, true>");
    CHECK(f.wide_log.kernel == std::string("phase1_kernel<512, uint16_t, ") + (f.on_chip ? "true" : "false") +
                                   ", false, true, false, false>");
    CHECK(f.spread.kernel == "spread_kernel<uint16_t, false>" && f.spread.threads == 256);
    CHECK(f.spread_split.kernel == "spread_kernel<uint16_t, true>" && f.spread_split.threads == 256);
    const size_t budget = std::max<size_t>(2 * p.output_bytes, size_t{64} << 20);
    CHECK(f.spread_layout.capacity == std::min<int64_t>(128, budget / f.spread_layout.slot_bytes));
    CHECK(f.spread_layout.capacity > 0 && f.spread_layout.min_terms == 65536);
    CHECK(f.spread_layout.slot_bytes % 256 == 0);
    // A double row of C cells a warp; the limit set to that (not raised) before its occupancy.
    CHECK(f.spread.smem_bytes == 8 * 128 * 8 && d.limit["spread_kernel<uint16_t, false>"] == f.spread.smem_bytes);
    CHECK(f.spread_split.smem_bytes == f.spread.smem_bytes &&
          d.limit["spread_kernel<uint16_t, true>"] == f.spread.smem_bytes);
    CHECK(f.spread.grid == 132 * 4);         // 60 registers: 4 blocks of 256 an SM
    CHECK(f.spread_split.grid == 132 * 3);   // 80 registers: 3
    // S8's chunks (n = 16,384, num_keys >= 8 n) qualify for the lean kernel too: 1024-thread blocks.
    CHECK(!f.lean.launched() || f.lean.kernel == "lean::lean_kernel<int32_t, float, false, 1024>");
    check_listed(k);
    // With more chunks than twice the general grid, no slots (S4: handing over lost).
    const KernelPolicy many = choose(Shape{1024, 128, 64, 64, 262144});
    CHECK(!many.forward.spread.launched() && contains(many.forward.spread.why, "> 2 x the general grid"));
    CHECK(!many.forward.spread_split.launched() && many.forward.spread_split.why == "none: no spread slots");
    CHECK(many.forward.general.kernel.find(", true>") == std::string::npos);   // no hand-over compiled in
    // SDMP1_SPREAD_SLOTS's cap (tests run out of slots with it).
    PlanRequest few = request(s8);
    few.spread_max_slots = 3;
    KernelPolicy capped{};
    CHECK(choose_policy(few, kH100, d, &capped) == 0 && capped.forward.spread_layout.capacity == 3);
}

// The training field sets (kernels/lean/lean_records.cuh): the lean kernel serves them, in
// its instantiations with stage "records" (RowFields); the tile and dc indices take the
// first-write masks, so their room for grouped entries shrinks a little; S6's chunks (16,384
// entries, one 1,024-thread block an SM) still fit with n / 8. A plan asking for kspa and
// qrec together on the 256-thread form keeps the general kernel (measured faster there).
void test_lean_serves_the_training_fields() {
    const Shape s1{8192, 64, 32, 32, 65536};
    const KernelPolicy shipped = choose(s1);
    CHECK(!shipped.forward.lean_layout.row_fields);
    for (int64_t det : {int64_t{SDM_P1_DET_ALL}, int64_t{511}, int64_t{SDM_P1_DET_KSPA | SDM_P1_DET_QREC8}}) {
        const KernelPolicy k = choose(Shape{8192, 64, 32, 32, 65536, det});
        CHECK_MSG(!k.forward.lean.launched() && contains(k.forward.lean.why, "none: kspa with qrec"),
                  std::to_string(det).c_str());
        CHECK(k.forward.general.kernel.find("phase1_kernel<") == 0);
        check_listed(k);
    }
    for (int64_t det : {int64_t{296}, int64_t{952}, int64_t{2872}, int64_t{SDM_P1_DET_ALL & ~SDM_P1_DET_KSPA},
                        int64_t{SDM_P1_DET_QREC8}, int64_t{SDM_P1_DET_KREC},
                        int64_t{SDM_P1_DET_SHIPPED | SDM_P1_DET_KSPA}, int64_t{SDM_P1_DET_KSPA}}) {
        const KernelPolicy k = choose(Shape{8192, 64, 32, 32, 65536, det});
        const ForwardKernels& f = k.forward;
        CHECK_MSG(f.lean.kernel == "lean::lean_kernel<int32_t, float, false, 256, true>", std::to_string(det).c_str());
        CHECK(f.lean_layout.row_fields && contains(f.lean.why, "fields past the shipped set (stage records)"));
        const bool firsts = (det & (SDM_P1_DET_TILES | SDM_P1_DET_DC_GIDX)) != 0;
        CHECK(f.lean_layout.max_grouped >= 4096 / 8 && f.lean_layout.max_grouped <= 4096 / 4);
        CHECK((f.lean_layout.fpre - f.lean_layout.fmask != 0) == firsts);
        CHECK(f.lean_layout.max_grouped <= shipped.forward.lean_layout.max_grouped);
        check_listed(k);
    }
    // The 1,024-thread form serves every set, kspa and qrec together included.
    for (int64_t det : {int64_t{SDM_P1_DET_ALL}, int64_t{511}}) {
        const KernelPolicy k = choose(Shape{128, 128, 64, 64, 262144, det});
        CHECK_MSG(k.forward.lean.kernel == "lean::lean_kernel<int32_t, float, false, 1024, true>",
                  std::to_string(det).c_str());
        check_listed(k);
    }
    const KernelPolicy s6 = choose(Shape{128, 128, 64, 64, 262144, 2872});
    CHECK(s6.forward.lean.kernel == "lean::lean_kernel<int32_t, float, false, 1024, true>");
    CHECK(s6.forward.lean_layout.max_grouped >= 16384 / 8);
    check_listed(s6);
}

// Records or kspa with slots at least the entries: the rows in sorted order, the
// sorted-rows instantiations for the chunks the lean kernel leaves, and no spread slots.
void test_records_sort_the_rows() {
    const KernelPolicy k = choose(Shape{128, 64, 32, 32, 65536, SDM_P1_DET_SHIPPED | SDM_P1_DET_KREC});
    const ForwardKernels& f = k.forward;
    CHECK(f.lean.launched());
    CHECK(f.shape.sorted_rows && f.shape.slots && !f.shape.shipped_fields && !f.shape.group_counts);
    CHECK(f.general.threads == 512);
    CHECK(contains(f.general.kernel, ", true, false, false, false>"));   // SortedRows, not WideLog
    CHECK(contains(f.wide_log.kernel, ", true, true, false, false>"));
    CHECK(contains(f.spread.why, "sorted order"));
    const KernelPolicy tiles = choose(Shape{128, 64, 32, 32, 65536, SDM_P1_DET_TILES});
    CHECK(tiles.forward.shape.group_counts && !tiles.forward.shape.sorted_rows);
    check_listed(k);
}

// n >= 2^16 entries a chunk: 32-bit counts, full-size blocks, the arrays off chip; a batch
// of 8 such chunks gets spread slots, the spread kernel of 32-bit counts.
void test_large_chunks_count_in_32_bits() {
    const KernelPolicy k = choose(Shape{8, 256, 256, 256, 1 << 20});
    CHECK(!k.forward.narrow_counts && !k.forward.on_chip);
    CHECK(k.forward.general.kernel == "phase1_kernel<512, uint32_t, false, false, false, true, true>");
    CHECK(k.forward.wide_log.kernel == "phase1_kernel<512, uint32_t, false, false, true, false, false>");
    CHECK(k.forward.spread.kernel == "spread_kernel<uint32_t, false>");
    CHECK(k.forward.spread_split.kernel == "spread_kernel<uint32_t, true>");
    CHECK(contains(k.forward.lean.why, "> 16384"));
    CHECK(contains(k.forward.general.why, "32-bit counts"));
    CHECK(k.forward.scratch_per_block > 0 && k.forward.scratch_per_block % 256 == 0);
    // Global scratch within the outputs' bytes: fewer blocks than chunks where it is short.
    const PlanRequest p = request(Shape{8, 256, 256, 256, 1 << 20});
    CHECK(k.forward.general.grid ==
          std::min<int64_t>(8, std::max<size_t>(1, p.output_bytes / k.forward.scratch_per_block)));
    check_listed(k);
}

// The lean kernel's form follows the plan's: int64 ids, bfloat16 values, per-write gates.
void test_lean_forms() {
    Shape x{8192, 64, 32, 32, 65536};
    x.idx64 = x.bf16 = x.per_write = true;
    const KernelPolicy k = choose(x);
    CHECK(k.forward.lean.kernel == "lean::lean_kernel<int64_t, uint16_t, true, 256>");
    CHECK(k.forward.lean_scalar.kernel == "lean::lean_kernel<int64_t, uint16_t, true, 256, false, false>");
    check_listed(k);
}

// One vector width an instantiation: W and R multiples of 4 get the vector form and its scalar
// twin for unaligned arrays (the same layout and grid); other shapes the scalar form alone.
void test_lean_vector_widths() {
    const KernelPolicy s1 = choose(Shape{8192, 64, 32, 32, 65536});
    const ForwardKernels& f = s1.forward;
    CHECK(f.lean.kernel == "lean::lean_kernel<int32_t, float, false, 256>");
    CHECK(f.lean_scalar.kernel == "lean::lean_kernel<int32_t, float, false, 256, false, false>");
    CHECK(f.lean_scalar.grid == f.lean.grid && f.lean_scalar.threads == f.lean.threads &&
          f.lean_scalar.smem_bytes == f.lean.smem_bytes);
    CHECK(contains(f.lean.why, "16-byte loads and stores (W and R multiples of 4)"));
    check_listed(s1);
    for (const int w : {6, 30, 31}) {
        const KernelPolicy odd = choose(Shape{8192, 64, w, 32, 65536});
        CHECK_MSG(odd.forward.lean.kernel == "lean::lean_kernel<int32_t, float, false, 256, false, false>",
                  std::to_string(w).c_str());
        CHECK(!odd.forward.lean_scalar.launched() &&
              contains(odd.forward.lean.why, "scalar (W or R not a multiple of 4)"));
        check_listed(odd);
    }
    Shape s6{128, 128, 64, 62, 262144};
    s6.det_fields = SDM_P1_DET_SHIPPED | SDM_P1_DET_KREC;
    const KernelPolicy rec = choose(s6);
    CHECK(rec.forward.lean.kernel == "lean::lean_kernel<int32_t, float, false, 1024, true, false>");
    check_listed(rec);
}

// The backward (kernels/backward/lean/README.md): the lean backward for chunks of up to
// 16,384 entries, blocks of 256 up to 8,192 entries, else 512; the general backward after it,
// and the one that sorts again for a NULL payload.
void test_backward_kernels() {
    Shape x{8192, 64, 32, 32, 65536};
    x.backward = true;
    const KernelPolicy k = choose(x);
    const BackwardKernels& b = k.backward_kernels;
    CHECK(k.backward);
    CHECK(b.lean.kernel == "lbwd::lean_backward_kernel<false, 256>" && b.lean_layout.threads == 256);
    CHECK(b.general.kernel == "backward_kernel<false>" && b.general_sort.kernel == "backward_kernel<true>");
    CHECK(b.general_sort.grid <= b.general.grid && b.general.threads == 256);
    CHECK(contains(b.general.why, "the lean backward leaves"));
    Shape wide{64, 128, 64, 64, 262144};
    wide.backward = wide.per_write = true;
    const KernelPolicy w = choose(wide);
    CHECK(!w.backward_kernels.lean.launched() ||
          w.backward_kernels.lean.kernel == "lbwd::lean_backward_kernel<true, 512>");
    Shape huge{4, 256, 64, 64, 1 << 20};
    huge.backward = true;
    const KernelPolicy h = choose(huge);
    CHECK(!h.backward_kernels.lean.launched() && contains(h.backward_kernels.lean.why, "> 16384"));
    check_listed(k);
    check_listed(w);
}

// The workspace's parts in order, each 256-byte aligned; a backward plan's payload words after
// the forward's lists, its slices from the scratch's offset.
void test_workspace_carve_out() {
    Shape x{8192, 64, 32, 32, 65536};
    x.backward = true;
    const KernelPolicy k = choose(x);
    const WorkspaceLayout& w = k.workspace;
    const size_t words = (8 * 8192 + 255) / 256 * 256;
    CHECK(w.status == 0 && w.chunk_value == 256);
    CHECK(w.wide_chunks == w.chunk_value + words && w.general_chunks == w.wide_chunks + words);
    CHECK(w.payload_value == w.general_chunks + words && w.scratch == w.payload_value + words);
    CHECK(w.spread_slots >= w.scratch && w.spread_slots % 256 == 0 && w.bytes >= w.spread_slots);
    CHECK(!w.too_large);
    const size_t general_slices =
        static_cast<size_t>(k.backward_kernels.general.grid) * k.backward_kernels.layout.bytes;
    CHECK(w.spread_slots - w.scratch >= general_slices);
    const KernelPolicy f = choose(Shape{8192, 64, 32, 32, 65536});
    CHECK(f.workspace.payload_value == 0 && f.workspace.scratch == f.workspace.general_chunks + words);
}

// Over many shapes and forms, the policy names (and asks the device about) only listed
// instantiations, and every listed one is named by some shape (none is dead).
void test_every_choice_is_listed() {
    std::set<std::string> chosen;
    const int64_t fields[] = {SDM_P1_DET_SHIPPED, SDM_P1_DET_ALL, SDM_P1_DET_TILES, SDM_P1_DET_KREC};
    const int sizes[][3] = {{16, 4, 4},    {64, 32, 32},    {128, 32, 32},  {128, 64, 64},
                            {256, 64, 64}, {256, 128, 128}, {256, 256, 256}};
    for (const int64_t N : {1, 128, 1024, 8192}) {
        for (const auto& c : sizes) {
            for (const int64_t keys : {int64_t{1024}, int64_t{1} << 18, int64_t{1} << 22}) {
                for (const int64_t det : fields) {
                    for (int form = 0; form < 8; ++form) {
                        Shape x{N, c[0], c[1], c[2], keys, det};
                        x.idx64 = form & 1;
                        x.bf16 = form & 2;
                        x.per_write = form & 4;
                        x.backward = true;
                        ModelDevice device;
                        const KernelPolicy k = choose(x, &device);
                        check_listed(k);
                        for (const std::string& asked : device.asked) CHECK_MSG(listed(asked), asked.c_str());
                        for (const KernelChoice* ch : stages(k)) {
                            if (ch->launched()) chosen.insert(ch->kernel);
                        }
                    }
                }
            }
        }
    }
    int listed_count = 0;
    for (const KernelGroup& g : kernel_groups()) {
        for (int i = 0; i < g.count; ++i) {
            ++listed_count;
            CHECK_MSG(chosen.count(g.entries[i].name) == 1, g.entries[i].name);
        }
    }
    CHECK(listed_count == 100);
}

// SDMP1_LOG's lines: the plan's launches as before, then each stage's instantiation and why.
void test_log_names_each_instantiation() {
    const KernelPolicy k = choose(Shape{8192, 64, 32, 32, 65536});
    const std::string log = policy_log(request(Shape{8192, 64, 32, 32, 65536}), k);
    std::printf("%s", log.c_str());
    CHECK(log.rfind("libsdmp1: plan N=8192 C=64 W=32 R=32 keys=65536: kernel lean (", 0) == 0);
    CHECK(contains(log,
                   "libsdmp1:   lean             lean::lean_kernel<int32_t, float, false, 256>: the shipped "
                   "fields, n = 4096 <= 16384, num_keys = 65536 >= 8 n, 28-bit sort keys"));
    CHECK(contains(log,
                   "libsdmp1:   general          phase1_kernel<256, uint16_t, true, false, false, true, false>: "
                   "the chunks the lean kernel leaves; two 256-thread blocks an SM (N = 8192 >= 2 x 132 SMs"));
    CHECK(
        contains(log, "libsdmp1:   wide-log         phase1_kernel<256, uint16_t, true, false, true, false, false>: "));
    CHECK(contains(log, "libsdmp1:   spread           none: 256-thread general blocks"));
    CHECK(!contains(log, "backward"));
    Shape s8{128, 128, 64, 64, 262144};
    s8.backward = true;
    const std::string log8 = policy_log(request(s8), choose(s8));
    std::printf("%s", log8.c_str());
    CHECK(contains(
        log8, "libsdmp1:   spread           spread_kernel<uint16_t, false>: N = 128 <= 2 x the general grid (128)"));
    CHECK(contains(log8,
                   "libsdmp1:   spread split     spread_kernel<uint16_t, true>: the slots of chunks of 64 terms a "
                   "cell or more"));
    CHECK(contains(log8, ", spread (528 blocks, "));
    CHECK(contains(log8, "libsdmp1: backward "));
    CHECK(contains(log8, "libsdmp1:   sorting backward backward_kernel<true>: the payload NULL"));
}

}   // namespace

int main() {
    RUN(test_s1_runs_the_lean_kernel);
    RUN(test_s4_runs_the_general_kernel);
    RUN(test_s8_gets_spread_slots);
    RUN(test_lean_serves_the_training_fields);
    RUN(test_records_sort_the_rows);
    RUN(test_large_chunks_count_in_32_bits);
    RUN(test_lean_forms);
    RUN(test_lean_vector_widths);
    RUN(test_backward_kernels);
    RUN(test_workspace_carve_out);
    RUN(test_every_choice_is_listed);
    RUN(test_log_names_each_instantiation);
    return test_summary();
}
