"""PyTorch autograd through the Phase-1 operator (CPU tensors; skips without torch).

torch.ops.sdm_phase1.phase1_forward's autograd formula calls the backward operator, which calls
the library's sdm_p1_execute_backward. Checked here:
- its gradients are, bit for bit, those of sdm_phase1.phase1_backward (NumPy) for the same
  upstream gradients (which sorts again from the ids, where autograd passes the forward's
  payload), through the operator's wrapper and through phase1_forward on torch tensors;
- they are within the bound of test_backward_cpu.py of the float64 reference VJP
  (backward_reference.vjp_f64) on hot slots with padding, Zipf-skewed ids and per-stream
  lengths, with NaN in every upstream cell and padding input the backward must not read;
- torch.library.opcheck of both operators (schema, autograd registration, fake tensors, AOT
  dispatch with dynamic shapes);
- torch.compile(fullgraph=True, backend="aot_eager") of forward and loss gives eager's bits;
- a second differentiation and ids that are not integers fail with a clear error;
- without grad the call records nothing.
"""

from __future__ import annotations

import backward_reference as br
import numpy as np
import pytest
from gpu_support import to_numpy, torch_inputs
from test_backward_cpu import check_against_reference, get_case, upstream
from test_backward_reference import make_case

p1 = pytest.importorskip("sdm_phase1")
torch = pytest.importorskip("torch")
from sdm_phase1 import torch_ops  # noqa: E402  (after the skip: imports torch)

# The differentiable outputs that are float tensors (the records' float words live in int32
# outputs, which autograd gives no gradient).
FLOAT_FIELDS = ("a", "qk", "log_k", "log_q", "rex", "cpe", "k_eff", "q_w", "kspa")
VALUES = ("k_val", "q_val", "g", "beta")
IDS = ("k_idx", "q_idx")


def zipf_case(seed, *, N=4, P=2, C=16, W=4, R=3, num_keys=64, exponent=1.2):
    """make_case's inputs (padding in each stream's last chunk) with Zipf-skewed write ids: a
    few hot slots take most writes, repeats within a token included."""
    case = make_case(seed, N=N, P=P, C=C, W=W, R=R, num_keys=num_keys, valid_last=C - 3)
    rng = np.random.default_rng(seed + 1)
    ranks = rng.zipf(exponent, size=(N, C, W)) % num_keys
    base = (np.arange(N) % P)[:, None, None] * case["kw"]["stream_offset"]
    valid = np.isfinite(case["g"][..., 0])  # padding tokens hold NaN gates
    case["k_idx"] = np.where(valid[..., None], ranks + base, case["k_idx"]).astype(np.int64)
    return case


def tensors(case, requires_grad=VALUES):
    """The case's inputs as CPU tensors, those named in requires_grad requiring grad."""
    t = torch_inputs({n: case[n] for n in IDS + VALUES}, "cpu")
    for n in VALUES:
        if t[n] is not None and n in requires_grad:
            t[n].requires_grad_()
    lengths = case["kw"]["stream_lengths"]
    t["stream_lengths"] = None if lengths is None else torch.tensor(lengths, dtype=torch.int64)
    return t


def options(case):
    kw = case["kw"]
    return dict(num_parallel=kw["num_parallel"], stream_offset=kw["stream_offset"],
                num_keys=kw["num_keys"], valid_last=kw["valid_last"])


def forward(t, case, f=None, **extra):
    f = f or torch_ops.phase1_forward
    det = p1.DET_SHIPPED | (p1.DET_RECORDS if t["beta"] is not None else 0)
    return f(t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], beta=t["beta"],
             stream_lengths=t["stream_lengths"], det_fields=det, **options(case), **extra)


def autograd_grads(case, ups, f=None):
    """{input: gradient as NumPy (bfloat16 as uint16)} of the outputs in `ups` paired with
    them (NumPy upstream gradients, bfloat16 as uint16), through torch autograd."""
    t = tensors(case)
    out = forward(t, case, f)
    names = [n for n in VALUES if t[n] is not None]
    up = torch_inputs(ups, "cpu")
    grads = torch.autograd.grad([getattr(out, f) for f in ups], [t[n] for n in names],
                                [up[f] for f in ups], allow_unused=True)
    return {n: to_numpy(gr) for n, gr in zip(names, grads)}


def numpy_grads(case, ups):
    kw = case["kw"]
    got = p1.phase1_backward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                             ups, beta=case["beta"], **kw)
    return {n: got[n] for n in VALUES if got[n] is not None}


BIT_CASES = ["hot-repeats-g1-pad", "hot-repeats-gw-pad", "stream-lengths-g1", "bf16-gw-no-beta",
             "bf16-g1-beta", "streams-4-lengths-gw"]


