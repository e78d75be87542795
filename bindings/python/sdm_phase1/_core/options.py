"""The options of a call or a plan, checked as the docstrings state them: an int option takes
an int (a Python or NumPy integer, never a bool), a bool option a bool, each within its
documented range; anything else raises TypeError / ValueError naming the option. The library
checks what needs the shapes' limits (C <= 256, ...); these checks keep the C API's "unset"
sentinels (-1) out of reach, so that no Python value means something its docstring does not say.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .constants import DET_RECORDS, DET_SHIPPED

__all__ = ["require_int", "require_bool", "optional_int", "CallOptions", "call_options",
           "plain_call_options", "key_options"]

_NUM_KEYS_MAX = 1 << 32


def require_int(name: str, value, minimum: Optional[int] = None, maximum: Optional[int] = None,
                rule: str = "") -> int:
    """``value`` as an int: TypeError unless it is a Python or NumPy integer (not a bool),
    ValueError outside [minimum, maximum] (``rule`` says the range in words)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if not rule:
            low = "" if minimum is None else f">= {minimum}"
            high = "" if maximum is None else f"<= {maximum}"
            rule = " and ".join(x for x in (low, high) if x)
        raise ValueError(f"{name} must be {rule}, got {value}")
    return value


def optional_int(name: str, value, minimum: Optional[int] = None, rule: str = "") -> Optional[int]:
    """None, or ``value`` checked by :func:`require_int`."""
    return None if value is None else require_int(name, value, minimum, None, rule)


def require_bool(name: str, value) -> bool:
    """``value`` as a bool: TypeError unless it is a bool (Python or NumPy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}")
    return bool(value)


class CallOptions(NamedTuple):
    """The options of one phase1_forward call, checked and resolved (det_fields' default
    applied, rec_tile <= 0 as 0: the library's 128)."""

    num_parallel: int
    stream_offset: int
    num_keys: int
    valid_last: int
    need_read_groups: bool
    rec_tile: int
    det_fields: int


def call_options(C: Optional[int], num_parallel, stream_offset, num_keys, valid_last,
                 need_read_groups, rec_tile, det_fields, beta_given: bool) -> CallOptions:
    """Checks phase1_forward's options (ranges as its docstring gives them; valid_last in 1..C
    when C is known) and resolves det_fields (None: DET_SHIPPED, plus DET_RECORDS with beta)."""
    if valid_last is None:
        raise TypeError("valid_last must be an int, got NoneType None (it may be left out only "
                        "with stream_lengths)")
    vl_rule = "in 1..C" + ("" if C is None else f" = 1..{C}")
    vl = require_int("valid_last", valid_last, 1, C, vl_rule)
    if det_fields is None:
        det = DET_SHIPPED | (DET_RECORDS if beta_given else 0)
    else:
        det = require_int("det_fields", det_fields, 0, None,
                          "None or a combination of the DET_* bits (>= 0)")
    return CallOptions(
        require_int("num_parallel", num_parallel, 1),
        require_int("stream_offset", stream_offset, 0),
        require_int("num_keys", num_keys, 1, _NUM_KEYS_MAX, "in 1..2**32"),
        vl,
        require_bool("need_read_groups", need_read_groups),
        max(0, require_int("rec_tile", rec_tile)),
        det,
    )


def plain_call_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                       rec_tile, det_fields, check) -> bool:
    """True when every option already has its plain type (int, bool, det_fields int or None):
    a cached plan's key then stands for options already checked against their ranges, so a
    call skips :func:`call_options` (the per-call fast path). False sends it the long way."""
    return (type(num_parallel) is int and type(stream_offset) is int and type(num_keys) is int
            and type(valid_last) is int and type(need_read_groups) is bool
            and type(rec_tile) is int and type(check) is bool
            and (det_fields is None or type(det_fields) is int))


def key_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                det_fields, check, beta_given: bool) -> tuple:
    """The options as a plan key holds them: as given when every one has its plain type (their
    ranges are checked when the key's plan is created), else checked and converted (NumPy
    integers to int; TypeError for a wrong type), so that a value of another type (True for 1)
    never finds a plan made for a plain one. (num_parallel, stream_offset, num_keys,
    valid_last, need_read_groups, rec_tile, det_fields, check)."""
    if plain_call_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                          rec_tile, det_fields, check):
        if det_fields is None:  # the default's value, so that calls naming it share the plan
            det_fields = DET_SHIPPED | (DET_RECORDS if beta_given else 0)
        return (num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                det_fields, check)
    o = call_options(None, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                     rec_tile, det_fields, beta_given)
    return tuple(o) + (require_bool("check", check),)
