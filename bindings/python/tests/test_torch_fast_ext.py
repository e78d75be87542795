"""The compiled fast path of the eager PyTorch forward, sdm_phase1._torch_fast (CPU tensors,
and CUDA tensors where a GPU is; skips where the extension was not built: Meson builds it only
where the configured Python imports torch; SDMP1_REQUIRE_TORCH_FAST=1, which ./run.sh's
torch-fast suite sets, makes that a failure). Checked here:
- its outputs are the Python path's (the extension turned off) byte for byte, with the same
  dtypes, shapes, strides and offsets into one block, for several shapes, field sets, with and
  without beta and stream_lengths; each a tensor of its own to autograd, as Python carves them;
- every miss falls back to the Python path: a non-contiguous input, another dtype, a tensor on
  another device, option values of other types, repeats, grad, a plan busy in another thread,
  bad data (each error word for word the Python path's);
- a plan destroyed (cleared, evicted) or moved to another stream is forgotten, never run;
  registering twice is harmless; SDMP1_TORCH_FAST=0 turns it off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import assert_same as _assert_same
from gpu_support import cuda_skip_reason, split, to_numpy, torch_inputs
from sdm_phase1._core import plan_cache
from test_reference import make_case

torch = pytest.importorskip("torch")
from sdm_phase1._frameworks import torch_fast, torch_impl  # noqa: E402  (imports torch)

if not torch_fast.available():
    if os.environ.get("SDMP1_REQUIRE_TORCH_FAST") == "1":
        raise RuntimeError(f"SDMP1_REQUIRE_TORCH_FAST=1 but sdm_phase1._torch_fast was not loaded "
                           f"(library {p1.library_path}; load error: {torch_fast.LOAD_ERROR!r})")
    pytest.skip("sdm_phase1._torch_fast was not built (Meson builds it where the configured "
                "Python imports torch; see docs/python.md)", allow_module_level=True)

NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")


def assert_same(want, got):
    """gpu_support.assert_same of two PyTorch results: the same dtypes, shapes and bytes."""
    _assert_same(p1.Phase1(*(None if w is None else to_numpy(w) for w in want)), got)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """Each test from an empty plan cache of its own and an empty registry, the extension on.
    (The tests take "the" plan from the cache: plans pinned by other files' CUDA graphs, which
    clear_plan_cache never destroys, stay in the cache they were made in. On a GPU they made
    five of these tests pick another file's plan.)"""
    torch_fast.set_enabled(True)
    p1.clear_plan_cache()
    monkeypatch.setattr(plan_cache._cache, "plans", OrderedDict())
    yield
    torch_fast.set_enabled(True)
    p1.clear_plan_cache()


def _case(seed=1, **kw):
    shape = dict(N=4, C=16, W=4, R=3, P=2, num_keys=32, valid_last=9)
    shape.update(kw)
    return split(make_case(seed, **shape))


def _call(t, opts, **kw):
    return p1.phase1_forward(*(t[n] for n in NAMES), beta=t["beta"], **opts, **kw)


def _direct(t, opts, det_fields=None, stream_lengths=None, check=False):
    """The extension's forward itself: (data, outputs) or None (a miss)."""
    return torch_fast.forward(*(t[n] for n in NAMES), t["beta"], stream_lengths,
                              opts["num_parallel"], opts["stream_offset"], opts["num_keys"],
                              opts["valid_last"], True, 0, det_fields, check)


def _python(t, opts, **kw):
    was = torch_fast.set_enabled(False)
    try:
        return _call(t, opts, **kw)
    finally:
        torch_fast.set_enabled(was)


def _same_tensors(want, got):
    """Byte for byte, and laid out alike: dtype, shape, strides, offset into the block."""
    assert_same(want, got)
    blocks = set()
    for name, w, g in zip(p1.Phase1._fields, want, got):
        if not isinstance(w, torch.Tensor) or w.numel() == 0:
            continue
        assert (g.dtype, g.shape, g.stride()) == (w.dtype, w.shape, w.stride()), name
        assert g.untyped_storage().nbytes() == w.untyped_storage().nbytes(), name
        assert (g.storage_offset() * g.element_size() == w.storage_offset() * w.element_size()), name
        assert g._base is None and not g._is_view() and not g.requires_grad, name
        blocks.add(g.untyped_storage().data_ptr())
    assert len(blocks) == 1  # one block


VARIANTS = {
    "f32": (dict(), {}),
    "f32-no-beta": (dict(beta=False), {}),
    "bf16-write-gates": (dict(vals="bf16", gate="write"), {}),
    "i64-records": (dict(idx=np.int64), dict(det_fields=3071)),
    "all-fields-one-stream": (dict(P=1, N=2, C=8, W=3, R=5, valid_last=None), dict(det_fields=3071)),
    "shipped-no-beta": (dict(beta=False, C=32, W=2, R=2), dict(det_fields=p1.DET_SHIPPED)),
    "lengths-int64": (dict(vals="bf16", stream_lengths=np.array([30, 7])), dict(det_fields=3071)),
    "lengths-int32": (dict(stream_lengths=np.array([12, 0], np.int32)), {}),
}


def _cuda_reason():
    return cuda_skip_reason() or (None if torch.cuda.is_available() else "torch sees no CUDA device")


#: The devices of the byte comparisons: the CPU backend everywhere, the CUDA backend (PyTorch's
#: current stream, its caching allocator) where a GPU is.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(_cuda_reason() is not None,
                                                                  reason=str(_cuda_reason())))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_same_bytes_as_the_python_path(name, device):
    variant, kw = VARIANTS[name]
    inputs, opts = _case(**variant)
    t = torch_inputs(inputs, device)
    if "stream_lengths" in variant:
        kw = dict(kw, stream_lengths=torch.from_numpy(variant["stream_lengths"]).to(device))
    created = p1.plan_cache_info()["created"]
    want = _python(t, opts, **kw)
    first = _call(t, opts, **kw)  # the long way, which registers the plan
    assert _direct(t, opts, kw.get("det_fields"), kw.get("stream_lengths")) is not None
    second = _call(t, opts, **kw)  # the extension
    for got in (first, second):
        _same_tensors(want, got)
    assert p1.plan_cache_info()["created"] == created + 1  # one plan: the Python path's