@pytest.mark.parametrize("path", ["op", "phase1_forward"])
@pytest.mark.parametrize("cid", BIT_CASES)
def test_same_bits_as_phase1_backward(cid, path):
    """Every float output's upstream gradient at once (NaN where never read): the gradients of
    autograd are phase1_backward's bytes, dtypes and shapes."""
    case = get_case(cid)
    ups = upstream(case, np.random.default_rng(3), fields=FLOAT_FIELDS)
    want = numpy_grads(case, ups)
    got = autograd_grads(case, ups, f=None if path == "op" else p1.phase1_forward)
    assert set(got) == set(want)
    for n in want:
        assert got[n].dtype == want[n].dtype and got[n].shape == want[n].shape, n
        assert got[n].tobytes() == want[n].tobytes(), n


def test_each_output_reaches_its_inputs_only():
    """One output's gradient at a time: the inputs it does not depend on get no gradient from
    autograd (None: the loss does not reach them, or exactly zero), the others phase1_backward's
    bits. Catches an upstream gradient passed as another output's."""
    case = get_case("hot-repeats-gw-pad")
    for field in FLOAT_FIELDS:
        ups = upstream(case, np.random.default_rng(9), fields=(field,))
        want = numpy_grads(case, ups)
        got = autograd_grads(case, ups)
        for n in want:
            if n in br.DEPENDS_ON[field]:
                assert got[n].tobytes() == want[n].tobytes(), (field, n)
            else:
                assert got[n] is None or not np.any(got[n]), (field, n)


def as_bf16(case):
    """The case with bfloat16 values (NaN padding stays NaN)."""
    return dict(case, k_val=p1.bf16_from_float32(case["k_val"]),
                q_val=p1.bf16_from_float32(case["q_val"]))


REFERENCE_CASES = {
    "hot-slots-padding": lambda: get_case("hot-repeats-gw-pad"),
    "hot-one-slot": lambda: get_case("one-slot-g1-pad"),
    "zipf-ids": lambda: zipf_case(5),
    "zipf-ids-bf16": lambda: as_bf16(zipf_case(6)),
    "stream-lengths": lambda: get_case("streams-4-lengths-gw"),
}


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
def test_against_the_float64_reference(name):
    """Autograd's gradients within the documented bound of backward_reference.vjp_f64."""
    case = REFERENCE_CASES[name]()
    ups = upstream(case, np.random.default_rng(17), fields=FLOAT_FIELDS)
    got = autograd_grads(case, ups)
    bf16 = case["k_val"].dtype == np.uint16
    check_against_reference(f"autograd {name}", case, ups, got, bf16_grads=bf16)


def _op_args(case, t):
    o = options(case)
    return ((t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], t["beta"], o["num_parallel"],
             o["stream_offset"], o["num_keys"], o["valid_last"], True, 0, 3071, False))


@pytest.mark.parametrize("cid", ["hot-repeats-g1-pad", "stream-lengths-g1"])
def test_opcheck_forward_with_autograd(cid):
    """opcheck's schema, autograd registration, fake tensor and AOT dispatch (dynamic) tests
    of the forward operator whose value inputs require grad (the AOT test compares the eager
    and the compiled gradients)."""
    case = get_case(cid)
    for n in VALUES:  # padding tokens' NaNs: made finite, which opcheck's comparisons need
        if case[n] is not None:
            case[n] = np.nan_to_num(case[n])
    t = tensors(case)
    args = _op_args(case, t)
    kwargs = {} if t["stream_lengths"] is None else {"stream_lengths": t["stream_lengths"]}
    torch.library.opcheck(torch.ops.sdm_phase1.phase1_forward.default, args, kwargs,
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor", "test_aot_dispatch_dynamic"))


def backward_operator_case():
    """A case's tensors, options, and the backward operator's arguments after the ids: its
    forward's payload and upstream gradients of a, k_eff and kspa."""
    case = get_case("bf16-g1-beta")
    t = tensors(case, requires_grad=())
    ups = torch_inputs(upstream(case, np.random.default_rng(2), fields=("a", "k_eff", "kspa")), "cpu")
    ups = {n: torch.nan_to_num(u) for n, u in ups.items()}
    payload = forward(t, case).payload.clone()
    grads = [ups.get(n) for n in torch_ops.GRAD_NAMES]
    o = options(case)
    rest = (t["k_val"], t["q_val"], t["g"], t["beta"], payload, None, grads, o["num_parallel"],
            o["stream_offset"], o["num_keys"], o["valid_last"])
    return t, o, rest


def test_opcheck_backward_operator():
    """The backward operator on its own: schema, fake tensors, AOT dispatch."""
    t, _, rest = backward_operator_case()
    args = (t["k_idx"], t["q_idx"]) + rest
    torch.library.opcheck(torch.ops.sdm_phase1.phase1_backward.default, args)
    got = torch.ops.sdm_phase1.phase1_backward(*args)
    assert [x.dtype for x in got] == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]


