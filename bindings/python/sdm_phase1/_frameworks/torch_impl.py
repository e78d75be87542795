"""PyTorch tensors: CUDA tensors run on the CUDA backend of their device, on PyTorch's current
stream; CPU tensors on the CPU backend. Both go through cached plans: the key of a call is one
tuple of what decides its plan (stream, shapes, dtypes, devices, options), every check that the
key implies (ranks, dtypes, shapes that agree, one device, option types and ranges) runs once,
when the plan is created. A call then finds its plan through a lookup under its arguments as
given (:func:`_call_plan`), reads its tensors' pointers, checks contiguity, and carves its
outputs from one block of the caching allocator (current stream), each a tensor of its own to
autograd (:class:`_PlanData`); the operator, whose returns may not share storage, takes an
allocation per output. The plan's workspace comes from the same allocator. Nothing here
synchronizes or reads device memory, so a call can be captured in a CUDA graph.

A call whose inputs require grad while autograd records goes through :class:`_Phase1Function`
in eager mode: the operator's formula (torch_ops) without its dispatch, its backward on a plan
made with backward = 1 under its own key (:func:`_call_plan` with ``backward``), found per
stream. Under torch.compile, a dispatch mode or a functorch transform, or on tensor subclasses
(:func:`eager` says), such calls go through the operator of ``torch_ops`` instead
(``torch_entry`` chooses, so that ``torch_ops`` imports this module and not the other way
round), whose formula's library call is :func:`run_backward`: CUDA tensors on their GPU,
without host copies, CPU tensors on the CPU backend.

Imported only when a torch tensor is passed (this module imports torch).
"""

from __future__ import annotations

import operator
from itertools import starmap as _starmap
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
from . import torch_fast

__all__ = ["run", "forward", "needs_grad", "run_backward", "check_repeats", "check_device",
           "check_one_device", "on_other_device",
           "TORCH_DTYPES", "COMPUTE_DEVICES", "phase1_from_outputs", "call_key"]

#: sdm_p1_dtype code -> torch dtype.
TORCH_DTYPES = framework_dtypes(torch)
_NAMES = {dtype: NAMES[code] for code, dtype in TORCH_DTYPES.items()}
_CPU = lib.SDM_P1_BACKEND_CPU
_FIELD_COUNT = lib.SDM_P1_FIELD_COUNT
_PAYLOAD = lib.SDM_P1_FIELD_PAYLOAD

#: The differentiable outputs that are float tensors, autograd's to give gradients (the
#: records' gradients are those of float words inside int32 outputs, which it never gives).
FLOAT_GRAD_NAMES = ("a", "qk", "log_k", "log_q", "rex", "cpe", "k_eff", "q_w", "kspa")
#: Their field ids.
FLOAT_FIELDS = frozenset(DIFFERENTIABLE[name] for name in FLOAT_GRAD_NAMES)
#: The error of a second differentiation (docs/backward.md: "Once differentiable").
NOT_TWICE_DIFFERENTIABLE = ("sdm_phase1: the Phase-1 backward is not differentiable (no double "
                            "backward, no forward mode): differentiate Phase 1 once")

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


def _contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides: List[int] = []
    step = 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


try:  # dispatch below autograd's view tracking: outputs that are tensors of their own to it
    _below_views = torch._C._AutoDispatchBelowADInplaceOrView
except AttributeError:  # pragma: no cover - an older torch: views, as before
    import contextlib

    _below_views = contextlib.nullcontext


