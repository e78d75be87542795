"""sdm_phase1: Python binding of libsdmp1, Phase 1 of the chunked Sparse Delta Memory recurrence.

``phase1_forward(...)`` keeps the signature and results of the spec's function
(sparse-delta-memory, ``phase1_forward``) on NumPy arrays (CPU backend); :class:`Plan` reuses
one plan over many calls of the same shapes. The library is loaded through cffi (ABI mode)
from, in order: the file named by ``SDMP1_LIBRARY``; the source tree's ``build/libsdmp1.so``;
the system's ``libsdmp1.so.1``.
"""

from ._bf16 import bf16_from_float32, bf16_to_float32
from ._constants import (
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
from ._errors import Phase1Error
from ._forward import phase1_forward
from ._library import ffi as _ffi
from ._library import lib as _lib
from ._library import library_path
from ._plan import Plan
from ._types import Phase1

#: The loaded library's version string ("1.0.0").
__version__ = _ffi.string(_lib.sdm_p1_version_string()).decode()


def version_number() -> int:
    """The loaded library's version as major * 10000 + minor * 100 + patch."""
    return int(_lib.sdm_p1_version_number())


__all__ = [
    "phase1_forward", "Plan", "Phase1", "Phase1Error", "library_path", "version_number",
    "bf16_from_float32", "bf16_to_float32", "pos_pack",
    "DET_POS", "DET_SPAY_RANK", "DET_FLAGS", "DET_SPAY_K", "DET_SPAY_Q", "DET_KREC", "DET_KSPA",
    "DET_QREC", "DET_TILES", "DET_DC_GIDX", "DET_QREC8", "DET_SHIPPED", "DET_RECORDS",
    "POS_BITS", "POS_MASK", "POS_AFTER_SHIFT", "POS_SIZE_SHIFT", "POS_COUNT_MAX",
    "SPAY_ENTRY_MASK", "SPAY_DIST_SHIFT", "SPAY_DIST_MAX", "__version__",
]
