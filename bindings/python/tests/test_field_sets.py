"""The package's field sets against their one definition, canon/field_sets.h (whose sets the
library uses): the training set (DET_RECORDS, what a call adds to DET_SHIPPED when beta is
given) against the file's text, and the differentiable set (DIFFERENTIABLE, VALUE_TYPED)
against what sdm_p1_execute_backward accepts: an upstream gradient of every field, alone, is
refused as "not differentiable" exactly where the set leaves it out, and in a bfloat16 plan a
gradient 2-byte aligned is refused as misaligned exactly where it is float32.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

p1 = pytest.importorskip("sdm_phase1")

from sdm_phase1._c import ffi, lib  # noqa: E402
from sdm_phase1._core.backward import DIFFERENTIABLE, VALUE_TYPED  # noqa: E402
from sdm_phase1._core.constants import DET_RECORDS  # noqa: E402
from sdm_phase1._core.types import FIELDS  # noqa: E402

FIELD_SETS = Path(__file__).resolve().parents[3] / "canon" / "field_sets.h"
N, C, W, R, KEYS = 2, 4, 2, 2, 8


def test_training_set_is_field_sets_h():
    if not FIELD_SETS.is_file():
        pytest.skip(f"{FIELD_SETS} is not here (an installed package without its source tree)")
    m = re.search(r"kTrainingDetFields\s*=\s*([^;]+);", FIELD_SETS.read_text())
    assert m, "canon/field_sets.h: no kTrainingDetFields"
    names = [n.strip() for n in m.group(1).split("|")]
    assert DET_RECORDS == sum(getattr(lib, n) for n in names), names


def _backward(grad_field, offset):
    """sdm_p1_execute_backward of a bfloat16 CPU plan with the upstream gradient of
    `grad_field` alone (zeros, at `offset` bytes into its buffer): (status, message)."""
    desc = ffi.new("sdm_p1_desc*")
    assert lib.sdm_p1_desc_init(desc, ffi.sizeof("sdm_p1_desc")) == 0
    desc.N, desc.C, desc.W, desc.R, desc.num_keys = N, C, W, R, KEYS
    desc.value_dtype, desc.backend = lib.SDM_P1_DTYPE_BFLOAT16, lib.SDM_P1_BACKEND_CPU
    desc.num_threads, desc.backward = 1, 1
    plan = ffi.new("sdm_p1_plan**")
    assert lib.sdm_p1_plan_create(plan, desc) == 0, ffi.string(lib.sdm_p1_last_error())
    try:
        k_idx = np.tile(np.arange(W, dtype=np.int32), (N, C, 1))
        q_idx = np.tile(np.arange(R, dtype=np.int32), (N, C, 1))
        k_val = np.full((N, C, W), 0x3F80, np.uint16)  # bfloat16 1.0
        q_val = np.full((N, C, R), 0x3F80, np.uint16)
        g = np.full((N, C, 1), -0.5, np.float32)
        beta = np.full((N, C), 0.5, np.float32)
        inputs = ffi.new("sdm_p1_inputs*")
        assert lib.sdm_p1_inputs_init(inputs, ffi.sizeof("sdm_p1_inputs")) == 0
        for name, array in (("k_idx", k_idx), ("q_idx", q_idx), ("k_val", k_val), ("q_val", q_val)):
            setattr(inputs, name, ffi.cast("void*", array.ctypes.data))
        inputs.g, inputs.beta = ffi.cast("float*", g.ctypes.data), ffi.cast("float*", beta.ctypes.data)
        # Room for any field's gradient (a and qk are the largest: N * C * C floats), zeros.
        upstream = np.zeros(N * C * max(C, 4 * (W + R)) + 8, np.float32)
        grads = ffi.new("void*[]", lib.SDM_P1_FIELD_COUNT)
        grads[grad_field] = ffi.cast("void*", upstream.ctypes.data + offset)
        dk = np.zeros((N, C, W), np.uint16)
        out = ffi.new("sdm_p1_input_grads*")
        assert lib.sdm_p1_input_grads_init(out, ffi.sizeof("sdm_p1_input_grads")) == 0
        out.k_val = ffi.cast("void*", dk.ctypes.data)
        status = lib.sdm_p1_execute_backward(plan[0], inputs, ffi.NULL, grads, lib.SDM_P1_FIELD_COUNT, out,
                                             ffi.NULL)
        return status, ffi.string(lib.sdm_p1_last_error()).decode()
    finally:
        lib.sdm_p1_plan_destroy(plan[0])


@pytest.mark.parametrize("field", range(lib.SDM_P1_FIELD_COUNT))
def test_differentiable_set_is_the_library_s(field):
    name = FIELDS[field] if field < len(FIELDS) else "repeats"
    status, message = _backward(field, 0)
    if name in DIFFERENTIABLE:
        assert DIFFERENTIABLE[name] == field
        assert status == lib.SDM_P1_SUCCESS, message
        # The gradient's element size: 2 bytes where it is of the value dtype (bfloat16 here).
        status, message = _backward(field, 2)
        if name in VALUE_TYPED:
            assert status == lib.SDM_P1_SUCCESS, message
        else:
            assert status == lib.SDM_P1_ERROR_INVALID_ARGUMENT and "not aligned" in message, message
    else:
        assert status == lib.SDM_P1_ERROR_INVALID_ARGUMENT, (name, message)
        assert "the output is not differentiable" in message, message
