"""Phase 1 under ``jax.jit``: the library's forward and backward as XLA FFI custom calls, with a
``jax.custom_vjp``, so that ``jax.jit(jax.grad(loss))`` of a loss of the outputs gives the
gradients of k_val, q_val, g and beta (docs/python.md, "JAX under jit").

    import sdm_phase1.jax_ffi as p1j
    out = jax.jit(lambda *x: p1j.phase1_forward(*x, num_parallel=2, ...))(k_idx, q_idx, k_val, q_val, g)

The handlers are libsdmp1_jax.so (bindings/python/jax_ffi/), which lies beside libsdmp1.so (the
build folder, or the package of a wheel: pip's build has jaxlib, a build requirement). Importing this module
loads it and registers its targets with JAX once: "sdm_phase1.forward" and
"sdm_phase1.backward" on the CPU (the library's CPU backend) and, where the library has its
CUDA backend, on CUDA (the CUDA backend on XLA's stream). The platform follows the
computation's device. Plans are created at a shape's first call and cached by the handlers
(:func:`plans_created`). ``vmap`` runs the calls one after another
(``vmap_method="sequential"``): correct, not vectorized.

:func:`sdm_phase1.phase1_forward` sends JAX tracers (inside jit, grad, vmap) here; concrete
arrays keep their paths (NumPy for JAX CPU arrays, DLPack for JAX GPU arrays).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._c import library_path
from ._core.backward import DIFFERENTIABLE
from ._core.checks import check_agreement, check_dtypes, check_rank, lengths_dtype_code
from ._core.dtypes import INT32, framework_dtypes
from ._core.fields import EMPTY_DTYPES, REPEATS, VALUE, output_layout
from ._core.options import call_options, optional_int, require_bool
from ._core.types import FIELDS, Phase1

__all__ = ["phase1_forward", "plans_created", "has_cuda", "HANDLER_LIBRARY", "FORWARD_TARGET",
           "BACKWARD_TARGET"]

FORWARD_TARGET = "sdm_phase1.forward"
BACKWARD_TARGET = "sdm_phase1.backward"
_HANDLER_FILE = "libsdmp1_jax.so"

_DTYPES = framework_dtypes(jnp)  # sdm_p1_dtype code -> JAX dtype
# The outputs JAX can differentiate, with their field ids: the differentiable ones that are
# float arrays (the records krec, qrec and qrec8 are int32 words in JAX, whose cotangents are
# float0).
_DIFFERENTIABLE = {name: f for name, f in DIFFERENTIABLE.items() if EMPTY_DTYPES.get(f) != INT32}


def _load_handlers(path: str) -> ctypes.CDLL:
    if not os.path.isfile(path):
        raise ImportError(
            f"sdm_phase1.jax_ffi: no {_HANDLER_FILE} beside the loaded {library_path}. It is built "
            "with libsdmp1 where the Python that Meson runs has jaxlib (Meson option jax_ffi): "
            "pip install '.[jax]' from the repository root builds it into the package (jaxlib is "
            "a build requirement; on platforms without jaxlib wheels it is left out)"
        )
    handlers = ctypes.CDLL(path)
    handlers.sdmp1_jax_plans_created.restype = ctypes.c_int64
    return handlers


#: The handler library: beside the libsdmp1.so this package loaded, which the handlers link by
#: its soname, so that the dynamic loader gives them that same copy.
HANDLER_LIBRARY = os.path.join(os.path.dirname(library_path), _HANDLER_FILE)
_handlers = _load_handlers(HANDLER_LIBRARY)
#: Whether the handlers include the CUDA ones (a library built with its CUDA backend).
has_cuda = hasattr(_handlers, "sdmp1_jax_forward_cuda")


def _register(platform: str, suffix: str) -> None:
    for target, call in ((FORWARD_TARGET, "forward"), (BACKWARD_TARGET, "backward")):
        handler = getattr(_handlers, f"sdmp1_jax_{call}_{suffix}")
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform=platform)


# Once, at this module's import: XLA keeps one handler per target and platform in the process.
_register("cpu", "cpu")
if has_cuda:
    _register("CUDA", "cuda")


def plans_created() -> int:
    """How many plans the handlers have created in this process: one per distinct shapes,
    options, device and stream, then reused by every call (jitted or not, forward and backward
    plans apart)."""
    return int(_handlers.sdmp1_jax_plans_created())


class _Options(NamedTuple):
    """The call's options, checked: static (hashable) for jax.custom_vjp."""

    num_parallel: int
    stream_offset: int
    num_keys: int
    valid_last: int
    need_read_groups: bool
    rec_tile: int
    det_fields: int
    num_threads: int
    check: bool


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
    """:func:`sdm_phase1.phase1_forward` for JAX, traceable: usable under ``jax.jit``,
    differentiable by ``jax.grad`` / ``jax.vjp`` with respect to k_val, q_val, g and beta.

    Arguments as in :func:`sdm_phase1.phase1_forward`, as JAX arrays (or arrays JAX converts):
    values float32 or ``jnp.bfloat16``; ids and stream_lengths int32 (int64 with x64 enabled).
    ``repeats`` and ``backend`` must be None (JAX arrays are immutable; the platform of the
    computation picks the backend). ``num_threads``: the CPU plan's threads. ``check``: on a
    GPU, wait for the stream after the forward and raise bad input data there (the CPU always
    raises it); without it, such data give unspecified outputs and no error on a GPU.

    Returns a :class:`Phase1` of JAX arrays. The differentiable outputs are the float ones:
    a, qk, log_k, log_q, rex, cpe, k_eff, q_w and kspa (the backward of docs/backward.md, the
    library's bits); the integer outputs, the records krec, qrec, qrec8 among them, carry no
    gradient. Errors of the library are raised by JAX when the computation runs (under jit: at
    the jitted call), with the library's message in their text.
    """
    if repeats is not None:
        raise ValueError("repeats must be None with JAX arrays (they are immutable, so it cannot be "
                         "incremented in place)")
    if backend is not None:
        raise ValueError(f"backend must be None with sdm_phase1.jax_ffi, got {backend!r}: the platform "
                         "the computation runs on picks the library's backend")
    given = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
    if beta is not None:
        given["beta"] = beta
    arrays = {name: jnp.asarray(x) for name, x in given.items()}
    for name, x in arrays.items():
        check_rank(name, x.shape)
    dtypes = {name: x.dtype.name for name, x in arrays.items()}
    if dtypes["k_val"] == "uint16":
        raise ValueError("k_val must be float32 or jnp.bfloat16 with JAX (uint16 bit patterns are "
                         "not differentiable): pass jax.lax.bitcast_convert_type(k_val, jnp.bfloat16)")
    check_dtypes(dtypes)
    _, C, _, _, _ = check_agreement({name: x.shape for name, x in arrays.items()})
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        valid_last = C
    o = call_options(C, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, beta is not None)
    threads = optional_int("num_threads", num_threads, 0, "None or 0 (the hardware's thread count) or >= 1")
    opts = _Options(o.num_parallel, o.stream_offset, o.num_keys, o.valid_last, o.need_read_groups,
                    o.rec_tile, o.det_fields, threads or 0, require_bool("check", check))
    lengths = None
    if stream_lengths is not None:
        lengths = jnp.asarray(stream_lengths)
        lengths_dtype_code(lengths.shape, lengths.dtype.name, o.num_parallel)
    return _phase1(opts, arrays["k_idx"], arrays["q_idx"], arrays["k_val"], arrays["q_val"], arrays["g"],
                   arrays.get("beta"), lengths)


