"""The spec's constants: det_fields bits and the bit layouts of pos_k / pos_q and spay_k / spay_q.

The det_fields bits are the header's SDM_P1_DET_* macros (read through the declarations made
from it); the bit layouts are documented in the header's comments only, so they are written
here.
"""

from __future__ import annotations

import numpy as np

from .._c import lib

__all__ = [
    "DET_POS", "DET_SPAY_RANK", "DET_FLAGS", "DET_SPAY_K", "DET_SPAY_Q", "DET_KREC",
    "DET_KSPA", "DET_QREC", "DET_TILES", "DET_DC_GIDX", "DET_QREC8", "DET_SHIPPED",
    "DET_RECORDS", "POS_BITS", "POS_MASK", "POS_AFTER_SHIFT", "POS_SIZE_SHIFT",
    "POS_COUNT_MAX", "pos_pack", "SPAY_ENTRY_MASK", "SPAY_DIST_SHIFT", "SPAY_DIST_MAX",
]

# det_fields bits: which optional outputs a call computes.
DET_POS: int = lib.SDM_P1_DET_POS  #: pos_k, pos_q
DET_SPAY_RANK: int = lib.SDM_P1_DET_SPAY_RANK  #: spay_rank
DET_FLAGS: int = lib.SDM_P1_DET_FLAGS  #: is_last, is_only; q_last, q_only (with read groups)
DET_SPAY_K: int = lib.SDM_P1_DET_SPAY_K  #: spay_k
DET_SPAY_Q: int = lib.SDM_P1_DET_SPAY_Q  #: spay_q (with read groups)
DET_KREC: int = lib.SDM_P1_DET_KREC  #: krec
DET_KSPA: int = lib.SDM_P1_DET_KSPA  #: kspa (needs beta)
DET_QREC: int = lib.SDM_P1_DET_QREC  #: qrec (with read groups)
DET_TILES: int = lib.SDM_P1_DET_TILES  #: tiles_k, segb_k; tiles_q (with read groups)
DET_DC_GIDX: int = lib.SDM_P1_DET_DC_GIDX  #: dc_kpos, dc_bpre
DET_QREC8: int = lib.SDM_P1_DET_QREC8  #: qrec8 (with read groups)
#: The default set: DET_POS | DET_SPAY_RANK | DET_FLAGS | DET_SPAY_K | DET_SPAY_Q.
DET_SHIPPED: int = lib.SDM_P1_DET_SHIPPED
#: Added to the default when beta is given: DET_KREC | DET_KSPA | DET_QREC | DET_TILES (the
#: training set of canon/field_sets.h; tests/test_field_sets.py holds the two together).
DET_RECORDS = DET_KREC | DET_KSPA | DET_QREC | DET_TILES

# pos_k / pos_q: position in the chunk's sorted row (bits 0-16), peers after the entry in its
# slot group (bits 17-23) and peers in the group (bits 24-30), both saturating at 127.
POS_BITS = 17  #: bits of the sorted position
POS_MASK = (1 << POS_BITS) - 1  #: mask of the sorted position
POS_AFTER_SHIFT = POS_BITS  #: shift of the "peers after" count
POS_SIZE_SHIFT = POS_BITS + 7  #: shift of the "peers in the group" count
POS_COUNT_MAX = 127  #: both counts saturate here

# spay_k / spay_q elements: payload entry bits 0-17, distance back to the group's first
# element (bits 18-29, saturating), LAST bit 30, FIRST bit 31.
SPAY_ENTRY_MASK = 0x3FFFF  #: the payload's entry bits (lane, read, token, padding)
SPAY_DIST_SHIFT = 18  #: shift of the distance back to the group's first element
SPAY_DIST_MAX = 4095  #: the distance saturates here


def pos_pack(pos, after, size):
    """The packed value of ``Phase1.pos_k`` / ``pos_q`` from its three parts.

    ``pos`` is the sorted position, ``after`` the peers after the entry in its group and
    ``size`` the peers in the group; both counts are clamped at :data:`POS_COUNT_MAX`.
    Works on Python ints (returns an int) and on NumPy integer arrays (broadcasting).
    """
    if isinstance(pos, (int, np.integer)) and isinstance(after, (int, np.integer)) and isinstance(
        size, (int, np.integer)
    ):
        after = min(int(after), POS_COUNT_MAX)
        size = min(int(size), POS_COUNT_MAX)
        return int(pos) | (after << POS_AFTER_SHIFT) | (size << POS_SIZE_SHIFT)
    pos = np.asarray(pos)
    after = np.minimum(np.asarray(after), POS_COUNT_MAX)
    size = np.minimum(np.asarray(size), POS_COUNT_MAX)
    return pos | (after << POS_AFTER_SHIFT) | (size << POS_SIZE_SHIFT)
