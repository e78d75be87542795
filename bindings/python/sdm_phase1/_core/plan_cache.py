"""The cached-plan path, common to every framework: plans cached per framework, device,
stream, shapes, dtypes and options (one key tuple); the allocator hook that gives a CUDA plan's
workspace from the framework's allocator; execute with raw pointers, into one output block
carved by the plan's layout or into a buffer per field; the device-side data check. Host
arrays (NumPy, PyTorch CPU tensors) use it too, with CPU plans (no workspace hook).

Why a plan per stream: a plan's workspace holds the kernels' scratch and the data check, so one
plan must not run on two streams at once. Executes on one stream are ordered, so a plan per
stream is always safe and costs one workspace per stream and shape.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from .._c import ffi, lib
from .errors import Phase1Error, check
from .plan import create_plan, desc_values

__all__ = [
    "Workspace", "CachedPlan", "get_plan", "get_plan_for", "synchronize", "plan_cache_info",
    "clear_plan_cache", "cuda_device_count", "cuda_architectures", "OUTPUT_ALIGN", "note_hit",
    "add_release_hook",
]

#: Alignment of each output in a carved block (what the plan's own buffers get in C).
OUTPUT_ALIGN = 256

#: Plans kept at most (the least recently used unpinned plan goes first).
CACHE_LIMIT = 64

# Use stamps: a plan's last use is the tick it took (a framework's own fast lookup takes one
# too, through note_hit), so eviction picks the least recently used plan however it was found.
_TICK = itertools.count()

# The pointer fields of sdm_p1_inputs as uintptr_t words, so a call stores plain ints in them
# (no cffi cast per pointer).
_WORD = ffi.sizeof("uintptr_t")
_IN_WORDS = []
for _name in ("k_idx", "q_idx", "k_val", "q_val", "g", "beta", "stream_lengths"):
    assert ffi.offsetof("sdm_p1_inputs", _name) % _WORD == 0
    _IN_WORDS.append(ffi.offsetof("sdm_p1_inputs", _name) // _WORD)
assert _IN_WORDS == [1, 2, 3, 4, 5, 6, 7], _IN_WORDS
# Likewise the pointers of sdm_p1_input_grads (k_val, q_val, g, beta), after its 8-byte head.
_GRAD_WORDS = [ffi.offsetof("sdm_p1_input_grads", n) // _WORD for n in ("k_val", "q_val", "g", "beta")]
assert _GRAD_WORDS == [1, 2, 3, 4], _GRAD_WORDS
_FIELD_COUNT = lib.SDM_P1_FIELD_COUNT

# Called with a plan before it is destroyed or moved to another stream, under the plan's lock:
# a framework's cache of prepared calls outside this module (the compiled PyTorch fast path)
# forgets it there, so that nothing runs a freed plan or one on a stream not its own.
_RELEASE_HOOKS: List[Callable[["CachedPlan"], None]] = []


def add_release_hook(hook: Callable[["CachedPlan"], None]) -> None:
    """Adds ``hook(plan)``, called (under the plan's lock; it must not raise) before a plan is
    destroyed or moved to another stream."""
    if hook not in _RELEASE_HOOKS:
        _RELEASE_HOOKS.append(hook)


class Workspace:
    """Memory for a plan's workspace from a framework's allocator, and the framework's way to
    wait for the plan's stream. Subclasses implement alloc, free and sync."""

    #: The exception alloc raised, reported when plan creation fails.
    error: Optional[BaseException] = None

    def alloc(self, nbytes: int, stream: int) -> int:
        """A device pointer to ``nbytes`` bytes, 256-byte aligned, usable on ``stream`` (the
        library passes the legacy default stream, 0)."""
        raise NotImplementedError

    def free(self, ptr: int) -> None:
        """Releases a pointer alloc returned, once the plan's queued work is done (the plan ran
        on other streams than the one the block belongs to)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Waits until the work queued on the plan's stream is done."""
        raise NotImplementedError


def _alloc(ctx, ptr_out, nbytes, stream) -> int:
    ws = ffi.from_handle(ctx)
    try:
        ptr = int(ws.alloc(int(nbytes), int(ffi.cast("uintptr_t", stream))))
    except BaseException as e:  # reported by GpuPlan when the plan creation fails
        ws.error = e
        return 1
    if ptr % 256:
        ws.error = RuntimeError(f"the allocator gave {ptr:#x}, not 256-byte aligned")
        ws.free(ptr)
        return 1
    ptr_out[0] = ffi.cast("void*", ptr)
    return 0


def _free(ctx, ptr, nbytes, stream) -> None:
    try:
        ffi.from_handle(ctx).free(int(ffi.cast("uintptr_t", ptr)))
    except BaseException:  # nothing to report to from here; the block is lost at worst
        pass


_ALLOC_CB = ffi.callback("int(void*, void**, size_t, void*)", _alloc, error=1)
_FREE_CB = ffi.callback("void(void*, void*, size_t, void*)", _free)


class CachedPlan:
    """One plan (SDM_P1_OUTPUTS_CALLER) for one stream, its workspace from a framework (CUDA)
    or the library's (``workspace`` None: CPU plans on host arrays).

    ``fields``: (field id, shape, sdm_p1_dtype) of each output the plan computes, in field
    order, ending with repeats. ``layout``: (field id, shape, sdm_p1_dtype, byte offset) of
    each in one block of ``block_bytes`` bytes (each output 256-byte aligned), for
    :meth:`execute_block`. ``extra``: a slot for the framework's per-plan data (its dtype
    objects, views), filled by the framework module. The cffi structs of a call are built once
    here and updated in place by each execute.
    """

    def __init__(self, key: tuple, values: dict, stream: int, workspace: Optional[Workspace]):
        self.key = key
        self.workspace = workspace
        self.lock = threading.Lock()
        self.pending = False  # executed and not yet checked
        self.pinned = False  # used in a CUDA graph: never destroyed (the graph holds its workspace)
        self.used = next(_TICK)  # the tick of its last use (eviction goes by it)
        self.extra: Any = None
        allocator = None
        if workspace is not None:
            self._ctx = ffi.new_handle(workspace)
            allocator = ffi.new("sdm_p1_allocator*")
            allocator.ctx = self._ctx
            allocator.alloc = _ALLOC_CB
            allocator.free = _FREE_CB
        try:
            self.handle, self.options, views = create_plan(values, allocator)
        except Phase1Error as e:
            cause = workspace.error if workspace is not None else None
            if cause is not None:
                message = f"{e.message} (the allocator raised: {cause!r})"
                raise type(e)(e.function, e.code, e.status, message) from cause
            raise
        #: The plan's address as an int, for a compiled caller (torch_fast) that runs it
        #: under its lock; 0 once destroyed (destroy unregisters it first, under the lock).
        self.address = int(ffi.cast("uintptr_t", self.handle))
        self.fields = [(f, v[2], v[1]) for f, v in enumerate(views) if v is not None]
        self.layout = []
        offset = 0
        for f, v in enumerate(views):
            if v is not None:
                self.layout.append((f, v[2], v[1], offset))
                offset += -(-v[3] // OUTPUT_ALIGN) * OUTPUT_ALIGN
        self.block_bytes = max(offset, OUTPUT_ALIGN)
        self._inputs = ffi.new("sdm_p1_inputs*")
        self._inputs.struct_size = ffi.sizeof("sdm_p1_inputs")
        self._in_words = ffi.cast("uintptr_t*", self._inputs)
        # The output pointers: base + offset per field (unrequested fields, which the library
        # ignores, at the base), computed by one NumPy add into memory cffi passes as is.
        self._offsets = np.zeros(_FIELD_COUNT, np.uint64)
        for f, _, _, off in self.layout:
            self._offsets[f] = off
        self._out_words = np.zeros(_FIELD_COUNT, np.uint64)
        self._outs = ffi.cast("uintptr_t*", ffi.from_buffer(self._out_words))
        self._outs_arg = ffi.cast("void**", self._outs)
        self._backward: Any = None  # execute_backward's structs, made at its first call
        self.set_stream(stream)

    def set_stream(self, stream: int) -> None:
        # A capture moves a plan to its stream (get_plan_for): a call found for the old one
        # must not run it. (Without the lock: the Python fast lookup reads plan.stream so too.)
        for hook in _RELEASE_HOOKS:
            hook(self)
        self.stream = stream
        self._stream = ffi.cast("void*", stream)

    def execute(self, k_idx: int, q_idx: int, k_val: int, q_val: int, g: int, beta: int,
                outputs: Sequence[int], lengths: int = 0, lengths_dtype: int = 0) -> None:
        """Enqueues the plan on its stream (CPU: runs it): input pointers, then one output
        pointer per entry of ``fields``; ``lengths``: the stream_lengths pointer (0: none) and
        its sdm_p1_dtype. Raises a Phase1Error subclass when the library refuses the call."""
        with self.lock:
            o = self._outs
            for (f, _, _), p in zip(self.fields, outputs):
                o[f] = p
            self._run(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype)

    def execute_block(self, k_idx: int, q_idx: int, k_val: int, q_val: int, g: int, beta: int,
                      block: int, lengths: int = 0, lengths_dtype: int = 0) -> None:
        """As :meth:`execute`, the outputs at ``block`` + their ``layout`` offsets (a block of
        ``block_bytes`` bytes, 256-byte aligned)."""
        with self.lock:
            np.add(self._offsets, block, out=self._out_words)
            self._run(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype)

    def execute_backward(self, k_idx: int, q_idx: int, k_val: int, q_val: int, g: int, beta: int,
                         lengths: int, lengths_dtype: int, payload: int, grads: Sequence[int],
                         outputs: Sequence[int]) -> None:
        """``sdm_p1_execute_backward`` on the plan's stream (a plan created with backward = 1;
        CPU: runs it): input pointers and stream lengths as at :meth:`execute`, ``payload``
        (0: sort again from the ids), ``grads`` (one upstream gradient pointer per field id,
        0 for none: ``_FIELD_COUNT`` of them) and ``outputs``, the pointers of dL/dk_val,
        dL/dq_val, dL/dg and dL/dbeta (0: not computed). Device-side data errors are read by
        :meth:`check_status`, as the forward's."""
        with self.lock:
            grad_words = self._backward_structs()[0]
            grad_words[:] = grads
            self._run_backward(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype,
                               payload, outputs)

    def execute_backward_fields(self, k_idx: int, q_idx: int, k_val: int, q_val: int, g: int,
                                beta: int, lengths: int, lengths_dtype: int, payload: int,
                                fields: Sequence[int], grads: Sequence[int],
                                outputs: Sequence[int]) -> None:
        """:meth:`execute_backward` with the upstream gradients given as the pointers ``grads``
        of the field ids ``fields`` (the others none): the autograd formula's call, whose
        gradients are a few of the fields."""
        with self.lock:
            grad_words = self._backward_structs()[0]
            grad_words.fill(0)
            words = self._backward[4]
            for f, p in zip(fields, grads):
                words[f] = p
            self._run_backward(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype,
                               payload, outputs)

    def _backward_structs(self):
        # Called with the lock held: execute_backward's structs, made at its first call.
        b = self._backward
        if b is None:
            grad_words = np.zeros(_FIELD_COUNT, np.uint64)
            out = ffi.new("sdm_p1_input_grads*")
            out.struct_size = ffi.sizeof("sdm_p1_input_grads")
            grads_buffer = ffi.from_buffer(grad_words)
            b = self._backward = (grad_words, ffi.cast("const void* const*", grads_buffer), out,
                                  ffi.cast("uintptr_t*", out), ffi.cast("uintptr_t*", grads_buffer))
        return b

    def _run_backward(self, k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype, payload,
                      outputs) -> None:
        # Called with the lock held, the upstream gradient words in place.
        _, grads_arg, out, out_words = self._backward[:4]
        outputs = tuple(outputs) + (0,) * (len(_GRAD_WORDS) - len(outputs))
        for word, p in zip(_GRAD_WORDS, outputs):
            out_words[word] = p
        self._set_inputs(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype)
        pay = ffi.cast("const int32_t*", payload)
        rc = lib.sdm_p1_execute_backward(self.handle, self._inputs, pay, grads_arg, _FIELD_COUNT,
                                         out, self._stream)
        if rc:
            check("sdm_p1_execute_backward", rc)
        self.pending = self.workspace is not None  # a device-side data check to read

    def _set_inputs(self, k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype) -> None:
        # Called with the lock held.
        if self.handle is None:
            raise RuntimeError("sdm_phase1: this cached plan was evicted from the plan cache "
                               "(more than CACHE_LIMIT plans in use at once); call again")
        w = self._in_words
        w[1] = k_idx
        w[2] = q_idx
        w[3] = k_val
        w[4] = q_val
        w[5] = g
        w[6] = beta
        w[7] = lengths
        if lengths:
            self._inputs.stream_lengths_dtype = lengths_dtype

    def _run(self, k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype) -> None:
        # Called with the lock held, the output pointers in place.
        self._set_inputs(k_idx, q_idx, k_val, q_val, g, beta, lengths, lengths_dtype)
        rc = lib.sdm_p1_execute(self.handle, self._inputs, self._outs_arg, _FIELD_COUNT, self._stream)
        if rc:
            check("sdm_p1_execute", rc)
        self.pending = self.workspace is not None  # a device-side data check to read

    def check_status(self) -> None:
        """The data check of the last execute; call after its stream has been synchronized.
        Raises InvalidInputError (SDM_P1_ERROR_INVALID_INPUT) with the CPU backend's message."""
        if not hasattr(lib, "sdm_p1_execute_status"):
            raise RuntimeError("the loaded libsdmp1 is older than 1.1 (no sdm_p1_execute_status)")
        with self.lock:
            self.pending = self.pinned  # a graph's replays run it again
            check("sdm_p1_execute_status", lib.sdm_p1_execute_status(self.handle))

    def destroy(self) -> None:
        with self.lock:  # not while another thread executes it
            handle, self.handle = self.handle, None
            self.address = 0
            for hook in _RELEASE_HOOKS:  # before the lock goes: nothing finds it after
                hook(self)
        if handle is not None:
            lib.sdm_p1_plan_destroy(handle)


class _Cache:
    def __init__(self):
        self.lock = threading.Lock()
        self.plans: "OrderedDict[tuple, CachedPlan]" = OrderedDict()
        self.created = 0
        self.hits = 0


_cache = _Cache()


def _evict(keep: "CachedPlan") -> None:
    # Called with the cache lock held: the least recently used unpinned plans go (by their
    # use stamps, which fast lookups outside this cache also take), never `keep`, the plan
    # the calling thread has just made for its call (with every other plan pinned by CUDA
    # graphs, the cache then holds one more than CACHE_LIMIT rather than fail the call).
    plans = _cache.plans
    while len(plans) > CACHE_LIMIT:
        unpinned = [(p.used, k) for k, p in plans.items() if not p.pinned and p is not keep]
        if not unpinned:
            return
        plans.pop(min(unpinned)[1]).destroy()


def get_plan(framework: str, device: int, stream: int, options: tuple,
             make_workspace: Callable[[], Optional[Workspace]], capturing: bool = False,
             backend: int = lib.SDM_P1_BACKEND_CUDA) -> CachedPlan:
    """The cached plan for (framework, device, stream, options), created on a miss.

    ``options``: (N, C, W, R, num_parallel, stream_offset, num_keys, valid_last, index dtype,
    value dtype, gate_width, need_read_groups, det_fields, rec_tile), checked. ``capturing``:
    the stream is being captured into a CUDA graph: the plan is pinned, and on a miss a plan of
    the same options made for another stream is moved to this one rather than created,
    because a plan is not created during capture (its allocations and kernel set-up).
    ``backend``: CUDA, or CPU for host arrays (``make_workspace`` then returns None, or a
    host workspace in the tests that drive this machinery).
    """
    return get_plan_for((framework, device, stream) + options, options, make_workspace,
                        capturing, backend)


def cached_plan(key: tuple, capturing: bool = False) -> Optional[CachedPlan]:
    """The plan cached under ``key`` (framework, device, stream, ...), or None: a call's fast
    path, whose key stands for arguments a plan was created (and its arguments checked) for."""
    with _cache.lock:
        plan = _cache.plans.get(key)
        if plan is not None:
            _cache.plans.move_to_end(key)
            _cache.hits += 1
            plan.used = next(_TICK)
            if capturing:
                plan.pinned = True
        return plan


def note_hit(plan: CachedPlan) -> None:
    """Counts a use of ``plan`` that a framework found by a lookup of its own (a cache of
    prepared calls in front of this one): a hit in :func:`plan_cache_info`, and a use stamp,
    so that eviction keeps it as recently used. (No lock: a counter and a stamp.)"""
    _cache.hits += 1
    plan.used = next(_TICK)


def get_plan_for(key: tuple, options: tuple, make_workspace: Callable[[], Optional[Workspace]],
                 capturing: bool = False, backend: int = lib.SDM_P1_BACKEND_CUDA,
                 num_threads: Optional[int] = None, backward: bool = False,
                 grad_dtype=None) -> CachedPlan:
    """As :func:`get_plan` under a key of the caller's: (framework, device, stream, then
    anything that determines ``options``, ``num_threads``, CPU threads: None for the
    hardware's count, ``backward`` and ``grad_dtype``). ``backward``: a plan that runs
    :meth:`CachedPlan.execute_backward` (desc.backward = 1), its k_val / q_val gradients in
    ``grad_dtype`` (None: the value dtype, or float32)."""
    plan = cached_plan(key, capturing)
    if plan is not None:
        return plan
    device, stream = key[1], key[2]
    with _cache.lock:
        if capturing:
            plan = _take_other_stream(key)
            if plan is not None:
                plan.set_stream(stream)
                plan.key = key
                plan.pinned = True
                _cache.plans[key] = plan
                return plan
    values = desc_values(
        N=options[0], C=options[1], W=options[2], R=options[3], num_parallel=options[4],
        stream_offset=options[5], num_keys=options[6], valid_last=options[7],
        index_dtype=options[8], value_dtype=options[9], gate_width=options[10],
        need_read_groups=options[11], det_fields=options[12], rec_tile=options[13],
        backend=backend, device=device if backend == lib.SDM_P1_BACKEND_CUDA else None,
        num_threads=num_threads, backward=backward, grad_dtype=grad_dtype,
    )
    try:
        plan = CachedPlan(key, values, stream, make_workspace())
    except Phase1Error as e:
        if capturing:
            raise type(e)(
                e.function, e.code, e.status,
                f"{e.message}. sdm_phase1 could not create a plan during CUDA graph capture: "
                "call it once with the same shapes and options before capturing (a warm-up "
                "run, as torch.cuda.graph's documentation asks)",
            ) from e
        raise
    plan.pinned = capturing
    with _cache.lock:
        old = _cache.plans.pop(key, None)  # another thread made one meanwhile
        _cache.plans[key] = plan
        _cache.created += 1
        if old is not None and not old.pinned:
            old.destroy()
        _evict(plan)
    return plan


def _take_other_stream(key: tuple) -> Optional[CachedPlan]:
    # Called with the cache lock held: an unpinned plan of the same framework, device and
    # options on another stream, removed from the cache; the most recently used one (the
    # warm-up's, typically).
    for k, p in reversed(list(_cache.plans.items())):
        if k[:2] == key[:2] and k[3:] == key[3:] and not p.pinned:
            return _cache.plans.pop(k)
    return None


def synchronize() -> None:
    """Waits for the device work of every sdm_phase1 call on a GPU that has not been checked
    yet, then raises :class:`InvalidInputError` if the last call of any plan met bad data (ids out
    of range, bad gates), with the message the CPU backend gives for the same data.

    This is where device-side data errors surface when the calls ran with ``check=False``
    (the default). Only a plan's last call is reported (each call overwrites the check).
    Plans used in a CUDA graph are checked every time (their replays run them again).
    """
    with _cache.lock:
        plans = [p for p in _cache.plans.values() if p.pending]
    first: Optional[Phase1Error] = None
    for plan in plans:
        assert plan.workspace is not None  # pending plans are those with a workspace (CUDA)
        plan.workspace.sync()
        try:
            plan.check_status()
        except Phase1Error as e:
            first = first or e
    if first is not None:
        raise first


def plan_cache_info() -> dict:
    """Counters of the GPU plan cache: ``plans`` held now, ``created`` and ``hits`` so far."""
    with _cache.lock:
        return {"plans": len(_cache.plans), "created": _cache.created, "hits": _cache.hits,
                "pinned": sum(p.pinned for p in _cache.plans.values())}


def clear_plan_cache() -> None:
    """Destroys every cached GPU plan except those a CUDA graph uses (pinned)."""
    with _cache.lock:
        for key in [k for k, p in _cache.plans.items() if not p.pinned]:
            _cache.plans.pop(key).destroy()


def cuda_device_count() -> Optional[int]:
    """CUDA devices the loaded library's CUDA backend can use; None when the library has no
    CUDA backend (or is older than 1.1)."""
    if not hasattr(lib, "sdm_p1_cuda_device_count"):
        return None
    count = ffi.new("int32_t*")
    rc = lib.sdm_p1_cuda_device_count(count)
    if rc == lib.SDM_P1_ERROR_BACKEND_UNAVAILABLE:
        return None
    check("sdm_p1_cuda_device_count", rc)
    return int(count[0])


def cuda_architectures() -> Optional[List[str]]:
    """The GPU architectures the loaded library's CUDA kernels were built for, e.g.
    ``["sm_90"]`` or ``["sm_80", "sm_90", "sm_100", "compute_100"]`` (sm_XY: machine code for
    compute capability X.Y to X.9; compute_XY: PTX for X.Y and later); None when the library
    has no CUDA backend (or is older than 1.2)."""
    if not hasattr(lib, "sdm_p1_cuda_architectures"):
        return None
    names = ffi.new("const char**")
    rc = lib.sdm_p1_cuda_architectures(names)
    if rc == lib.SDM_P1_ERROR_BACKEND_UNAVAILABLE:
        return None
    check("sdm_p1_cuda_architectures", rc)
    return ffi.string(names[0]).decode().split()


def requested(plan: CachedPlan) -> List[int]:
    """The field ids the plan computes."""
    return [f for f, _, _ in plan.fields]