def _common_attrs(opts: _Options, beta, lengths) -> dict:
    # Typed as the handlers decode them (bindings/python/jax_ffi/phase1_call.h): i64 and bool scalars.
    return {
        "num_parallel": np.int64(opts.num_parallel),
        "stream_offset": np.int64(opts.stream_offset),
        "num_keys": np.int64(opts.num_keys),
        "valid_last": np.int64(opts.valid_last),
        "num_threads": np.int64(opts.num_threads),
        "has_beta": np.bool_(beta is not None),
        "has_lengths": np.bool_(lengths is not None),
    }


def _forward_call(opts: _Options, k_idx, q_idx, k_val, q_val, g, beta, lengths) -> Phase1:
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    layout = output_layout(N, C, W, R, opts.det_fields, opts.need_read_groups, opts.rec_tile)
    # repeats: the 8 bytes of the library's int64 count, which JAX keeps only with x64.
    results = [jax.ShapeDtypeStruct((2,), jnp.uint32) if f == REPEATS else
               jax.ShapeDtypeStruct(shape, k_val.dtype if dtype == VALUE else _DTYPES[dtype])
               for f, shape, dtype in layout]
    operands = [x for x in (k_idx, q_idx, k_val, q_val, g, beta, lengths) if x is not None]
    call = jax.ffi.ffi_call(FORWARD_TARGET, results, vmap_method="sequential")
    outs = call(*operands, **_common_attrs(opts, beta, lengths),
                need_read_groups=np.bool_(opts.need_read_groups), det_fields=np.int64(opts.det_fields),
                rec_tile=np.int64(opts.rec_tile), check=np.bool_(opts.check))
    by_field = {f: out for (f, _, _), out in zip(layout, outs)}
    fields = []
    for f, name in enumerate(FIELDS):
        a = by_field.get(f)
        if a is None and f in EMPTY_DTYPES:  # as the spec returns it: empty, not None
            a = jnp.zeros((0, C, W) if name in ("is_last", "is_only") else (0,), _DTYPES[EMPTY_DTYPES[f]])
        fields.append(a)
    return Phase1._make(fields)


