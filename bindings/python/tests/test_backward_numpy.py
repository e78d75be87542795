"""The package's backward on NumPy arrays (Plan.execute_backward, phase1_backward): the bits
of sdm_p1_execute_backward called directly (test_backward_cpu.backward_c, which is itself held
to the float64 reference VJP), and the package's own checks and errors."""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref
import sdm_phase1 as p1
from test_backward_cpu import (
    backward_c,
    check_against_reference,
    forward_payload,
    get_case,
    is_bf16,
    upstream,
)

# Families: uniform ids, hot slots with repeats and padding, per-write gates, one slot,
# streams with per-stream lengths, bfloat16 values.
CASE_IDS = ["uniform-g1", "hot-repeats-gw-pad", "one-slot-g1-pad", "stream-lengths-g1",
            "streams-4-lengths-gw", "bf16-g1-beta"]


def _kw(case):
    kw = dict(case["kw"])
    if kw["stream_lengths"] is not None:
        kw["stream_lengths"] = np.asarray(kw["stream_lengths"], np.int64)
    return kw


def _plan(case, **extra):
    N, C, W = case["k_idx"].shape
    kw = case["kw"]
    return p1.Plan(N=N, C=C, W=W, R=case["q_idx"].shape[2], num_parallel=kw["num_parallel"],
                   stream_offset=kw["stream_offset"], num_keys=kw["num_keys"],
                   valid_last=kw["valid_last"], index_dtype=np.int64,
                   value_dtype=np.uint16 if is_bf16(case) else np.float32,
                   gate_width=case["g"].shape[2], det_fields=0, **extra)


def _inputs(case):
    return (case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"])


def _same_bits(got, want):
    for name, arr in want.items():
        assert got[name] is not None and got[name].dtype == arr.dtype, name
        assert got[name].tobytes() == arr.tobytes(), name


@pytest.mark.parametrize("cid", CASE_IDS)
def test_plan_and_call_give_the_c_bits(cid):
    """Plan.execute_backward (with and without the payload) and phase1_backward give the bits
    of the C call; the reference bound holds for them as for it."""
    case = get_case(cid)
    grads = upstream(case, np.random.default_rng(3))
    want = backward_c(case, grads)
    kw = _kw(case)
    with _plan(case, backward=True) as plan:
        got = plan.execute_backward(*_inputs(case), grads, beta=case["beta"],
                                    stream_lengths=kw["stream_lengths"])
        again = plan.execute_backward(*_inputs(case), grads, beta=case["beta"],
                                      stream_lengths=kw["stream_lengths"], payload=forward_payload(case))
    if case["beta"] is None:
        assert got["beta"] is None
        want.pop("beta")
        got.pop("beta")
        again.pop("beta")
    _same_bits(got, want)
    _same_bits(again, want)
    call = p1.phase1_backward(*_inputs(case), grads, beta=case["beta"], **kw)
    if case["beta"] is None:
        call.pop("beta")
    _same_bits(call, want)
    check_against_reference("numpy", case, grads, got, bf16_grads=is_bf16(case))


def test_float32_gradients_of_bfloat16_values():
    """grad_dtype=float32 on bfloat16 values: float32 gradients, which rounded to bfloat16 are
    the default gradients bit for bit."""
    case = get_case("bf16-g1-beta")
    grads = upstream(case, np.random.default_rng(4))
    kw = _kw(case)
    default = p1.phase1_backward(*_inputs(case), grads, beta=case["beta"], **kw)
    wide = p1.phase1_backward(*_inputs(case), grads, beta=case["beta"], grad_dtype=np.float32, **kw)
    for name in ("k_val", "q_val"):
        assert default[name].dtype == np.uint16 and wide[name].dtype == np.float32
        assert np.array_equal(ref.f64_to_bf16_bits(wide[name].astype(np.float64)), default[name]), name
    assert wide["g"].tobytes() == default["g"].tobytes()


def test_zero_upstream_gives_zero():
    case = get_case("hot-repeats-gw-pad")
    got = p1.phase1_backward(*_inputs(case), {}, beta=case["beta"], **_kw(case))
    for name, arr in got.items():
        assert np.all(arr == 0) and not np.any(np.signbit(arr)), name


def test_errors():
    case = get_case("uniform-g1")
    N, C, W = case["k_idx"].shape
    R = case["q_idx"].shape[2]
    grads = upstream(case, np.random.default_rng(5))
    with _plan(case) as plan:  # created without backward
        with pytest.raises(p1.InvalidArgumentError, match="backward"):
            plan.execute_backward(*_inputs(case), grads, beta=case["beta"])
    with _plan(case, backward=True) as plan:
        bad_shape = dict(grads, a=np.zeros((N, C, C + 1), np.float32))
        with pytest.raises(ValueError, match=r"grads\['a'\] has shape"):
            plan.execute_backward(*_inputs(case), bad_shape, beta=case["beta"])
        with pytest.raises(ValueError, match=r"grads\['payload'\]: not a differentiable output"):
            plan.execute_backward(*_inputs(case), {"payload": np.zeros((N, 48), np.int32)})
        wrong_dtype = {"kspa": np.zeros((N, C * W), np.float64)}
        with pytest.raises(ValueError, match=r"grads\['kspa'\] has dtype float64"):
            plan.execute_backward(*_inputs(case), wrong_dtype, beta=case["beta"])
        with pytest.raises(p1.InvalidArgumentError, match="beta"):
            plan.execute_backward(*_inputs(case), {"kspa": np.zeros((N, C * W), np.float32)})
        with pytest.raises(TypeError, match="grads must be a dict"):
            plan.execute_backward(*_inputs(case), [grads["a"]], beta=case["beta"])
        payload = forward_payload(case)
        payload[0, [0, 1]] = payload[0, [1, 1]]  # one entry named twice: not the chunk's sort
        with pytest.raises(p1.InvalidInputError, match="payload"):
            plan.execute_backward(*_inputs(case), grads, beta=case["beta"], payload=payload)
        with pytest.raises(ValueError, match="payload must be"):
            plan.execute_backward(*_inputs(case), grads, beta=case["beta"], payload=payload[:, :8])
        # A payload of other ids (issue 44): the forward's payload with each stream's slot
        # order reversed in the ids is out of their order at the first slot change.
        kw = case["kw"]
        nk, base = kw["num_keys"], (np.arange(N) % kw["num_parallel"] * kw["stream_offset"])[:, None, None]

        def reverse(ids):
            return np.where((ids >= base) & (ids < base + nk), 2 * base + nk - 1 - ids, ids)

        other = (reverse(case["k_idx"]), reverse(case["q_idx"])) + _inputs(case)[2:]
        refused = r"is out of the order of these ids .* not the sort of chunk 0"
        with pytest.raises(p1.InvalidInputError, match=refused):
            plan.execute_backward(*other, grads, beta=case["beta"], payload=forward_payload(case))
        noncontiguous = {"q_w": np.zeros((N, C, 2 * R), np.float32)[:, :, ::2]}
        with pytest.raises(ValueError, match="not contiguous"):
            plan.execute_backward(*_inputs(case), noncontiguous)
