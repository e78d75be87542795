"""sdm_phase1: Python binding of libsdmp1, Phase 1 of the chunked Sparse Delta Memory recurrence.

``phase1_forward(...)`` keeps the signature and results of the spec's function
(sparse-delta-memory, ``phase1_forward``). NumPy arrays run on the CPU backend; PyTorch, CuPy
and JAX tensors on a GPU run on the CUDA backend of their device, on the framework's current
stream, asynchronously, with outputs allocated by the framework (plans are cached per shape,
options, device and stream). Device-side data errors surface with ``check=True`` or at the
next :func:`synchronize`. :class:`Plan` reuses one CPU plan over many calls. A failed library
call raises a subclass of :class:`Phase1Error` per status code, each also a built-in exception
(ValueError for bad arguments and data, MemoryError, RuntimeError for the backend and CUDA).
``stream_lengths`` gives each stream its own length; :mod:`sdm_phase1.layout`
(``to_chunks``, ``chunk_tokens``, ``from_chunks``) maps batch-major [B, T, H, W] or packed (``cu_seqlens``)
batches to and from the time-major chunks.
``sdm_phase1.torch_ops`` registers the PyTorch operator ``torch.ops.sdm_phase1.phase1_forward``
(for ``torch.compile``); only that module imports torch. ``sdm_phase1.jax_ffi`` runs the forward
and the backward as XLA custom calls under ``jax.jit``, differentiable by ``jax.grad``
(``phase1_forward`` sends JAX tracers there); it imports jax.

``phase1_backward(...)`` and :meth:`Plan.execute_backward` give the gradients of k_val, q_val,
g and beta for upstream gradients of the outputs (NumPy arrays on the CPU backend;
``phase1_backward`` also CuPy arrays on the CUDA backend; docs/backward.md), bitwise the same
on every run and backend. With PyTorch, ``phase1_forward`` and the operator are differentiable
in k_val, q_val, g and beta (autograd calls that backward, on the GPU for CUDA tensors).

``sdm_layer(...)`` is one SDM layer's memory: Phase 1, then the chunked recurrence (Phase 2),
returning ``(o, memory)``; differentiable with torch tensors
(:mod:`sdm_phase1.torch_recurrence`), float64 NumPy otherwise (:mod:`sdm_phase1.recurrence`,
which also holds the token-by-token reference). Both are references, not fast kernels.

The library is loaded through cffi (ABI mode), with declarations made from its header
(``sdm_phase1._c``), from, in order: the file named by ``SDMP1_LIBRARY``; this installation's
own ``libsdmp1.so`` (inside the package for a wheel, in the build folder for an editable
install); the source tree's ``build/libsdmp1.so``; the system's ``libsdmp1.so.1``.
``library_path`` names the file loaded. ``python -m sdm_phase1`` reports the library, its
backends, the CUDA architectures it was built for and the GPUs it sees.
"""

from . import layout, recurrence
from ._c import ffi as _ffi
from ._c import lib as _lib
from ._c import library_path
from ._core.bf16 import bf16_from_float32, bf16_to_float32
from ._core.constants import (
    DET_DC_GIDX,
    DET_FLAGS,
    DET_KREC,
    DET_KSPA,
    DET_POS,
    DET_QREC,
    DET_QREC8,
    DET_RECORDS,
    DET_SHIPPED,
    DET_SPAY_K,
    DET_SPAY_Q,
    DET_SPAY_RANK,
    DET_TILES,
    POS_AFTER_SHIFT,
    POS_BITS,
    POS_COUNT_MAX,
    POS_MASK,
    POS_SIZE_SHIFT,
    SPAY_DIST_MAX,
    SPAY_DIST_SHIFT,
    SPAY_ENTRY_MASK,
    pos_pack,
)
from ._core.errors import (
    BackendUnavailableError,
    CudaError,
    InternalError,
    InvalidArgumentError,
    InvalidInputError,
    OutOfMemoryError,
    Phase1Error,
    UnsupportedError,
)
from ._core.forward import phase1_forward
from ._core.phase1_backward import phase1_backward
from ._core.plan import Plan
from ._core.plan_cache import (
    clear_plan_cache,
    cuda_architectures,
    cuda_device_count,
    plan_cache_info,
    synchronize,
)
from ._core.types import Phase1
from .layout import chunk_tokens, from_chunks, to_chunks
from .recurrence import sdm_layer

#: The loaded library's version string, e.g. "1.4.0".
__version__ = _ffi.string(_lib.sdm_p1_version_string()).decode()
#: The version of this Python package: that of the header its declarations mirror (the wheel's
#: metadata carries the same, Meson's project version; the tests check both).
binding_version = f"{_lib.SDM_P1_VERSION_MAJOR}.{_lib.SDM_P1_VERSION_MINOR}.{_lib.SDM_P1_VERSION_PATCH}"


def version_number() -> int:
    """The loaded library's version as major * 10000 + minor * 100 + patch."""
    return int(_lib.sdm_p1_version_number())


__all__ = [
    "phase1_forward", "phase1_backward", "Plan", "Phase1", "library_path", "version_number",
    "Phase1Error", "InvalidArgumentError", "UnsupportedError", "InvalidInputError", "OutOfMemoryError",
    "BackendUnavailableError", "CudaError", "InternalError",
    "synchronize", "plan_cache_info", "clear_plan_cache", "cuda_device_count", "cuda_architectures",
    "binding_version", "layout", "to_chunks", "chunk_tokens", "from_chunks", "recurrence",
    "sdm_layer",
    "bf16_from_float32", "bf16_to_float32", "pos_pack",
    "DET_POS", "DET_SPAY_RANK", "DET_FLAGS", "DET_SPAY_K", "DET_SPAY_Q", "DET_KREC", "DET_KSPA",
    "DET_QREC", "DET_TILES", "DET_DC_GIDX", "DET_QREC8", "DET_SHIPPED", "DET_RECORDS",
    "POS_BITS", "POS_MASK", "POS_AFTER_SHIFT", "POS_SIZE_SHIFT", "POS_COUNT_MAX",
    "SPAY_ENTRY_MASK", "SPAY_DIST_SHIFT", "SPAY_DIST_MAX", "__version__",
]
