"""The eager PyTorch path (CPU tensors; skips without torch): the fast plan lookup in front of
the plan cache, the outputs carved from one block, and the autograd Function that eager calls
with grad take instead of the operator's registered formula. Checked here:
- the same bits as the NumPy path and as the operator, with and without grad, forward and
  backward (the operator's own autograd formula, which torch.compile keeps, included);
- a call that differs in anything its plan or its checks depend on (shape, dtype, option,
  what is given, the stream) gets another plan; the same call again creates nothing;
- every error of a cold call is raised, word for word, by the same call once the lookup is
  warm;
- the outputs share one block but are tensors of their own to autograd: changing one in place
  leaves the others (and the backward) alone, a changed payload is caught;
- eviction goes by use, fast lookups included; an evicted or moved plan is not used.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import assert_same, cpu_result, split, to_numpy, torch_inputs
from sdm_phase1._core import plan_cache
from test_reference import make_case

torch = pytest.importorskip("torch")
from sdm_phase1 import torch_ops  # noqa: E402  (after the skip: imports torch)
from sdm_phase1._frameworks import torch_impl  # noqa: E402

NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")
VALUES = ("k_val", "q_val", "g", "beta")
FLOATS = ("a", "qk", "log_k", "log_q", "rex", "cpe", "k_eff", "q_w")


def _case(seed=1, **kw):
    shape = dict(N=4, C=16, W=4, R=3, P=2, num_keys=32, valid_last=9)
    shape.update(kw)
    return split(make_case(seed, **shape))


def _tensors(inputs, grad=()):
    t = torch_inputs(inputs, "cpu")
    for n in grad:
        if t[n] is not None:
            t[n].requires_grad_()
    return t


def _call(t, opts, f=None, **kw):
    f = f or torch_ops.phase1_forward
    return f(*(t[n] for n in NAMES), beta=t["beta"], **opts, **kw)


def _operator(t, opts, det=None, **kw):
    """The operator itself, dispatched with its registered autograd formula (torch.compile's
    path), as a Phase1 (det: None for the default)."""
    if det is None:
        det = p1.DET_SHIPPED | (p1.DET_RECORDS if t["beta"] is not None else 0)
    got = torch_ops.phase1_op(*(t[n] for n in NAMES), t["beta"], opts["num_parallel"],
                              opts["stream_offset"], opts["num_keys"], opts["valid_last"], True, 0,
                              det, False, **kw)
    fields = torch_ops._fields_of(det, True)
    return torch_impl.phase1_from_outputs(got, fields, t["k_idx"].shape[1], t["k_idx"].shape[2],
                                          t["k_idx"].device)


VARIANTS = [dict(), dict(vals="bf16", gate="write"), dict(idx=np.int64, det_fields=3071),
            dict(vals="bf16", det_fields=3071, stream_lengths=np.array([30, 7]))]


@pytest.mark.parametrize("variant", VARIANTS, ids=["f32", "bf16-gw", "i64-records", "lengths"])
@pytest.mark.parametrize("grad", [False, True])
def test_same_bits_as_numpy_and_the_operator(variant, grad):
    """Cold and warm calls of both eager entries, with and without grad, give the NumPy path's
    bytes, and the operator's."""
    variant = dict(variant)
    det = variant.pop("det_fields", None)
    lengths = variant.pop("stream_lengths", None)
    inputs, opts = _case(**variant, **({} if lengths is None else {"stream_lengths": lengths}))
    kw = {} if det is None else {"det_fields": det}
    if lengths is not None:
        kw["stream_lengths"] = lengths
    want = cpu_result(inputs, opts, **kw)
    t = _tensors(inputs, VALUES if grad else ())
    if lengths is not None:
        kw["stream_lengths"] = torch.from_numpy(lengths)
    p1.clear_plan_cache()
    for _ in range(2):  # the plan made, then found by the fast lookup
        for f in (torch_ops.phase1_forward, p1.phase1_forward):
            got = _call(t, opts, f, **kw)
            assert_same(want, got)
            assert all(getattr(got, n).requires_grad == grad for n in FLOATS)
    op_kw = {} if lengths is None else {"stream_lengths": kw["stream_lengths"]}
    assert_same(want, _operator(t, opts, det, **op_kw))


def _grads(out, t, ups):
    names = [n for n in VALUES if t[n] is not None]
    got = torch.autograd.grad([getattr(out, f) for f in ups], [t[n] for n in names],
                              [ups[f] for f in ups], allow_unused=True)
    return {n: None if x is None else to_numpy(x) for n, x in zip(names, got)}