def test_backward_operator_checks_the_payload_against_its_ids():
    """A payload that is not the sort of the ids given with it (the forward's, with each
    stream's slot order reversed in the ids) is refused by the backward operator (issue 44);
    with payload_trusted=True, as the autograd formula calls it, the ids are not read: the
    gradients are those of the payload's own ids, bit for bit."""
    t, o, rest = backward_operator_case()
    N = t["k_idx"].shape[0]
    nk = o["num_keys"]
    base = (torch.arange(N) % o["num_parallel"] * o["stream_offset"])[:, None, None]

    def reverse(ids):
        inside = (ids >= base) & (ids < base + nk)
        return torch.where(inside, 2 * base + nk - 1 - ids, ids).to(ids.dtype)

    other = (reverse(t["k_idx"]), reverse(t["q_idx"])) + rest
    with pytest.raises(p1.InvalidInputError, match="is out of the order of these ids"):
        torch.ops.sdm_phase1.phase1_backward(*other)
    trusted = torch.ops.sdm_phase1.phase1_backward(*other, payload_trusted=True)
    own = torch.ops.sdm_phase1.phase1_backward(t["k_idx"], t["q_idx"], *rest)
    assert len(trusted) == len(own) == 4
    assert all(torch.equal(a, b) for a, b in zip(trusted, own))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_forward_loss_backward(dynamic):
    """torch.compile(fullgraph=True, backend="aot_eager") of the forward and a sum-style loss
    over several outputs; loss.backward() runs AOT autograd's backward graph: the same loss
    and gradients, bit for bit, as eager."""
    torch._dynamo.reset()
    case = get_case("streams-3-gw-mixed")
    opts = options(case)
    weight = torch.from_numpy(np.random.default_rng(4).standard_normal(case["k_val"].shape)).float()

    def loss_fn(k_idx, q_idx, k_val, q_val, g, beta):
        out = torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, beta=beta, **opts)
        return out.a.sum() + (out.k_eff * weight).sum() + out.q_w.square().sum() + out.rex.sum()

    def grads(f):
        t = tensors(case)
        loss = f(*(t[n] for n in IDS + VALUES))
        loss.backward()
        return loss.detach(), [t[n].grad for n in VALUES]

    want_loss, want = grads(loss_fn)
    got_loss, got = grads(torch.compile(loss_fn, fullgraph=True, backend="aot_eager", dynamic=dynamic))
    assert torch.equal(got_loss, want_loss)
    for n, w, gr in zip(VALUES, want, got):
        assert gr is not None and w is not None, n
        assert torch.equal(gr, w), n
    assert want[3].abs().sum() == 0  # beta reaches Phase 1 through kspa alone, absent here
    assert want[0].abs().sum() > 0 and want[1].abs().sum() > 0 and want[2].abs().sum() > 0


def test_double_backward_raises():
    """The backward is differentiable once (docs/backward.md): create_graph gives the first
    gradients, differentiating them again raises the documented error."""
    case = get_case("hot-repeats-g1-pad")
    t = tensors(case)
    out = forward(t, case)
    (dk,) = torch.autograd.grad(out.qk.sum(), [t["k_val"]], create_graph=True)
    assert dk.requires_grad
    with pytest.raises(RuntimeError, match="the Phase-1 backward is not differentiable"):
        dk.sum().backward()


@pytest.mark.parametrize("path", ["op", "phase1_forward"])
def test_ids_that_require_grad_are_refused(path):
    """Ids are not differentiable: only integer ids are taken, so float ids (the only ones that
    can require grad) are refused naming the argument, with or without grad."""
    case = get_case("hot-repeats-g1-pad")
    t = tensors(case)
    t["k_idx"] = t["k_idx"].double().requires_grad_()
    with pytest.raises(ValueError, match="k_idx"):
        forward(t, case, None if path == "op" else p1.phase1_forward)


def test_without_grad_nothing_is_recorded():
    """Under no_grad (and for inputs that do not require grad) the outputs carry no graph; with
    grad they do, and the forward's bits are the same either way."""
    case = get_case("hot-repeats-gw-pad")
    t = tensors(case)
    with torch.no_grad():
        plain = forward(t, case)
    recorded = forward(t, case)
    detached = forward({n: (x.detach() if x is not None else None) for n, x in t.items()}, case)
    for field in FLOAT_FIELDS:
        assert getattr(plain, field).grad_fn is None and getattr(detached, field).grad_fn is None
        assert getattr(recorded, field).grad_fn is not None
        assert to_numpy(getattr(recorded, field)).tobytes() == to_numpy(getattr(plain, field)).tobytes()
    assert recorded.payload.grad_fn is None  # an integer output: no gradient


