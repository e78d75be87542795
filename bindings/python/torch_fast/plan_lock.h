// A plan's threading.Lock (CachedPlan.lock), taken from C++ without waiting: a plan never runs
// in two threads at once, and one busy in another thread (which runs it without the GIL)
// sends this call to the Python path, which waits for the lock there.
#ifndef SDMP1_TORCH_FAST_PLAN_LOCK_H
#define SDMP1_TORCH_FAST_PLAN_LOCK_H

#include <Python.h>

namespace sdmp1_torch {

// Held from construction (where held()) to destruction; both with the GIL held.
class PlanLock {
public:
    explicit PlanLock(PyObject* lock);
    ~PlanLock();
    PlanLock(const PlanLock&) = delete;
    PlanLock& operator=(const PlanLock&) = delete;
    bool held() const { return held_; }

private:
    PyObject* lock_;
    bool held_ = false;
};

}   // namespace sdmp1_torch

#endif