@pytest.mark.parametrize("variant", [dict(), dict(vals="bf16", gate="write"),
                                     dict(vals="bf16", stream_lengths=np.array([30, 7]))])
def test_backward_same_bits_as_the_operators_formula(variant):
    """The eager Function's gradients are the operator's registered formula's bits (the
    formula torch.compile keeps), cold and warm, for every float output's gradient at once and
    for a few (the others None)."""
    lengths = variant.get("stream_lengths")
    inputs, opts = _case(3, **variant)
    t = _tensors(inputs, VALUES)
    kw = {} if lengths is None else {"stream_lengths": torch.from_numpy(lengths)}
    rng = np.random.default_rng(5)
    p1.clear_plan_cache()
    for fields in (FLOATS, ("qk", "k_eff"), ("rex",)):
        for _ in range(2):
            eager = _call(t, opts, **kw)
            assert type(eager.a.grad_fn).__name__ == "_Phase1FunctionBackward"
            ups = {f: torch.from_numpy(rng.standard_normal(getattr(eager, f).shape))
                   .to(getattr(eager, f).dtype) for f in fields}
            want = _grads(_operator(t, opts, **kw), t, ups)
            got = _grads(eager, t, ups)
            assert got.keys() == want.keys()
            for n in want:
                assert (got[n] is None) == (want[n] is None), n
                if want[n] is not None:
                    assert got[n].dtype == want[n].dtype and got[n].tobytes() == want[n].tobytes(), n


def test_the_same_call_finds_its_plan_and_another_gets_its_own():
    """The fast lookup: the same call again creates no plan and counts a hit; a call that
    differs in a shape, a dtype, an option, beta or repeats being given gets a plan of its own
    (and the NumPy path's bits); det_fields' default named or left out is the same plan, and
    so is the call with stream_lengths (the lengths are read at each call), its own entry of
    the fast lookup."""
    inputs, opts = _case(9)
    t = _tensors(inputs)
    p1.clear_plan_cache()
    torch_impl._FAST.clear()
    _call(t, opts)
    info = p1.plan_cache_info()
    _call(t, opts, det_fields=p1.DET_SHIPPED | p1.DET_RECORDS)  # beta given: the default
    _call(t, opts)
    after = p1.plan_cache_info()
    assert after["created"] == info["created"] and after["hits"] >= info["hits"] + 2
    rep = torch.zeros(1, dtype=torch.int64)
    lengths = torch.tensor([25, 7])
    others = [
        (dict(t, k_idx=t["k_idx"].long(), q_idx=t["q_idx"].long()), opts, {}),
        ({n: (v[:2] if v is not None else None) for n, v in t.items()}, opts, {}),
        (dict(t, beta=None), opts, {}),
        (t, dict(opts, valid_last=7), {}),
        (t, opts, dict(need_read_groups=False)),
        (t, opts, dict(rec_tile=4)),
    ]
    for tensors, o, kw in others + [(t, opts, dict(stream_lengths=lengths))]:
        created = p1.plan_cache_info()["created"]
        entries = len(torch_impl._FAST)
        got = _call(tensors, o, **kw)
        made = 0 if "stream_lengths" in kw else 1
        assert p1.plan_cache_info()["created"] == created + made, (o, kw)
        assert len(torch_impl._FAST) == entries + 1, (o, kw)
        numpy_kw = dict(kw, **({"stream_lengths": lengths.numpy()} if "stream_lengths" in kw else {}))
        assert_same(cpu_result({n: to_numpy(v) for n, v in tensors.items()}, o, **numpy_kw), got)
    created = p1.plan_cache_info()["created"]
    p1.phase1_forward(*(t[n] for n in NAMES), rep, beta=t["beta"], **opts)  # repeats: its key
    assert p1.plan_cache_info()["created"] == created + 1
    p1.phase1_forward(*(t[n] for n in NAMES), rep, beta=t["beta"], **opts)
    assert p1.plan_cache_info()["created"] == created + 1


