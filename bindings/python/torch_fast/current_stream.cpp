#include "current_stream.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace sdmp1_torch {

namespace {
PyObject* capturing_query = nullptr;   // a new reference kept for the process's life
}

std::uintptr_t current_cuda_stream(c10::Device device) {
    // getStream asks the CUDA guard implementation that libtorch_cuda registered; the handle
    // is the cudaStream_t (Stream::native_handle), what torch.cuda.current_stream gives.
    const c10::impl::VirtualGuardImpl impl(device.type());
    return reinterpret_cast<std::uintptr_t>(impl.getStream(device).native_handle());
}

bool init_capture_query() {
    PyObject* c = PyImport_ImportModule("torch._C");
    if (c == nullptr) return false;
    capturing_query = PyObject_GetAttrString(c, "_cuda_isCurrentStreamCapturing");
    Py_DECREF(c);
    if (capturing_query == nullptr) PyErr_Clear();   // a CPU-only torch: no CUDA tensors come
    return true;
}

int current_stream_capturing() {
    if (capturing_query == nullptr) return -1;
    PyObject* r = PyObject_CallNoArgs(capturing_query);
    if (r == nullptr) {
        PyErr_Clear();
        return -1;
    }
    const int capturing = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (capturing < 0) PyErr_Clear();
    return capturing;
}

}   // namespace sdmp1_torch