def _backward_call(opts: _Options, k_idx, q_idx, k_val, q_val, g, beta, lengths, payload,
                   grads: Mapping[int, object]):
    N, C = k_idx.shape[:2]
    results = [jax.ShapeDtypeStruct(k_val.shape, k_val.dtype), jax.ShapeDtypeStruct(q_val.shape, q_val.dtype),
               jax.ShapeDtypeStruct(g.shape, jnp.float32)]
    if beta is not None:
        results.append(jax.ShapeDtypeStruct((N, C), jnp.float32))
    operands = [x for x in (k_idx, q_idx, k_val, q_val, g, payload, beta, lengths) if x is not None]
    operands += [grads[f] for f in sorted(grads)]
    call = jax.ffi.ffi_call(BACKWARD_TARGET, results, vmap_method="sequential")
    outs = call(*operands, **_common_attrs(opts, beta, lengths),
                grad_fields=np.int64(sum(1 << f for f in grads)))
    return outs[0], outs[1], outs[2], outs[3] if beta is not None else None


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _phase1(opts: _Options, k_idx, q_idx, k_val, q_val, g, beta, lengths) -> Phase1:
    return _forward_call(opts, k_idx, q_idx, k_val, q_val, g, beta, lengths)


def _phase1_fwd(opts: _Options, k_idx, q_idx, k_val, q_val, g, beta, lengths):
    out = _forward_call(opts, k_idx, q_idx, k_val, q_val, g, beta, lengths)
    # The payload (always computed) saves the backward its sort.
    return out, (k_idx, q_idx, k_val, q_val, g, beta, lengths, out.payload)


def _phase1_bwd(opts: _Options, residuals, cotangents: Phase1):
    k_idx, q_idx, k_val, q_val, g, beta, lengths, payload = residuals
    N, C, W = k_idx.shape
    computed = {f for f, _, _ in output_layout(N, C, W, q_idx.shape[2], opts.det_fields,
                                               opts.need_read_groups, opts.rec_tile)}
    grads = {f: cotangents[f] for f in _DIFFERENTIABLE.values() if f in computed}
    dk_val, dq_val, dg, dbeta = _backward_call(opts, k_idx, q_idx, k_val, q_val, g, beta, lengths, payload,
                                               grads)
    # Ids and lengths are integers: no cotangent (None is JAX's zero).
    return None, None, dk_val, dq_val, dg, dbeta, None


_phase1.defvjp(_phase1_fwd, _phase1_bwd)
