"""PyTorch tensors: CUDA tensors run on the CUDA backend of their device, on PyTorch's current
stream; CPU tensors on the CPU backend. Both go through cached plans: the key of a call is one
tuple of what decides its plan (stream, shapes, dtypes, devices, options), every check that the
key implies (ranks, dtypes, shapes that agree, one device, option types and ranges) runs once,
when the plan is created, and a call then only reads its tensors' pointers, checks contiguity
and autograd, and carves its outputs from one ``torch.empty`` block (the caching allocator,
current stream; the operator, whose returns may not share storage, takes one per output). The
plan's workspace comes from the same allocator. Nothing here
synchronizes or reads device memory, so a call can be captured in a CUDA graph.

A call whose inputs require grad while autograd records goes through the operator of
``torch_ops`` instead, which has the autograd formula (so the path without grad keeps its host
time; ``torch_entry`` chooses, so that ``torch_ops`` imports this module and not the other way
round). :func:`run_backward` is that formula's library call, on the same path (:func:`_call_plan`:
key, checks, cached plan, stream), with a plan made with backward = 1 under its own key: CUDA
tensors on their GPU, without host copies, CPU tensors on the CPU backend.

Imported only when a torch tensor is passed (this module imports torch).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from .._c import lib
from .._core import plan_cache
from .._core.backward import DIFFERENTIABLE, VALUE_TYPED, check_payload, check_upstream, upstream_shapes
from .._core.checks import check_agreement, check_dtypes, check_rank, lengths_dtype_code, not_contiguous
from .._core.dtypes import NAMES, framework_dtypes
from .._core.fields import EMPTY_DTYPES, REPEATS
from .._core.options import call_options, key_options
from .._core.types import FIELDS, Phase1

__all__ = ["run", "forward", "needs_grad", "run_backward", "check_repeats", "check_device",
           "check_one_device", "on_other_device",
           "TORCH_DTYPES", "COMPUTE_DEVICES", "phase1_from_outputs", "call_key"]

#: sdm_p1_dtype code -> torch dtype.
TORCH_DTYPES = framework_dtypes(torch)
_NAMES = {dtype: NAMES[code] for code, dtype in TORCH_DTYPES.items()}
_CPU = lib.SDM_P1_BACKEND_CPU
_FIELD_COUNT = lib.SDM_P1_FIELD_COUNT

try:  # the raw cudaStream_t of the current stream, without a Stream object (fast)
    _current_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - a torch without CUDA
    def _current_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream

try:
    _capturing = torch._C._cuda_isCurrentStreamCapturing
except AttributeError:  # pragma: no cover - a torch without CUDA
    def _capturing() -> bool:
        return False


class _TorchWorkspace(plan_cache.Workspace):
    """A plan's workspace from PyTorch's caching allocator."""

    def __init__(self, device: int):
        self.device = device

    def alloc(self, nbytes: int, stream: int) -> int:
        return torch.cuda.caching_allocator_alloc(nbytes, self.device, stream)

    def free(self, ptr: int) -> None:
        self.sync()  # the block returns to its stream's pool; the plan ran on others
        torch.cuda.caching_allocator_delete(ptr)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)


def needs_grad(k_val, q_val, g, beta) -> bool:
    """Whether autograd records and a value input requires grad (the index inputs are integer
    tensors, which cannot)."""
    return torch.is_grad_enabled() and (
        getattr(k_val, "requires_grad", False) or getattr(q_val, "requires_grad", False)
        or getattr(g, "requires_grad", False) or getattr(beta, "requires_grad", False))


def _dtype_name(t: torch.Tensor) -> str:
    return _NAMES.get(t.dtype) or str(t.dtype).replace("torch.", "")


#: The devices whose tensors the library computes on (their memory is the CPU's or a GPU's).
COMPUTE_DEVICES = ("cpu", "cuda")


def check_device(name: str, device: torch.device) -> None:
    """ValueError unless ``device`` is one the library computes on: a meta tensor (or one of
    another backend) has no memory the library can read."""
    if device.type not in COMPUTE_DEVICES:
        raise ValueError(
            f"{name} is on {device}: sdm_phase1 computes on CPU and CUDA tensors only"
            + (" (a meta tensor holds no data)" if device.type == "meta" else "")
        )


def on_other_device(name: str, t: torch.Tensor, device: torch.device) -> ValueError:
    """The error for a tensor of a call that is not on k_idx's device."""
    return ValueError(f"{name} is on {t.device} but k_idx is on {device}: every tensor of a call "
                      "must be on one device")


