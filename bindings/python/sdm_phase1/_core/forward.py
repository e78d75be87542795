"""`phase1_forward`: the spec's entry point. NumPy arrays run on the CPU backend, PyTorch, CuPy
and JAX GPU tensors on the CUDA backend, each over cached plans (a plan per shapes and options,
kept between calls, so that its worker threads or workspace are too)."""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np

from .._c import lib
from .arrays import prepare_inputs, prepare_lengths
from .checks import check_agreement
from .dtypes import INDEX_CODES, NUMPY
from .options import call_options, optional_int, require_bool
from .plan import Plan, backend_code, check_host_repeats, host_result
from .plan_cache import get_plan_for
from .types import Phase1

__all__ = ["phase1_forward", "framework_of"]

_KDL_CPU = 1


def framework_of(x) -> Optional[str]:
    """"torch", "cupy" or "jax" for a tensor of those frameworks that the device path takes
    (torch tensors on any device, CuPy arrays, JAX arrays on a GPU); "other" for another GPU
    array; None for host arrays (NumPy, lists, JAX CPU arrays), which the CPU path takes."""
    if isinstance(x, np.ndarray) or x is None:
        return None
    root = type(x).__module__.partition(".")[0]
    if root == "torch":
        return "torch"
    if root == "cupy":
        return "cupy"
    dl_device = getattr(x, "__dlpack_device__", None)
    on_gpu = hasattr(x, "__cuda_array_interface__") or (
        dl_device is not None and dl_device()[0] != _KDL_CPU
    )
    if not on_gpu:
        return None
    return "jax" if root in ("jax", "jaxlib") else "other"


def _traced_by_jax(*arrays) -> bool:
    """Whether any input is a JAX tracer (inside jit, grad or vmap), which only the custom calls
    of sdm_phase1.jax_ffi can take. (Never imports jax: a tracer exists only where it is.)"""
    jax = sys.modules.get("jax")
    return jax is not None and any(isinstance(x, jax.core.Tracer) for x in arrays)


