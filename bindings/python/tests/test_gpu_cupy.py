"""CuPy arrays on the CUDA backend: outputs bit for bit the CPU backend's, CuPy arrays from CuPy's
pool, on CuPy's current stream; bad arguments and device-side bad data; phase1_backward on CuPy
arrays (the CUDA backward): the NumPy call's bits, a bad payload. Skips without CuPy, a GPU or a
CUDA-enabled library."""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import assert_same, cpu_result, cuda_skip_reason, split
from test_backward_cpu import get_case, upstream
from test_reference import make_case

cupy = pytest.importorskip("cupy")


def _reason():
    reason = cuda_skip_reason()
    if reason:
        return reason
    try:
        return None if cupy.cuda.runtime.getDeviceCount() > 0 else "CuPy sees no GPU"
    except Exception as e:  # no driver
        return f"CuPy sees no GPU ({e})"


_REASON = _reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")


def to_cupy(inputs):
    return {n: (None if a is None else cupy.asarray(a)) for n, a in inputs.items()}


def call(x, opts, repeats=None, **kw):
    return p1.phase1_forward(*(x[n] for n in NAMES), repeats, beta=x["beta"], **opts, **kw)


@pytest.mark.parametrize("kw", [dict(vals="f32", idx=np.int64), dict(vals="bf16", gate="write")])
@pytest.mark.parametrize("det_fields", [None, 3071])
def test_matches_cpu(kw, det_fields):
    case = make_case(13, N=4, C=32, W=5, R=4, P=2, num_keys=40, valid_last=17, **kw)
    inputs, opts = split(case)
    got = call(to_cupy(inputs), opts, det_fields=det_fields)
    assert all(x is None or isinstance(x, cupy.ndarray) for x in got)
    assert_same(cpu_result(inputs, opts, det_fields=det_fields), got)


def test_side_stream_and_repeats():
    case = make_case(14, N=2, C=8, W=3, R=2, P=1, num_keys=16, kmode="random")
    inputs, opts = split(case)
    want_rep = np.zeros(1, np.int64)
    want = cpu_result(inputs, opts, repeats=want_rep)
    x = to_cupy(inputs)
    rep = cupy.zeros(1, cupy.int64)
    cupy.cuda.Stream.null.synchronize()  # the copies above ran on the null stream
    with cupy.cuda.Stream(non_blocking=True) as stream:
        got = call(x, opts, rep)
        stream.synchronize()
    assert_same(want, got)
    assert int(rep.get()[0]) == int(want_rep[0])


def test_outputs_come_from_cupys_pool():
    case = make_case(15, N=4, C=64, W=8, R=8, P=2, num_keys=256)
    inputs, opts = split(case)
    x = to_cupy(inputs)
    call(x, opts)  # the plan exists from here on
    pool = cupy.get_default_memory_pool()
    before = pool.used_bytes()
    out = call(x, opts)
    outputs = sum(a.nbytes for a in out if a is not None)
    assert outputs <= pool.used_bytes() - before < outputs + 512 * 32


