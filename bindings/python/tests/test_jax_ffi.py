"""sdm_phase1.jax_ffi: the forward and backward as XLA FFI custom calls under jax.jit, against
the NumPy path bit for bit (phase1_forward on NumPy arrays, phase1_backward for the same upstream
gradient); the handlers' plan cache, the library's errors raised through XLA, vmap. Skips
without JAX; the GPU test also without a JAX GPU or a library with the CUDA backend."""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref
from gpu_support import assert_same, to_numpy
from test_reference import make_case

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import sdm_phase1 as p1  # noqa: E402

try:
    import sdm_phase1.jax_ffi as p1j
except ImportError as e:  # the handler library is built only where Meson's Python has JAX
    pytest.skip(str(e), allow_module_level=True)

CASES = {
    # two streams, per-token gates, padding, beta (records and kspa)
    "f32-g1-beta": dict(N=4, C=16, W=4, R=3, P=2, num_keys=40, valid_last=11),
    # bfloat16 values, per-write gates, no beta
    "bf16-gw": dict(N=2, C=8, W=3, R=2, num_keys=6, vals="bf16", gate="write", valid_last=6, beta=False),
    # per-stream lengths (an empty stream), ids with repeats, per-write gates, beta
    "lengths-repeats-gw": dict(N=6, C=8, W=3, R=2, P=3, num_keys=7, kmode="random", gate="write",
                               stream_lengths=[16, 0, 9]),
}
OPTIONS = ("num_parallel", "stream_offset", "num_keys", "valid_last")
# The CPU tests run on JAX's CPU device (committed inputs place the computation), also where
# JAX's default device is a GPU.
CPU = jax.devices("cpu")[0]


def _case(cid):
    return make_case(sum(map(ord, cid)), **CASES[cid])


def _numpy_kw(case):
    kw = {n: case[n] for n in OPTIONS}
    if case["stream_lengths"] is not None:
        kw["stream_lengths"] = np.asarray(case["stream_lengths"], np.int32)
    return kw


def _jax_array(x, device=CPU):
    """A NumPy input as a JAX array (uint16 bfloat16 bits as jnp.bfloat16)."""
    if x is None:
        return None
    a = jax.device_put(x, device)
    return jax.lax.bitcast_convert_type(a, jnp.bfloat16) if x.dtype == np.uint16 else a


def _jax_inputs(case, device=CPU):
    """(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths) as JAX arrays."""
    lengths = case["stream_lengths"]
    return tuple(_jax_array(x, device) for x in (case["k_idx"], case["q_idx"], case["k_val"], case["q_val"],
                                                 case["g"], case["beta"],
                                                 None if lengths is None else np.asarray(lengths, np.int32)))


def _jit_forward(case, **extra):
    opts = {n: case[n] for n in OPTIONS}
    opts.update(extra)
    return jax.jit(lambda k, q, kv, qv, g, beta, lengths: p1j.phase1_forward(
        k, q, kv, qv, g, beta=beta, stream_lengths=lengths, **opts))


def _numpy_forward(case, **extra):
    kw = _numpy_kw(case)
    kw.update(extra)
    return p1.phase1_forward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                             beta=case["beta"], **kw)


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_under_jit_has_the_numpy_bits(cid):
    case = _case(cid)
    got = _jit_forward(case)(*_jax_inputs(case))
    assert next(iter(got.a.devices())).platform == "cpu"
    assert_same(_numpy_forward(case), got)
    # Eager (each ffi_call compiled on its own), and other options: the same bits.
    x = _jax_inputs(case)
    eager = p1j.phase1_forward(*x[:5], beta=x[5], stream_lengths=x[6], **{n: case[n] for n in OPTIONS})
    assert_same(_numpy_forward(case), eager)
    # Every optional output (kspa needs beta), no read groups, short tiles.
    every = p1.DET_SHIPPED | p1.DET_RECORDS | p1.DET_DC_GIDX | p1.DET_QREC8
    extra = dict(det_fields=every if case["beta"] is not None else every & ~p1.DET_KSPA,
                 need_read_groups=False, rec_tile=4)
    assert_same(_numpy_forward(case, **extra), _jit_forward(case, **extra)(*_jax_inputs(case)))


