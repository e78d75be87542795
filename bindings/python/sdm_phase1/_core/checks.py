"""Input checks that the library cannot make (it sees pointers, not arrays): ranks, dtypes and
shapes that agree with each other. Shared by the host (NumPy) and device (tensor) paths, so
both raise the same ValueError messages."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .dtypes import CODES, VALUE_NAMES

__all__ = ["LAYOUTS", "check_rank", "check_dtypes", "check_agreement", "lengths_dtype_code",
           "not_contiguous"]

#: Rank and layout text of every input.
LAYOUTS = {
    "k_idx": (3, "[N, C, W]"),
    "q_idx": (3, "[N, C, R]"),
    "k_val": (3, "[N, C, W]"),
    "q_val": (3, "[N, C, R]"),
    "g": (3, "[N, C, 1] or [N, C, W]"),
    "beta": (2, "[N, C]"),
    "stream_lengths": (1, "[num_parallel]"),
}

_VALUES = "float32, or bfloat16 (uint16 bit patterns or a 'bfloat16' dtype)"


def check_rank(name: str, shape: Tuple[int, ...]) -> None:
    """ValueError unless ``shape`` has the rank of input ``name``."""
    ndim, layout = LAYOUTS[name]
    if len(shape) != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array {layout}, got shape {tuple(shape)}")


def not_contiguous(name: str, shape: Tuple[int, ...], strides: Tuple[int, ...], fix: str) -> ValueError:
    """The error for an input that is not C-contiguous (row-major, dense). Every framework
    refuses such inputs rather than copying them, so that no call copies its inputs unseen;
    ``fix`` is the framework's way to make a contiguous copy, e.g. ``k_val.contiguous()``."""
    return ValueError(
        f"{name} is not contiguous (shape {tuple(shape)}, strides {tuple(strides)}): sdm_phase1 "
        f"reads its inputs in place, without copying them; pass {fix}"
    )


def check_dtypes(dtypes: Dict[str, str]) -> Tuple[int, int]:
    """(index dtype code, value dtype code) from the inputs' dtype names ("int32", "int64",
    "float32", "bfloat16", "uint16" for bfloat16 bits, anything else); ValueError otherwise.
    ``dtypes`` holds k_idx, q_idx, k_val, q_val, g and, when given, beta."""
    k, q = dtypes["k_idx"], dtypes["q_idx"]
    if k not in ("int32", "int64"):
        raise ValueError(f"k_idx must be int32 or int64, got dtype {k}")
    if q != k:
        raise ValueError(f"q_idx must have k_idx's dtype {k}, got {q}")
    kv, qv = dtypes["k_val"], dtypes["q_val"]
    if kv not in VALUE_NAMES:
        raise ValueError(f"k_val must be {_VALUES}, got dtype {kv}")
    value = VALUE_NAMES[kv]
    if qv != kv and VALUE_NAMES.get(qv) != value:  # bfloat16 and its uint16 bits mix
        raise ValueError(f"q_val must have k_val's dtype {kv}, got {qv}")
    for name in ("g", "beta"):
        if name in dtypes and dtypes[name] != "float32":
            raise ValueError(f"{name} must be float32, got dtype {dtypes[name]}")
    return CODES[k], value


def _want(name: str, N: int, C: int, W: int, R: int) -> str:
    return {
        "q_idx": f"[N, C, R] = ({N}, {C}, R)",
        "k_val": f"[N, C, W] = ({N}, {C}, {W})",
        "q_val": f"[N, C, R] = ({N}, {C}, {R})",
        "g": f"[N, C, 1] or [N, C, W] = ({N}, {C}, 1) or ({N}, {C}, {W})",
        "beta": f"[N, C] = ({N}, {C})",
    }[name]


def check_agreement(shapes: Dict[str, Tuple[int, ...]]) -> Tuple[int, int, int, int, int]:
    """Every shape must agree with k_idx's [N, C, W] and q_idx's R (the library only sees the
    shapes derived from k_idx, q_idx and g). Returns (N, C, W, R, gate_width)."""
    kshape = tuple(shapes["k_idx"])
    N, C, W = kshape
    qshape = tuple(shapes["q_idx"])
    R = qshape[2]

    def need(name: str, ok: bool, what: str = "") -> None:
        if not ok:
            raise ValueError(
                f"{name} has shape {tuple(shapes[name])}, which does not agree with k_idx's shape "
                f"{kshape}{what}: {name} must be {_want(name, N, C, W, R)}"
            )

    need("q_idx", qshape[:2] == (N, C))
    need("k_val", tuple(shapes["k_val"]) == (N, C, W))
    need("q_val", tuple(shapes["q_val"]) == (N, C, R), f" and q_idx's shape {qshape}")
    need("g", tuple(shapes["g"])[:2] == (N, C))
    beta: Optional[Tuple[int, ...]] = shapes.get("beta")
    if beta is not None:
        need("beta", tuple(beta) == (N, C))
    return N, C, W, R, tuple(shapes["g"])[2]


def lengths_dtype_code(shape: Tuple[int, ...], dtype: str, num_parallel: int) -> int:
    """The sdm_p1_dtype code of a ``stream_lengths`` array of ``shape`` and dtype name
    ``dtype``: int32 or int64, one length per stream; ValueError otherwise. (The lengths'
    values are the library's to check: on a GPU it reads them on the device.)"""
    if tuple(shape) != (num_parallel,):
        raise ValueError(
            f"stream_lengths must be a 1-D array of num_parallel = {num_parallel} lengths, got shape "
            f"{tuple(shape)}"
        )
    if dtype in ("int32", "int64"):
        return CODES[dtype]
    raise ValueError(f"stream_lengths must be int32 or int64, got dtype {dtype}")
