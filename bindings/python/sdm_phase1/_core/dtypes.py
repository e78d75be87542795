"""The one table of element types: the header's sdm_p1_dtype codes, their names, NumPy dtypes
and what each framework calls them. Every other module takes its dtypes from here.

A code's name is its enum name without the prefix (SDM_P1_DTYPE_FLOAT32: "float32"), which is
also what NumPy, PyTorch, CuPy and JAX call the type (``torch.float32``, ``jnp.bfloat16``);
NumPy and CuPy have no bfloat16, so there it is uint16 bit patterns.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np

from .._c import ffi

__all__ = ["INT8", "INT32", "INT64", "FLOAT32", "BFLOAT16", "NAMES", "CODES", "NUMPY", "ITEMSIZE",
           "INDEX_CODES", "VALUE_NAMES", "framework_dtypes", "DLPACK_NAMES"]

_PREFIX = "SDM_P1_DTYPE_"
#: sdm_p1_dtype code -> name ("int8", "int32", "int64", "float32", "bfloat16"), from the header.
NAMES: Dict[int, str] = {code: enum_name[len(_PREFIX):].lower()
                         for code, enum_name in sorted(ffi.typeof("sdm_p1_dtype").elements.items())}
#: name -> sdm_p1_dtype code; "uint16" (bfloat16 bit patterns) is bfloat16.
CODES: Dict[str, int] = {name: code for code, name in NAMES.items()}
CODES["uint16"] = CODES["bfloat16"]

INT8, INT32, INT64, FLOAT32, BFLOAT16 = (CODES[n] for n in ("int8", "int32", "int64", "float32", "bfloat16"))

#: sdm_p1_dtype code -> NumPy dtype (bfloat16 as its uint16 bits); CuPy takes the same.
NUMPY: Dict[int, np.dtype] = {code: np.dtype("uint16" if code == BFLOAT16 else name)
                              for code, name in NAMES.items()}
#: sdm_p1_dtype code -> bytes per element.
ITEMSIZE: Dict[int, int] = {code: dt.itemsize for code, dt in NUMPY.items()}
#: NumPy dtype of slot ids and stream lengths -> sdm_p1_dtype code.
INDEX_CODES: Dict[np.dtype, int] = {NUMPY[INT32]: INT32, NUMPY[INT64]: INT64}
#: Dtype names taken as value dtypes (k_val, q_val), with their sdm_p1_dtype codes.
VALUE_NAMES: Dict[str, int] = {"float32": FLOAT32, "bfloat16": BFLOAT16, "uint16": BFLOAT16}


def framework_dtypes(module: Any) -> Dict[int, Any]:
    """sdm_p1_dtype code -> the dtype of a framework that has every one by name (``torch``,
    ``jax.numpy``): ``module.int8``, ..., ``module.bfloat16``."""
    return {code: getattr(module, name) for code, name in NAMES.items()}


#: DLPack (type code, bits) -> dtype name, for reading capsules: kDLInt 0, kDLUInt 1, kDLFloat
#: 2, kDLBfloat 4 (more than the library's types, so that a wrong dtype is named).
DLPACK_NAMES: Dict[Tuple[int, int], str] = {
    (0, 8): "int8", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (1, 16): "uint16",
    (1, 32): "uint32", (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
}