def _upstream(case, rng, computed):
    """Random upstream gradients of every float output the forward computes: NumPy arrays for
    phase1_backward (value-typed ones as bfloat16 bits where the values are bfloat16)."""
    N, C, W = case["k_idx"].shape
    R = case["q_idx"].shape[2]
    shapes = {"a": (N, C, C), "qk": (N, C, C), "log_k": (N, C, W), "log_q": (N, C, R), "rex": (N, C, W),
              "cpe": (N, C, W), "k_eff": (N, C, W), "q_w": (N, C, R), "kspa": (N, C * W)}
    up = {}
    for name, shape in shapes.items():
        if name not in computed:
            continue
        u = rng.standard_normal(shape).astype(np.float32)
        if name in ("cpe", "k_eff", "q_w") and case["k_val"].dtype == np.uint16:
            u = ref.f64_to_bf16_bits(u)
        up[name] = u
    return up


def _loss(case, up, device=CPU, **opts):
    """sum over the fields of <upstream, output>: its gradient with respect to each output is the
    upstream array, exactly."""
    k, q, _, _, _, _, lengths = _jax_inputs(case, device)
    weights = {name: _jax_array(u, device).astype(jnp.float32) for name, u in up.items()}

    def loss(kv, qv, g, beta):
        out = p1j.phase1_forward(k, q, kv, qv, g, beta=beta, stream_lengths=lengths, **opts)
        return sum(jnp.sum(w * getattr(out, name).astype(jnp.float32)) for name, w in weights.items())

    return loss


def _assert_same_grads(want, got):
    for name, arr in want.items():
        if arr is None:
            assert got[name] is None, name
            continue
        g = to_numpy(got[name])
        assert g.dtype == arr.dtype and g.shape == arr.shape, (name, g.dtype, g.shape)
        assert g.tobytes() == arr.tobytes(), f"dL/d{name}: bits differ from phase1_backward's"


def _grads_under_jit(case, up, device=CPU):
    x = _jax_inputs(case, device)
    argnums = (0, 1, 2, 3) if case["beta"] is not None else (0, 1, 2)
    loss = _loss(case, up, device, **{n: case[n] for n in OPTIONS})
    got = jax.jit(jax.grad(loss, argnums=argnums))(x[2], x[3], x[4], x[5])
    return dict(zip(("k_val", "q_val", "g", "beta"), got + (None,) * (4 - len(got))))


@pytest.mark.parametrize("cid", list(CASES))
def test_grad_under_jit_has_the_phase1_backward_bits(cid):
    case = _case(cid)
    computed = {n for n, v in _numpy_forward(case)._asdict().items() if v is not None and v.size}
    up = _upstream(case, np.random.default_rng(5), computed)
    assert "a" in up and "k_eff" in up and ("kspa" in up) == (case["beta"] is not None)
    want = p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"], up,
                              beta=case["beta"], **_numpy_kw(case))
    assert all(np.any(to_numpy(a) != 0) for a in want.values() if a is not None)
    _assert_same_grads(want, _grads_under_jit(case, up))


def test_phase1_forward_sends_tracers_to_the_custom_calls():
    """sdm_phase1.phase1_forward under jit and grad: the FFI path, the same bits."""
    case = _case("f32-g1-beta")
    kw = {n: case[n] for n in OPTIONS}
    x = _jax_inputs(case)
    got = jax.jit(lambda *a: p1.phase1_forward(*a[:5], beta=a[5], **kw))(*x[:6])
    assert_same(_numpy_forward(case), got)
    grad = jax.jit(jax.grad(lambda g: jnp.sum(p1.phase1_forward(*x[:4], g, beta=x[5], **kw).log_k)))(x[4])
    want = p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                              {"log_k": np.ones(case["k_idx"].shape, np.float32)}, beta=case["beta"], **kw)
    assert np.asarray(grad).tobytes() == want["g"].tobytes()


def test_plans_are_created_once():
    """A jitted call creates its plan once: later calls, another jitted function and eager calls
    of the same shapes and options reuse it; another option makes one more; jit(grad) makes the
    backward's plan once."""
    case = _case("f32-g1-beta")
    case["valid_last"] = 9  # a plan (forward and backward) no other test makes
    opts = {n: case[n] for n in OPTIONS}
    x = _jax_inputs(case)
    before = p1j.plans_created()
    f = _jit_forward(case)
    f(*x)
    assert p1j.plans_created() == before + 1
    f(*x)
    _jit_forward(case)(*x)
    p1j.phase1_forward(*x[:5], beta=x[5], **opts)
    assert p1j.plans_created() == before + 1
    _jit_forward(case, rec_tile=9)(*x)
    assert p1j.plans_created() == before + 2

    grad = jax.jit(jax.grad(_loss(case, {"a": np.ones((4, 16, 16), np.float32)}, **opts)))
    grad(*x[2:6])
    assert p1j.plans_created() == before + 3  # the backward's plan (the forward's exists)
    grad(*x[2:6])
    assert p1j.plans_created() == before + 3


