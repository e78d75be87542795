"""CuPy arrays: the CUDA backend of the arrays' device, on CuPy's current stream; the outputs
are views of one ``cupy.empty`` block (CuPy's memory pool, current stream), carved by the
plan's layout, and each plan's workspace comes from the same pool. The checks that a plan's
key implies run when the plan is created. bfloat16 values are uint16 arrays of bfloat16 bits
(CuPy has no bfloat16 dtype), and cpe, k_eff and q_w come back as such.

:func:`backward` is ``phase1_backward`` on CuPy arrays: the same way, through a cached plan
made with backward = 1, the gradients in ``cupy.empty`` arrays.

Imported only when a CuPy array is passed (this module imports cupy).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import cupy
import numpy as np

from .._c import lib
from .._core import plan_cache
from .._core.arrays import value_dtype_code
from .._core.backward import (
    DIFFERENTIABLE,
    VALUE_TYPED,
    check_payload,
    check_upstream,
    not_differentiable,
    upstream_shapes,
)
from .._core.checks import check_agreement, check_dtypes, check_rank, lengths_dtype_code, not_contiguous
from .._core.dtypes import NUMPY
from .._core.fields import EMPTY_DTYPES, REPEATS
from .._core.options import call_options, key_options
from .._core.types import FIELDS, Phase1

__all__ = ["forward", "backward"]


class _CupyWorkspace(plan_cache.Workspace):
    """A plan's workspace from CuPy's memory pool, on the plan's device."""

    def __init__(self, device: int):
        self.device = device
        self.blocks: Dict[int, Any] = {}  # pointer -> cupy MemoryPointer, kept until free

    def alloc(self, nbytes: int, stream: int) -> int:
        on = cupy.cuda.Stream.null if stream == 0 else cupy.cuda.ExternalStream(stream, self.device)
        with cupy.cuda.Device(self.device), on:
            mem = cupy.cuda.alloc(nbytes)  # from the pool's arena of that stream
        self.blocks[mem.ptr] = mem
        return mem.ptr

    def free(self, ptr: int) -> None:
        self.sync()  # the block returns to its stream's arena; the plan ran on others
        self.blocks.pop(ptr, None)

    def sync(self) -> None:
        cupy.cuda.Device(self.device).synchronize()


