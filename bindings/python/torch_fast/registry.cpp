#include "registry.h"

#include <torch/csrc/Dtype.h>

#include <unordered_map>

namespace sdmp1_torch {

namespace {

// At most this many keys (torch_impl's _FAST_LIMIT): a key per plan and stream, and per
// spelling of the options; emptied when full, as the Python lookup is.
constexpr std::size_t kKeyLimit = 256;

// Allocated once and never destroyed: a static's destructor would run after the interpreter
// has finalized, dropping Python references without the GIL.
auto& by_key = *new std::unordered_map<CallKey, std::shared_ptr<PlanRecord>, CallKeyHash>();
auto& by_plan = *new std::unordered_map<PyObject*, std::shared_ptr<PlanRecord>>();
auto& backward_by_plan = *new std::unordered_map<PyObject*, std::shared_ptr<BackwardRecord>>();

bool int_of(PyObject* obj, int64_t& out) {
    const long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) return false;
    out = v;
    return true;
}

bool ints_of(PyObject* seq, std::vector<int64_t>& out) {
    PyObject* fast = PySequence_Fast(seq, "sdm_phase1._torch_fast: a shape must be a sequence");
    if (fast == nullptr) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out.resize(static_cast<std::size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!int_of(PySequence_Fast_GET_ITEM(fast, i), out[static_cast<std::size_t>(i)])) {
            Py_DECREF(fast);
            return false;
        }
    }
    Py_DECREF(fast);
    return true;
}

// layout: ((field id, byte offset), ...) of every output the plan computes.
bool read_layout(PyObject* layout, PlanRecord& r) {
    std::vector<int64_t> pair;
    PyObject* fast = PySequence_Fast(layout, "sdm_phase1._torch_fast: layout must be a sequence");
    if (fast == nullptr) return false;
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); ++i) {
        ok = ints_of(PySequence_Fast_GET_ITEM(fast, i), pair);
        if (ok && (pair.size() != 2 || pair[0] < 0 || pair[0] >= SDM_P1_FIELD_COUNT || pair[1] < 0 ||
                   pair[1] >= r.block_bytes)) {
            PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: a bad layout entry");
            ok = false;
        }
        if (ok) r.field_offsets[static_cast<std::size_t>(pair[0])] = pair[1];
    }
    Py_DECREF(fast);
    return ok;
}

// outputs: ((torch dtype, shape, strides, offset in elements), ...) in carve's order.
bool read_outputs(PyObject* outputs, PlanRecord& r) {
    PyObject* fast = PySequence_Fast(outputs, "sdm_phase1._torch_fast: outputs must be a sequence");
    if (fast == nullptr) return false;
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
        OutputSpec spec{};
        ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 4 && THPDtype_Check(PyTuple_GET_ITEM(item, 0));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "sdm_phase1._torch_fast: a bad output spec");
            break;
        }
        spec.dtype = reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(item, 0))->scalar_type;
        ok = ints_of(PyTuple_GET_ITEM(item, 1), spec.sizes) && ints_of(PyTuple_GET_ITEM(item, 2), spec.strides) &&
             int_of(PyTuple_GET_ITEM(item, 3), spec.offset);
        if (ok) r.outputs.push_back(std::move(spec));
    }
    Py_DECREF(fast);
    return ok;
}

}   // namespace

PlanRecord::~PlanRecord() {
    Py_XDECREF(plan);
    Py_XDECREF(lock);
    Py_XDECREF(data);
}

BackwardRecord::~BackwardRecord() {
    Py_XDECREF(plan);
    Py_XDECREF(lock);
}

namespace {

// An attribute of `obj` as an int; false with a Python error set.
bool int_attr(PyObject* obj, const char* name, int64_t& out) {
    PyObject* v = PyObject_GetAttrString(obj, name);
    if (v == nullptr) return false;
    const bool ok = int_of(v, out);
    Py_DECREF(v);
    return ok;
}

// _BackwardData.specs: [(shape, torch dtype), ...].
bool read_grad_specs(PyObject* specs, BackwardRecord& r) {
    PyObject* fast = PySequence_Fast(specs, "sdm_phase1._torch_fast: specs must be a sequence");
    if (fast == nullptr) return false;
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
        std::vector<int64_t> sizes;
        ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 && THPDtype_Check(PyTuple_GET_ITEM(item, 1));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "sdm_phase1._torch_fast: a bad gradient spec");
            break;
        }
        ok = ints_of(PyTuple_GET_ITEM(item, 0), sizes);
        if (ok) {
            r.grads.emplace_back(reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(item, 1))->scalar_type, std::move(sizes));
        }
    }
    Py_DECREF(fast);
    return ok && r.grads.size() >= 3 && r.grads.size() <= 4;
}

}   // namespace