def _bad_ids(case):
    bad = dict(case)
    bad["k_idx"] = case["k_idx"].copy()
    bad["k_idx"][0, 0, 0] = case["num_keys"] + 3  # chunk 0 is stream 0's: ids in 0..num_keys-1
    return bad


def test_library_errors_under_jit_carry_its_message():
    case = _case("f32-g1-beta")
    bad = _bad_ids(case)
    with pytest.raises(p1.InvalidInputError) as numpy_error:
        _numpy_forward(bad)
    with pytest.raises(Exception) as jax_error:
        _jit_forward(bad)(*_jax_inputs(bad))
    assert numpy_error.value.message in str(jax_error.value)
    assert "SDM_P1_ERROR_INVALID_INPUT" in str(jax_error.value)
    # Refused at the plan's creation, inside the handler: num_parallel 3 does not divide N = 4.
    with pytest.raises(p1.InvalidArgumentError) as numpy_error:
        _numpy_forward(case, num_parallel=3)
    with pytest.raises(Exception) as jax_error:
        _jit_forward(case, num_parallel=3)(*_jax_inputs(case))
    assert numpy_error.value.message in str(jax_error.value)


def test_arguments_checked_before_tracing():
    case = _case("bf16-gw")
    x = _jax_inputs(case)
    kw = {n: case[n] for n in OPTIONS}
    with pytest.raises(ValueError, match="jnp.bfloat16"):
        p1j.phase1_forward(*x[:2], case["k_val"], case["q_val"], x[4], **kw)  # uint16 bits
    with pytest.raises(ValueError, match="repeats must be None"):
        p1j.phase1_forward(*x[:5], jnp.zeros(1, jnp.int32), **kw)
    with pytest.raises(ValueError, match="backend must be None"):
        p1j.phase1_forward(*x[:5], backend="cpu", **kw)
    with pytest.raises(ValueError, match="q_val"):
        p1j.phase1_forward(*x[:3], x[3][:, :1], x[4], **kw)


def test_vmap_runs_the_calls_in_turn():
    """vmap (vmap_method="sequential"): each element's outputs are those of its own call."""
    case = _case("f32-g1-beta")
    x = _jax_inputs(case)
    g2 = jnp.stack([x[4], x[4] * 0.5])
    f = _jit_forward(case)
    batched = jax.vmap(f, in_axes=(None, None, None, None, 0, None, None))(*x[:4], g2, *x[5:])
    for i in range(2):
        one = f(*x[:4], g2[i], *x[5:])
        for name, a, b in zip(p1.Phase1._fields, one, batched):
            if a is not None and a.size:
                assert np.asarray(b[i]).tobytes() == np.asarray(a).tobytes(), name


def test_gpu_forward_grad_and_errors():
    """On a JAX GPU: the CUDA handlers on XLA's stream give the NumPy path's bits; check=True
    raises bad data with the library's message; jit(grad) gives the CPU backward's bits."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU")
    if not p1j.has_cuda:
        pytest.skip(f"{p1j.HANDLER_LIBRARY} was built without the CUDA backend")
    case = _case("lengths-repeats-gw")
    x = _jax_inputs(case, gpus[0])
    got = _jit_forward(case)(*x)
    assert next(iter(got.a.devices())).platform == "gpu"
    assert_same(_numpy_forward(case), got)

    bad = _bad_ids(case)
    with pytest.raises(p1.InvalidInputError) as numpy_error:
        _numpy_forward(bad)
    with pytest.raises(Exception) as jax_error:
        jax.block_until_ready(_jit_forward(bad, check=True)(*_jax_inputs(bad, gpus[0])))
    assert numpy_error.value.message in str(jax_error.value)

    computed = {n for n, v in _numpy_forward(case)._asdict().items() if v is not None and v.size}
    up = _upstream(case, np.random.default_rng(5), computed)
    want = p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"], up,
                              beta=case["beta"], **_numpy_kw(case))
    got_grads = _grads_under_jit(case, up, gpus[0])
    jax.block_until_ready(got_grads)
    _assert_same_grads(want, got_grads)
