"""Which outputs a call computes and their shapes and dtypes, from the options alone.

This mirrors the views libsdmp1 reports (``sdm_p1_outputs``, documented per field in
include/sdm/phase1.h); the PyTorch operator's fake implementation needs it, since it runs
without the library. tests/test_gpu_common.py checks it against the library's views.
"""

from __future__ import annotations

from typing import List, Tuple

from ._constants import (
    DET_DC_GIDX,
    DET_FLAGS,
    DET_KREC,
    DET_KSPA,
    DET_POS,
    DET_QREC,
    DET_QREC8,
    DET_SPAY_K,
    DET_SPAY_Q,
    DET_SPAY_RANK,
    DET_TILES,
)

__all__ = ["INT8", "INT32", "INT64", "FLOAT32", "VALUE", "REPEATS", "output_layout", "EMPTY_DTYPES"]

# Element types of the layout: the sdm_p1_dtype codes, and VALUE for "the value dtype".
INT8, INT32, INT64, FLOAT32 = 1, 2, 3, 4
VALUE = -1

#: The field id of ``repeats`` (after the 28 fields of Phase1).
REPEATS = 28

#: The dtype of a not-requested field that the spec returns as an empty array (is_last,
#: is_only and the record fields), by field id.
EMPTY_DTYPES = {6: INT8, 7: INT8, 18: INT32, 19: FLOAT32, 20: INT32, 21: INT32, 22: INT32,
                23: INT32, 24: INT32, 25: INT32, 26: INT32, 27: INT32}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def output_layout(N: int, C: int, W: int, R: int, det_fields: int, need_read_groups: bool,
                  rec_tile: int) -> List[Tuple[int, Tuple[int, ...], int]]:
    """(field id, shape, dtype) of every output the call computes, in field order, ending with
    ``repeats``; dtype is an sdm_p1_dtype code or :data:`VALUE`. ``rec_tile`` <= 0 means 128.
    ``det_fields`` must already be resolved (no None)."""
    L = rec_tile if rec_tile > 0 else 128
    rg = bool(need_read_groups)
    d = det_fields
    row = _ceil(C * (W + R), 16) * 16
    k_tiles = (N, _ceil(C * W, L) + 1)
    fields = [
        (0, (N, C, C), FLOAT32, True),  # a
        (1, (N, C, C), FLOAT32, True),  # qk
        (2, (N, C, W), FLOAT32, True),  # log_k
        (3, (N, C, R), FLOAT32, True),  # log_q
        (4, (N, C, W), FLOAT32, True),  # rex
        (5, (N, C, W), VALUE, True),  # cpe
        (6, (N, C, W), INT8, d & DET_FLAGS),  # is_last
        (7, (N, C, W), INT8, d & DET_FLAGS),  # is_only
        (8, (N, C, W), VALUE, True),  # k_eff
        (9, (N, C, R), VALUE, True),  # q_w
        (10, (N, row), INT32, True),  # payload
        (11, (N, C, W), INT32, d & DET_POS),  # pos_k
        (12, (N, C, R), INT32, d & DET_POS),  # pos_q
        (13, (N, C, R), INT8, rg and d & DET_FLAGS),  # q_last
        (14, (N, C, R), INT8, rg and d & DET_FLAGS),  # q_only
        (15, (N, C * W), INT32, d & DET_SPAY_K),  # spay_k
        (16, (N, C * R), INT32, rg and d & DET_SPAY_Q),  # spay_q
        (17, (N, _ceil(C * (W + R), 32), 2), INT32, d & DET_SPAY_RANK),  # spay_rank
        (18, (N, C * W, 4), INT32, d & DET_KREC),  # krec
        (19, (N, C * W), FLOAT32, d & DET_KSPA),  # kspa
        (20, (N, C * R, 4), INT32, rg and d & DET_QREC),  # qrec
        (21, k_tiles, INT32, d & DET_TILES),  # tiles_k
        (22, (N, _ceil(C * R, L) + 1), INT32, rg and d & DET_TILES),  # tiles_q
        (23, k_tiles, INT32, d & DET_TILES),  # segb_k
        (24, (N, C, W), INT32, d & DET_DC_GIDX),  # dc_kpos
        (25, (N, _ceil(C * W, 32) + 1), INT32, d & DET_DC_GIDX),  # dc_bpre
        # 26, dc_rec: never computed
        (27, (N, C * R, 2), INT32, rg and d & DET_QREC8),  # qrec8
        (REPEATS, (1,), INT64, True),
    ]
    return [(f, shape, dtype) for f, shape, dtype, on in fields if on]
