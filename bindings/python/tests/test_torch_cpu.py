"""PyTorch on the CPU backend (CPU tensors; skips without torch): the cached-plan path and the
operator give the NumPy path's bits and the spec's fields; option types are checked as for
NumPy. The same path runs CUDA tensors (test_gpu_torch.py); autograd is test_torch_autograd.py's."""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import assert_same, cpu_result, split, torch_inputs
from sdm_phase1._core import plan_cache
from test_reference import make_case

torch = pytest.importorskip("torch")

NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")


def _case(seed=1, **kw):
    shape = dict(N=4, C=16, W=4, R=3, P=2, num_keys=32, valid_last=9)
    shape.update(kw)
    return split(make_case(seed, **shape))


def _call(t, opts, op=False, **kw):
    from sdm_phase1 import torch_ops

    f = torch_ops.phase1_forward if op else p1.phase1_forward
    return f(*(t[n] for n in NAMES), beta=t["beta"], **opts, **kw)


@pytest.mark.parametrize("op", [False, True])
@pytest.mark.parametrize("variant", [dict(), dict(vals="bf16", gate="write"),
                                     dict(idx=np.int64, det_fields=3071)])
def test_same_bits_as_numpy(op, variant):
    det = variant.pop("det_fields", None)
    inputs, opts = _case(**variant)
    kw = {} if det is None else {"det_fields": det}
    want = cpu_result(inputs, opts, **kw)
    t = torch_inputs(inputs, "cpu")
    for _ in range(2):  # the second call: the cached plan
        got = _call(t, opts, op=op, **kw)
        assert_same(want, got)
        assert all(x is None or x.device.type == "cpu" for x in got)


