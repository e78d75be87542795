"""Which outputs a call computes and their shapes and dtypes, from the options alone.

The library describes them (``sdm_p1_describe_outputs``, documented per field in
include/sdm/phase1.h) without a plan, so the PyTorch operator's fake implementation, which
runs before any data exist, gets the library's own shapes. tests/test_package.py checks them
against a plan's views.
"""

from __future__ import annotations

import functools
from typing import List, Tuple

from .._c import ffi, lib
from .dtypes import BFLOAT16, FLOAT32, INT8, INT32
from .errors import check

__all__ = ["VALUE", "REPEATS", "output_layout", "EMPTY_DTYPES"]

#: The element type of the value-dtype fields (cpe, k_eff, q_w) in a layout, whose other
#: fields have their sdm_p1_dtype code.
VALUE = -1

#: The field id of ``repeats`` (after the 28 fields of Phase1).
REPEATS = lib.SDM_P1_FIELD_REPEATS

#: The dtype of a not-requested field that the spec returns as an empty array (is_last,
#: is_only and the record fields), by field id.
EMPTY_DTYPES = {6: INT8, 7: INT8, 18: INT32, 19: FLOAT32, 20: INT32, 21: INT32, 22: INT32,
                23: INT32, 24: INT32, 25: INT32, 26: INT32, 27: INT32}


def output_layout(N, C: int, W: int, R: int, det_fields: int, need_read_groups: bool,
                  rec_tile: int) -> List[Tuple[int, Tuple, int]]:
    """(field id, shape, dtype) of every output the call computes, in field order, ending with
    ``repeats``; dtype is an sdm_p1_dtype code or :data:`VALUE`. ``rec_tile`` <= 0 means 128.
    ``det_fields`` must already be resolved (no None). The library says
    (sdm_p1_describe_outputs), without a plan or any memory; a bad option raises its
    :class:`Phase1Error`. Every field but ``repeats`` is N chunks of a chunk's shape, so N
    may be symbolic (a torch SymInt under dynamic shapes); C, W and R are read as ints."""
    return [(f, shape if f == REPEATS else (N,) + shape, dtype)
            for f, shape, dtype in _chunk_layout(int(C), int(W), int(R), int(det_fields),
                                                 bool(need_read_groups), int(rec_tile))]


@functools.lru_cache(maxsize=256)
def _chunk_layout(C: int, W: int, R: int, det_fields: int, need_read_groups: bool,
                  rec_tile: int) -> List[Tuple[int, Tuple[int, ...], int]]:
    """output_layout's fields with each shape's leading N dropped (``repeats`` whole), from
    the library's views of a one-chunk plan."""
    desc = ffi.new("sdm_p1_desc*")
    check("sdm_p1_desc_init", lib.sdm_p1_desc_init(desc, ffi.sizeof("sdm_p1_desc")))
    desc.N, desc.C, desc.W, desc.R = 1, C, W, R
    desc.num_keys = 1  # any valid count: shapes do not depend on it
    desc.det_fields = det_fields
    desc.need_read_groups = 1 if need_read_groups else 0
    desc.rec_tile = max(rec_tile, 0)
    # bfloat16 values: the value-typed fields are then the only bfloat16 ones (VALUE).
    desc.value_dtype = BFLOAT16
    desc.backend = lib.SDM_P1_BACKEND_CPU  # shapes are the same on every backend
    views = ffi.new("sdm_p1_tensor[]", lib.SDM_P1_FIELD_COUNT)
    check("sdm_p1_describe_outputs", lib.sdm_p1_describe_outputs(desc, views, lib.SDM_P1_FIELD_COUNT))
    layout = []
    for f in range(lib.SDM_P1_FIELD_COUNT):
        v = views[f]
        if not v.requested:
            continue
        dtype = VALUE if v.dtype == BFLOAT16 else int(v.dtype)
        shape = tuple(int(v.shape[d]) for d in range(v.ndim))
        layout.append((f, shape if f == REPEATS else shape[1:], dtype))
    return layout
