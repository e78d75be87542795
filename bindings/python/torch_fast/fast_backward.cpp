#include "fast_backward.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/python_variable.h>

#include <vector>

#include "plan_lock.h"
#include "registry.h"

namespace sdmp1_torch {

namespace {

ExecuteBackwardFn execute_backward_fn = nullptr;

// A saved input: nullptr for None, else its tensor (false: not a plain tensor).
bool tensor_or_none(PyObject* obj, const at::Tensor*& out) {
    out = nullptr;
    if (obj == Py_None) return true;
    if (!THPVariable_CheckExact(obj)) return false;
    out = &THPVariable_Unpack(obj);
    return true;
}

const void* data_of(const at::Tensor* t) { return t == nullptr ? nullptr : t->data_ptr(); }

}   // namespace

void set_backward_library(ExecuteBackwardFn execute_backward) { execute_backward_fn = execute_backward; }

PyObject* fast_backward(PyObject* const* a) {
    PyObject* plan = a[0];
    PyObject* fields = a[10];
    PyObject* grads = a[11];
    if (execute_backward_fn == nullptr || !PyTuple_Check(fields) || !PyTuple_Check(grads) ||
        PyTuple_GET_SIZE(fields) != PyTuple_GET_SIZE(grads)) {
        Py_RETURN_NONE;
    }
    const unsigned long long stream = PyLong_AsUnsignedLongLong(a[1]);
    if (stream == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    const at::Tensor *k_idx, *q_idx, *k_val, *q_val, *g, *beta, *lengths, *payload;
    if (!tensor_or_none(a[2], k_idx) || !tensor_or_none(a[3], q_idx) || !tensor_or_none(a[4], k_val) ||
        !tensor_or_none(a[5], q_val) || !tensor_or_none(a[6], g) || !tensor_or_none(a[7], beta) ||
        !tensor_or_none(a[8], lengths) || !tensor_or_none(a[9], payload) || k_val == nullptr || k_idx == nullptr ||
        q_idx == nullptr || q_val == nullptr || g == nullptr) {
        Py_RETURN_NONE;
    }
    int32_t lengths_dtype = 0;
    if (lengths != nullptr) {   // checked at the forward; its dtype code again, as Python's
        if (!lengths->is_contiguous()) Py_RETURN_NONE;
        if (lengths->scalar_type() == at::kInt) {
            lengths_dtype = SDM_P1_DTYPE_INT32;
        } else if (lengths->scalar_type() == at::kLong) {
            lengths_dtype = SDM_P1_DTYPE_INT64;
        } else {
            Py_RETURN_NONE;
        }
    }

    // The upstream gradients by field id; a strided one (sum()'s gradient is expanded) made
    // contiguous, as the Python formula does. Kept alive through the call.
    std::vector<at::Tensor> ups;
    const void* words[SDM_P1_FIELD_COUNT] = {};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(grads); ++i) {
        PyObject* u = PyTuple_GET_ITEM(grads, i);
        if (u == Py_None) continue;
        const long f = PyLong_AsLong(PyTuple_GET_ITEM(fields, i));
        if (f < 0 || f >= SDM_P1_FIELD_COUNT || !THPVariable_CheckExact(u)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        const at::Tensor& t = THPVariable_Unpack(u);
        ups.push_back(t.is_contiguous() ? t : t.contiguous());
        words[f] = ups.back().data_ptr();
    }
    if (ups.empty()) Py_RETURN_NONE;

    const std::shared_ptr<BackwardRecord> found = backward_record(plan);
    if (found == nullptr) {
        PyErr_Clear();   // not one of ours: Python's own call says what it is
        Py_RETURN_NONE;
    }
    BackwardRecord& r = *found;
    if (r.stream != stream || (beta != nullptr) != (r.grads.size() == 4)) Py_RETURN_NONE;

    std::vector<at::Tensor> outs;
    outs.reserve(r.grads.size());
    for (const auto& spec : r.grads) {
        outs.push_back(at::empty(spec.second, at::TensorOptions().dtype(spec.first).device(k_val->device())));
    }
    sdm_p1_input_grads out{};
    out.struct_size = sizeof(sdm_p1_input_grads);
    out.k_val = outs[0].data_ptr();
    out.q_val = outs[1].data_ptr();
    out.g = static_cast<float*>(outs[2].data_ptr());
    out.beta = outs.size() > 3 ? static_cast<float*>(outs[3].data_ptr()) : nullptr;
    sdm_p1_inputs in{};
    in.struct_size = sizeof(sdm_p1_inputs);
    // The payload and the ids were saved from one forward: with the payload, the ids are not
    // given (not checked against it again), as the Python formula calls it.
    in.k_idx = payload != nullptr ? nullptr : k_idx->data_ptr();
    in.q_idx = payload != nullptr ? nullptr : q_idx->data_ptr();
    in.k_val = k_val->data_ptr();
    in.q_val = q_val->data_ptr();
    in.g = static_cast<const float*>(g->data_ptr());
    in.beta = static_cast<const float*>(data_of(beta));
    in.stream_lengths = data_of(lengths);
    in.stream_lengths_dtype = lengths_dtype;

    sdm_p1_status rc = SDM_P1_SUCCESS;
    {
        PlanLock lock(r.lock);
        // Unregistering happens under the plan's lock: held, a live record is a live plan.
        if (!lock.held() || !r.alive) Py_RETURN_NONE;
        const auto* pay = static_cast<const int32_t*>(data_of(payload));
        sdm_p1_plan* handle = r.handle;
        void* s = reinterpret_cast<void*>(static_cast<std::uintptr_t>(stream));
        Py_BEGIN_ALLOW_THREADS rc = execute_backward_fn(handle, &in, pay, words, SDM_P1_FIELD_COUNT, &out, s);
        Py_END_ALLOW_THREADS
    }
    if (rc != SDM_P1_SUCCESS) Py_RETURN_NONE;   // the Python call raises the library's error
    if (r.cuda && PyObject_SetAttrString(r.plan, "pending", Py_True) != 0) return nullptr;
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(outs.size()));
    if (list == nullptr) return nullptr;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        PyObject* t = THPVariable_Wrap(std::move(outs[i]));
        if (t == nullptr) {
            Py_DECREF(list);
            return nullptr;
        }
        PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), t);
    }
    return list;
}

}   // namespace sdmp1_torch