def check_one_device(tensors: dict, device: torch.device) -> None:
    """ValueError unless every given tensor (None: not given) is on ``device``, k_idx's. The
    operators' fake implementations check this too: PyTorch dispatches a call that mixes meta
    and CPU tensors to them, whose outputs would be uninitialized memory of k_idx's device."""
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise on_other_device(name, t, device)


def _check_tensors(tensors: dict, device: torch.device) -> None:
    """Type, device, rank and contiguity of every given input."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor like k_idx, got {type(t).__name__}")
        if t.device != device:
            raise on_other_device(name, t, device)
        check_rank(name, t.shape)
        if not t.is_contiguous():
            raise not_contiguous(name, t.shape, t.stride(), f"{name}.contiguous()")


def check_repeats(repeats, device) -> None:
    if repeats is None:
        return
    if not (isinstance(repeats, torch.Tensor) and repeats.dtype == torch.int64 and repeats.numel() == 1
            and repeats.device == device):
        got = type(repeats).__name__
        if isinstance(repeats, torch.Tensor):
            got += f" of dtype {repeats.dtype}, shape {tuple(repeats.shape)} on {repeats.device}"
        raise ValueError(
            f"repeats must be None or an int64 tensor of one element on {device} (incremented in "
            f"place), got {got}"
        )


def lengths_arg(stream_lengths, device: torch.device, num_parallel: int):
    """(pointer, sdm_p1_dtype) of a call's stream_lengths, (0, 0) for None: a contiguous
    [num_parallel] int32 / int64 tensor on the inputs' device (read there: no host sync)."""
    if stream_lengths is None:
        return 0, 0
    if not isinstance(stream_lengths, torch.Tensor):
        raise TypeError(f"stream_lengths must be None or a torch.Tensor like k_idx, got "
                        f"{type(stream_lengths).__name__}")
    if stream_lengths.device != device:
        raise ValueError(f"stream_lengths is on {stream_lengths.device} but k_idx is on {device}: "
                         "every tensor of a call must be on one device")
    code = lengths_dtype_code(tuple(stream_lengths.shape), _dtype_name(stream_lengths), num_parallel)
    if not stream_lengths.is_contiguous():
        raise not_contiguous("stream_lengths", stream_lengths.shape, stream_lengths.stride(),
                             "stream_lengths.contiguous()")
    return stream_lengths.data_ptr(), code


