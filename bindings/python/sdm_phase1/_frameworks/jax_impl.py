"""JAX arrays on a GPU: the CUDA backend of the array's device, on the stream JAX offers for
work done outside it (``Device.get_stream_for_external_ready_events``), through DLPack.

Ordering without a host wait: each input is exported with ``__dlpack__(stream=S)``, which
makes S wait until JAX has computed it; each output is a fresh JAX array (one jitted
function of a plan makes a call's outputs in one dispatch), exported the same way, written by
the kernels on S, and handed back to JAX with ``jax.dlpack.from_dlpack``, which makes JAX
wait on S before any later use (where JAX consumes on another of its streams, that stream
waits for S through a CUDA event). No copies; the plan's workspace is a JAX-allocated byte
array. JAX arrays are immutable, so ``repeats`` must be None. (Where a jaxlib has no such
stream, calls fail with a clear error.)

Imported only when a JAX GPU array is passed (this module imports jax).
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Dict, List, cast

import jax
import jax.dlpack
import jax.numpy as jnp

from .._core import plan_cache
from .._core.checks import check_agreement, check_dtypes, check_rank, lengths_dtype_code, not_contiguous
from .._core.dtypes import framework_dtypes
from .._core.fields import EMPTY_DTYPES, REPEATS
from .._core.options import call_options, require_bool
from .._core.types import FIELDS, Phase1
from .dlpack import KDL_CUDA, capsule_pointer, read_capsule

__all__ = ["forward"]

_DTYPES = framework_dtypes(jnp)  # sdm_p1_dtype code -> JAX dtype
_streams: dict = {}


def _stream_of(device) -> int:
    s = _streams.get(device)
    if s is None:
        try:
            s = int(device.get_stream_for_external_ready_events())
        except AttributeError:
            raise RuntimeError(
                "this jaxlib's devices have no get_stream_for_external_ready_events(): "
                "sdm_phase1 cannot order its work with JAX's without it"
            ) from None
        _streams[device] = s
    return s


class _Offer:
    """A DLPack capsule of memory written on stream S, offered back to JAX (from_dlpack).
    ``ordered``: the consumer streams already made to wait for S since the call's launch, shared
    by the offers of one call (its work was all queued before the first offer, so one wait per
    consumer stream orders every output)."""

    def __init__(self, capsule, device_id: int, stream: int, ordered: set):
        self.capsule = capsule
        self.device_id = device_id
        self.stream = stream
        self.ordered = ordered

    def __dlpack_device__(self):
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # JAX hands out its streams for external events from a pool, so the consumer's may
        # differ from the one the kernels ran on: it then waits for ours, on the device.
        if stream is not None and stream != self.stream and stream not in self.ordered:
            _order_after(stream, self.stream)
            self.ordered.add(stream)
        capsule, self.capsule = self.capsule, None
        return capsule


_driver = None


def _order_after(consumer: int, producer: int) -> None:
    """Makes stream `consumer` wait for the work queued so far on stream `producer`, without a
    host wait (an event through the CUDA driver API; the kernels' context is current)."""
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, call: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            _driver.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"sdm_phase1: {call} failed: {(name.value or b'?').decode()}")

    event = ctypes.c_void_p()
    check(_driver.cuEventCreate(ctypes.byref(event), 2), "cuEventCreate")  # CU_EVENT_DISABLE_TIMING
    try:
        check(_driver.cuEventRecord(event, ctypes.c_void_p(producer)), "cuEventRecord")
        check(_driver.cuStreamWaitEvent(ctypes.c_void_p(consumer), event, 0), "cuStreamWaitEvent")
    finally:
        _driver.cuEventDestroy_v2(event)


class _JaxWorkspace(plan_cache.Workspace):
    """A plan's workspace: a JAX byte array held until the plan is destroyed."""

    def __init__(self, device, stream: int):
        self.device = device
        self.stream = stream
        self.blocks: Dict[int, tuple] = {}  # aligned pointer -> (array, capsule), kept until free
        self.last: Any = None  # a tiny output of the plan's last call, to wait for its work

    def alloc(self, nbytes: int, stream: int) -> int:
        arr = jnp.empty((nbytes + 256,), jnp.uint8, device=self.device)
        # DLPack names the legacy default stream 1 (its handle 0 means "no stream").
        capsule = arr.__dlpack__(stream=stream or 1)
        ptr = read_capsule(capsule).ptr
        aligned = (ptr + 255) // 256 * 256
        self.blocks[aligned] = (arr, capsule)
        return aligned

    def free(self, ptr: int) -> None:
        # JAX reuses freed memory at once, not in stream order: let the last call finish.
        self.sync()
        self.blocks.pop(ptr, None)

    def sync(self) -> None:
        if self.last is not None:
            jax.block_until_ready(self.last)


