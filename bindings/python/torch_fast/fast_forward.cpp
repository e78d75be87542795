#include "fast_forward.h"

#include <torch/csrc/autograd/python_variable.h>

#include "current_stream.h"
#include "outputs.h"
#include "plan_lock.h"
#include "registry.h"

namespace sdmp1_torch {

namespace {

ExecuteFn execute_fn = nullptr;
PyObject* note_hit_fn = nullptr;

bool contiguous(PyObject* obj) { return obj == Py_None || THPVariable_Unpack(obj).is_contiguous(); }

// stream_lengths as the library takes it, or false where the Python path would refuse it
// (then it says why): a contiguous [num_parallel] int32 / int64 tensor on k_idx's device.
bool lengths_of(const CallArgs& a, const at::Tensor& k_idx, const void*& ptr, int32_t& dtype) {
    if (a.stream_lengths == Py_None) return true;
    if (!THPVariable_CheckExact(a.stream_lengths)) return false;
    const at::Tensor& t = THPVariable_Unpack(a.stream_lengths);
    const long long num_parallel = PyLong_AsLongLong(a.num_parallel);   // an int, as the key says
    if (t.device() != k_idx.device() || t.dim() != 1 || t.size(0) != num_parallel || !t.is_contiguous()) {
        return false;
    }
    if (t.scalar_type() == at::kInt) {
        dtype = SDM_P1_DTYPE_INT32;
    } else if (t.scalar_type() == at::kLong) {
        dtype = SDM_P1_DTYPE_INT64;
    } else {
        return false;
    }
    ptr = t.data_ptr();
    return true;
}

PyObject* fallback() { Py_RETURN_NONE; }

// The plan of `r` run on a new block, under its lock, its outputs carved: a new list, None
// (busy, unregistered, refused by the library: the Python path runs the call), or nullptr
// with a Python error set.
PyObject* run_record(PlanRecord& r, const CallArgs& a, const at::Tensor& k_idx, const void* lengths,
                     int32_t lengths_dtype) {
    at::Tensor block;
    sdm_p1_status rc = SDM_P1_SUCCESS;
    {
        PlanLock lock(r.lock);
        // Unregistering happens under the plan's lock: with the lock held, a live record's
        // handle is a live plan until the call returns.
        if (!lock.held() || !r.alive) return fallback();
        block = new_block(k_idx, r.block_bytes);   // may throw: the caller falls back
        auto* base = static_cast<char*>(block.data_ptr());
        void* outs[SDM_P1_FIELD_COUNT];
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) outs[f] = base + r.field_offsets[static_cast<std::size_t>(f)];
        sdm_p1_inputs in{};
        in.struct_size = sizeof(sdm_p1_inputs);
        in.k_idx = k_idx.data_ptr();
        in.q_idx = THPVariable_Unpack(a.q_idx).data_ptr();
        in.k_val = THPVariable_Unpack(a.k_val).data_ptr();
        in.q_val = THPVariable_Unpack(a.q_val).data_ptr();
        in.g = static_cast<const float*>(THPVariable_Unpack(a.g).data_ptr());
        in.beta = a.beta == Py_None ? nullptr : static_cast<const float*>(THPVariable_Unpack(a.beta).data_ptr());
        in.stream_lengths = lengths;
        in.stream_lengths_dtype = lengths_dtype;
        sdm_p1_plan* handle = r.handle;
        void* stream = reinterpret_cast<void*>(r.stream);
        // Without the GIL, as cffi calls it: the CPU backend computes here.
        Py_BEGIN_ALLOW_THREADS rc = execute_fn(handle, &in, outs, SDM_P1_FIELD_COUNT, stream);
        Py_END_ALLOW_THREADS
    }
    // A refused call (bad data on the CPU backend, checked before any output is written) goes
    // the long way, which calls again and raises the library's error with its message.
    if (rc != SDM_P1_SUCCESS) return fallback();
    if (r.cuda && PyObject_SetAttrString(r.plan, "pending", Py_True) != 0) return nullptr;
    return carve(block, r.outputs);
}

}   // namespace

void set_library(ExecuteFn execute, PyObject* note_hit) {
    execute_fn = execute;
    note_hit_fn = note_hit;
}

bool library_set() { return execute_fn != nullptr; }