def _errors(t, opts):
    """(call, what it changes) pairs of bad calls, each raising before anything runs."""
    strided = t["k_val"].repeat_interleave(2, dim=-1)[..., ::2]
    return [
        (lambda: _call(dict(t, k_val=strided), opts), "non-contiguous k_val"),
        (lambda: _call(dict(t, q_idx=t["q_idx"].long()), opts), "q_idx of another dtype"),
        (lambda: _call(dict(t, q_val=t["q_val"][:, :, :-1].contiguous()), opts), "q_val's shape"),
        (lambda: _call(dict(t, g=t["g"].double()), opts), "float64 g"),
        (lambda: _call(dict(t, k_val=t["k_val"].half()), opts), "float16 k_val"),
        (lambda: _call(dict(t, q_idx=t["q_idx"].tolist()), opts), "a list for q_idx"),
        (lambda: _call(dict(t, q_val=t["q_val"].to("meta")), opts), "q_val on meta"),
        (lambda: _call(dict(t, beta=t["beta"][:, :-1].contiguous()), opts), "beta's shape"),
        (lambda: _call(t, dict(opts, num_parallel=True)), "a bool num_parallel"),
        (lambda: _call(t, dict(opts, valid_last=17)), "valid_last past C"),
        (lambda: _call(t, dict(opts, valid_last=None)), "valid_last None without lengths"),
        (lambda: _call(t, opts, check=1), "an int check"),
        (lambda: _call(t, opts, det_fields=-1), "a negative det_fields"),
        (lambda: _call(t, opts, stream_lengths=torch.tensor([1, 2, 3])), "3 lengths for 2 streams"),
        (lambda: _call(t, opts, stream_lengths=torch.tensor([1.0, 2.0])), "float lengths"),
        (lambda: p1.phase1_forward(*(t[n] for n in NAMES), torch.zeros(1), beta=t["beta"],
                                   **opts), "float32 repeats"),
        (lambda: _call(dict(t, k_idx=t["k_idx"].double().requires_grad_()), opts),
         "float ids that require grad"),
    ]


@pytest.mark.parametrize("grad", [False, True])
def test_errors_are_the_same_once_the_lookup_is_warm(grad):
    """Each bad call raises the same exception type and message with an empty cache and after
    the good call it differs from has warmed the fast lookup (with and without grad)."""
    inputs, opts = _case(4)
    t = _tensors(inputs, VALUES if grad else ())

    def raised(call):
        with pytest.raises((TypeError, ValueError, RuntimeError, NotImplementedError)) as info:
            call()
        return type(info.value), str(info.value)

    p1.clear_plan_cache()
    torch_impl._FAST.clear()
    cold = [(what, raised(call)) for call, what in _errors(t, opts)]
    for f in (torch_ops.phase1_forward, p1.phase1_forward):
        _call(t, opts, f)  # warm: the plan and the fast lookup's entry
    warm = [(what, raised(call)) for call, what in _errors(t, opts)]
    assert warm == cold
    names = {"non-contiguous k_val": "k_val", "q_idx of another dtype": "q_idx",
             "q_val's shape": "q_val", "float64 g": "g", "q_val on meta": "q_val",
             "a bool num_parallel": "num_parallel", "valid_last past C": "valid_last",
             "an int check": "check", "3 lengths for 2 streams": "stream_lengths"}
    for what, (_, message) in warm:
        if what in names:
            assert names[what] in message, (what, message)


def test_outputs_share_a_block_but_are_their_own_tensors():
    """Without grad and with: the outputs are carved from one block (one storage, 256-byte
    aligned, no overlap), but none is a view to autograd: one changed in place changes no
    other's version, and the backward of a loss on the others still runs."""
    inputs, opts = _case(6)
    for grad in (False, True):
        t = _tensors(inputs, VALUES if grad else ())
        out = _call(t, opts, det_fields=3071)
        present = [x for x in out if x is not None and x.numel()]
        assert len({x.untyped_storage().data_ptr() for x in present}) == 1
        spans = sorted((x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()) for x in present)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
        assert all((start - spans[0][0]) % 256 == 0 for start, _ in spans)
        assert all(x._base is None and not x._is_view() for x in present)
        with torch.no_grad():
            out.rex.mul_(2)
            out.pos_k.add_(1)
        assert out.rex._version == 1 and out.pos_k._version == 1
        assert all(x._version == 0 for x in present if x is not out.rex and x is not out.pos_k)
        if grad:
            (out.a.sum() + out.k_eff.float().sum()).backward()
            assert t["k_val"].grad is not None
            out.qk.mul_(3)  # in place with grad: autograd records it, as for any tensor
            assert out.qk.grad_fn is not None


def test_a_changed_payload_is_caught_and_a_changed_id_too():
    """The backward reads the forward's payload and ids: changed in place, autograd refuses
    the backward (as it did when the payload was an allocation of its own)."""
    inputs, opts = _case(7)
    for change in ("payload", "k_idx"):
        t = _tensors(inputs, VALUES)
        out = _call(t, opts)
        with torch.no_grad():
            (out.payload if change == "payload" else t["k_idx"]).add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.a.sum().backward()