class _PlanData:
    """Per plan, built at its first use: how a call carves its outputs from one block and how
    it fills Phase1."""

    def __init__(self, plan: plan_cache.CachedPlan, device: torch.device):
        self.device = device
        self.block_bytes = plan.block_bytes
        self.dtypes = sorted({TORCH_DTYPES[dt] for _, _, dt, _ in plan.layout}, key=str)
        self.views = []  # (index into dtypes, shape, strides, offset in elements)
        for _, shape, dt, offset in plan.layout:
            dtype = TORCH_DTYPES[dt]
            strides: List[int] = []
            step = 1
            for n in reversed(shape):
                strides.insert(0, step)
                step *= n
            size = torch.empty((), dtype=dtype).element_size()
            self.views.append((self.dtypes.index(dtype), shape, tuple(strides), offset // size))
        self.specs = [(shape, TORCH_DTYPES[dt]) for _, shape, dt, _ in plan.layout]
        self.fields = [f for f, _, _, _ in plan.layout]
        self.repeats = self.fields.index(REPEATS)
        self.template, self.slots = _template(tuple(self.fields), plan.options["C"],
                                              plan.options["W"], device)

    def carve(self, block: torch.Tensor) -> List[torch.Tensor]:
        """The outputs, views of ``block`` (one per computed field, in field order)."""
        flats = [block.view(d) for d in self.dtypes]
        return [flats[i].as_strided(shape, strides, offset) for i, shape, strides, offset in self.views]


def _template(fields: tuple, C: int, W: int, device,
              reuse: bool = True) -> Tuple[List[Any], List[Tuple[int, int]]]:
    """(Phase1 values with the outputs' places empty, [(place, index into the outputs)]): the
    fields not computed are None, or zero-element tensors for is_last / is_only and the record
    fields, as the spec returns them. ``reuse``: share those between calls (not while tracing)."""
    position = {f: i for i, f in enumerate(fields)}
    template: List[Any] = []
    slots: List[Tuple[int, int]] = []
    for f, name in enumerate(FIELDS):
        if f in position:
            template.append(None)
            slots.append((f, position[f]))
        elif f in EMPTY_DTYPES:
            shape = (0, C, W) if name in ("is_last", "is_only") else (0,)
            dtype = TORCH_DTYPES[EMPTY_DTYPES[f]]
            template.append(_empty(shape, dtype, device) if reuse
                            else torch.empty(shape, dtype=dtype, device=device))
        else:
            template.append(None)
    return template, slots


def _assemble(template, slots, outs) -> Phase1:
    values = list(template)
    for place, i in slots:
        values[place] = outs[i]
    return Phase1._make(values)


_EMPTIES: dict = {}


def _empty(shape, dtype, device) -> torch.Tensor:
    # Zero-element tensors hold no data, so one per (shape, dtype, device) serves every call.
    key = (shape, dtype, device)
    t = _EMPTIES.get(key)
    if t is None:
        t = _EMPTIES[key] = torch.empty(shape, dtype=dtype, device=device)
    return t


def _make_plan(key, k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset,
               num_keys, valid_last, need_read_groups, rec_tile, det_fields, capturing,
               backward=False):
    """A call's plan on a cache miss: every check the key stands for, then the plan (with
    ``backward``, one that runs the backward, its extra a :class:`_BackwardData`)."""
    if not isinstance(k_idx, torch.Tensor):
        raise TypeError(f"k_idx must be a torch.Tensor, got {type(k_idx).__name__}")
    device = k_idx.device
    check_device("k_idx", device)
    tensors = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
    if beta is not None:
        tensors["beta"] = beta
    _check_tensors(tensors, device)
    check_repeats(repeats, device)
    index, value = check_dtypes({n: _dtype_name(t) for n, t in tensors.items()})
    N, C, W, R, gate_width = check_agreement({n: tuple(t.shape) for n, t in tensors.items()})
    o = call_options(C, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, beta is not None)
    options = (N, C, W, R, o.num_parallel, o.stream_offset, o.num_keys, o.valid_last, index, value,
               gate_width, o.need_read_groups, o.det_fields, o.rec_tile)
    if device.type == "cuda":
        index_ = device.index
        plan = plan_cache.get_plan_for(key, options, lambda: _TorchWorkspace(index_), capturing,
                                 backward=backward)
    else:
        plan = plan_cache.get_plan_for(key, options, lambda: None, backend=_CPU, backward=backward)
    if plan.extra is None:
        plan.extra = _BackwardData(plan, device, beta is not None) if backward else _PlanData(plan, device)
    return plan


def call_key(k_idx, q_idx, k_val, q_val, g, beta, repeats, device: int, stream: int, num_parallel,
             stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields) -> tuple:
    """The plan key of a call: one tuple of everything its plan and its checks depend on
    (device and stream, each input's shape, dtype and device, the kind of repeats, the options
    as key_options gives them), so that a cached plan stands for checks already made."""
    rep = None if repeats is None else (
        (repeats.dtype, repeats.shape, repeats.device) if isinstance(repeats, torch.Tensor)
        else type(repeats))
    # Each tensor's torch.device (type and index), not get_device(), which is -1 for the CPU
    # and for the meta device alike: a meta tensor must not find a CPU call's plan.
    return ("torch", device, stream, k_idx.shape, q_idx.shape, k_val.shape, q_val.shape, g.shape,
            None if beta is None else beta.shape, k_idx.dtype, q_idx.dtype, k_val.dtype, q_val.dtype,
            g.dtype, None if beta is None else beta.dtype, k_idx.device, q_idx.device, k_val.device,
            q_val.device, g.device, None if beta is None else beta.device, rep,
            num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields)


#: The last element of a backward plan's key (after call_key's), which no forward key has.
_BACKWARD = "backward"


def _call_plan(k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset,
               num_keys, valid_last, need_read_groups, rec_tile, det_fields, check,
               stream_lengths, backward=False):
    """The cached plan of a forward call, or with ``backward`` of a backward call (whose plan
    is made with need_read_groups True, rec_tile 0, det_fields 0, as the gradients depend on
    none of them): the options checked into their key form, the current stream of k_idx's
    GPU (0 on the CPU), the plan from the cache or made (every check its key stands for),
    the inputs' contiguity. Returns (plan, device index, -1 for the CPU, num_parallel, check).
    Raises as phase1_forward documents."""
    T = torch.Tensor
    if not (isinstance(k_idx, T) and isinstance(q_idx, T) and isinstance(k_val, T)
            and isinstance(q_val, T) and isinstance(g, T) and (beta is None or isinstance(beta, T))):
        _make_plan(None, k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset,
                   num_keys, valid_last, need_read_groups, rec_tile, det_fields, False)  # raises
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        check_rank("k_idx", k_idx.shape)
        valid_last = k_idx.shape[1]
    (num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields,
     check) = key_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                          rec_tile, det_fields, check, beta is not None)
    device = k_idx.get_device()  # -1: the CPU
    stream = _current_stream(device) if device >= 0 else 0
    capturing = device >= 0 and _capturing()
    if check and capturing:
        raise ValueError("check=True waits for the stream, which a CUDA graph capture forbids; "
                         "call sdm_phase1.synchronize() after a replay instead")
    key = call_key(k_idx, q_idx, k_val, q_val, g, beta, repeats, device, stream, num_parallel,
                   stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields)
    if backward:
        key += (_BACKWARD,)
    plan = plan_cache.cached_plan(key, capturing)
    if plan is None:
        plan = _make_plan(key, k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel,
                          stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                          det_fields, capturing, backward)
    if not (k_idx.is_contiguous() and q_idx.is_contiguous() and k_val.is_contiguous()
            and q_val.is_contiguous() and g.is_contiguous() and (beta is None or beta.is_contiguous())):
        tensors = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
        _check_tensors(dict(tensors, **({} if beta is None else {"beta": beta})), k_idx.device)
    return plan, device, num_parallel, check


def _check_status(plan: plan_cache.CachedPlan, device: int) -> None:
    """check=True on a GPU: waits for the current stream, then raises the device-side data
    check's error (a CPU plan raised at its call)."""
    if device >= 0:
        torch.cuda.current_stream(device).synchronize()
        plan.check_status()


def _launch(k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths=None,
            separate=False):
    """Runs the call (enqueues it on the current stream of k_idx's GPU); returns (plan data,
    outputs in field order). Raises as phase1_forward documents. ``separate``: a tensor of its
    own per output (an operator's returns must not share storage), else views of one block."""
    plan, device, num_parallel, check = _call_plan(
        k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset, num_keys,
        valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths)
    data = plan.extra
    inputs = (k_idx.data_ptr(), q_idx.data_ptr(), k_val.data_ptr(), q_val.data_ptr(), g.data_ptr(),
              0 if beta is None else beta.data_ptr())
    lengths = lengths_arg(stream_lengths, data.device, num_parallel)
    if separate:
        dev = data.device
        outs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in data.specs]
        plan.execute(*inputs, [o.data_ptr() for o in outs], *lengths)
    else:
        block = torch.empty(data.block_bytes, dtype=torch.uint8, device=data.device)
        plan.execute_block(*inputs, block.data_ptr(), *lengths)
        outs = data.carve(block)
    if check:
        _check_status(plan, device)
    return data, outs