@pytest.mark.parametrize("op", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_stream_lengths_same_bits_as_numpy(op, dtype):
    lengths = np.array([30, 0])   # steps 2 of C 16: 30 and 0 of 32 tokens
    inputs, opts = split(make_case(6, N=4, C=16, W=4, R=3, P=2, num_keys=32, stream_lengths=lengths))
    want = cpu_result(inputs, opts, det_fields=3071, stream_lengths=lengths)
    t = torch_inputs(inputs, "cpu")
    got = _call(t, opts, op=op, det_fields=3071, stream_lengths=torch.from_numpy(lengths).to(dtype))
    assert_same(want, got)
    ids = torch.zeros(2, 5, 3, 2, dtype=torch.int32)
    layout = p1.to_chunks(ids, ids, torch.ones(2, 5, 3, 2), torch.ones(2, 5, 3, 2), torch.zeros(2, 5, 3),
                          chunk_size=4, lengths=torch.tensor([5, 2]))
    assert layout.k_val.shape == (12, 4, 2) and layout.stream_lengths.tolist() == [5, 5, 5, 2, 2, 2]
    assert float(layout.k_val.sum()) == 2.0 * (3 * 5 + 3 * 2)   # the padding tokens hold zeros


def test_repeats_and_cache():
    inputs, opts = _case(5, kmode="random")
    want = np.array([3], np.int64)
    cpu_result(inputs, opts, repeats=want)
    t = torch_inputs(inputs, "cpu")
    rep = torch.full((1,), 3, dtype=torch.int64)
    _call(t, opts)
    before = p1.plan_cache_info()
    p1.phase1_forward(*(t[n] for n in NAMES), rep, beta=t["beta"], **opts)
    from sdm_phase1 import torch_ops

    torch_ops.phase1_forward(*(t[n] for n in NAMES), rep, beta=t["beta"], **opts)
    assert int(rep.item()) == 3 + 2 * (int(want[0]) - 3) and want[0] > 3
    after = p1.plan_cache_info()
    assert after["created"] == before["created"] + 1  # the same plan, but for repeats' key
    assert after["hits"] >= before["hits"] + 1


@pytest.mark.parametrize("op", [False, True])
def test_option_types(op):
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    _call(t, opts, op=op)  # a cached plan for the plain options
    for name, bad, error in (("num_parallel", True, TypeError), ("need_read_groups", "no", TypeError),
                             ("valid_last", -1, ValueError), ("det_fields", -1, ValueError),
                             ("check", 1, TypeError), ("valid_last", 17, ValueError)):
        with pytest.raises(error, match=name):
            _call(t, dict(opts, **{name: bad}) if name in opts else opts,
                  op=op, **({} if name in opts else {name: bad}))
    # NumPy integers are ints.
    assert_same(cpu_result(inputs, opts), _call(t, {n: np.int64(v) for n, v in opts.items()}, op=op))


def test_outputs_share_one_block_without_overlap():
    inputs, opts = _case()
    t = torch_inputs(inputs, "cpu")
    out = _call(t, opts, det_fields=3071)
    spans = sorted((x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()) for x in out
                   if x is not None and x.numel())
    assert len({x.untyped_storage().data_ptr() for x in out if x is not None and x.numel()}) == 1
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start
    assert all((start - spans[0][0]) % 256 == 0 for start, _ in spans)


def test_operator_opcheck_on_cpu():
    """The operator's schema, fake implementation and autograd registration as
    torch.library.opcheck tests them (no input requiring grad: test_torch_autograd.py has
    those): its returns share no storage."""
    from sdm_phase1 import torch_ops  # noqa: F401  (registers the operator)

    inputs, opts = _case(41, N=2, C=8, W=3, R=2, P=1, num_keys=16, valid_last=8)
    t = torch_inputs(inputs, "cpu")
    args = tuple(t[n] for n in NAMES) + (t["beta"], opts["num_parallel"], opts["stream_offset"],
                                         opts["num_keys"], opts["valid_last"], True, 0, 3071, False)
    torch.library.opcheck(torch.ops.sdm_phase1.phase1_forward.default, args)


@pytest.mark.parametrize("dynamic", [False, True])
def test_operator_under_torch_compile_fullgraph_on_cpu(dynamic):
    """torch.compile traces the operator's wrapper whole (fullgraph; dynamo and AOT autograd
    with the eager backend, which needs no C++ compiler), static and with a dynamic N, and the
    compiled call gives the NumPy path's bits."""
    from sdm_phase1 import torch_ops

    torch._dynamo.reset()
    inputs, opts = _case(31, N=4, C=16, W=4, R=4, P=2, num_keys=32, valid_last=11, vals="bf16")
    want = cpu_result(inputs, opts)
    t = torch_inputs(inputs, "cpu")

    def f(k_idx, q_idx, k_val, q_val, g, beta):
        return torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, beta=beta, **opts)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    assert_same(want, compiled(*(t[n] for n in NAMES), t["beta"]))


def test_a_changed_key_makes_a_new_plan():
    """The plan key is one tuple of everything a plan and its checks depend on: the same call
    again creates nothing, and a call that differs in any one of them gets a plan of its own
    (and the NumPy path's bits)."""
    from sdm_phase1._core.options import key_options
    from sdm_phase1._frameworks.torch_impl import call_key

    inputs, opts = _case(9)
    t = torch_inputs(inputs, "cpu")

    def key_of(tensors, **kw):
        o = dict(opts, **kw)
        options = key_options(o["num_parallel"], o["stream_offset"], o["num_keys"], o["valid_last"],
                              True, 0, None, False, True)[:7]
        return call_key(*(tensors[n] for n in NAMES), tensors["beta"], None, -1, 0, *options)

    p1.clear_plan_cache()  # plans of earlier tests may have any of the keys below
    _call(t, opts)
    before = p1.plan_cache_info()
    _call(t, opts)
    assert p1.plan_cache_info()["created"] == before["created"]
    assert key_of(t) in plan_cache._cache.plans
    for change in (dict(valid_last=7), dict(need_read_groups=False), dict(det_fields=3071),
                   dict(rec_tile=4)):
        given = {k: v for k, v in change.items() if k in opts}
        extra = {k: v for k, v in change.items() if k not in opts}
        created = p1.plan_cache_info()["created"]
        got = _call(t, dict(opts, **given), **extra)
        assert p1.plan_cache_info()["created"] == created + 1, change
        assert_same(cpu_result(inputs, dict(opts, **given), **extra), got)
    # Inputs of another dtype or shape: another key, another plan.
    wider = {n: (v.to(torch.int64) if n in ("k_idx", "q_idx") else v) for n, v in t.items()}
    fewer = {n: v[:2] for n, v in t.items()}
    for other in (wider, fewer):
        assert key_of(other) != key_of(t)
        created = p1.plan_cache_info()["created"]
        _call(other, opts)
        assert p1.plan_cache_info()["created"] == created + 1
        assert key_of(other) in plan_cache._cache.plans


