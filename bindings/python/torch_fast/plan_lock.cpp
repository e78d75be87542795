#include "plan_lock.h"

namespace sdmp1_torch {

PlanLock::PlanLock(PyObject* lock) : lock_(lock) {
    PyObject* r = PyObject_CallMethod(lock_, "acquire", "O", Py_False);
    held_ = r == Py_True;
    if (r == nullptr) PyErr_Clear();   // not a lock: not held, the Python path runs the call
    Py_XDECREF(r);
}

PlanLock::~PlanLock() {
    if (!held_) return;
    PyObject* r = PyObject_CallMethod(lock_, "release", nullptr);
    if (r == nullptr) PyErr_Clear();   // cannot fail for a lock this thread holds
    Py_XDECREF(r);
}

}   // namespace sdmp1_torch