std::shared_ptr<BackwardRecord> backward_record(PyObject* plan) {
    const auto it = backward_by_plan.find(plan);
    if (it != backward_by_plan.end()) return it->second;
    auto r = std::make_shared<BackwardRecord>();
    int64_t address = 0;
    int64_t stream = 0;
    if (!int_attr(plan, "address", address) || !int_attr(plan, "stream", stream)) return nullptr;
    if (address == 0) {   // destroyed (plan_cache zeroes it under the plan's lock)
        PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: a destroyed plan");
        return nullptr;
    }
    PyObject* workspace = PyObject_GetAttrString(plan, "workspace");
    if (workspace == nullptr) return nullptr;
    r->cuda = workspace != Py_None;
    Py_DECREF(workspace);
    PyObject* extra = PyObject_GetAttrString(plan, "extra");
    if (extra == nullptr) return nullptr;
    PyObject* specs = PyObject_GetAttrString(extra, "specs");
    Py_DECREF(extra);
    if (specs == nullptr) return nullptr;
    const bool ok = read_grad_specs(specs, *r);
    Py_DECREF(specs);
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: not a backward plan");
        return nullptr;
    }
    r->lock = PyObject_GetAttrString(plan, "lock");
    if (r->lock == nullptr) return nullptr;
    r->handle = reinterpret_cast<sdm_p1_plan*>(static_cast<std::uintptr_t>(address));
    r->stream = static_cast<std::uintptr_t>(stream);
    Py_INCREF(plan);
    r->plan = plan;
    backward_by_plan.emplace(plan, r);
    return r;
}

std::shared_ptr<PlanRecord> make_record(PyObject* plan, PyObject* handle, PyObject* lock, PyObject* data,
                                        PyObject* cuda, PyObject* layout, PyObject* outputs, PyObject* block_bytes) {
    auto r = std::make_shared<PlanRecord>();
    const unsigned long long h = PyLong_AsUnsignedLongLong(handle);
    if (h == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    if (h == 0) {
        PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: a null plan handle");
        return nullptr;
    }
    // The plan's address read again here, with the GIL held through the registration: a plan
    // destroyed since the caller read it (its address zeroed, then its hooks run) is not
    // registered after its unregistration.
    int64_t now = 0;
    if (!int_attr(plan, "address", now)) return nullptr;
    if (static_cast<unsigned long long>(now) != h) return nullptr;   // no error: nothing to do
    r->handle = reinterpret_cast<sdm_p1_plan*>(static_cast<std::uintptr_t>(h));
    r->cuda = PyObject_IsTrue(cuda) == 1;
    if (!int_of(block_bytes, r->block_bytes)) return nullptr;
    if (!read_layout(layout, *r) || !read_outputs(outputs, *r)) return nullptr;
    Py_INCREF(plan);
    Py_INCREF(lock);
    Py_INCREF(data);
    r->plan = plan;
    r->lock = lock;
    r->data = data;
    return r;
}

std::shared_ptr<PlanRecord> plan_record(PyObject* plan) {
    const auto it = by_plan.find(plan);
    if (it != by_plan.end()) return it->second;
    // New references, dropped below whatever happens.
    PyObject* parts[8] = {};
    const char* plan_attrs[] = {"address", "lock", "extra", "workspace", "stream"};
    for (int i = 0; i < 5; ++i) {
        parts[i] = PyObject_GetAttrString(plan, plan_attrs[i]);
    }
    const char* data_attrs[] = {"fast_layout", "fast_outputs", "block_bytes"};
    for (int i = 0; i < 3; ++i) {
        parts[5 + i] = parts[2] == nullptr ? nullptr : PyObject_GetAttrString(parts[2], data_attrs[i]);
    }
    std::shared_ptr<PlanRecord> r;
    bool complete = true;
    for (PyObject* part : parts) complete = complete && part != nullptr;
    if (complete) {
        PyObject* cuda = parts[3] == Py_None ? Py_False : Py_True;
        r = make_record(plan, parts[0], parts[1], parts[2], cuda, parts[5], parts[6], parts[7]);
        int64_t stream = 0;
        if (r != nullptr && int_of(parts[4], stream)) {
            r->stream = static_cast<std::uintptr_t>(stream);
            by_plan.emplace(plan, r);
        } else {
            r = nullptr;
        }
    }
    for (PyObject* part : parts) Py_XDECREF(part);
    if (r == nullptr && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: a destroyed plan");
    }
    return r;
}

std::shared_ptr<PlanRecord> find_plan(const CallKey& key) {
    const auto it = by_key.find(key);
    return it == by_key.end() ? nullptr : it->second;
}

void add_plan(const CallKey& key, const std::shared_ptr<PlanRecord>& record) {
    if (by_key.size() >= kKeyLimit) clear_plans();
    auto [it, inserted] = by_plan.emplace(record->plan, record);
    by_key[key] = it->second;   // the plan's one record, the first registered
}

void remove_plan(PyObject* plan) {
    const auto b = backward_by_plan.find(plan);
    if (b != backward_by_plan.end()) {
        const std::shared_ptr<BackwardRecord> record = b->second;
        record->alive = false;
        backward_by_plan.erase(b);
    }
    const auto it = by_plan.find(plan);
    if (it == by_plan.end()) return;
    const std::shared_ptr<PlanRecord> record = it->second;   // alive until the keys are gone
    record->alive = false;
    by_plan.erase(it);
    for (auto k = by_key.begin(); k != by_key.end();) {
        k = k->second == record ? by_key.erase(k) : std::next(k);
    }
}

std::size_t clear_plans() {
    const std::size_t n = by_key.size();
    for (auto& entry : by_plan) entry.second->alive = false;
    for (auto& entry : backward_by_plan) entry.second->alive = false;
    // Moved out first: a record's destructor drops Python references, which may run code
    // that comes back here.
    auto keys = std::move(by_key);
    auto plans = std::move(by_plan);
    auto backward_plans = std::move(backward_by_plan);
    by_key.clear();
    by_plan.clear();
    backward_by_plan.clear();
    return n;
}

std::size_t registered_keys() { return by_key.size(); }

}   // namespace sdmp1_torch
