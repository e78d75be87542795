// The plans of the JAX handlers, created at a call's first use of its shapes and options and
// kept for every later call: creating one allocates its workspace and (CPU) starts its worker
// threads, far more than an execute of a small batch costs.
//
// Why a process-wide cache rather than XLA's per-instance FFI state: a plan serves every
// compiled computation of its shapes (jit(f), jit(grad(f)) and eager calls share it), and the
// cache needs no type registration with XLA. Plans are never freed: a process holds a plan per
// distinct (shapes, options, device, stream) it used, as XLA holds a compiled executable per
// distinct computation.
//
// The workspace is the plan's own (sdm_p1_plan_create allocates it; the API takes no workspace
// at execute, so XLA's ScratchAllocator cannot provide it). On CUDA it is reused by every
// execute of the plan; the key holds the stream, so those executes are ordered on one stream and
// never use the workspace at the same time.
#ifndef SDMP1_JAX_PLAN_CACHE_H
#define SDMP1_JAX_PLAN_CACHE_H

#include <cstdint>
#include <mutex>

#include "sdm/phase1.h"

namespace sdmp1_jax {

struct CachedPlan {
    sdm_p1_plan* plan = nullptr;
    // The plan's output views (names, dtypes, shapes, bytes; data NULL: caller's outputs).
    sdm_p1_tensor views[SDM_P1_FIELD_COUNT] = {};
    // Held for an execute and what follows it: a plan may not run concurrently with itself, and
    // XLA may run one computation from several threads at once.
    std::mutex mutex;
};

// The plan for `desc` on `stream` (nullptr on the CPU), created on the first request. On failure
// returns nullptr with the library's status in *status and its message in sdm_p1_last_error() of
// the calling thread.
CachedPlan* get_plan(const sdm_p1_desc& desc, void* stream, sdm_p1_status* status);

// The number of plans get_plan has created.
int64_t plans_created();

}   // namespace sdmp1_jax

#endif   // SDMP1_JAX_PLAN_CACHE_H