class _PlanData:
    """Per forward plan, built at its creation: how a call carves its outputs from one block
    and fills Phase1, and the backward plans its autograd formula found, per stream.

    The outputs are made by ``as_strided`` on the block below autograd's view tracking
    (``torch._C._AutoDispatchBelowADInplaceOrView``, as ``torch.library.custom_op`` runs its
    kernels): each is a tensor of its own to autograd, sharing the block's memory but not a
    version counter and not a view, so that an output changed in place is the only one
    autograd sees changed (as with an allocation per output), and the autograd Function may
    return them; it costs about two thirds of a tracked view."""

    def __init__(self, plan: plan_cache.CachedPlan, device: torch.device, options: tuple):
        self.device = device
        #: (num_parallel, stream_offset, num_keys, valid_last) as checked: the backward's.
        self.options = options
        layout = plan.layout  # (field id, shape, sdm_p1_dtype, byte offset) in field order
        self.specs = [(shape, TORCH_DTYPES[dt]) for _, shape, dt, _ in layout]
        self.fields = [f for f, _, _, _ in layout]
        self.template, _ = _template(tuple(self.fields), plan.options["C"], plan.options["W"],
                                     device)
        # The block's dtype is that of most outputs (one view fewer), the others views of it.
        counts: dict = {}
        for shape, dtype in self.specs:
            counts[dtype] = counts.get(dtype, 0) + 1
        self.dtypes = sorted(counts, key=lambda d: (-counts[d], str(d)))
        self.block_bytes = plan.block_bytes  # a multiple of 256: of every element size
        self.block_shape = (self.block_bytes // _itemsize(self.dtypes[0]),)
        index = {d: i for i, d in enumerate(self.dtypes)}
        #: Per dtype of dtypes: the (shape, strides, offset in elements) of its outputs, in
        #: field order (repeats apart): carve makes them with one starmap each.
        self.specs_by_dtype: List[List[tuple]] = [[] for _ in self.dtypes]
        order = []  # field ids in the order carve makes them
        for f, shape, dt, offset in layout:
            dtype = TORCH_DTYPES[dt]
            spec = (shape, _contiguous_strides(shape), offset // _itemsize(dtype))
            if f == REPEATS:
                self.repeats_view = (index[dtype],) + spec
            else:
                self.specs_by_dtype[index[dtype]].append(spec)
        for i, dtype in enumerate(self.dtypes):
            order += [f for f, _, dt, _ in layout if f != REPEATS and TORCH_DTYPES[dt] == dtype]
        #: What the compiled fast path (torch_fast) needs to do what new_block, carve and
        #: CachedPlan.execute_block do: (field id, byte offset) of every output the plan
        #: computes, and (dtype, shape, strides, offset in elements) of each carved output,
        #: in carve's order.
        self.fast_layout = tuple((f, offset) for f, _, _, offset in layout)
        self.fast_outputs = tuple((dtype,) + spec for dtype, specs in
                                  zip(self.dtypes, self.specs_by_dtype) for spec in specs)
        # Phase1's values from [outputs in carve's order] + extras (the template's values of
        # the fields not computed).
        place = {f: i for i, f in enumerate(order)}
        missing = [f for f in range(len(self.template)) if f not in place]
        self.extras = [self.template[f] for f in missing]
        where = {**place, **{f: len(order) + j for j, f in enumerate(missing)}}
        self.assemble = operator.itemgetter(*(where[f] for f in range(len(self.template))))
        #: The float outputs (autograd's Function returns them, in field order), their
        #: places among carve's outputs, and the payload's.
        self.float_fields = tuple(f for f in self.fields if f in FLOAT_FIELDS)
        floats = operator.itemgetter(*(place[f] for f in self.float_fields))
        self.floats = floats if len(self.float_fields) > 1 else (lambda outs: (floats(outs),))
        self.payload = place.get(_PAYLOAD)
        #: The backward plans of the autograd formula, per stream (found by its first call).
        self.backward_plans: dict = {}

    def new_block(self, like: torch.Tensor) -> torch.Tensor:
        """A fresh block for a call's outputs (the caching allocator: ``like``'s device, the
        current stream)."""
        return like.new_empty(self.block_shape, dtype=self.dtypes[0])

    def carve(self, block: torch.Tensor) -> list:
        """The outputs carved from ``block`` (see the class), grouped by dtype: Phase1's
        values are ``assemble(outputs + extras)``."""
        with _below_views():
            outs = list(_starmap(block.as_strided, self.specs_by_dtype[0]))
            for d, specs in zip(self.dtypes[1:], self.specs_by_dtype[1:]):
                outs += _starmap(block.view(d).as_strided, specs)
        return outs

    def repeats_of(self, block: torch.Tensor) -> torch.Tensor:
        """The call's repeats count, carved from ``block``."""
        i, shape, strides, offset = self.repeats_view
        with _below_views():
            return (block if i == 0 else block.view(self.dtypes[i])).as_strided(shape, strides, offset)


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
        plan.extra = (_BackwardData(plan, device, beta is not None) if backward else
                      _PlanData(plan, device, (o.num_parallel, o.stream_offset, o.num_keys,
                                               o.valid_last)))
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


#: The fast lookup: plans by the call's arguments as given (see _call_plan), at most
#: _FAST_LIMIT entries (emptied when full; evicted plans are found by their handle).
_FAST: dict = {}
_FAST_LIMIT = 4 * plan_cache.CACHE_LIMIT


def _fast_key(k_idx, q_idx, k_val, q_val, g, beta, repeats, stream, num_parallel, stream_offset,
              num_keys, valid_last, need_read_groups, rec_tile, det_fields, stream_lengths,
              backward) -> tuple:
    """The fast lookup's key: the arguments as given (options of their plain types, which the
    caller checked), each input's shape, dtype and device, and what is given: everything the
    checks of a plan's creation read, so that a hit stands for them. AttributeError where an
    input is not a tensor."""
    return (stream, k_idx.shape, q_idx.shape, k_val.shape, q_val.shape, g.shape, k_idx.dtype,
            q_idx.dtype, k_val.dtype, q_val.dtype, g.dtype, k_idx.device, q_idx.device,
            k_val.device, q_val.device, g.device,
            None if beta is None else (beta.shape, beta.dtype, beta.device),
            None if repeats is None else (repeats.shape, repeats.dtype, repeats.device),
            stream_lengths is None, num_parallel, stream_offset, num_keys, valid_last,
            need_read_groups, rec_tile, det_fields, backward)


def _call_plan(k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset,
               num_keys, valid_last, need_read_groups, rec_tile, det_fields, check,
               stream_lengths, backward=False):
    """The cached plan of a forward call, or with ``backward`` of a backward call (whose plan
    is made with need_read_groups True, rec_tile 0, det_fields 0, as the gradients depend on
    none of them): the options checked into their key form, the current stream of k_idx's
    GPU (0 on the CPU), the plan from the cache or made (every check its key stands for),
    the inputs' contiguity. Returns (plan, device index, -1 for the CPU, num_parallel, check).
    Raises as phase1_forward documents.

    A call whose options have their plain types (int, bool; valid_last or det_fields None)
    first looks its plan up in _FAST, under _fast_key: a hit costs the key's attribute
    reads, the stream, and the contiguity of the inputs; anything else (a miss, a
    non-contiguous input, a capture, an evicted plan or one a capture moved to another
    stream) takes the long way, which raises whatever error the call has, and enters its plan
    in _FAST."""
    fast = None
    if (type(num_parallel) is int and type(stream_offset) is int and type(num_keys) is int
            and (type(valid_last) is int or valid_last is None) and type(need_read_groups) is bool
            and type(rec_tile) is int and (det_fields is None or type(det_fields) is int)
            and type(check) is bool):
        try:
            device = k_idx.get_device()  # -1: the CPU (and the meta device: the key tells them apart)
            stream = _current_stream(device) if device >= 0 else 0
            fast = _fast_key(k_idx, q_idx, k_val, q_val, g, beta, repeats, stream, num_parallel,
                             stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                             det_fields, stream_lengths, backward)
        except (AttributeError, TypeError):  # not tensors: the long way says what they are
            fast = None
        if fast is not None:
            plan = _FAST.get(fast)
            # (plan.stream: a plan that a capture moved to its stream is not this stream's)
            if (plan is not None and plan.handle is not None and plan.stream == stream
                    and k_idx.is_contiguous() and q_idx.is_contiguous() and k_val.is_contiguous()
                    and q_val.is_contiguous() and g.is_contiguous()
                    and (beta is None or beta.is_contiguous())
                    and not (device >= 0 and (check or not plan.pinned) and _capturing())):
                plan_cache.note_hit(plan)
                return plan, device, num_parallel, check
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
    if fast is not None:
        if len(_FAST) >= _FAST_LIMIT:
            _FAST.clear()
        _FAST[fast] = plan
    return plan, device, num_parallel, check


def _check_status(plan: plan_cache.CachedPlan, device: int) -> None:
    """check=True on a GPU: waits for the current stream, then raises the device-side data
    check's error (a CPU plan raised at its call)."""
    if device >= 0:
        torch.cuda.current_stream(device).synchronize()
        plan.check_status()


def run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel: int, stream_offset: int,
        num_keys: int, valid_last: int, need_read_groups: bool, rec_tile: int, det_fields: int,
        check: bool, stream_lengths=None) -> List[torch.Tensor]:
    """The operator's implementation: the computed outputs in field order (repeats' count
    last), each in an allocation of its own (an operator's returns may not share storage).
    Raises as phase1_forward documents."""
    plan, device, num_parallel, check = _call_plan(
        k_idx, q_idx, k_val, q_val, g, beta, None, num_parallel, stream_offset, num_keys,
        valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths)
    lengths = lengths_arg(stream_lengths, plan.extra.device, num_parallel)
    outs = [k_idx.new_empty(shape, dtype=dtype) for shape, dtype in plan.extra.specs]
    plan.execute(k_idx.data_ptr(), q_idx.data_ptr(), k_val.data_ptr(), q_val.data_ptr(),
                 g.data_ptr(), 0 if beta is None else beta.data_ptr(), [o.data_ptr() for o in outs],
                 *lengths)
    if check:
        _check_status(plan, device)
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


def _execute(plan: plan_cache.CachedPlan, device: int, num_parallel: int, check: bool, k_idx,
             q_idx, k_val, q_val, g, beta, stream_lengths) -> torch.Tensor:
    """Runs a forward call on its plan (enqueues it on the stream), its outputs in one fresh
    block of the caching allocator (k_idx's device, current stream), which it returns."""
    data = plan.extra
    lengths, code = (0, 0) if stream_lengths is None else lengths_arg(stream_lengths, data.device,
                                                                      num_parallel)
    block = data.new_block(k_idx)
    plan.execute_block(k_idx.data_ptr(), q_idx.data_ptr(), k_val.data_ptr(), q_val.data_ptr(),
                       g.data_ptr(), 0 if beta is None else beta.data_ptr(), block.data_ptr(),
                       lengths, code)
    if check:
        _check_status(plan, device)
    return block


def _carved_outputs(plan, device, num_parallel, check, k_idx, q_idx, k_val, q_val, g, beta,
                    stream_lengths, repeats) -> list:
    """The plan executed into a new output block, the repeats counted where asked, and the
    outputs carved from the block (Phase1's computed values, in the plan's order)."""
    data = plan.extra
    # the same, compiled (None: not built, or off)
    run = torch_fast.run_plan
    if run is not None and repeats is None:
        outs = run(plan, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel)
        if outs is not None:
            if check:
                _check_status(plan, device)
            return outs
    block = _execute(plan, device, num_parallel, check, k_idx, q_idx, k_val, q_val, g, beta,
                     stream_lengths)
    if repeats is not None:
        repeats.add_(data.repeats_of(block))
    return data.carve(block)


_tuple_new = tuple.__new__


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check,
            stream_lengths=None, grad=None) -> Phase1:
    """phase1_forward on torch tensors (see sdm_phase1.phase1_forward) in eager mode. ``grad``:
    whether autograd records it (None: :func:`needs_grad` says): then through
    :class:`_Phase1Function`, whose backward is the library's, else with nothing recorded.
    (torch_entry sends calls that need the operator, under torch.compile or a dispatch mode,
    to torch_ops.)"""
    if grad is None:
        grad = needs_grad(k_val, q_val, g, beta)
    # The compiled fast path (torch_fast), where built: calls without grad or repeats, outside
    # torch.compile, modes and functorch transforms (whose Python code sees what this one
    # does); None from it for anything else, and this call goes on in Python.
    fast = None if grad or repeats is not None else torch_fast.forward
    if fast is not None and (_is_compiling() or _dispatch_modes() or _function_modes()
                             or _functorch()):
        fast = None
    if fast is not None:
        got = fast(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel,
                   stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields,
                   check)
        if got is not None:
            data, outs = got
            outs += data.extras
            return _tuple_new(Phase1, data.assemble(outs))
    plan, device, parallel, checked = _call_plan(
        k_idx, q_idx, k_val, q_val, g, beta, repeats, num_parallel, stream_offset, num_keys,
        valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths)
    if grad:
        state = [plan, device, parallel, checked, k_idx, q_idx, stream_lengths, repeats]
        _Phase1Function.apply(k_val, q_val, g, beta, state)
        return _tuple_new(Phase1, state[8])
    data = plan.extra
    outs = _carved_outputs(plan, device, parallel, checked, k_idx, q_idx, k_val, q_val, g, beta,
                           stream_lengths, repeats)
    if fast is not None and not (device >= 0 and (checked or _capturing())):
        # The long way has checked this call: later ones with its key run compiled.
        torch_fast.register(plan, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths,
                            num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                            rec_tile, det_fields, check)
    outs += data.extras
    return _tuple_new(Phase1, data.assemble(outs))


_PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_functorch = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling


def eager(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths) -> bool:
    """Whether a call may take :func:`forward` rather than the operator: not traced by
    torch.compile, no torch function or dispatch mode (FakeTensorMode, a device context...)
    and no functorch transform active, every tensor a plain torch.Tensor (or Parameter), not
    a subclass that dispatches itself, and k_idx not on the meta device (the operator's fake
    implementation answers those). The operator takes the others, as before."""
    if _is_compiling():  # first: torch.compile reads it as a constant and traces no further
        return False
    P = _PLAIN_TENSORS
    return (type(k_idx) in P and type(q_idx) in P and type(k_val) in P and type(q_val) in P
            and type(g) in P and (beta is None or type(beta) in P)
            and (stream_lengths is None or type(stream_lengths) in P) and not k_idx.is_meta
            and not _dispatch_modes() and not _function_modes() and not _functorch())


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
                 num_keys: int, valid_last: int, check: bool = False,
                 payload_trusted: bool = False) -> List[torch.Tensor]:
    """``sdm_p1_execute_backward`` on the tensors' device, as :func:`_launch` runs the
    forward: CUDA tensors on the current stream of their GPU (device pointers, gradients
    from PyTorch's caching allocator, a cached CUDA plan made with backward = 1: no host
    copy, no synchronization, capturable in a CUDA graph), CPU tensors on the CPU backend.
    Returns [dk_val, dq_val, dg] and dbeta where beta is given, each a tensor of its own,
    k_val's and q_val's in the value dtype. ``grads``: one upstream gradient or None per
    name of ``_core.backward.DIFFERENTIABLE``, in that order; ``payload``: the forward's (None:
    sorted again from the ids), checked against the ids unless ``payload_trusted`` (the
    autograd formula's, whose payload and ids were saved from one forward: the ids are then
    not given to the library with it). ``check``: as the forward's (a GPU's data errors
    otherwise surface at the next :func:`sdm_phase1.synchronize`)."""
    plan, device, num_parallel, check = _call_plan(
        k_idx, q_idx, k_val, q_val, g, beta, None, num_parallel, stream_offset, num_keys,
        valid_last, True, 0, 0, check, stream_lengths, backward=True)
    data = plan.extra
    ups = data.grad_pointers(grads)
    pay = data.payload_pointer(payload)
    lengths = lengths_arg(stream_lengths, data.device, num_parallel)
    dev = data.device
    outs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in data.specs]
    ids = (0, 0) if payload_trusted and payload is not None else (k_idx.data_ptr(), q_idx.data_ptr())
    plan.execute_backward(ids[0], ids[1], k_val.data_ptr(),
                          q_val.data_ptr(), g.data_ptr(), 0 if beta is None else beta.data_ptr(),
                          lengths[0], lengths[1], pay, ups, [o.data_ptr() for o in outs])
    if check:
        _check_status(plan, device)
    return outs


