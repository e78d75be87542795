// sdm_phase1._torch_fast: the eager PyTorch forward's fast path in C++ (a client of the C ABI,
// as jax_ffi is). Python keeps plan creation, every check and every error message; once its
// long way has found or made a forward plan for a call, it registers the plan here under the
// call's key, and later calls with that key run here in one call: the lookup, the output
// block, sdm_p1_execute, the outputs carved. The autograd formula's library call likewise
// (fast_backward.h), on the backward plan Python found. See docs/python.md ("The compiled
// fast path").
//
// No C++ exception crosses into Python: each function below catches them and returns None (a
// forward: Python takes its long way, which meets the same condition and reports it) or sets
// a Python exception.
#include <Python.h>

#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>

#include "call_key.h"
#include "current_stream.h"
#include "fast_backward.h"
#include "fast_forward.h"
#include "registry.h"

namespace {

using namespace sdmp1_torch;

PyObject* note_hit = nullptr;   // plan_cache.note_hit, kept for the process's life

bool arg_count(const char* name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return true;
    PyErr_Format(PyExc_TypeError, "sdm_phase1._torch_fast.%s takes %zd arguments, got %zd", name, want, nargs);
    return false;
}

PyObject* internal_error(const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "sdm_phase1._torch_fast: %s", e.what());
    return nullptr;
}

// forward(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel, stream_offset,
//         num_keys, valid_last, need_read_groups, rec_tile, det_fields, check)
//   -> (data, outputs) or None
PyObject* forward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count("forward", nargs, kCallArgCount)) return nullptr;
    try {
        return fast_forward(call_args(args));
    } catch (const std::exception&) {   // c10::Error (e.g. out of memory): the long way says it
        PyErr_Clear();
        Py_RETURN_NONE;
    }
}

// register_plan(<forward's arguments>, plan, handle, lock, data, cuda, stream, layout,
//               outputs, block_bytes) -> None
PyObject* register_plan(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count("register_plan", nargs, kCallArgCount + 9)) return nullptr;
    try {
        return register_call(call_args(args), args + kCallArgCount);
    } catch (const std::exception& e) {
        return internal_error(e);
    }
}

// run_plan(plan, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel)
//   -> [outputs] or None (fast_forward.h)
PyObject* run_plan(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count("run_plan", nargs, kRunPlanArgCount)) return nullptr;
    try {
        return fast_run_plan(args);
    } catch (const std::exception&) {   // c10::Error (e.g. out of memory): Python's call says it
        PyErr_Clear();
        Py_RETURN_NONE;
    }
}

// backward(plan, stream, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, payload, fields,
//          grads) -> [gradients] or None (fast_backward.h)
PyObject* backward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count("backward", nargs, kBackwardArgCount)) return nullptr;
    try {
        return fast_backward(args);
    } catch (const std::exception&) {   // c10::Error (e.g. out of memory): Python's call says it
        PyErr_Clear();
        Py_RETURN_NONE;
    }
}

// unregister_plan(plan) -> None: plan_cache calls it (under the plan's lock) before a plan is
// destroyed or moved to another stream.
PyObject* unregister_plan(PyObject*, PyObject* plan) {
    remove_plan(plan);
    Py_RETURN_NONE;
}

PyObject* clear(PyObject*, PyObject*) { return PyLong_FromSize_t(clear_plans()); }

PyObject* registered(PyObject*, PyObject*) { return PyLong_FromSize_t(registered_keys()); }

// set_library(execute, execute_backward, note_hit): the addresses of the loaded libsdmp1's
// sdm_p1_execute and sdm_p1_execute_backward (ints, from cffi) and plan_cache.note_hit.
PyObject* set_library_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count("set_library", nargs, 3)) return nullptr;
    const unsigned long long execute = PyLong_AsUnsignedLongLong(args[0]);
    const unsigned long long execute_backward = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred()) return nullptr;
    if (execute == 0 || execute_backward == 0 || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast.set_library: a null address or no note_hit");
        return nullptr;
    }
    Py_INCREF(args[2]);
    Py_XDECREF(note_hit);
    note_hit = args[2];
    set_library(reinterpret_cast<ExecuteFn>(static_cast<std::uintptr_t>(execute)), note_hit);
    set_backward_library(reinterpret_cast<ExecuteBackwardFn>(static_cast<std::uintptr_t>(execute_backward)));
    Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(forward)), METH_FASTCALL,
     "The forward of a registered plan: (data, outputs), or None (take the Python path)."},
    {"register_plan", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_plan)), METH_FASTCALL,
     "Registers a forward plan under a call's key."},
    {"run_plan", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run_plan)), METH_FASTCALL,
     "A forward plan that Python found for a call, run: the outputs, or None (take the Python path)."},
    {"backward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(backward)), METH_FASTCALL,
     "The autograd formula's library call: the gradients, or None (take the Python path)."},
    {"unregister_plan", unregister_plan, METH_O, "Forgets every key of a plan."},
    {"clear", clear, METH_NOARGS, "Forgets every plan; returns the number of keys forgotten."},
    {"registered", registered, METH_NOARGS, "The number of keys registered."},
    {"set_library", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_library_py)), METH_FASTCALL,
     "Sets sdm_p1_execute's address and plan_cache.note_hit."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_torch_fast",
    "The eager PyTorch forward's fast path (C++).",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}   // namespace

PyMODINIT_FUNC PyInit__torch_fast() {
    if (!init_capture_query()) return nullptr;
    PyObject* module = PyModule_Create(&module_def);
    // torch.__version__ at build time: Python uses the module only beside the same torch.
    if (module != nullptr && PyModule_AddStringConstant(module, "TORCH_VERSION", SDMP1_TORCH_VERSION) != 0) {
        Py_DECREF(module);
        return nullptr;
    }
    return module;
}
