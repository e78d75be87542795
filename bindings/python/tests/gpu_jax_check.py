"""JAX GPU arrays through sdm_phase1 (run by test_gpu_jax.py in its own process, so that JAX's
CUDA libraries never meet PyTorch's in one process). Exit 0: passed; 77: skipped (the reason on
the last line); anything else: failed."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import sdm_phase1 as p1  # noqa: E402
from gpu_support import assert_same, cpu_result, split  # noqa: E402
from test_reference import make_case  # noqa: E402

NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")


def main() -> int:
    import jax
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        print("skip: JAX sees no GPU")
        return 77
    dev = gpus[0]

    def to_jax(inputs):
        out = {}
        for n, a in inputs.items():
            if a is None:
                out[n] = None
            elif a.dtype == np.uint16:
                out[n] = jax.device_put(a, dev).view(jnp.bfloat16)
            else:
                out[n] = jax.device_put(a, dev)
        return out

    def call(x, opts, **kw):
        return p1.phase1_forward(*(x[n] for n in NAMES), beta=x["beta"], **opts, **kw)

    for seed, kw, det in ((1, dict(vals="f32"), 3071), (2, dict(vals="bf16", gate="write"), None)):
        case = make_case(seed, N=4, C=32, W=5, R=4, P=2, num_keys=40, valid_last=17, **kw)
        inputs, opts = split(case)
        want = cpu_result(inputs, opts, det_fields=det)
        got = call(to_jax(inputs), opts, det_fields=det)
        assert all(x is None or isinstance(x, jax.Array) for x in got), [type(x) for x in got]
        assert got.a.devices() == {dev}
        # JAX work on the outputs waits for ours (ordered on the device, no host wait).
        total = float(jnp.sum(jnp.abs(got.a)))
        assert np.isclose(total, float(np.abs(want.a).sum(dtype=np.float64)), rtol=1e-5), total
        assert_same(want, got)
        if kw["vals"] == "bf16":
            assert got.k_eff.dtype == jnp.bfloat16

    # Per-stream lengths (int32: JAX keeps no int64 without x64), on the device.
    lengths = np.array([70, 3], np.int32)
    case = make_case(4, N=6, C=32, W=4, R=3, P=2, num_keys=40, stream_lengths=lengths)
    inputs, opts = split(case)
    want = cpu_result(inputs, opts, stream_lengths=lengths)
    assert_same(want, call(to_jax(inputs), opts, stream_lengths=jax.device_put(lengths, dev)))
    try:
        bad = jax.device_put(np.array([97, 3], np.int32), dev)
        call(to_jax(inputs), opts, check=True, stream_lengths=bad)
    except p1.Phase1Error as e:
        assert "stream_lengths[0] = 97" in e.message, e.message
    else:
        raise AssertionError("bad length not reported")

    case = make_case(3, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    x = to_jax(inputs)
    for bad, words in ((dict(k_val=x["k_val"].astype(jnp.float16)), "k_val must be float32"),
                       (dict(q_idx=inputs["q_idx"]), "q_idx must be a jax.Array")):
        try:
            call(dict(x, **bad), opts)
        except (TypeError, ValueError) as e:
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"no error for {words}")
    try:
        p1.phase1_forward(*(x[n] for n in NAMES), np.zeros(1, np.int64), **opts)
    except ValueError as e:
        assert "repeats must be None with JAX" in str(e)
    else:
        raise AssertionError("repeats accepted")

    case["g"][1, 2, 0] = np.inf
    inputs, opts = split(case)
    try:
        cpu_result(inputs, opts)
    except p1.Phase1Error as e:
        cpu_message = e.message
    try:
        call(to_jax(inputs), opts, check=True)
    except p1.Phase1Error as e:
        assert e.message == cpu_message, (e.message, cpu_message)
    else:
        raise AssertionError("bad gate not reported")
    print(f"ok: JAX {jax.__version__} on {dev}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
