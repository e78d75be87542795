"""The backward of Phase 1 on NumPy arrays (the CPU backend): :func:`phase1_backward` and
:meth:`Plan.execute_backward`, over ``sdm_p1_execute_backward`` (API 1.3, docs/backward.md);
and the checks of upstream gradients and payloads that the framework paths (PyTorch, CuPy:
the CUDA backend, through the cached plans of ``plan_cache``) share with it.

Given the forward's inputs and upstream gradients dL/dX for some differentiable outputs X, it
returns dL/d``k_val``, dL/d``q_val``, dL/d``g`` and (with a ``kspa`` gradient) dL/d``beta``,
summed in double in one fixed order and rounded once: the same bits on every run, thread
count, backend and GPU.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from .._c import ffi, lib
from .arrays import HostInputs
from .dtypes import NUMPY
from .errors import check

__all__ = ["DIFFERENTIABLE", "VALUE_TYPED", "upstream_shapes", "check_upstream", "payload_row",
           "check_payload", "not_differentiable", "run_backward"]

#: The outputs that take an upstream gradient, with their sdm_p1_field ids (the differentiable
#: set of canon/field_sets.h; tests/test_field_sets.py holds it, and VALUE_TYPED, to the library).
DIFFERENTIABLE: Dict[str, int] = {
    "a": lib.SDM_P1_FIELD_A, "qk": lib.SDM_P1_FIELD_QK, "log_k": lib.SDM_P1_FIELD_LOG_K,
    "log_q": lib.SDM_P1_FIELD_LOG_Q, "rex": lib.SDM_P1_FIELD_REX, "cpe": lib.SDM_P1_FIELD_CPE,
    "k_eff": lib.SDM_P1_FIELD_K_EFF, "q_w": lib.SDM_P1_FIELD_Q_W, "krec": lib.SDM_P1_FIELD_KREC,
    "kspa": lib.SDM_P1_FIELD_KSPA, "qrec": lib.SDM_P1_FIELD_QREC, "qrec8": lib.SDM_P1_FIELD_QREC8,
}
#: Gradients in the plan's value dtype (the others are float32).
VALUE_TYPED = ("cpe", "k_eff", "q_w")


def upstream_shapes(N: int, C: int, W: int, R: int) -> Dict[str, Tuple[int, ...]]:
    """The shape of each upstream gradient (docs/backward.md): the output's, but for the
    records, whose gradients are those of their floats only (krec words 2-3; the scales of
    qrec and qrec8)."""
    return {
        "a": (N, C, C), "qk": (N, C, C), "log_k": (N, C, W), "log_q": (N, C, R),
        "rex": (N, C, W), "cpe": (N, C, W), "k_eff": (N, C, W), "q_w": (N, C, R),
        "krec": (N, C * W, 2), "kspa": (N, C * W), "qrec": (N, C * R), "qrec8": (N, C * R),
    }


def check_upstream(name: str, shape: Tuple[int, ...], dtype: str, want_shape: Tuple[int, ...],
                   want_dtype: str, contiguous: bool, fix: str) -> None:
    """ValueError unless the upstream gradient ``grads[name]`` of ``shape`` and dtype name
    ``dtype`` is the plan's: ``want_shape`` (:func:`upstream_shapes`), ``want_dtype`` and
    C-contiguous (``fix``: the framework's way to make it so). Every framework's messages."""
    if tuple(shape) != tuple(want_shape):
        raise ValueError(f"grads[{name!r}] has shape {tuple(shape)}, but the plan's {name} gradient "
                         f"is {tuple(want_shape)}")
    if dtype != want_dtype:
        raise ValueError(f"grads[{name!r}] has dtype {dtype}, but the plan's {name} gradient is "
                         f"{want_dtype} (cpe, k_eff and q_w in the value dtype, bfloat16 as uint16 "
                         "for NumPy and CuPy; the others float32)")
    if not contiguous:
        raise ValueError(f"grads[{name!r}] is not contiguous: pass {fix}")


def not_differentiable(name) -> ValueError:
    return ValueError(f"grads[{name!r}]: not a differentiable output (they are "
                      f"{', '.join(DIFFERENTIABLE)})")


def payload_row(C: int, W: int, R: int) -> int:
    """The words of a chunk's row of the forward's ``payload`` output: C * (W + R) rounded up
    to a multiple of 16."""
    return (C * (W + R) + 15) // 16 * 16


def check_payload(shape: Tuple[int, ...], dtype: str, contiguous: bool, N: int, C: int, W: int,
                  R: int, what: str = "array") -> None:
    """ValueError unless a payload of ``shape`` and dtype name ``dtype`` can be the forward's
    ``payload`` output: C-contiguous int32 [N, row]. (Its contents are the library's to
    check.)"""
    row = payload_row(C, W, R)
    if tuple(shape) != (N, row) or dtype != "int32" or not contiguous:
        raise ValueError(f"payload must be the forward's payload output: a C-contiguous int32 "
                         f"[N, row] = {(N, row)} {what}, got {dtype} {tuple(shape)}"
                         f"{'' if contiguous else ' (not contiguous)'}")


def _upstream_array(name: str, x, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    arr = np.asarray(x)
    check_upstream(name, arr.shape, str(arr.dtype), shape, str(dtype), arr.flags.c_contiguous,
                   f"np.ascontiguousarray(grads[{name!r}])")
    return np.require(arr, requirements=("ALIGNED",))


def run_backward(plan, desc: dict, x: HostInputs, grads: dict, payload,
                 grad_dtype: int) -> Dict[str, Optional[np.ndarray]]:
    """``sdm_p1_execute_backward`` on plan (a handle created with backward = 1) for the
    checked inputs ``x``: the gradients of k_val, q_val and g, and of beta where beta is given
    (else None). k_val / q_val in ``grad_dtype`` (bfloat16 as uint16)."""
    N, C, W, R = desc["N"], desc["C"], desc["W"], desc["R"]
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of output name -> array, got {type(grads).__name__}")
    shapes = upstream_shapes(N, C, W, R)
    value = NUMPY[desc["value_dtype"]]
    keep = []
    up = ffi.new("void*[]", lib.SDM_P1_FIELD_COUNT)
    for name, u in grads.items():
        if name not in DIFFERENTIABLE:
            raise not_differentiable(name)
        if u is None:
            continue
        arr = _upstream_array(name, u, shapes[name], value if name in VALUE_TYPED else np.dtype(np.float32))
        buf = ffi.from_buffer(arr)
        keep.append(buf)
        up[DIFFERENTIABLE[name]] = buf
    if payload is not None:
        payload = np.asarray(payload)
        check_payload(payload.shape, str(payload.dtype), payload.flags.c_contiguous, N, C, W, R)
        keep.append(payload)
    results: Dict[str, Optional[np.ndarray]] = {
        "k_val": np.empty((N, C, W), NUMPY[grad_dtype]),
        "q_val": np.empty((N, C, R), NUMPY[grad_dtype]),
        "g": np.empty((N, C, desc["gate_width"]), np.float32),
        "beta": np.empty((N, C), np.float32) if x.beta is not None else None,
    }
    out = ffi.new("sdm_p1_input_grads*")
    out.struct_size = ffi.sizeof("sdm_p1_input_grads")
    for name, result in results.items():
        if result is not None:
            setattr(out, name, ffi.cast("float*" if name in ("g", "beta") else "void*", result.ctypes.data))
    inputs = ffi.new("sdm_p1_inputs*")
    keep += x.fill(inputs)
    pay = ffi.NULL if payload is None else ffi.cast("const int32_t*", payload.ctypes.data)
    check("sdm_p1_execute_backward",
          lib.sdm_p1_execute_backward(plan, inputs, pay, up, lib.SDM_P1_FIELD_COUNT, out, ffi.NULL))
    del keep
    return results
