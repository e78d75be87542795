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

std::shared_ptr<PlanRecord> make_record(PyObject* plan, PyObject* handle, PyObject* lock, PyObject* data,
                                        PyObject* cuda, PyObject* layout, PyObject* outputs, PyObject* block_bytes) {
    auto r = std::make_shared<PlanRecord>();
    const unsigned long long h = PyLong_AsUnsignedLongLong(handle);
    if (h == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    if (h == 0) {
        PyErr_SetString(PyExc_ValueError, "sdm_phase1._torch_fast: a null plan handle");
        return nullptr;
    }
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
    // Moved out first: a record's destructor drops Python references, which may run code
    // that comes back here.
    auto keys = std::move(by_key);
    auto plans = std::move(by_plan);
    by_key.clear();
    by_plan.clear();
    return n;
}

std::size_t registered_keys() { return by_key.size(); }

}   // namespace sdmp1_torch
