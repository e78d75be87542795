"""The result type `Phase1` and how the library's field views map onto it."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["Phase1", "FIELDS", "RECORD_FIELDS", "not_requested"]


class Phase1(NamedTuple):
    """Phase-1 outputs for N chunks of C tokens with W write and R read slots per token.

    The fields and their order are those of the spec's ``Phase1`` (sparse-delta-memory,
    ``phase1_forward``); include/sdm/phase1.h (``sdm_p1_field``) documents each one. ``cpe``,
    ``k_eff`` and ``q_w`` have the value dtype (float32, or uint16 bfloat16 bits); flags are
    int8. Fields not requested (``det_fields``, ``need_read_groups``) are None, except
    ``is_last`` / ``is_only`` (then int8 arrays of shape (0, C, W)) and the record fields
    ``krec`` ... ``qrec8`` (then empty int32 arrays; ``kspa`` float32). ``dc_rec`` is never
    computed.
    """

    a: np.ndarray  #: [N, C, C] float32, strictly lower triangular
    qk: np.ndarray  #: [N, C, C] float32, lower triangular
    log_k: np.ndarray  #: [N, C, W] float32
    log_q: np.ndarray  #: [N, C, R] float32
    rex: np.ndarray  #: [N, C, W] float32
    cpe: np.ndarray  #: [N, C, W] value dtype
    is_last: np.ndarray  #: [N, C, W] int8 (DET_FLAGS)
    is_only: np.ndarray  #: [N, C, W] int8 (DET_FLAGS)
    k_eff: np.ndarray  #: [N, C, W] value dtype
    q_w: np.ndarray  #: [N, C, R] value dtype
    payload: np.ndarray  #: [N, row] int32 sorted payloads
    pos_k: Optional[np.ndarray]  #: [N, C, W] int32 (DET_POS)
    pos_q: Optional[np.ndarray]  #: [N, C, R] int32 (DET_POS)
    q_last: Optional[np.ndarray]  #: [N, C, R] int8 (DET_FLAGS, read groups)
    q_only: Optional[np.ndarray]  #: [N, C, R] int8 (DET_FLAGS, read groups)
    spay_k: Optional[np.ndarray] = None  #: [N, C * W] int32 (DET_SPAY_K)
    spay_q: Optional[np.ndarray] = None  #: [N, C * R] int32 (DET_SPAY_Q, read groups)
    spay_rank: Optional[np.ndarray] = None  #: [N, ceil(C * (W + R) / 32), 2] int32
    krec: Optional[np.ndarray] = None  #: [N, C * W, 4] int32 (DET_KREC)
    kspa: Optional[np.ndarray] = None  #: [N, C * W] float32 (DET_KSPA)
    qrec: Optional[np.ndarray] = None  #: [N, C * R, 4] int32 (DET_QREC)
    tiles_k: Optional[np.ndarray] = None  #: [N, ceil(C * W / L) + 1] int32 (DET_TILES)
    tiles_q: Optional[np.ndarray] = None  #: [N, ceil(C * R / L) + 1] int32 (DET_TILES)
    segb_k: Optional[np.ndarray] = None  #: [N, ceil(C * W / L) + 1] int32 (DET_TILES)
    dc_kpos: Optional[np.ndarray] = None  #: [N, C, W] int32 (DET_DC_GIDX)
    dc_bpre: Optional[np.ndarray] = None  #: [N, ceil(C * W / 32) + 1] int32 (DET_DC_GIDX)
    dc_rec: Optional[np.ndarray] = None  #: never computed (empty)
    qrec8: Optional[np.ndarray] = None  #: [N, C * R, 2] int32 (DET_QREC8)


#: The Phase1 field names; index i is the library's field id i (SDM_P1_FIELD_A = 0, ...).
FIELDS = Phase1._fields

#: Fields that are empty arrays, not None, when not requested (the spec's record fields).
RECORD_FIELDS = frozenset(
    ("krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre", "dc_rec", "qrec8")
)


_EMPTIES: dict = {}


def not_requested(name: str, C: int, W: int):
    """The value of a field the call did not compute, as the spec returns it (zero-element
    arrays hold no data, so one per shape and dtype serves every call; they are read-only)."""
    if name not in RECORD_FIELDS and name not in ("is_last", "is_only"):
        return None
    key = (name, C, W)
    empty = _EMPTIES.get(key)
    if empty is None:
        if name in ("is_last", "is_only"):
            empty = np.empty((0, C, W), np.int8)
        else:
            empty = np.empty((0,), np.float32 if name == "kspa" else np.int32)
        empty.flags.writeable = False
        empty = _EMPTIES.setdefault(key, empty)
    return empty