def test_outputs_are_tensors_of_their_own():
    """As the Python carve: an output changed in place bumps no other's version counter."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts)
    out = _call(t, opts)
    versions = [o._version for o in (out.qk, out.log_k, out.rex)]
    out.a.add_(1)
    assert [o._version for o in (out.qk, out.log_k, out.rex)] == versions


def _message(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def test_misses_fall_back_to_the_python_path():
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    want = _python(t, opts)
    _call(t, opts)
    assert _direct(t, opts) is not None
    # Option values of other types than the key's: the Python path, the same result.
    np_opts = dict(opts, num_parallel=np.int64(opts["num_parallel"]))
    assert_same(want, _call(t, np_opts))
    # Repeats and grad: the Python path.
    repeats = torch.zeros(1, dtype=torch.int64)
    assert_same(want, _call(t, opts, repeats=repeats))
    g = dict(t, k_val=t["k_val"].clone().requires_grad_())
    assert _call(g, opts).a.requires_grad
    # Another dtype: another plan (the long way), the same bytes as Python's.
    t64 = dict(t, k_idx=t["k_idx"].long(), q_idx=t["q_idx"].long())
    assert _direct(t64, opts) is None
    assert_same(_python(t64, opts), _call(t64, opts))


@pytest.mark.parametrize("bad", ["non-contiguous", "float64", "meta", "num_keys", "ids"])
def test_errors_are_the_python_paths(bad):
    """A warm key's call with a bad input misses (or is refused by the library) and raises
    the Python path's error, word for word."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts)
    if bad == "non-contiguous":
        k_val = t["k_val"].transpose(0, 1).contiguous().transpose(0, 1)
        t = dict(t, k_val=k_val)
        assert _direct(t, opts) is None
    elif bad == "float64":
        t = dict(t, g=t["g"].double())
    elif bad == "meta":
        t = dict(t, q_val=t["q_val"].to("meta"))
    elif bad == "num_keys":
        opts = dict(opts, num_keys=-1)
    else:  # ids out of range: the CPU backend refuses the call, which goes the long way
        t = dict(t, k_idx=torch.full_like(t["k_idx"], 10**6))
        assert _direct(t, opts) is None
    fast = _message(lambda: _call(t, opts))
    assert fast == _message(lambda: _python(t, opts))
    assert fast == _message(lambda: _call(t, opts))  # again, the key registered or not


