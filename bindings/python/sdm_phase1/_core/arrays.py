"""Input arrays: checks the library cannot make (array-ness, ndim, dtype, contiguity) and the
host (NumPy) arrays as aligned buffers with their sdm_p1_dtype codes. A non-contiguous array
is refused, as on every framework (inputs are read in place, never copied unseen).

Host memory only (the CPU backend); GPU tensors take the device path (plan_cache.py and the
framework modules of _frameworks/) before reaching here, so a GPU array met here is mixed
with host arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .._c import ffi
from .checks import lengths_dtype_code, not_contiguous
from .dtypes import BFLOAT16, FLOAT32, INDEX_CODES

__all__ = ["HostInputs", "prepare_inputs", "prepare_lengths", "index_dtype_code",
           "value_dtype_code", "check_host"]


def _is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def index_dtype_code(dtype) -> int:
    """The sdm_p1_dtype of an index dtype (int32 or int64); ValueError otherwise."""
    dt = np.dtype(dtype)
    if dt not in INDEX_CODES:
        raise ValueError(f"slot ids must be int32 or int64, got dtype {dt}")
    return INDEX_CODES[dt]


def value_dtype_code(dtype) -> int:
    """The sdm_p1_dtype of a value dtype: float32, or bfloat16 given as uint16 bits, as a
    dtype named 'bfloat16' (ml_dtypes, JAX) or as the string 'bfloat16'; ValueError otherwise."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return BFLOAT16
    dt = np.dtype(dtype)
    if dt == np.float32:
        return FLOAT32
    if dt == np.uint16 or _is_bfloat16(dt):
        return BFLOAT16
    raise ValueError(
        f"values must be float32, or bfloat16 (uint16 bit patterns or a 'bfloat16' dtype), got dtype {dt}"
    )


def _is_torch_tensor(x) -> bool:
    # By the type's module, so that checking never imports torch.
    return type(x).__module__.partition(".")[0] == "torch"


def _torch_among_host(name: str) -> TypeError:
    """The error for a torch tensor among host arrays (NumPy's path): a call's inputs come from
    one framework, which k_idx's decides."""
    if name == "k_idx":
        return TypeError(
            "k_idx is a torch.Tensor where host (NumPy) arrays are expected: sdm_phase1.Plan and "
            "phase1_backward take NumPy arrays (phase1_forward and sdm_layer take torch tensors, "
            "differentiable by autograd)"
        )
    return TypeError(
        f"{name} is a torch.Tensor but k_idx is not: every input of a call must come from one "
        "framework, and k_idx's decides (a host array here: the NumPy path); pass torch tensors "
        f"for all (torch.from_numpy(k_idx), ...) or NumPy arrays for all ({name}.detach().numpy())"
    )


def check_host(name: str, x) -> None:
    """Refuses what the host (NumPy) path must not convert: a torch tensor (TypeError: a
    call's inputs come from one framework) or a GPU array (ValueError: one device)."""
    if _is_torch_tensor(x):
        raise _torch_among_host(name)
    if not isinstance(x, np.ndarray) and (
        hasattr(x, "__cuda_array_interface__")
        or (hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] != 1)
    ):
        raise ValueError(
            f"{name} is a GPU array where host (NumPy) arrays are expected: every input of a call "
            "must be on one device, and sdm_phase1.Plan takes host arrays only (phase1_forward "
            "takes GPU tensors)"
        )


def _host_array(name: str, x, ndim: int, layout: str, dtypes: Optional[str] = None) -> np.ndarray:
    """``x`` as a C-contiguous, aligned NumPy array of rank ``ndim``. ``dtypes``: the dtypes
    the input takes, for the error that refuses a Python list or tuple (which has none: NumPy
    would pick int64 or float64, and a later check would blame another input); None: lists
    are converted (stream_lengths)."""
    if x is None:
        raise ValueError(f"{name}: an array is required, got None")
    check_host(name, x)
    if dtypes is not None and isinstance(x, (list, tuple)):
        raise TypeError(
            f"{name} is a Python {type(x).__name__}, not an array: pass a NumPy array of "
            f"{dtypes} (np.asarray({name}, np.{dtypes.split()[0]}))"
        )
    try:
        arr = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise ValueError(f"{name}: not convertible to an array ({e})") from e
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array {layout}, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise not_contiguous(name, arr.shape, arr.strides, f"np.ascontiguousarray({name})")
    # A misaligned array (a view into a byte buffer at an odd offset) is copied: the library
    # reads elements of their own alignment, and np.ascontiguousarray would not fix it.
    return np.require(arr, requirements=("ALIGNED",))