def run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel: int, stream_offset: int,
        num_keys: int, valid_last: int, need_read_groups: bool, rec_tile: int, det_fields: int,
        check: bool, stream_lengths=None) -> List[torch.Tensor]:
    """The computed outputs in field order (repeats' count last), each in a tensor of its own:
    the operator's result."""
    _, outs = _launch(k_idx, q_idx, k_val, q_val, g, beta, None, num_parallel, stream_offset,
                      num_keys, valid_last, need_read_groups, rec_tile, det_fields, check,
                      stream_lengths, separate=True)
    return outs


def phase1_from_outputs(outs: List[torch.Tensor], fields: tuple, C: int, W: int, device,
                        reuse: bool = True) -> Phase1:
    """A Phase1 from the computed outputs of ``fields`` (field ids, in order). ``reuse``:
    eager calls, whose templates are kept (and share their zero-element tensors)."""
    if not reuse:
        template, slots = _template(fields, C, W, device, reuse=False)
        return _assemble(template, slots, outs)
    key = (fields, C, W, device)
    made = _TEMPLATES.get(key)
    if made is None:
        made = _TEMPLATES[key] = _template(fields, C, W, device)
    return _assemble(made[0], made[1], outs)


_TEMPLATES: dict = {}


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check,
            stream_lengths=None) -> Phase1:
    """phase1_forward on torch tensors that need no gradient (see sdm_phase1.phase1_forward;
    torch_entry.forward sends the others to the operator of torch_ops)."""
    data, outs = _launch(k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel,
                         stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                         det_fields, check, stream_lengths)
    if repeats is not None:
        repeats.add_(outs[data.repeats])
    return _assemble(data.template, data.slots, outs)


# ---- the backward ----------------------------------------------------------------------------


