// SDMP1_LOG's lines (kernel_policy.h: policy_log): a line of the plan's launches, as before
// the policy had lines of its own, then a line a stage: its instantiation, or none, and why.
#include <cstdarg>
#include <cstdio>

#include "kernel_policy.h"

namespace sdm_p1 {
namespace cuda {

namespace {

void append(std::string& out, const char* fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    out += text;
}

// "libsdmp1:   NAME  KERNEL: WHY" (KERNEL and its colon absent where the stage has none).
void append_stage(std::string& out, const char* stage, const KernelChoice& c) {
    append(out, "libsdmp1:   %-16s ", stage);
    if (c.launched()) out += c.kernel + ": ";
    out += c.why + "\n";
}

}   // namespace

std::string policy_log(const PlanRequest& plan, const KernelPolicy& policy) {
    const ForwardKernels& f = policy.forward;
    const KernelShape& s = plan.shape;
    const LeanLayout& l = f.lean_layout;
    std::string out;
    append(out, "libsdmp1: plan N=%lld C=%d W=%d R=%d keys=%lld: kernel %s", static_cast<long long>(s.N), s.C, s.W, s.R,
           static_cast<long long>(s.num_keys), f.lean.launched() ? "lean" : "general");
    if (f.lean.launched()) {
        append(out, " (%d blocks of %d threads, %d an SM, %u B shared, %u grouped entries a chunk)", l.grid, l.threads,
               l.blocks_per_sm, l.smem_bytes, l.max_grouped);
    }
    append(out, ", general (%d blocks of %d threads, %zu B shared)", f.general.grid, f.general.threads,
           f.general.smem_bytes);
    const SpreadLayout& spread = f.spread_layout;
    if (f.spread.launched()) {
        append(out, ", spread (%d blocks, %lld slots of %zu B, from %llu terms a chunk)", spread.grid,
               static_cast<long long>(spread.capacity), spread.slot_bytes,
               static_cast<unsigned long long>(spread.min_terms));
    }
    out += "\n";
    append_stage(out, "lean", f.lean);
    if (f.lean_scalar.launched()) append_stage(out, "lean unaligned", f.lean_scalar);
    append_stage(out, "general", f.general);
    append_stage(out, "wide-log", f.wide_log);
    append_stage(out, "spread", f.spread);
    append_stage(out, "spread split", f.spread_split);
    if (!policy.backward) return out;
    const BackwardKernels& b = policy.backward_kernels;
    const LeanBackwardLayout& lb = b.lean_layout;
    out += "libsdmp1: backward";
    if (b.lean.launched()) {
        append(out,
               " lean (%d blocks of %d threads, %d an SM, %u B shared, %d hot warps, hot groups of up to %d entries, "
               "xbar %s, beta terms %s, %zu B slices), then",
               lb.grid, lb.threads, lb.blocks_per_sm, lb.smem_bytes, lb.hot_warps, lb.hot_max,
               lb.xbar_in_smem ? "shared" : "global", lb.beta_terms_in_smem ? "shared" : "global", lb.slice_bytes);
    }
    append(out, " general (%d blocks, %zu B slices)\n", b.general.grid, b.layout.bytes);
    append_stage(out, "lean backward", b.lean);
    append_stage(out, "general backward", b.general);
    append_stage(out, "sorting backward", b.general_sort);
    return out;
}

}   // namespace cuda
}   // namespace sdm_p1
