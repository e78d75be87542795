"""bfloat16 as uint16 bit patterns (the upper 16 bits of a float32), for value inputs/outputs."""

from __future__ import annotations

import numpy as np

__all__ = ["bf16_from_float32", "bf16_to_float32"]


def bf16_from_float32(x) -> np.ndarray:
    """Rounds float32 values to bfloat16, to nearest even, as uint16 bit patterns.

    NaNs stay NaN (quiet, sign kept); infinities stay infinite; values beyond the bfloat16
    range round to infinity. Returns a uint16 array of ``x``'s shape.
    """
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> 16) & 1
    rounded = (bits.astype(np.uint64) + 0x7FFF + lsb) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    out = np.where(nan, (bits >> 16) | 0x0040, rounded)
    return out.astype(np.uint16)


def bf16_to_float32(bits) -> np.ndarray:
    """Widens bfloat16 bit patterns (uint16, or a 'bfloat16' dtype) to float32, exactly."""
    arr = np.asarray(bits)
    if arr.dtype.name == "bfloat16":
        arr = arr.view(np.uint16)
    if arr.dtype != np.uint16:
        raise ValueError(f"bf16_to_float32: needs uint16 bit patterns, got dtype {arr.dtype}")
    return (arr.astype(np.uint32) << 16).view(np.float32)