def test_destroyed_or_moved_plans_are_forgotten(monkeypatch):
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    want = _python(t, opts)
    p1.clear_plan_cache()
    _call(t, opts)
    ext = torch_fast._ext
    assert ext.registered() == 1 and _direct(t, opts) is not None
    p1.clear_plan_cache()  # destroyed: unregistered first
    assert ext.registered() == 0 and _direct(t, opts) is None
    assert_same(want, _call(t, opts))  # made again, registered again
    assert _direct(t, opts) is not None
    plan = plan_cache._cache.plans[next(iter(plan_cache._cache.plans))]
    plan.set_stream(plan.stream)  # what a capture does to a plan: forgotten
    assert _direct(t, opts) is None
    # Evicted: the least recently used plan goes when another is made past the limit.
    p1.clear_plan_cache()
    monkeypatch.setattr(plan_cache, "CACHE_LIMIT", 1)
    _call(t, opts)
    assert _direct(t, opts) is not None
    other = torch_inputs(_case(2, C=8, valid_last=5)[0], "cpu")
    _call(other, dict(opts, valid_last=5))
    assert p1.plan_cache_info()["plans"] == 1
    assert _direct(t, opts) is None
    assert_same(want, _call(t, opts))


def test_registering_twice_is_harmless():
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    want = _python(t, opts)
    _call(t, opts)
    plan = next(iter(plan_cache._cache.plans.values()))
    args = [t[n] for n in NAMES] + [t["beta"], None, opts["num_parallel"], opts["stream_offset"],
                                    opts["num_keys"], opts["valid_last"], True, 0, None, False]
    for _ in range(2):
        torch_fast.register(plan, *args)
    assert torch_fast._ext.registered() == 1
    _same_tensors(want, _call(t, opts))


def test_a_busy_plan_is_not_run():
    """A plan runs in one thread at a time: with its lock taken elsewhere, the extension
    leaves the call to the Python path (which waits for the lock)."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts)
    plan = next(iter(plan_cache._cache.plans.values()))
    with plan.lock:
        assert _direct(t, opts) is None
    assert _direct(t, opts) is not None


def test_hits_count_as_the_python_lookups_do():
    """A call the extension runs is a hit of the plan cache and a use (eviction goes by it)."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts)
    plan = next(iter(plan_cache._cache.plans.values()))
    hits, used = p1.plan_cache_info()["hits"], plan.used
    _call(t, opts)
    assert p1.plan_cache_info()["hits"] == hits + 1 and plan.used > used


def test_turned_off_by_the_environment():
    code = ("import torch, sdm_phase1; from sdm_phase1._frameworks import torch_fast; "
            "print(torch_fast.available(), torch_fast.forward)")
    env = dict(os.environ, SDMP1_TORCH_FAST="0", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "None"]


def test_python_fast_lookup_untouched_when_off():
    """Off, calls take the Python path's own fast lookup, as without the extension."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    torch_fast.set_enabled(False)
    torch_impl._FAST.clear()
    _call(t, opts)
    _call(t, opts)
    assert torch_impl._FAST and torch_fast._ext.registered() == 0


# ---- the backward's library call -------------------------------------------------------------

FLOATS = ("a", "qk", "log_k", "log_q", "rex", "cpe", "k_eff", "q_w")
VALUES = ("k_val", "q_val", "g", "beta")


def _gradients(t, opts, ups, kw):
    """The gradients of sum(<ups[f], output f>) for the value inputs, as NumPy bytes."""
    leaves = {n: t[n].clone().requires_grad_() for n in VALUES if t[n] is not None}
    out = _call(dict(t, **leaves), opts, **kw)
    outs = [getattr(out, f) for f in ups]
    got = torch.autograd.grad(outs, list(leaves.values()), [ups[f] for f in ups],
                              allow_unused=True)
    return {n: None if x is None else to_numpy(x) for n, x in zip(leaves, got)}


class _Spy:
    """Counts the extension backward's answers (gradients or None)."""

    def __init__(self, monkeypatch):
        self.answers = []
        real = torch_fast.backward

        def spy(*args):
            got = real(*args)
            self.answers.append(got is not None)
            return got
        monkeypatch.setattr(torch_fast, "backward", spy)


