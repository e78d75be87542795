"""Reading a DLPack capsule (``__dlpack__()``) without consuming it: the data pointer, shape,
dtype and contiguity of the tensor it describes. The capsule stays with its producer's
destructor, so the tensor is released when the capsule object is."""

from __future__ import annotations

import ctypes
from typing import NamedTuple, Tuple

import cffi

from .._core.dtypes import DLPACK_NAMES

__all__ = ["DLTensorInfo", "read_capsule", "capsule_pointer", "KDL_CPU", "KDL_CUDA"]

KDL_CPU = 1
KDL_CUDA = 2

_ffi = cffi.FFI()
_ffi.cdef("""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(struct DLManagedTensor*);
} DLManagedTensor;
""")

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]



class DLTensorInfo(NamedTuple):
    ptr: int  #: data + byte_offset
    shape: Tuple[int, ...]
    dtype: str  #: a NumPy-style name, e.g. "float32", "bfloat16"
    device: Tuple[int, int]  #: (DLDeviceType, device id)
    contiguous: bool  #: dense row-major
    strides: Tuple[int, ...]  #: in elements; () when the producer gave none (dense row-major)


def read_capsule(capsule) -> DLTensorInfo:
    """The tensor a legacy ("dltensor") DLPack capsule describes; the capsule is not consumed."""
    raw = _get_pointer(capsule, b"dltensor")
    t = _ffi.cast("DLManagedTensor*", raw).dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides != _ffi.NULL else ()
    contiguous = True
    if strides:
        want = 1
        for n, s in zip(reversed(shape), reversed(strides)):
            if n != 1 and s != want:
                contiguous = False
            want *= n
    code = (int(t.dtype.code), int(t.dtype.bits))
    dtype = DLPACK_NAMES.get(code, f"DLPack dtype code {code[0]} bits {code[1]}")
    if t.dtype.lanes != 1:
        dtype += f" x{t.dtype.lanes}"
    ptr = int(_ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
    return DLTensorInfo(ptr, shape, dtype, (int(t.device.device_type), int(t.device.device_id)),
                        contiguous, strides)


def capsule_pointer(capsule) -> int:
    """The data pointer (data + byte_offset) of a legacy DLPack capsule, not consumed: for
    memory whose shape and dtype the caller made (read_capsule's other fields cost a call's
    host time, 19 times a call for the outputs)."""
    t = _ffi.cast("DLManagedTensor*", _get_pointer(capsule, b"dltensor")).dl_tensor
    return int(_ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