def _check_arrays(arrays: dict, device: int) -> None:
    for name, a in arrays.items():
        if not isinstance(a, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray like k_idx, got {type(a).__name__}")
        if a.device.id != device:
            raise ValueError(
                f"{name} is on GPU {a.device.id} but k_idx is on GPU {device}: every array of a "
                "call must be on one device"
            )
        check_rank(name, a.shape)
        if not a.flags.c_contiguous:
            raise not_contiguous(name, a.shape, a.strides, f"cupy.ascontiguousarray({name})")


def _call_arrays(k_idx, q_idx, k_val, q_val, g, beta, device: int) -> dict:
    """The call's input arrays by name (beta where given); raises as _check_arrays where one is
    not a cupy array (the other checks come with the plan, on a cache miss)."""
    arrays = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
    if beta is not None:
        arrays["beta"] = beta
    if not all(isinstance(a, cupy.ndarray) for a in arrays.values()):
        _check_arrays(arrays, device)  # raises
    return arrays


def _make_plan(key, device, arrays, repeats, num_parallel, stream_offset, num_keys, valid_last,
               need_read_groups, rec_tile, det_fields, backward=False, grad_dtype=None):
    """A call's plan on a cache miss: every check the key stands for, then the plan (with
    ``backward``, one that runs the backward too, its gradients in ``grad_dtype``)."""
    _check_arrays(arrays, device)
    if repeats is not None and not (
        isinstance(repeats, cupy.ndarray) and repeats.dtype == cupy.int64 and repeats.size == 1
        and repeats.device.id == device
    ):
        raise ValueError(f"repeats must be None or a one-element int64 cupy array on GPU {device}")
    index, value = check_dtypes({n: a.dtype.name for n, a in arrays.items()})
    N, C, W, R, gate_width = check_agreement({n: a.shape for n, a in arrays.items()})
    o = call_options(C, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, "beta" in arrays)
    options = (N, C, W, R, o.num_parallel, o.stream_offset, o.num_keys, o.valid_last, index, value,
               gate_width, o.need_read_groups, o.det_fields, o.rec_tile)
    plan = plan_cache.get_plan_for(key, options, lambda: _CupyWorkspace(device), backward=backward,
                             grad_dtype=grad_dtype)
    if plan.extra is None and not backward:
        # dtype objects made once: cupy.ndarray would parse a dtype name at every call.
        plan.extra = [(shape, NUMPY[dt], offset) for _, shape, dt, offset in plan.layout]
    return plan


def _lengths_arg(stream_lengths, device: int, num_parallel: int):
    """(pointer, sdm_p1_dtype) of a call's stream_lengths, (0, 0) for None: a C-contiguous
    [num_parallel] int32 / int64 cupy array on the inputs' device (read there: no host sync)."""
    if stream_lengths is None:
        return 0, 0
    if not isinstance(stream_lengths, cupy.ndarray):
        raise TypeError(f"stream_lengths must be None or a cupy.ndarray like k_idx, got "
                        f"{type(stream_lengths).__name__}")
    if stream_lengths.device.id != device:
        raise ValueError(f"stream_lengths is on GPU {stream_lengths.device.id} but k_idx is on GPU "
                         f"{device}: every array of a call must be on one device")
    code = lengths_dtype_code(stream_lengths.shape, stream_lengths.dtype.name, num_parallel)
    if not stream_lengths.flags.c_contiguous:
        raise not_contiguous("stream_lengths", stream_lengths.shape, stream_lengths.strides,
                             "cupy.ascontiguousarray(stream_lengths)")
    return stream_lengths.data.ptr, code


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check,
            stream_lengths=None) -> Phase1:
    """phase1_forward on CuPy arrays (see sdm_phase1.phase1_forward)."""
    device = k_idx.device.id
    arrays = _call_arrays(k_idx, q_idx, k_val, q_val, g, beta, device)
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        check_rank("k_idx", k_idx.shape)
        valid_last = k_idx.shape[1]
    (num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields,
     check) = key_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                          rec_tile, det_fields, check, beta is not None)

    with cupy.cuda.Device(device):
        stream = cupy.cuda.get_current_stream()
        rep = None if repeats is None else (type(repeats), getattr(repeats, "dtype", None),
                                            getattr(repeats, "size", None))
        key = _key(device, stream.ptr, arrays, rep, (num_parallel, stream_offset, num_keys,
                                                     valid_last, need_read_groups, rec_tile,
                                                     det_fields))
        plan = plan_cache.cached_plan(key)
        if plan is None:
            plan = _make_plan(key, device, arrays, repeats, num_parallel, stream_offset, num_keys,
                              valid_last, need_read_groups, rec_tile, det_fields)
        if repeats is not None and repeats.device.id != device:
            raise ValueError(f"repeats must be None or a one-element int64 cupy array on GPU {device}")
        lengths = _lengths_arg(stream_lengths, device, num_parallel)
        block = cupy.empty(plan.block_bytes, dtype=cupy.uint8)
        plan.execute_block(k_idx.data.ptr, q_idx.data.ptr, k_val.data.ptr, q_val.data.ptr,
                           g.data.ptr, 0 if beta is None else beta.data.ptr, block.data.ptr, *lengths)
        outs = [cupy.ndarray(shape, dtype, memptr=block.data + offset) for shape, dtype, offset in plan.extra]
        if check:
            stream.synchronize()
            plan.check_status()
        by_field: List[Any] = [None] * (REPEATS + 1)
        for (f, _, _, _), o in zip(plan.layout, outs):
            by_field[f] = o
        if repeats is not None:
            cupy.add(repeats, by_field[REPEATS].reshape(repeats.shape), out=repeats)
        C, W = plan.options["C"], plan.options["W"]
        fields = []
        for f, name in enumerate(FIELDS):
            a = by_field[f]
            if a is None and f in EMPTY_DTYPES:
                shape = (0, C, W) if name in ("is_last", "is_only") else (0,)
                a = cupy.empty(shape, dtype=NUMPY[EMPTY_DTYPES[f]])
            fields.append(a)
    return Phase1._make(fields)


