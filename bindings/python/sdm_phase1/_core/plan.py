"""`Plan`: one libsdmp1 plan (shapes and options) executed on NumPy arrays, returning fresh
output arrays per call (the plan runs in SDM_P1_OUTPUTS_CALLER mode)."""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Tuple

import numpy as np

from .._c import ffi, lib
from .arrays import HostInputs, index_dtype_code, prepare_inputs, prepare_lengths, value_dtype_code
from .backward import run_backward
from .constants import DET_SHIPPED
from .dtypes import NUMPY
from .errors import check
from .options import optional_int, require_bool, require_int
from .types import FIELDS, Phase1, not_requested

__all__ = ["Plan", "backend_code", "desc_values", "create_plan", "check_host_repeats", "host_result"]

_BACKENDS = {
    None: lib.SDM_P1_BACKEND_CPU,
    "cpu": lib.SDM_P1_BACKEND_CPU,
    "cuda": lib.SDM_P1_BACKEND_CUDA,
}
_DESC_OPTIONS = (
    "N", "C", "W", "R", "num_parallel", "stream_offset", "num_keys", "valid_last",
    "index_dtype", "value_dtype", "gate_width", "need_read_groups", "det_fields", "rec_tile",
    "backend", "device", "num_threads", "output_mode", "backward", "grad_dtype",
)


def backend_code(backend: Optional[str]) -> int:
    """The sdm_p1_backend for ``backend``: None or "cpu" (NumPy arrays) or "cuda"."""
    try:
        return _BACKENDS[backend.lower() if isinstance(backend, str) else backend]
    except (KeyError, AttributeError):
        raise ValueError(f"backend must be None, 'cpu' or 'cuda', got {backend!r}") from None


def _shape_error(name: str, got, want_desc: str, want) -> ValueError:
    return ValueError(f"{name} has shape {tuple(got)}, but the plan needs {want_desc} = {tuple(want)}")


def desc_values(*, N, C, W, R, num_parallel, stream_offset, num_keys, valid_last, index_dtype,
                value_dtype, gate_width, need_read_groups, det_fields, rec_tile, backend, device,
                num_threads, backward=False, grad_dtype=None) -> dict:
    """The sdm_p1_desc fields (output_mode CALLER) from Python values; dtypes and backend
    given as their C codes. Raises TypeError for an option of the wrong type (a bool for an
    int, an int for a bool), ValueError outside the documented range; the library checks its
    limits (C <= 256, ...)."""
    # Shapes: their type here, their limits in the library (its messages name them).
    C = require_int("C", C)
    return {
        "N": require_int("N", N),
        "C": C,
        "W": require_int("W", W),
        "R": require_int("R", R),
        "num_parallel": require_int("num_parallel", num_parallel, 1),
        "stream_offset": require_int("stream_offset", stream_offset, 0),
        "num_keys": require_int("num_keys", num_keys, 1, 1 << 32, "in 1..2**32"),
        "valid_last": lib.SDM_P1_UNSET if valid_last is None else require_int(
            "valid_last", valid_last, 1, C, f"None or in 1..C = 1..{C}"),
        "index_dtype": index_dtype,
        "value_dtype": value_dtype,
        "gate_width": require_int("gate_width", gate_width),
        "need_read_groups": 1 if require_bool("need_read_groups", need_read_groups) else 0,
        "det_fields": DET_SHIPPED if det_fields is None else require_int(
            "det_fields", det_fields, 0, None, "None or a combination of the DET_* bits (>= 0)"),
        "rec_tile": max(0, require_int("rec_tile", rec_tile)),
        "backend": backend,
        "device": lib.SDM_P1_UNSET if device is None else optional_int(
            "device", device, 0, "None or a device ordinal (>= 0)"),
        "num_threads": 0 if num_threads is None else require_int(
            "num_threads", num_threads, 0, None, "None or 0 (the hardware's thread count) or >= 1"),
        "output_mode": lib.SDM_P1_OUTPUTS_CALLER,
        "backward": 1 if require_bool("backward", backward) else 0,
        "grad_dtype": 0 if grad_dtype is None else value_dtype_code(grad_dtype),
    }


def _new_desc():
    """A descriptor holding the library's defaults (sdm_p1_desc_init: SDM_P1_DESC_INITIALIZER)."""
    desc = ffi.new("sdm_p1_desc*")
    check("sdm_p1_desc_init", lib.sdm_p1_desc_init(desc, ffi.sizeof("sdm_p1_desc")))
    return desc


