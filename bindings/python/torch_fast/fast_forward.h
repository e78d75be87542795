// The fast forward: a registered plan found by the call's key, run on a new block, the
// outputs carved from it. Every condition the Python fast path checks at a call is checked
// here; where one does not hold, or anything is unusual, the call returns None and Python
// takes its long way, which raises whatever error the call has.
#ifndef SDMP1_TORCH_FAST_FAST_FORWARD_H
#define SDMP1_TORCH_FAST_FAST_FORWARD_H

#include <Python.h>

#include "call_key.h"
#include "sdm/phase1.h"

namespace sdmp1_torch {

using ExecuteFn = sdm_p1_status (*)(sdm_p1_plan*, const sdm_p1_inputs*, void* const*, int32_t, void*);

// The library's sdm_p1_execute, as the cffi binding loaded it (the plans are that library's:
// the extension never loads one of its own), and plan_cache.note_hit (a borrowed reference
// kept alive by the caller: the module holds it).
void set_library(ExecuteFn execute, PyObject* note_hit);
bool library_set();

// (data, [outputs in carve's order]) or None; nullptr with a Python error set only where
// Python itself failed (no memory).
PyObject* fast_forward(const CallArgs& args);

// run_plan(plan, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel) ->
// [outputs in carve's order] or None: the forward plan that Python found for a call (and
// checked the call for: _call_plan), run and carved; the autograd Function's forward calls
// it. Its record is made from the plan's attributes at its first call.
constexpr Py_ssize_t kRunPlanArgCount = 9;
PyObject* fast_run_plan(PyObject* const* args);

// register_plan's work: `args` as the forward's, then the record's parts (registry.h).
// Returns None; registers nothing where the call has no key or runs on a stream other than
// the plan's.
PyObject* register_call(const CallArgs& args, PyObject* const* record_args);

}   // namespace sdmp1_torch

#endif