@pytest.mark.parametrize("op", [False, True])
@pytest.mark.parametrize("name", NAMES + ("beta", "stream_lengths"))
def test_non_contiguous_input_is_refused(op, name):
    """A non-contiguous tensor is refused naming it and the fix, on the call that creates the
    plan and on the cached plan's calls alike (the NumPy path's rule)."""
    inputs, opts = _case()  # N 4, C 16, num_parallel 2, valid_last 9: lengths <= 25 read valid data
    t = torch_inputs(inputs, "cpu")
    t["stream_lengths"] = torch.tensor([25, 7], dtype=torch.int64)
    want = cpu_result(inputs, opts, stream_lengths=t["stream_lengths"].numpy())
    strided = t[name].repeat_interleave(2, dim=-1)[..., ::2]  # the same values, every other element
    torch.testing.assert_close(strided, t[name], rtol=0, atol=0, equal_nan=True)  # (NaN padding)
    assert not strided.is_contiguous()
    message = (f"{name} is not contiguous (shape {tuple(strided.shape)}, strides {strided.stride()}): "
               f"sdm_phase1 reads its inputs in place, without copying them; pass {name}.contiguous()")

    def call(tensors):
        return _call(tensors, opts, op=op, stream_lengths=tensors["stream_lengths"])

    p1.clear_plan_cache()
    for _ in range(2):  # no plan yet, then (after the contiguous call) the cached plan
        with pytest.raises(ValueError) as info:
            call(dict(t, **{name: strided}))
        assert str(info.value) == message
        assert_same(want, call(dict(t, **{name: strided.contiguous()})))  # the fix it names


@pytest.mark.parametrize("op", [False, True])
def test_valid_last_may_be_left_out_with_stream_lengths(op):
    """With stream_lengths, valid_last is ignored and may be left out: the NumPy path's bytes
    with an explicit valid_last."""
    lengths = np.array([30, 7])
    inputs, opts = _case(7, valid_last=16)
    want = cpu_result(inputs, opts, det_fields=3071, stream_lengths=lengths)
    t = torch_inputs(inputs, "cpu")
    del opts["valid_last"]
    for _ in range(2):  # the second call: the cached plan
        assert_same(want, _call(t, opts, op=op, det_fields=3071, stream_lengths=torch.from_numpy(lengths)))
    with pytest.raises(TypeError, match="valid_last must be an int, got NoneType None"):
        _call(t, opts, op=op)


def test_layout_refuses_cpu_lengths_past_their_sequence():
    """Lengths in a CPU tensor are read on the host, so checked (as NumPy's)."""
    ids = torch.zeros(2, 5, 3, 2, dtype=torch.int32)
    vals, g = torch.ones(2, 5, 3, 2), torch.zeros(2, 5, 3)
    assert p1.to_chunks(ids, ids, vals, vals, g, chunk_size=4, lengths=torch.tensor([5, 2])).layout.steps == 2
    with pytest.raises(ValueError, match=r"lengths\[0\] = 6: sequence 0 has T = 5 tokens"):
        p1.to_chunks(ids, ids, vals, vals, g, chunk_size=4, lengths=torch.tensor([6, 2]))
    with pytest.raises(ValueError, match=r"cu_seqlens\[1:3\] = \[4, 11\]: sequence 1 \(length 7\)"):
        p1.to_chunks(ids[0], ids[0], vals[0], vals[0], g[0], chunk_size=4,
                     cu_seqlens=torch.tensor([0, 4, 11]), max_len=7)