def test_bad_arguments():
    case = make_case(16, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    x = to_cupy(inputs)
    with pytest.raises(ValueError, match=r"k_val is not contiguous .* cupy\.ascontiguousarray\(k_val\)"):
        call(dict(x, k_val=cupy.asfortranarray(x["k_val"])), opts)
    with pytest.raises(TypeError, match="q_idx must be a cupy.ndarray"):
        call(dict(x, q_idx=inputs["q_idx"]), opts)
    with pytest.raises(ValueError, match="k_val must be float32"):
        call(dict(x, k_val=x["k_val"].astype(cupy.float16)), opts)
    with pytest.raises(ValueError, match="repeats"):
        call(x, opts, np.zeros(1, np.int64))


def test_device_side_bad_data():
    case = make_case(17, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    case["k_idx"][1, 3, 2] = 99
    inputs, opts = split(case)
    with pytest.raises(p1.Phase1Error) as cpu:
        cpu_result(inputs, opts)
    with pytest.raises(p1.Phase1Error) as gpu:
        call(to_cupy(inputs), opts, check=True)
    assert gpu.value.status == "SDM_P1_ERROR_INVALID_INPUT" and gpu.value.message == cpu.value.message
    assert type(gpu.value) is type(cpu.value) is p1.InvalidInputError


# ---- phase1_backward on CuPy arrays: the CUDA backward ---------------------------------------


def _backward_inputs(case):
    """The case's inputs as CuPy arrays, stream_lengths too, and its options."""
    kw = dict(case["kw"])
    lengths = kw.pop("stream_lengths")
    x = {n: (None if case[n] is None else cupy.asarray(case[n])) for n in NAMES + ("beta",)}
    x["stream_lengths"] = None if lengths is None else cupy.asarray(np.asarray(lengths, np.int64))
    return x, kw


def _cupy_backward(case, ups, payload=None, **extra):
    x, kw = _backward_inputs(case)
    up = {n: cupy.asarray(u) for n, u in ups.items()}
    return p1.phase1_backward(*(x[n] for n in NAMES), up, beta=x["beta"],
                              stream_lengths=x["stream_lengths"], payload=payload, **kw, **extra)


@pytest.mark.parametrize("cid", ["hot-repeats-gw-pad", "streams-4-lengths-gw", "bf16-g1-beta",
                                 "bf16-gw-no-beta"])
def test_backward_matches_cpu(cid):
    """phase1_backward on CuPy arrays (every upstream gradient, records' too, NaN where never
    read): the NumPy call's bits, with the forward's payload (a CuPy array) and without; for
    bfloat16 values also with float32 gradients (grad_dtype)."""
    case = get_case(cid)
    ups = upstream(case, np.random.default_rng(3))
    kw = dict(case["kw"])
    wide = [None] + ([np.float32] if case["k_val"].dtype == np.uint16 else [])
    x, _ = _backward_inputs(case)
    payload = p1.phase1_forward(*(x[n] for n in NAMES), beta=x["beta"],
                                stream_lengths=x["stream_lengths"], det_fields=0,
                                **{k: v for k, v in kw.items() if k != "stream_lengths"}).payload
    for grad_dtype in wide:
        want = p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"],
                                  case["g"], ups, beta=case["beta"], grad_dtype=grad_dtype, **kw)
        for pay in (payload, None):
            got = _cupy_backward(case, ups, pay, grad_dtype=grad_dtype, check=True)
            assert set(got) == set(want)
            for n, w in want.items():
                if w is None:
                    assert got[n] is None, n
                    continue
                assert isinstance(got[n], cupy.ndarray) and got[n].dtype == w.dtype, n
                assert got[n].get().tobytes() == w.tobytes(), n


def test_backward_bad_payload_and_arguments():
    case = get_case("hot-repeats-g1-pad")
    rng = np.random.default_rng(2)
    ups = {k: np.nan_to_num(u) for k, u in upstream(case, rng, fields=("a", "kspa")).items()}
    kw = case["kw"]
    payload = p1.phase1_forward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                                det_fields=0, **kw).payload.copy()
    payload[1, [0, 1]] = payload[1, [1, 1]]  # one entry named twice: not the chunk's sort
    with pytest.raises(p1.InvalidInputError) as cpu:
        p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                           ups, beta=case["beta"], payload=payload, **kw)
    p1.synchronize()
    with pytest.raises(p1.InvalidInputError) as gpu:
        _cupy_backward(case, ups, cupy.asarray(payload), check=True)
    assert gpu.value.message == cpu.value.message
    _cupy_backward(case, ups, cupy.asarray(payload))  # check=False: at the next synchronize()
    with pytest.raises(p1.InvalidInputError) as later:
        p1.synchronize()
    assert later.value.message == cpu.value.message
    with pytest.raises(ValueError, match="payload must be the forward's payload output"):
        _cupy_backward(case, ups, cupy.asarray(payload[:, :8]))
    x, options = _backward_inputs(case)
    with pytest.raises(ValueError, match=r"grads\['a'\] must be a cupy array on GPU"):
        p1.phase1_backward(*(x[n] for n in NAMES), ups, beta=x["beta"], **options)  # NumPy grads
    with pytest.raises(ValueError, match=r"grads\['payload'\]: not a differentiable output"):
        _cupy_backward(case, {"payload": cupy.zeros((2, 48), cupy.int32)})