PyObject* fast_forward(const CallArgs& a) {
    CallKey key;
    CallFacts facts;
    if (execute_fn == nullptr || !make_call_key(a, key, facts)) return fallback();
    const std::shared_ptr<PlanRecord> found = find_plan(key);
    if (found == nullptr || !found->alive || found->stream != facts.stream) return fallback();
    // Checked at every call, as the Python fast path does: contiguity, the lengths, no capture
    // (the Python path pins a plan that a graph captures; it does so itself) and no check
    // (check=True on a GPU waits for the stream and reads the data check: Python's).
    if (!contiguous(a.k_idx) || !contiguous(a.q_idx) || !contiguous(a.k_val) || !contiguous(a.q_val) ||
        !contiguous(a.g) || !contiguous(a.beta)) {
        return fallback();
    }
    const at::Tensor& k_idx = THPVariable_Unpack(a.k_idx);
    const void* lengths = nullptr;
    int32_t lengths_dtype = 0;
    if (!lengths_of(a, k_idx, lengths, lengths_dtype)) return fallback();
    if (facts.cuda && (a.check == Py_True || current_stream_capturing() != 0)) return fallback();

    // The call's own share of the record (found): another thread may unregister it (or
    // empty the registry) while this one runs without the GIL.
    PyObject* outs = run_record(*found, a, k_idx, lengths, lengths_dtype);
    if (outs == nullptr || outs == Py_None) return outs;
    PyObject* hit = PyObject_CallOneArg(note_hit_fn, found->plan);
    if (hit == nullptr) {
        Py_DECREF(outs);
        return nullptr;
    }
    Py_DECREF(hit);
    PyObject* result = PyTuple_Pack(2, found->data, outs);
    Py_DECREF(outs);
    return result;
}

PyObject* fast_run_plan(PyObject* const* args) {
    // args: the plan, then k_idx, q_idx, k_val, q_val, g, beta, stream_lengths and
    // num_parallel (the other options are the plan's: Python found it, and checked the call).
    if (execute_fn == nullptr) return fallback();
    CallArgs a{};
    a.k_idx = args[1];
    a.q_idx = args[2];
    a.k_val = args[3];
    a.q_val = args[4];
    a.g = args[5];
    a.beta = args[6];
    a.stream_lengths = args[7];
    a.num_parallel = args[8];
    if (!THPVariable_CheckExact(a.k_idx) || !THPVariable_CheckExact(a.q_idx) || !THPVariable_CheckExact(a.k_val) ||
        !THPVariable_CheckExact(a.q_val) || !THPVariable_CheckExact(a.g) ||
        (a.beta != Py_None && !THPVariable_CheckExact(a.beta)) || !PyLong_CheckExact(a.num_parallel)) {
        return fallback();
    }
    const std::shared_ptr<PlanRecord> found = plan_record(args[0]);
    if (found == nullptr) {
        PyErr_Clear();   // not one of ours, or destroyed: Python's own call says what it is
        return fallback();
    }
    const at::Tensor& k_idx = THPVariable_Unpack(a.k_idx);
    const void* lengths = nullptr;
    int32_t lengths_dtype = 0;
    if (!lengths_of(a, k_idx, lengths, lengths_dtype)) return fallback();
    return run_record(*found, a, k_idx, lengths, lengths_dtype);
}

PyObject* register_call(const CallArgs& a, PyObject* const* p) {
    CallKey key;
    CallFacts facts;
    if (!make_call_key(a, key, facts)) Py_RETURN_NONE;
    // p: plan, handle, lock, data, cuda, stream, layout, outputs, block_bytes
    const unsigned long long stream = PyLong_AsUnsignedLongLong(p[5]);
    if (stream == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    if (stream != facts.stream) Py_RETURN_NONE;   // a plan a capture moved: not this stream's
    std::shared_ptr<PlanRecord> record = make_record(p[0], p[1], p[2], p[3], p[4], p[6], p[7], p[8]);
    if (record == nullptr) {
        if (PyErr_Occurred()) return nullptr;
        Py_RETURN_NONE;   // destroyed meanwhile: nothing to register
    }
    record->stream = facts.stream;
    add_plan(key, record);
    Py_RETURN_NONE;
}

}   // namespace sdmp1_torch