def _export(name: str, x, stream: int, device_id: int):
    if not isinstance(x, jax.Array):
        raise TypeError(f"{name} must be a jax.Array like k_idx, got {type(x).__name__}")
    try:
        capsule = x.__dlpack__(stream=stream)
    except Exception as e:
        raise ValueError(f"{name}: cannot export it through DLPack ({e})") from e
    info = read_capsule(capsule)
    if info.device != (KDL_CUDA, device_id):
        raise ValueError(
            f"{name} is on DLPack device {info.device} but k_idx is on GPU {device_id}: every "
            "array of a call must be on one device"
        )
    check_rank(name, info.shape)
    if not info.contiguous:
        raise not_contiguous(name, info.shape, info.strides, f"jnp.copy({name})")
    return capsule, info


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check,
            stream_lengths=None) -> Phase1:
    """phase1_forward on JAX GPU arrays (see sdm_phase1.phase1_forward; stream_lengths: an
    int32 array, or int64 with x64 enabled, on the inputs' GPU)."""
    if repeats is not None:
        raise ValueError("repeats must be None with JAX arrays (they are immutable, so it cannot "
                         "be incremented in place)")
    devices = k_idx.devices()
    if len(devices) != 1:
        raise ValueError(f"k_idx is sharded over {len(devices)} devices; pass single-device arrays")
    device = next(iter(devices))
    device_id = int(k_idx.__dlpack_device__()[1])
    stream = _stream_of(device)
    given = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
    if beta is not None:
        given["beta"] = beta
    exported = {n: _export(n, x, stream, device_id) for n, x in given.items()}
    info = {n: e[1] for n, e in exported.items()}
    index, value = check_dtypes({n: i.dtype for n, i in info.items()})
    N, C, W, R, gate_width = check_agreement({n: i.shape for n, i in info.items()})
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        valid_last = C
    o = call_options(C, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, beta is not None)
    check = require_bool("check", check)
    lengths = (0, 0)
    if stream_lengths is not None:
        exported["stream_lengths"] = _export("stream_lengths", stream_lengths, stream, device_id)
        li = exported["stream_lengths"][1]
        lengths = (li.ptr, lengths_dtype_code(li.shape, li.dtype, o.num_parallel))
    options = (N, C, W, R, o.num_parallel, o.stream_offset, o.num_keys, o.valid_last, index, value,
               gate_width, o.need_read_groups, o.det_fields, o.rec_tile)
    plan = plan_cache.get_plan("jax", device_id, stream, options, lambda: _JaxWorkspace(device, stream))

    if plan.extra is None:
        plan.extra = _PlanData(plan, device)
    outs = [(c, capsule_pointer(c)) for c in (a.__dlpack__(stream=stream) for a in plan.extra.make())]
    if len({p for _, p in outs}) != len(outs):  # each output of a computation is its own buffer
        raise RuntimeError("sdm_phase1: JAX gave two outputs of one call the same memory")
    beta_ptr = info["beta"].ptr if beta is not None else 0
    plan.execute(info["k_idx"].ptr, info["q_idx"].ptr, info["k_val"].ptr, info["q_val"].ptr,
                 info["g"].ptr, beta_ptr, [p for _, p in outs], *lengths)
    by_field: List[Any] = [None] * (REPEATS + 1)
    ordered: set = set()
    for (f, _, _), (capsule, _) in zip(plan.fields, outs):
        by_field[f] = jax.dlpack.from_dlpack(_Offer(capsule, device_id, stream, ordered))
    cast(_JaxWorkspace, plan.workspace).last = by_field[REPEATS]
    # JAX frees an input's memory as soon as its array and capsule are gone, without waiting
    # for work on S: keep the input capsules until the first output is released.
    try:
        weakref.finalize(by_field[0], lambda keep: None, [e[0] for e in exported.values()])
    except TypeError:
        plan.extra.keep = [e[0] for e in exported.values()]
    if check:
        jax.block_until_ready(by_field[REPEATS])
        plan.check_status()

    fields = []
    for f, name in enumerate(FIELDS):
        a = by_field[f]
        if a is None and f in EMPTY_DTYPES:
            shape = (0, C, W) if name in ("is_last", "is_only") else (0,)
            a = _empty(shape, EMPTY_DTYPES[f], device)
        fields.append(a)
    return Phase1._make(fields)


class _PlanData:
    """The module's data for one plan (CachedPlan.extra): ``make``, one jitted function that
    returns fresh arrays for a call's outputs (plan.fields order), one dispatch a call where a
    jnp.empty each was 19 (about 95 us each on an H200); ``keep``, the last call's input
    capsules where its first output cannot hold them (forward)."""

    def __init__(self, plan, device):
        # 8 bytes the library writes for repeats; JAX keeps no int64 without x64.
        specs = [((2,), jnp.uint32) if f == REPEATS else (tuple(shape), _DTYPES[dt])
                 for f, shape, dt in plan.fields]
        self.make = jax.jit(lambda: tuple(jnp.empty(s, d) for s, d in specs),
                            out_shardings=jax.sharding.SingleDeviceSharding(device))
        self.keep = None


_EMPTIES: dict = {}


def _empty(shape: tuple, dtype: int, device):
    # JAX arrays are immutable and these hold no data, so one per (shape, dtype, device) serves
    # every call (each jnp.empty is a dispatch of its own).
    key = (shape, dtype, device)
    a = _EMPTIES.get(key)
    if a is None:
        a = _EMPTIES[key] = jnp.empty(shape, _DTYPES[dtype], device=device)
    return a