class _BackwardData:
    """Per backward plan, built at its first use: the gradients' shapes and dtypes, and the
    upstream gradients' and payload's that a call checks."""

    def __init__(self, plan: plan_cache.CachedPlan, device: torch.device, beta_given: bool):
        o = plan.options
        N, C, W, R = o["N"], o["C"], o["W"], o["R"]
        value = TORCH_DTYPES[o["value_dtype"]]
        grad = TORCH_DTYPES[o["grad_dtype"] or o["value_dtype"]]
        self.device = device
        self.N, self.C, self.W, self.R = N, C, W, R
        #: dL/dk_val, dL/dq_val, dL/dg, and dL/dbeta where beta is given: (shape, dtype).
        self.specs: List[Tuple[Tuple[int, ...], torch.dtype]] = [
            ((N, C, W), grad), ((N, C, R), grad), ((N, C, o["gate_width"]), torch.float32)]
        if beta_given:
            self.specs.append(((N, C), torch.float32))
        shapes = upstream_shapes(N, C, W, R)
        #: Per name of DIFFERENTIABLE, in its order: (field id, shape, dtype) of its gradient.
        self.upstream = [(field, shapes[name], value if name in VALUE_TYPED else torch.float32)
                         for name, field in DIFFERENTIABLE.items()]
        self.none = [0] * _FIELD_COUNT

    def grad_pointers(self, grads) -> List[int]:
        """The upstream gradient pointers by field id (0 for None), each checked: a tensor on
        the plan's device of its shape and dtype, contiguous."""
        if len(grads) != len(self.upstream):
            raise ValueError(f"grads must hold one tensor or None per differentiable output "
                             f"({', '.join(DIFFERENTIABLE)}), got {len(grads)}")
        words = list(self.none)
        for name, u, (field, shape, dtype) in zip(DIFFERENTIABLE, grads, self.upstream):
            if u is None:
                continue
            if not isinstance(u, torch.Tensor):
                raise TypeError(f"grads[{name!r}] must be a torch.Tensor or None, got "
                                f"{type(u).__name__}")
            if u.device != self.device:
                raise ValueError(f"grads[{name!r}] is on {u.device} but k_idx is on {self.device}: "
                                 "every tensor of a call must be on one device")
            if u.shape != shape or u.dtype != dtype or not u.is_contiguous():
                check_upstream(name, tuple(u.shape), _dtype_name(u), shape, _NAMES[dtype],
                               u.is_contiguous(), f"grads[{name!r}].contiguous()")
            words[field] = u.data_ptr()
        return words

    def payload_pointer(self, payload) -> int:
        """The payload's pointer (0 for None), checked: an int32 [N, row] contiguous tensor on
        the plan's device (its contents are checked by the library)."""
        if payload is None:
            return 0
        if not isinstance(payload, torch.Tensor):
            raise TypeError(f"payload must be None or a torch.Tensor, got {type(payload).__name__}")
        if payload.device != self.device:
            raise ValueError(f"payload is on {payload.device} but k_idx is on {self.device}: "
                             "every tensor of a call must be on one device")
        check_payload(tuple(payload.shape), _dtype_name(payload), payload.is_contiguous(),
                      self.N, self.C, self.W, self.R, "tensor")
        return payload.data_ptr()


def run_backward(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths,
                 grads: List[Optional[torch.Tensor]], num_parallel: int, stream_offset: int,
                 num_keys: int, valid_last: int, check: bool = False) -> List[torch.Tensor]:
    """``sdm_p1_execute_backward`` on the tensors' device, as :func:`_launch` runs the
    forward: CUDA tensors on the current stream of their GPU (device pointers, gradients
    from PyTorch's caching allocator, a cached CUDA plan made with backward = 1: no host
    copy, no synchronization, capturable in a CUDA graph), CPU tensors on the CPU backend.
    Returns [dk_val, dq_val, dg] and dbeta where beta is given, each a tensor of its own,
    k_val's and q_val's in the value dtype. ``grads``: one upstream gradient or None per
    name of ``_core.backward.DIFFERENTIABLE``, in that order; ``payload``: the forward's (None:
    sorted again from the ids). ``check``: as the forward's (a GPU's data errors otherwise
    surface at the next :func:`sdm_phase1.synchronize`)."""
    plan, device, num_parallel, check = _call_plan(
        k_idx, q_idx, k_val, q_val, g, beta, None, num_parallel, stream_offset, num_keys,
        valid_last, True, 0, 0, check, stream_lengths, backward=True)
    data = plan.extra
    ups = data.grad_pointers(grads)
    pay = data.payload_pointer(payload)
    lengths = lengths_arg(stream_lengths, data.device, num_parallel)
    dev = data.device
    outs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in data.specs]
    plan.execute_backward(k_idx.data_ptr(), q_idx.data_ptr(), k_val.data_ptr(),
                          q_val.data_ptr(), g.data_ptr(), 0 if beta is None else beta.data_ptr(),
                          lengths[0], lengths[1], pay, ups, [o.data_ptr() for o in outs])
    if check:
        _check_status(plan, device)
    return outs