# ---- autograd in eager mode ------------------------------------------------------------------


class _Phase1Function(torch.autograd.Function):
    """The forward and its backward in eager mode (torch_ops' operator has the same formula
    for torch.compile): the forward runs the call and returns its float outputs (the only
    ones autograd differentiates); the backward runs ``sdm_p1_execute_backward`` on a plan of
    the forward's shapes made with backward = 1 (cached per stream in the forward plan's
    data), on the saved inputs and the forward's payload (the sort, not done again).

    apply(k_val, q_val, g, beta, state), ``state`` the list [plan, device, num_parallel,
    check, k_idx, q_idx, stream_lengths, repeats] of the call (its plan found and its
    arguments checked), to which the forward appends Phase1's values."""

    @staticmethod
    def forward(ctx, k_val, q_val, g, beta, state):
        plan, device, num_parallel, check, k_idx, q_idx, stream_lengths, repeats = state
        data = plan.extra
        outs = _carved_outputs(plan, device, num_parallel, check, k_idx, q_idx, k_val, q_val, g,
                               beta, stream_lengths, repeats)
        payload = None if data.payload is None else outs[data.payload]
        outs += data.extras
        state.append(data.assemble(outs))
        ctx.set_materialize_grads(False)  # unused outputs' gradients: None (read as zero)
        ctx.save_for_backward(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths)
        ctx.call = (data, device, check)
        return data.floats(outs)

    @staticmethod
    def backward(ctx, *grads):
        data, device, check = ctx.call
        need = ctx.needs_input_grad
        # (Not grads.count(None): that compares tensors with None elementwise.)
        if not (need[0] or need[1] or need[2] or need[3]) or all(u is None for u in grads):
            return None, None, None, None, None
        k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths = ctx.saved_tensors
        stream = _current_stream(device) if device >= 0 else 0
        plan = data.backward_plans.get(stream)
        if (plan is None or plan.handle is None or plan.stream != stream
                or (device >= 0 and (check or not plan.pinned) and _capturing())):
            num_parallel, stream_offset, num_keys, valid_last = data.options
            plan = _call_plan(k_idx, q_idx, k_val, q_val, g, beta, None, num_parallel,
                              stream_offset, num_keys, valid_last, True, 0, 0, check,
                              stream_lengths, backward=True)[0]
            data.backward_plans[stream] = plan
        else:
            plan_cache.note_hit(plan)
        # the compiled call (None: not built, or off)
        fast = torch_fast.backward
        outs = None if fast is None else fast(plan, stream, k_idx, q_idx, k_val, q_val, g, beta,
                                              stream_lengths, payload, data.float_fields, grads)
        if outs is None:
            outs = _backward_call(plan, data, k_idx, q_idx, k_val, q_val, g, beta, payload,
                                  stream_lengths, grads)
        if check:
            _check_status(plan, device)
        if torch.is_grad_enabled():  # create_graph: their own backward raises
            outs = _not_twice(outs, k_val, q_val, g, beta, [u for u in grads if u is not None])
        return (outs[0] if need[0] else None, outs[1] if need[1] else None,
                outs[2] if need[2] else None, outs[3] if need[3] and beta is not None else None,
                None)


