// The plans that the Python path registered, by call key. A record holds what a call needs
// besides its arguments: the C plan, the Python objects whose state the call keeps as the
// Python path does (the CachedPlan, its lock, its framework data for Phase1's assembly) and
// how the outputs lie in one block. Every function here runs with the GIL held, which is what
// serializes the registry; plan_cache unregisters a plan (under the plan's lock) before it
// destroys it or moves it to another stream, so a record found here names a live plan.
#ifndef SDMP1_TORCH_FAST_REGISTRY_H
#define SDMP1_TORCH_FAST_REGISTRY_H

#include <Python.h>

#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "call_key.h"
#include "sdm/phase1.h"

namespace sdmp1_torch {

// One output carved from the block: its dtype, sizes, strides and offset in elements.
struct OutputSpec {
    c10::ScalarType dtype;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    int64_t offset;
};

struct PlanRecord {
    PlanRecord() = default;
    PlanRecord(const PlanRecord&) = delete;
    PlanRecord& operator=(const PlanRecord&) = delete;
    ~PlanRecord();   // drops the Python references (with the GIL held, as everything here)

    sdm_p1_plan* handle = nullptr;
    PyObject* plan = nullptr;   // the CachedPlan (strong references, all three)
    PyObject* lock = nullptr;   // its threading.Lock: a plan never runs twice at once
    PyObject* data = nullptr;   // its _PlanData, returned with the outputs
    bool cuda = false;          // a CUDA plan: a data check pending after each execute
    std::uintptr_t stream = 0;
    int64_t block_bytes = 0;
    // Per sdm_p1_field, its output's byte offset in the block (0, the block itself, for a
    // field the plan does not compute: the library ignores it).
    std::array<int64_t, SDM_P1_FIELD_COUNT> field_offsets{};
    std::vector<OutputSpec> outputs;   // in the order of _PlanData.carve
    bool alive = true;                 // false once unregistered
};

// A backward plan (made with backward = 1) as the autograd formula runs it: no key (Python
// finds the plan, per stream, in the forward plan's data), the gradients' shapes and dtypes.
struct BackwardRecord {
    BackwardRecord() = default;
    BackwardRecord(const BackwardRecord&) = delete;
    BackwardRecord& operator=(const BackwardRecord&) = delete;
    ~BackwardRecord();

    sdm_p1_plan* handle = nullptr;
    PyObject* plan = nullptr;   // the CachedPlan and its lock (strong references)
    PyObject* lock = nullptr;
    bool cuda = false;
    std::uintptr_t stream = 0;
    // dL/dk_val, dL/dq_val, dL/dg and, where beta was given, dL/dbeta: (dtype, sizes).
    std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> grads;
    bool alive = true;
};

// The record of the backward plan `plan`, made from its attributes at its first call (address,
// lock, workspace, stream, extra.specs); nullptr with a Python error set where they are not a
// CachedPlan's with a _BackwardData.
std::shared_ptr<BackwardRecord> backward_record(PyObject* plan);

// Builds a record from register_plan's arguments (see module.cpp); nullptr with a Python
// error set where they are not what torch_impl passes, nullptr without one where the plan
// has been destroyed since the caller read its address.
std::shared_ptr<PlanRecord> make_record(PyObject* plan, PyObject* handle, PyObject* lock, PyObject* data,
                                        PyObject* cuda, PyObject* layout, PyObject* outputs, PyObject* block_bytes);

// The record of the forward plan `plan`: its registered one, else one made from its
// attributes (address, lock, workspace, stream, extra's fast_layout, fast_outputs and
// block_bytes) and kept without a key; nullptr with a Python error set where they are not a
// live CachedPlan's with a _PlanData.
std::shared_ptr<PlanRecord> plan_record(PyObject* plan);

// The registered record of `key`, or nullptr.
std::shared_ptr<PlanRecord> find_plan(const CallKey& key);
// Registers `record` under `key`; a record already registered for the same plan is reused
// (one record per plan), so registering twice is harmless. Bounded: when full, emptied.
void add_plan(const CallKey& key, const std::shared_ptr<PlanRecord>& record);
// Removes every key of `plan` (or its backward record) and marks its record dead; nothing
// where it has none.
void remove_plan(PyObject* plan);
// Empties the registry. Returns the number of keys it held.
std::size_t clear_plans();
std::size_t registered_keys();

}   // namespace sdmp1_torch

#endif