def test_parameters_take_the_eager_path_and_subclasses_the_operator():
    """nn.Parameter values take the eager Function; under a dispatch mode (FakeTensorMode) the
    call takes the operator, whose fake implementation answers it."""
    inputs, opts = _case(8)
    t = _tensors(inputs)
    params = dict(t, **{n: torch.nn.Parameter(t[n]) for n in ("k_val", "q_val", "g")})
    out = _call(params, opts)
    assert type(out.a.grad_fn).__name__ == "_Phase1FunctionBackward"
    assert_same(cpu_result(inputs, opts), out)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = {n: (mode.from_tensor(v) if v is not None else None) for n, v in params.items()}
        got = _call(fake, opts)
    assert tuple(got.a.shape) == tuple(out.a.shape) and type(got.a).__name__ == "FakeTensor"


def test_an_evicted_or_moved_plan_is_not_used():
    """The fast lookup holds plans the cache may destroy (eviction, clear_plan_cache) or a
    capture may move to its stream: such a plan is passed over and the call made right."""
    inputs, opts = _case(10)
    t = _tensors(inputs)
    want = cpu_result(inputs, opts)
    _call(t, opts)
    plan = torch_impl._call_plan(*(t[n] for n in NAMES), t["beta"], None, opts["num_parallel"],
                                 opts["stream_offset"], opts["num_keys"], opts["valid_last"], True,
                                 0, None, False, None)[0]
    p1.clear_plan_cache()
    assert plan.handle is None
    created = p1.plan_cache_info()["created"]
    assert_same(want, _call(t, opts))
    assert p1.plan_cache_info()["created"] == created + 1
    again = torch_impl._call_plan(*(t[n] for n in NAMES), t["beta"], None, opts["num_parallel"],
                                  opts["stream_offset"], opts["num_keys"], opts["valid_last"], True,
                                  0, None, False, None)[0]
    assert again is not plan and again.handle is not None
    with plan_cache._cache.lock:  # moved to another stream, as _take_other_stream does
        plan_cache._cache.plans.pop(again.key)
    again.set_stream(12345)
    assert_same(want, _call(t, opts))
    assert p1.plan_cache_info()["created"] == created + 2
    again.destroy()


def test_eviction_goes_by_use_fast_lookups_included(monkeypatch):
    """With room for two plans, the plan used last (found by the fast lookup, not the cache)
    stays when a third is made; the other goes. (Room for two beside the plans that CUDA
    graphs of earlier tests pin, which no clearing removes.)"""
    inputs, opts = _case(11)
    t = _tensors(inputs)
    p1.clear_plan_cache()
    torch_impl._FAST.clear()
    monkeypatch.setattr(plan_cache, "CACHE_LIMIT", 2 + p1.plan_cache_info()["pinned"])

    def plan_of(o):
        _call(t, o)
        return torch_impl._call_plan(*(t[n] for n in NAMES), t["beta"], None, o["num_parallel"],
                                     o["stream_offset"], o["num_keys"], o["valid_last"], True, 0,
                                     None, False, None)[0]

    first = plan_of(opts)
    second = plan_of(dict(opts, valid_last=8))
    plan_of(opts)  # the first, used again through the fast lookup
    third = plan_of(dict(opts, valid_last=7))
    assert first.handle is not None and third.handle is not None and second.handle is None


def test_a_call_keeps_its_new_plan_when_every_other_is_pinned(monkeypatch):
    """The plan made for a call is never the one its own creation evicts: with the cache full
    of pinned plans (as CUDA graphs leave them), the call still runs, the cache holding one
    more than its limit, and gives the NumPy call's bits."""
    inputs, opts = _case(12)
    t = _tensors(inputs)
    p1.clear_plan_cache()
    torch_impl._FAST.clear()
    _call(t, opts)
    _call(t, dict(opts, valid_last=7))
    with plan_cache._cache.lock:
        held = list(plan_cache._cache.plans.values())
    for p in held:
        p.pinned = True
    monkeypatch.setattr(plan_cache, "CACHE_LIMIT", len(held))
    try:
        got = _call(t, dict(opts, valid_last=8))
        assert p1.plan_cache_info()["plans"] == len(held) + 1
    finally:
        for p in held:
            p.pinned = False
    p1.clear_plan_cache()
    torch_impl._FAST.clear()
    assert_same(cpu_result(inputs, dict(opts, valid_last=8)), got)