def _key(device: int, stream: int, arrays: dict, rep, options: tuple) -> tuple:
    """The plan key of a call (framework, device, stream, each array's shape, dtype, device and
    contiguity, whether beta is given, the kind of repeats, the options in key form)."""
    return ("cupy", device, stream) + tuple(
        (a.shape, a.dtype, a.device.id, a.flags.c_contiguous) for a in arrays.values()) + (
        "beta" in arrays, rep) + options


def backward(k_idx, q_idx, k_val, q_val, g, grads: dict, *, num_parallel, stream_offset,
             num_keys, valid_last, beta, stream_lengths, payload, grad_dtype,
             check) -> Dict[str, Optional[Any]]:
    """phase1_backward on CuPy arrays (see sdm_phase1.phase1_backward): enqueued on CuPy's
    current stream, the gradients in cupy arrays (bfloat16 as uint16)."""
    device = k_idx.device.id
    arrays = _call_arrays(k_idx, q_idx, k_val, q_val, g, beta, device)
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of output name -> array, got {type(grads).__name__}")
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        check_rank("k_idx", k_idx.shape)
        valid_last = k_idx.shape[1]
    # The gradients depend on none of need_read_groups, rec_tile, det_fields: True, 0, 0.
    (num_parallel, stream_offset, num_keys, valid_last, _, _, _, check) = key_options(
        num_parallel, stream_offset, num_keys, valid_last, True, 0, 0, check, beta is not None)
    grad_code = None if grad_dtype is None else value_dtype_code(grad_dtype)

    with cupy.cuda.Device(device):
        stream = cupy.cuda.get_current_stream()
        key = _key(device, stream.ptr, arrays, None, (num_parallel, stream_offset, num_keys,
                                                      valid_last, True, 0, 0, "backward", grad_code))
        plan = plan_cache.cached_plan(key)
        if plan is None:
            plan = _make_plan(key, device, arrays, None, num_parallel, stream_offset, num_keys,
                              valid_last, True, 0, 0, backward=True, grad_dtype=grad_dtype)
        o = plan.options
        N, C, W, R = o["N"], o["C"], o["W"], o["R"]
        shapes = upstream_shapes(N, C, W, R)
        value = NUMPY[o["value_dtype"]].name
        ups = [0] * lib.SDM_P1_FIELD_COUNT
        for name, u in grads.items():
            if name not in DIFFERENTIABLE:
                raise not_differentiable(name)
            if u is None:
                continue
            if not isinstance(u, cupy.ndarray) or u.device.id != device:
                where = f"on GPU {u.device.id}" if isinstance(u, cupy.ndarray) else type(u).__name__
                raise ValueError(f"grads[{name!r}] must be a cupy array on GPU {device} like k_idx, "
                                 f"got {where}")
            check_upstream(name, u.shape, u.dtype.name, shapes[name],
                           value if name in VALUE_TYPED else "float32", u.flags.c_contiguous,
                           f"cupy.ascontiguousarray(grads[{name!r}])")
            ups[DIFFERENTIABLE[name]] = u.data.ptr
        pay = 0
        if payload is not None:
            if not isinstance(payload, cupy.ndarray) or payload.device.id != device:
                raise ValueError(f"payload must be None or the forward's payload output, a cupy "
                                 f"array on GPU {device}, got {type(payload).__name__}")
            check_payload(payload.shape, payload.dtype.name, payload.flags.c_contiguous, N, C, W,
                          R, "cupy array")
            pay = payload.data.ptr
        lengths = _lengths_arg(stream_lengths, device, num_parallel)
        grad = NUMPY[o["grad_dtype"] or o["value_dtype"]]
        results: Dict[str, Optional[Any]] = {
            "k_val": cupy.empty((N, C, W), grad),
            "q_val": cupy.empty((N, C, R), grad),
            "g": cupy.empty((N, C, o["gate_width"]), np.float32),
            "beta": None if beta is None else cupy.empty((N, C), np.float32),
        }
        plan.execute_backward(k_idx.data.ptr, q_idx.data.ptr, k_val.data.ptr, q_val.data.ptr,
                              g.data.ptr, 0 if beta is None else beta.data.ptr, lengths[0],
                              lengths[1], pay, ups,
                              [0 if r is None else r.data.ptr for r in results.values()])
        if check:
            stream.synchronize()
            plan.check_status()
    return results