def _backward_call(plan, data, k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths,
                   grads) -> List[torch.Tensor]:
    """The formula's library call in Python (where torch_fast's is not built, off, or
    refuses it): the gradients allocated, sdm_p1_execute_backward run on ``plan``."""
    fields = []
    ups = []
    for f, u in zip(data.float_fields, grads):
        if u is not None:
            if not u.is_contiguous():
                u = u.contiguous()  # e.g. sum()'s gradient is an expanded (strided) one
            fields.append(f)
            ups.append(u)
    lengths, code = (0, 0) if stream_lengths is None else lengths_arg(
        stream_lengths, data.device, data.options[0])
    outs = [k_val.new_empty(shape, dtype=dtype) for shape, dtype in plan.extra.specs]
    # The payload and the ids were saved from one forward (autograd refuses them changed in
    # place): the payload goes without the ids, not checked against them again.
    ids = (0, 0) if payload is not None else (k_idx.data_ptr(), q_idx.data_ptr())
    plan.execute_backward_fields(
        ids[0], ids[1], k_val.data_ptr(), q_val.data_ptr(), g.data_ptr(),
        0 if beta is None else beta.data_ptr(), lengths, code,
        0 if payload is None else payload.data_ptr(), fields, [u.data_ptr() for u in ups],
        [o.data_ptr() for o in outs])
    return outs


def _not_twice(outs, *inputs):
    """With create_graph, the gradients as tensors whose own backward raises
    :data:`NOT_TWICE_DIFFERENTIABLE` (a double backward would otherwise see no path and give
    zeros), where anything they come from requires grad."""
    flat = [t for x in inputs for t in (x if isinstance(x, list) else [x])]
    if not any(t is not None and t.requires_grad for t in flat):
        return outs
    error = torch._C._functions.DelayedError(NOT_TWICE_DIFFERENTIABLE, len(outs))
    marked = []
    for t in outs:
        t = t.detach()
        t.requires_grad = True
        marked.append(t)
    got = error(*marked)
    return list(got) if isinstance(got, tuple) else [got]