BACKWARD_VARIANTS = {
    "f32": (dict(), {}),
    "bf16-no-beta": (dict(vals="bf16", beta=False), {}),
    "lengths-records": (dict(vals="bf16", stream_lengths=np.array([30, 7])), dict(det_fields=3071)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(BACKWARD_VARIANTS))
@pytest.mark.parametrize("fields", [FLOATS, ("qk", "k_eff"), ("rex",)])
def test_backward_same_bytes_as_the_python_path(name, fields, device, monkeypatch):
    variant, kw = BACKWARD_VARIANTS[name]
    inputs, opts = _case(3, **variant)
    t = torch_inputs(inputs, device)
    if "stream_lengths" in variant:
        kw = dict(kw, stream_lengths=torch.from_numpy(variant["stream_lengths"]).to(device))
    shapes = _python(t, opts, **kw)
    rng = np.random.default_rng(5)
    ups = {f: torch.from_numpy(rng.standard_normal(getattr(shapes, f).shape))
           .to(getattr(shapes, f).dtype).to(device) for f in fields}
    torch_fast.set_enabled(False)
    want = _gradients(t, opts, ups, kw)
    torch_fast.set_enabled(True)
    spy = _Spy(monkeypatch)
    for _ in range(2):
        got = _gradients(t, opts, ups, kw)
        assert got.keys() == want.keys()
        for n in want:
            assert (got[n] is None) == (want[n] is None), n
            if want[n] is not None:
                assert got[n].dtype == want[n].dtype and got[n].tobytes() == want[n].tobytes(), n
    assert spy.answers == [True, True]


def test_backward_of_an_expanded_gradient(monkeypatch):
    """sum()'s upstream gradient is expanded (strided): made contiguous, as in Python."""
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")

    def grads():
        k_val = t["k_val"].clone().requires_grad_()
        out = _call(dict(t, k_val=k_val), opts)
        return to_numpy(torch.autograd.grad(out.qk.sum() + out.a.sum(), k_val)[0])

    torch_fast.set_enabled(False)
    want = grads()
    torch_fast.set_enabled(True)
    spy = _Spy(monkeypatch)
    assert grads().tobytes() == want.tobytes()
    assert spy.answers == [True]


def test_backward_plan_destroyed_is_forgotten(monkeypatch):
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    k_val = t["k_val"].clone().requires_grad_()
    out = _call(dict(t, k_val=k_val), opts)
    torch.autograd.grad(out.qk.sum(), k_val, retain_graph=True)  # the backward plan made
    backward_plans = [p for p in plan_cache._cache.plans.values() if p.key[-1] == "backward"]
    assert len(backward_plans) == 1
    plan = backward_plans[0]
    forward_plan = next(p for p in plan_cache._cache.plans.values() if p.key[-1] != "backward")
    fields = forward_plan.extra.float_fields
    args = (plan, 0, t["k_idx"], t["q_idx"], k_val, t["q_val"], t["g"], t["beta"], None,
            out.payload, fields, (torch.ones_like(out.a),) + (None,) * (len(fields) - 1))
    spy = _Spy(monkeypatch)
    with plan.lock:  # busy in another thread: the Python call, which waits for the lock
        assert torch_fast._ext.backward(*args) is None
    assert torch_fast._ext.backward(*args) is not None
    p1.clear_plan_cache()  # destroyed: forgotten, never run
    assert plan.handle is None and torch_fast._ext.backward(*args) is None
    assert spy.answers == []


def test_not_used_beside_another_torch(monkeypatch):
    """Built against another torch version, the extension is left aside, saying why."""
    monkeypatch.setattr(torch_fast, "LOAD_ERROR", None)
    assert torch_fast._find() is not None
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert torch_fast._find() is None
    assert "built against torch" in str(torch_fast.LOAD_ERROR)


@pytest.mark.parametrize("name", ["f32", "bf16-write-gates", "lengths-int64"])
def test_forward_with_grad_same_bytes(name, monkeypatch):
    """With grad, the autograd Function's forward runs its plan through the extension
    (run_plan): the Python path's bytes, layout and autograd history."""
    variant, kw = VARIANTS[name]
    inputs, opts = _case(**variant)
    t = torch_inputs(inputs, "cpu")
    if "stream_lengths" in variant:
        kw = dict(kw, stream_lengths=torch.from_numpy(variant["stream_lengths"]))
    leaves = dict(t, k_val=t["k_val"].clone().requires_grad_())
    torch_fast.set_enabled(False)
    want = _call(leaves, opts, **kw)
    torch_fast.set_enabled(True)
    used = []
    real = torch_fast.run_plan
    monkeypatch.setattr(torch_fast, "run_plan", lambda *a: used.append(1) or real(*a))
    got = _call(leaves, opts, **kw)
    assert used
    assert_same(want, got)
    for n in ("a", "qk", "k_eff"):
        w, g = getattr(want, n), getattr(got, n)
        assert g.requires_grad and type(g.grad_fn) is type(w.grad_fn)
        assert (g.dtype, g.shape, g.stride()) == (w.dtype, w.shape, w.stride())


def test_run_plan_of_a_destroyed_plan_is_refused():
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts)
    plan = next(iter(plan_cache._cache.plans.values()))
    args = (plan,) + tuple(t[n] for n in NAMES) + (t["beta"], None, opts["num_parallel"])
    assert torch_fast.run_plan(*args) is not None
    p1.clear_plan_cache()
    assert torch_fast.run_plan(*args) is None