@dataclass
class HostInputs:
    """Host input arrays ready for sdm_p1_execute (C-contiguous, aligned, checked dtypes).

    ``value_view`` is the dtype the value-dtype outputs (cpe, k_eff, q_w) are shown with:
    float32, uint16, or the caller's 'bfloat16' dtype."""

    k_idx: np.ndarray
    q_idx: np.ndarray
    k_val: np.ndarray
    q_val: np.ndarray
    g: np.ndarray
    beta: Optional[np.ndarray]
    index_dtype: int
    value_dtype: int
    value_view: np.dtype
    stream_lengths: Optional[np.ndarray] = None  # [num_parallel] int32 / int64, or None

    def fill(self, inputs) -> list:
        """Fills an ``sdm_p1_inputs*``; returns the cffi buffers to keep alive during the call."""
        keep = []

        def ptr(a):
            buf = ffi.from_buffer(a)
            keep.append(buf)
            return buf

        inputs.struct_size = ffi.sizeof("sdm_p1_inputs")
        inputs.k_idx = ptr(self.k_idx)
        inputs.q_idx = ptr(self.q_idx)
        inputs.k_val = ptr(self.k_val)
        inputs.q_val = ptr(self.q_val)
        inputs.g = ffi.cast("const float*", ptr(self.g))
        inputs.beta = ffi.cast("const float*", ptr(self.beta)) if self.beta is not None else ffi.NULL
        if self.stream_lengths is not None:
            inputs.stream_lengths = ptr(self.stream_lengths)
            inputs.stream_lengths_dtype = INDEX_CODES[self.stream_lengths.dtype]
        return keep


def prepare_inputs(k_idx, q_idx, k_val, q_val, g, beta=None) -> HostInputs:
    """Checks array-ness, ndim, contiguity and dtypes; returns the inputs as host arrays.

    Shapes are not compared here (see Plan and phase1_forward)."""
    ids, values = "int32 or int64 slot ids", "float32 or bfloat16 values"
    k_idx = _host_array("k_idx", k_idx, 3, "[N, C, W]", ids)
    q_idx = _host_array("q_idx", q_idx, 3, "[N, C, R]", ids)
    k_val = _host_array("k_val", k_val, 3, "[N, C, W]", values)
    q_val = _host_array("q_val", q_val, 3, "[N, C, R]", values)
    g = _host_array("g", g, 3, "[N, C, 1] or [N, C, W]", "float32 log-gates")
    if beta is not None:
        beta = _host_array("beta", beta, 2, "[N, C]", "float32 write strengths")

    if k_idx.dtype not in INDEX_CODES:
        raise ValueError(f"k_idx must be int32 or int64, got dtype {k_idx.dtype}")
    if q_idx.dtype != k_idx.dtype:
        raise ValueError(f"q_idx must have k_idx's dtype {k_idx.dtype}, got {q_idx.dtype}")
    try:
        value_code = value_dtype_code(k_val.dtype)
    except ValueError:
        raise ValueError(
            "k_val must be float32, or bfloat16 (uint16 bit patterns or a 'bfloat16' dtype), "
            f"got dtype {k_val.dtype}"
        ) from None
    value_view = k_val.dtype
    if q_val.dtype != k_val.dtype and not (
        value_code == BFLOAT16
        and (q_val.dtype == np.uint16 or _is_bfloat16(q_val.dtype))
    ):
        raise ValueError(f"q_val must have k_val's dtype {k_val.dtype}, got {q_val.dtype}")
    if value_code == BFLOAT16:
        k_val = k_val.view(np.uint16)
        q_val = q_val.view(np.uint16)
    if g.dtype != np.float32:
        raise ValueError(f"g must be float32, got dtype {g.dtype}")
    if beta is not None and beta.dtype != np.float32:
        raise ValueError(f"beta must be float32, got dtype {beta.dtype}")
    return HostInputs(
        k_idx, q_idx, k_val, q_val, g, beta, INDEX_CODES[k_idx.dtype], value_code, value_view
    )


def prepare_lengths(stream_lengths, num_parallel: int) -> Optional[np.ndarray]:
    """``stream_lengths`` (None, or num_parallel int32 / int64 lengths: an array or a list) as
    a C-contiguous host array; ValueError for another rank, size or dtype, or a non-contiguous
    array. Their values are checked by the library."""
    if stream_lengths is None:
        return None
    arr = _host_array("stream_lengths", stream_lengths, 1, "[num_parallel]")
    lengths_dtype_code(arr.shape, arr.dtype.name, num_parallel)
    return arr
