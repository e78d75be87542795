// The autograd formula's library call (torch_impl._Phase1Function.backward) in C++: the
// gradients allocated, the upstream gradients' pointers gathered, sdm_p1_execute_backward run
// under the plan's lock. Python keeps the rest: which plan (per stream, its checks), the
// data check of check=True, the double-backward guard.
#ifndef SDMP1_TORCH_FAST_FAST_BACKWARD_H
#define SDMP1_TORCH_FAST_FAST_BACKWARD_H

#include <Python.h>

#include "sdm/phase1.h"

namespace sdmp1_torch {

using ExecuteBackwardFn = sdm_p1_status (*)(sdm_p1_plan*, const sdm_p1_inputs*, const int32_t*, const void* const*,
                                            int32_t, const sdm_p1_input_grads*, void*);

// The loaded library's sdm_p1_execute_backward (see set_library).
void set_backward_library(ExecuteBackwardFn execute_backward);

// The positional arguments of fast_backward, in order.
constexpr Py_ssize_t kBackwardArgCount = 12;

// backward(plan, stream, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, payload,
//          fields, grads) -> [dk_val, dq_val, dg(, dbeta)] or None.
// plan: the backward CachedPlan that Python found for `stream` (checked there); fields: the
// field ids of the float outputs, grads: their upstream gradients (None: not given), one each.
// None where anything is unusual (no upstream gradient, the plan busy in another thread or
// destroyed, the library refusing the call): Python then runs the call itself, and raises
// what it deserves. nullptr with a Python error set only where Python itself failed.
PyObject* fast_backward(PyObject* const* args);

}   // namespace sdmp1_torch

#endif