def create_plan(values: dict, allocator=None):
    """Creates a plan from :func:`desc_values`; returns (handle, resolved options, views).

    ``allocator``: an ``sdm_p1_allocator*`` or None (the library's). ``views`` has one entry
    per field id: None when not computed, else (name, sdm_p1_dtype, shape, bytes).
    Raises ValueError (a value outside its C field) or a :class:`Phase1Error` subclass.
    """
    desc = _new_desc()
    for name, value in values.items():
        try:
            setattr(desc, name, value)
        except OverflowError:
            raise ValueError(f"{name}={value} is out of the range of its C field") from None
    if allocator is not None:
        desc.allocator = allocator[0]
    handle = ffi.new("sdm_p1_plan**")
    check("sdm_p1_plan_create", lib.sdm_p1_plan_create(handle, desc))
    plan = handle[0]
    try:
        resolved = _new_desc()
        check("sdm_p1_plan_desc", lib.sdm_p1_plan_desc(plan, resolved))
        options = {name: int(getattr(resolved, name)) for name in _DESC_OPTIONS}
        count = lib.SDM_P1_FIELD_COUNT
        raw = ffi.new("sdm_p1_tensor[]", count)
        check("sdm_p1_outputs", lib.sdm_p1_outputs(plan, raw, count))
    except BaseException:
        lib.sdm_p1_plan_destroy(plan)
        raise
    views: List[Optional[Tuple[str, int, Tuple[int, ...], int]]] = []
    for f in range(count):
        v = raw[f]
        if not v.requested:
            views.append(None)
            continue
        shape = tuple(int(v.shape[d]) for d in range(v.ndim))
        views.append((ffi.string(v.name).decode(), int(v.dtype), shape, int(v.bytes)))
    return plan, options, views


def check_host_repeats(repeats) -> None:
    """ValueError unless ``repeats`` is None or a writeable one-element NumPy int64 array."""
    if repeats is None:
        return
    if not isinstance(repeats, np.ndarray) or repeats.dtype != np.int64 or repeats.size != 1:
        got = type(repeats).__name__
        if isinstance(repeats, np.ndarray):
            got += f" of dtype {repeats.dtype} and shape {repeats.shape}"
        raise ValueError(
            "repeats must be None or a NumPy int64 array of shape [1] (updated in place), "
            f"got {got}"
        )
    if not repeats.flags.writeable:
        raise ValueError("repeats must be writeable (it is incremented in place)")


def host_result(arrays: list, repeats, value_view, C: int, W: int) -> Phase1:
    """The Phase1 of host output arrays by field id (None where not computed): the count added
    into ``repeats``, value-dtype fields shown in the caller's dtype, fields not computed as
    the spec returns them."""
    rep = arrays[lib.SDM_P1_FIELD_REPEATS]
    if repeats is not None and rep is not None:
        repeats.reshape(-1)[0] += rep[0]  # a view: repeats.size == 1
    result = []
    for f, name in enumerate(FIELDS):
        arr = arrays[f]
        if arr is None:
            result.append(not_requested(name, C, W))
        elif f in (lib.SDM_P1_FIELD_CPE, lib.SDM_P1_FIELD_K_EFF, lib.SDM_P1_FIELD_Q_W) and (
            arr.dtype != value_view
        ):
            result.append(arr.view(value_view))  # bfloat16 shown as the caller's dtype
        else:
            result.append(arr)
    return Phase1(*result)