def phase1_forward(
    k_idx,
    q_idx,
    k_val,
    q_val,
    g,
    repeats=None,
    *,
    num_parallel: int,
    stream_offset: int,
    num_keys: int,
    valid_last: Optional[int] = None,
    need_read_groups: bool = True,
    beta=None,
    rec_tile: int = 0,
    det_fields: Optional[int] = None,
    backend: Optional[str] = None,
    num_threads: Optional[int] = None,
    check: bool = False,
    stream_lengths=None,
) -> Phase1:
    """Phase 1 of N = num_parallel * steps time-major chunks (the spec's ``phase1_forward``).

    Where it runs follows the arrays: NumPy arrays (and other host arrays) on the CPU backend;
    PyTorch, CuPy or JAX tensors on a GPU on the CUDA backend of their device, on that
    framework's current stream (PyTorch: ``torch.cuda.current_stream(device)``; CuPy:
    ``cupy.cuda.get_current_stream()``; JAX: the device's stream for external work, which
    JAX orders before and after its own), without a host synchronization and without copying
    the inputs. Results come back in the inputs' framework, in buffers that framework
    allocated. PyTorch CPU tensors run on the CPU backend and come back as CPU tensors. JAX
    tracers (inside ``jax.jit``, ``jax.grad``, ``jax.vmap``) go to
    :func:`sdm_phase1.jax_ffi.phase1_forward`: XLA custom calls, differentiable by JAX.

    Plans are cached per shapes, dtypes, options, device and stream, so a repeated call creates
    nothing (the CPU backend's worker threads and a GPU plan's workspace are kept with them);
    a call's outputs are carved from one allocation (NumPy, PyTorch, CuPy), so one output
    kept keeps that whole allocation (``.copy()`` / ``.clone()`` one to keep it alone).

    Differentiable with PyTorch: where k_val, q_val, g or beta requires grad while autograd
    records, the call is recorded with the autograd formula of :mod:`sdm_phase1.torch_ops`,
    whose backward is the library's (docs/python.md, "PyTorch autograd"); with JAX, under
    tracing (``jax.jit``, ``jax.grad``), through :mod:`sdm_phase1.jax_ffi` (docs/python.md,
    "JAX under jit").

    Options are checked as written here: int options take ints (Python or NumPy, not bools),
    bool options bools (TypeError otherwise), each in its range (ValueError otherwise).

    Args:
        k_idx, q_idx: [N, C, W] / [N, C, R] int32 or int64 slot ids (same dtype). Chunk c
            belongs to stream c % num_parallel, whose ids lie in [s * stream_offset,
            s * stream_offset + num_keys). A token's K slots are normally distinct.
        k_val, q_val: [N, C, W] / [N, C, R] weights: float32 or bfloat16 (torch.bfloat16,
            jnp.bfloat16, a NumPy dtype named 'bfloat16' such as ml_dtypes', or uint16 arrays
            of bfloat16 bits for NumPy and CuPy, see :func:`bf16_from_float32`).
        g: [N, C, 1] or [N, C, W] float32 log-gates (per token or per write): finite, of
            magnitude below 2**22 for valid tokens.
        repeats: None, or a one-element int64 array of the inputs' kind and device (NumPy,
            torch, CuPy), incremented in place (on the stream, for GPU tensors) by the number of
            K entries that repeat a slot already written by their token. JAX arrays are
            immutable: pass None.
        num_parallel: the number of streams, >= 1; divides N.
        stream_offset, num_keys: stream s owns the ids [s * stream_offset, s * stream_offset
            + num_keys); stream_offset >= 0, num_keys in 1..2**32.
        valid_last: valid tokens in the last chunk of each stream, 1..C; the last
            num_parallel chunks are the streams' last chunks. Later tokens are padding: their
            ids, values and gates are never read. Required without ``stream_lengths``; with
            them it is ignored and may be left out.
        need_read_groups: compute q_last, q_only, spay_q, qrec, qrec8 and tiles_q.
        beta: [N, C] float32, needed by kspa.
        rec_tile: tile length of tiles_k / tiles_q / segb_k, up to 2**20; <= 0: 128.
        det_fields: DET_* bits of the optional outputs (>= 0). Default: DET_SHIPPED, plus
            DET_KREC | DET_KSPA | DET_QREC | DET_TILES when beta is given.
        backend: None (follow the arrays), "cpu" (host arrays only) or "cuda" (GPU tensors;
            with NumPy arrays the library refuses the call).
        num_threads: CPU threads, >= 1, at most the hardware's count; None or 0: that count.
            Results do not depend on it. Ignored on a GPU.
        check: GPU tensors only: wait for the stream, then raise the device-side data check's
            :class:`InvalidInputError` (ids out of range, bad gates, lengths out of range) at this
            call. Off by default so the call stays asynchronous; such errors then surface at
            the next :func:`sdm_phase1.synchronize`. The CPU backend always raises them at once.
        stream_lengths: None (the valid_last rule), or [num_parallel] int32 or int64 lengths
            on the inputs' device (NumPy arrays or lists on the CPU; a tensor of the inputs'
            framework and GPU there, read by the kernels: no host sync, and a captured CUDA
            graph reads the buffer's lengths at each replay): stream s has
            stream_lengths[s] valid tokens, in 0..steps * C with steps = N / num_parallel, so
            chunk c has clamp(stream_lengths[c % num_parallel] - (c // num_parallel) * C, 0,
            C) valid tokens (a chunk with none gives the neutral outputs of padding). A length
            out of range raises InvalidInputError (on a GPU: as the data check above).
            :func:`sdm_phase1.layout.to_chunks` makes them from batch-major sequences.

    Returns:
        A :class:`Phase1` of fresh arrays of the inputs' framework (value-dtype fields in
        k_val's dtype). Fields not requested are None, except is_last / is_only and the record
        fields (empty arrays), as in the spec.

    Raises:
        TypeError, ValueError: an input is not an array of the right kind, rank, dtype, device
            or contiguity (inputs are read in place, for every framework: a non-contiguous one
            is refused, never copied), the shapes disagree, or an option has another type or
            lies outside its range.
        Phase1Error: the library refused the call; ``.status`` names why, and the subclass
            says it with a built-in base: InvalidArgumentError (options, kspa without beta,
            ...) and InvalidInputError (ids out of range, bad gates or lengths) are
            ValueErrors, UnsupportedError (limits) a NotImplementedError and ValueError,
            OutOfMemoryError a MemoryError, BackendUnavailableError, CudaError and
            InternalError RuntimeErrors.
    """
    if _traced_by_jax(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths):
        from ..jax_ffi import phase1_forward as traced_forward

        return traced_forward(
            k_idx, q_idx, k_val, q_val, g, repeats, num_parallel=num_parallel,
            stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
            need_read_groups=need_read_groups, beta=beta, rec_tile=rec_tile, det_fields=det_fields,
            backend=backend, num_threads=num_threads, check=check, stream_lengths=stream_lengths)
    framework = framework_of(k_idx)
    if framework is not None:
        if backend is not None:  # (k_idx.device is an object made per call: only when needed)
            on_gpu = framework != "torch" or k_idx.device.type == "cuda"
            if backend_code(backend) != backend_code("cuda" if on_gpu else "cpu"):
                where = "a GPU tensor (backend 'cuda')" if on_gpu else "a CPU tensor (backend 'cpu')"
                raise ValueError(f"backend={backend!r}, but k_idx is {where}")
        return _framework_forward(framework, k_idx)(
            k_idx, q_idx, k_val, q_val, g, repeats, num_parallel=num_parallel,
            stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
            need_read_groups=need_read_groups, beta=beta, rec_tile=rec_tile, det_fields=det_fields,
            check=check, stream_lengths=stream_lengths)

    x = prepare_inputs(k_idx, q_idx, k_val, q_val, g, beta)
    shapes = {"k_idx": x.k_idx.shape, "q_idx": x.q_idx.shape, "k_val": x.k_val.shape,
              "q_val": x.q_val.shape, "g": x.g.shape}
    if x.beta is not None:
        shapes["beta"] = x.beta.shape
    N, C, W, R, gate_width = check_agreement(shapes)
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        valid_last = C
    o = call_options(C, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, beta is not None)
    threads = optional_int("num_threads", num_threads, 0,
                           "None or 0 (the hardware's thread count) or >= 1")
    x.stream_lengths = prepare_lengths(stream_lengths, o.num_parallel)
    require_bool("check", check)
    if backend is not None and backend_code(backend) != lib.SDM_P1_BACKEND_CPU:
        # Host arrays on another backend: the library refuses them with its own message.
        with Plan(N=N, C=C, W=W, R=R, num_parallel=o.num_parallel, stream_offset=o.stream_offset,
                  num_keys=o.num_keys, valid_last=o.valid_last, index_dtype=x.k_idx.dtype,
                  value_dtype=x.k_val.dtype, gate_width=gate_width,
                  need_read_groups=o.need_read_groups, det_fields=o.det_fields,
                  rec_tile=o.rec_tile, backend=backend, num_threads=threads) as plan:
            return plan._run(x, repeats)
    check_host_repeats(repeats)
    options = (N, C, W, R, o.num_parallel, o.stream_offset, o.num_keys, o.valid_last,
               x.index_dtype, x.value_dtype, gate_width, o.need_read_groups, o.det_fields,
               o.rec_tile)
    cached = get_plan_for(("numpy", -1, 0, threads) + options, options, lambda: None,
                          backend=lib.SDM_P1_BACKEND_CPU, num_threads=threads)
    block = np.empty(cached.block_bytes, np.uint8)
    lengths = x.stream_lengths
    cached.execute_block(x.k_idx.ctypes.data, x.q_idx.ctypes.data, x.k_val.ctypes.data,
                         x.q_val.ctypes.data, x.g.ctypes.data,
                         0 if x.beta is None else x.beta.ctypes.data, block.ctypes.data,
                         0 if lengths is None else lengths.ctypes.data,
                         0 if lengths is None else INDEX_CODES[lengths.dtype])
    arrays = [None] * lib.SDM_P1_FIELD_COUNT
    for f, shape, dt, offset in cached.layout:
        arrays[f] = np.ndarray(shape, NUMPY[dt], buffer=block, offset=offset)
    return host_result(arrays, repeats, x.value_view, C, W)


_FORWARDS: dict = {}


def _framework_forward(framework: str, k_idx):
    """The forward of a framework's module, imported at its first use."""
    forward = _FORWARDS.get(framework)
    if forward is None:
        if framework == "torch":
            from .._frameworks.torch_entry import forward
        elif framework == "cupy":
            from .._frameworks.cupy_impl import forward
        elif framework == "jax":
            from .._frameworks.jax_impl import forward
        else:
            raise TypeError(
                f"k_idx is a GPU array of type {type(k_idx).__module__}.{type(k_idx).__name__}; "
                "sdm_phase1 takes PyTorch, CuPy and JAX tensors on a GPU: wrap others without a "
                "copy first (torch.from_dlpack(x) or cupy.asarray(x))"
            )
        _FORWARDS[framework] = forward
    return forward