def test_only_some_inputs_require_grad():
    """g alone requires grad: its gradient is phase1_backward's, the others get none."""
    case = get_case("hot-repeats-gw-pad")
    t = tensors(case, requires_grad=("g",))
    out = forward(t, case)
    ups = upstream(case, np.random.default_rng(8), fields=("log_k", "cpe", "k_eff"))
    up = torch_inputs(ups, "cpu")
    loss = sum((getattr(out, f) * torch.nan_to_num(up[f])).sum() for f in ups)
    loss.backward()
    want = numpy_grads(case, {f: np.nan_to_num(u) for f, u in ups.items()})
    assert t["g"].grad.numpy().tobytes() == want["g"].tobytes()
    assert all(t[n].grad is None for n in ("k_val", "q_val", "beta"))


def _backward_op_args(case, ups):
    """The backward operator's arguments: the case's inputs, its forward's payload, the upstream
    gradients in GRAD_NAMES order."""
    t = tensors(case, requires_grad=())
    payload = forward(t, case).payload
    up = torch_inputs(ups, "cpu")
    o = options(case)
    return [t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], t["beta"], payload,
            t["stream_lengths"], [up.get(n) for n in torch_ops.GRAD_NAMES], o["num_parallel"],
            o["stream_offset"], o["num_keys"], o["valid_last"]]


def test_backward_operator_checks_its_arguments():
    """The backward operator called directly: upstream gradients and the payload checked (the
    checks the CUDA path shares), a corrupted payload refused by the library; check=True
    changes nothing on the CPU (errors are raised at once there)."""
    case = get_case("hot-repeats-g1-pad")
    ups = {k: np.nan_to_num(u) for k, u in
           upstream(case, np.random.default_rng(2), fields=("a", "k_eff", "kspa")).items()}
    args = _backward_op_args(case, ups)
    op = torch.ops.sdm_phase1.phase1_backward
    want = op(*args)
    assert all(torch.equal(a, b) for a, b in zip(op(*args, check=True), want))
    place = torch_ops.GRAD_NAMES.index("a")
    for change, error, match in [
        (lambda u: u.double(), ValueError, r"grads\['a'\] has dtype float64"),
        (lambda u: u[:, :, :-1].contiguous(), ValueError, r"grads\['a'\] has shape"),
        (lambda u: u.transpose(1, 2), ValueError, r"grads\['a'\] is not contiguous"),
        (lambda u: u.to(torch.bfloat16), ValueError, r"grads\['a'\] has dtype bfloat16"),
    ]:
        bad = list(args)
        bad[8] = list(args[8])
        bad[8][place] = change(args[8][place])
        with pytest.raises(error, match=match):
            op(*bad)
    bad = list(args)
    bad[8] = args[8][:3]
    with pytest.raises(ValueError, match="one tensor or None per differentiable output"):
        op(*bad)
    for payload in (args[6][:, :8].contiguous(), args[6].long()):
        bad = list(args)
        bad[6] = payload
        with pytest.raises(ValueError, match="payload must be the forward's payload output"):
            op(*bad)
    bad = list(args)
    bad[6] = args[6].clone()
    bad[6][1, [0, 1]] = args[6][1, [1, 1]]  # one entry named twice: not the chunk's sort
    with pytest.raises(p1.InvalidInputError, match="sdm_p1_execute_backward.*payload"):
        op(*bad)
    bad = list(args)
    bad[6] = None  # sorted again from the ids: the same bits
    assert all(torch.equal(a, b) for a, b in zip(op(*bad), want))


def test_backward_plans_are_cached():
    """A backward's plan is made once per shapes and options, beside the forward's (its own
    key), and found again by the next step."""
    case = get_case("hot-repeats-gw-pad")
    ups = upstream(case, np.random.default_rng(6), fields=FLOAT_FIELDS)
    p1.clear_plan_cache()
    first = p1.plan_cache_info()
    want = autograd_grads(case, ups)
    made = p1.plan_cache_info()
    # forward, backward (plans a CUDA graph of an earlier test pinned stay in the cache)
    assert made["created"] == first["created"] + 2 and made["plans"] == first["plans"] + 2
    got = autograd_grads(case, ups)
    after = p1.plan_cache_info()
    assert after["created"] == made["created"] and after["hits"] >= made["hits"] + 2
    assert all(got[n].tobytes() == want[n].tobytes() for n in want)