class Plan:
    """A libsdmp1 plan: fixed shapes and options, executed any number of times.

    Create it from keyword shapes and options (the fields of ``sdm_p1_desc``), call
    :meth:`execute` with NumPy arrays of those shapes, and :meth:`close` it (or use it as a
    context manager). Every :meth:`execute` returns a :class:`Phase1` of fresh arrays. A plan
    serialises its own executes (a lock); different plans may run concurrently.

    Args:
        N, C, W, R: N chunks of C tokens with W write and R read slots per token.
        num_parallel, stream_offset, num_keys: the streams (see :func:`phase1_forward`).
        valid_last: valid tokens in each stream's last chunk (1..C); None: C.
        index_dtype: int32 or int64 (k_idx, q_idx).
        value_dtype: float32 or bfloat16 (``"bfloat16"``, uint16 or a 'bfloat16' dtype).
        gate_width: 1 (g is [N, C, 1]) or W (g is [N, C, W]).
        need_read_groups: compute the read-side groups (q_last, q_only, spay_q, ...).
        det_fields: DET_* bits of the optional outputs; None: DET_SHIPPED.
        rec_tile: tile length of tiles_k / tiles_q / segb_k; <= 0: the library's (128).
        backend: None or "cpu". A Plan runs host (NumPy) arrays; GPU tensors go through
            :func:`phase1_forward`, which keeps its own cached CUDA plans ("cuda" here is
            passed to the library, which refuses host memory).
        num_threads: CPU threads (>= 1; None or 0: the hardware's count; at most that count).
        device: CUDA device ordinal; None: the current device.
        backward: True: the plan may also run :meth:`execute_backward` (its workspace is
            sized for both).
        grad_dtype: the dtype of the k_val / q_val gradients: None (the value dtype) or
            float32.

    Raises:
        Phase1Error: the library refused the shapes or options (its message says why): an
            InvalidArgumentError, UnsupportedError (limits) or BackendUnavailableError.
    """

    def __init__(
        self,
        *,
        N: int,
        C: int,
        W: int,
        R: int,
        num_parallel: int,
        stream_offset: int,
        num_keys: int,
        valid_last: Optional[int] = None,
        index_dtype=np.int32,
        value_dtype=np.float32,
        gate_width: int = 1,
        need_read_groups: bool = True,
        det_fields: Optional[int] = None,
        rec_tile: int = 0,
        backend: Optional[str] = None,
        num_threads: Optional[int] = None,
        device: Optional[int] = None,
        backward: bool = False,
        grad_dtype=None,
    ):
        self._plan = None
        self._lib = lib  # kept for __del__ during interpreter shutdown
        self._lock = threading.Lock()
        values = desc_values(
            N=N, C=C, W=W, R=R, num_parallel=num_parallel, stream_offset=stream_offset,
            num_keys=num_keys, valid_last=valid_last, index_dtype=index_dtype_code(index_dtype),
            value_dtype=value_dtype_code(value_dtype), gate_width=gate_width,
            need_read_groups=need_read_groups, det_fields=det_fields, rec_tile=rec_tile,
            backend=backend_code(backend), device=device, num_threads=num_threads,
            backward=backward, grad_dtype=grad_dtype,
        )
        self._plan, self._desc, self._views = create_plan(values)

    # ------------------------------------------------------------------------------------
    @property
    def desc(self) -> dict:
        """The options the plan resolved (every "unset" replaced by the library's choice)."""
        return dict(self._desc)

    @property
    def fields(self) -> dict:
        """The outputs the plan computes: name -> (NumPy dtype, shape); bfloat16 as uint16."""
        return {v[0]: (NUMPY[v[1]], v[2]) for v in self._views if v is not None}

    @property
    def workspace_size(self) -> int:
        """Bytes of workspace the plan holds."""
        size = ffi.new("size_t*")
        check("sdm_p1_workspace_size", lib.sdm_p1_workspace_size(self._handle(), size))
        return int(size[0])

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._plan is None

    def _handle(self):
        if self._plan is None:
            raise ValueError("the plan is closed")
        return self._plan

    # ------------------------------------------------------------------------------------
    def execute(self, k_idx, q_idx, k_val, q_val, g, repeats=None, *, beta=None,
                stream_lengths=None) -> Phase1:
        """Runs the plan on NumPy arrays of its shapes; returns a :class:`Phase1` of fresh arrays.

        Arguments as in :func:`phase1_forward` (``stream_lengths``: per-stream lengths given
        at each execute, so one plan serves every length vector). Raises ValueError for
        arrays of a wrong dtype, shape or contiguity; :class:`InvalidInputError` when the
        library refuses the data (ids out of range, bad gates, lengths out of range),
        :class:`InvalidArgumentError` for kspa without beta.
        """
        x = prepare_inputs(k_idx, q_idx, k_val, q_val, g, beta)
        x.stream_lengths = prepare_lengths(stream_lengths, self._desc["num_parallel"])
        return self._run(x, repeats)

    def execute_backward(self, k_idx, q_idx, k_val, q_val, g, grads: dict, *, beta=None,
                         stream_lengths=None, payload=None) -> Dict[str, Optional[np.ndarray]]:
        """The backward (vector-Jacobian product) of :meth:`execute` at these inputs, on the
        CPU backend (docs/backward.md); the plan must have been created with
        ``backward=True``. Host (NumPy) arrays only, as :meth:`execute`: GPU tensors take
        PyTorch autograd, or :func:`phase1_backward` with CuPy arrays (the CUDA backward).

        Args:
            k_idx, q_idx, k_val, q_val, g, stream_lengths: the forward's inputs.
            grads: upstream gradients dL/dX by output name, any subset of ``a``, ``qk``,
                ``log_k``, ``log_q``, ``rex``, ``cpe``, ``k_eff``, ``q_w``, ``krec`` ([N, C * W,
                2]: words 2 and 3), ``kspa``, ``qrec`` and ``qrec8`` ([N, C * R]: the scale);
                float32, but cpe, k_eff and q_w in the value dtype (bfloat16 as uint16). A
                missing or None one is zero.
            beta: the forward's beta; needed with a ``kspa`` gradient (which alone reaches
                beta).
            payload: the forward's ``payload`` output for these inputs (saves the sort), or
                None (sorted again from the ids).

        Returns:
            ``{"k_val", "q_val", "g", "beta"}``: dL/dk_val and dL/dq_val in the gradient dtype
            (bfloat16 as uint16), dL/dg and dL/dbeta in float32 (beta's None without beta).
            Padding tokens get +0.0. The bits do not depend on the thread count.

        Raises:
            ValueError: arrays of a wrong shape, dtype or contiguity, a gradient of an output
                that is not differentiable; :class:`InvalidArgumentError` from the library (a
                plan without backward, kspa without beta), :class:`InvalidInputError` (bad
                ids, gates, lengths, or a payload that is not the chunks' sort). A plan of
                the "cuda" backend refuses host memory (InvalidArgumentError).
        """
        x = prepare_inputs(k_idx, q_idx, k_val, q_val, g, beta)
        x.stream_lengths = prepare_lengths(stream_lengths, self._desc["num_parallel"])
        self._check_shapes(x)
        grad_dtype = self._desc["grad_dtype"] or self._desc["value_dtype"]
        with self._lock:
            return run_backward(self._handle(), self._desc, x, grads, payload, grad_dtype)

    def _check_shapes(self, x: HostInputs) -> None:
        d = self._desc
        N, C, W, R = d["N"], d["C"], d["W"], d["R"]
        for name, arr, want_desc, want in (
            ("k_idx", x.k_idx, "[N, C, W]", (N, C, W)),
            ("q_idx", x.q_idx, "[N, C, R]", (N, C, R)),
            ("k_val", x.k_val, "[N, C, W]", (N, C, W)),
            ("q_val", x.q_val, "[N, C, R]", (N, C, R)),
            ("g", x.g, "[N, C, gate_width]", (N, C, d["gate_width"])),
            ("beta", x.beta, "[N, C]", (N, C)),
        ):
            if arr is not None and arr.shape != want:
                raise _shape_error(name, arr.shape, want_desc, want)
        if x.index_dtype != d["index_dtype"]:
            raise ValueError(f"k_idx has dtype {x.k_idx.dtype}, the plan another index dtype")
        if x.value_dtype != d["value_dtype"]:
            raise ValueError(f"k_val has dtype {x.value_view}, the plan another value dtype")

    def _run(self, x: HostInputs, repeats) -> Phase1:
        check_host_repeats(repeats)
        self._check_shapes(x)

        count = lib.SDM_P1_FIELD_COUNT
        outs = ffi.new("void*[]", count)
        arrays: List[Optional[np.ndarray]] = [None] * count
        keep = []
        for f, view in enumerate(self._views):
            if view is None:
                continue
            arr = np.empty(view[2], NUMPY[view[1]])
            buf = ffi.from_buffer(arr)
            keep.append(buf)
            outs[f] = buf
            arrays[f] = arr
        inputs = ffi.new("sdm_p1_inputs*")
        keep += x.fill(inputs)
        with self._lock:
            check("sdm_p1_execute", lib.sdm_p1_execute(self._handle(), inputs, outs, count, ffi.NULL))
        del keep
        return host_result(arrays, repeats, x.value_view, self._desc["C"], self._desc["W"])

    # ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the plan (idempotent). Arrays returned by :meth:`execute` stay valid."""
        plan, self._plan = self._plan, None
        if plan is not None:
            check("sdm_p1_plan_destroy", self._lib.sdm_p1_plan_destroy(plan))

    def __enter__(self) -> "Plan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        plan = getattr(self, "_plan", None)
        if plan is not None:
            self._plan = None
            try:
                self._lib.sdm_p1_plan_destroy(plan)
            except Exception:  # interpreter shutdown: nothing sensible to do
                pass

    def __repr__(self) -> str:
        if self._plan is None:
            return "<sdm_phase1.Plan (closed)>"
        d = self._desc
        return (
            f"<sdm_phase1.Plan N={d['N']} C={d['C']} W={d['W']} R={d['R']} "
            f"det_fields={d['det_fields']} backend={d['backend']}>"
        )
