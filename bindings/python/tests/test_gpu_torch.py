"""PyTorch CUDA tensors on the CUDA backend, through sdm_phase1.phase1_forward and the operator
sdm_phase1::phase1_forward: every output bit equal to the CPU backend's (through the NumPy path
on the same data), the spec's fields and dtypes, a side stream, CUDA graph capture and replay,
torch.compile(fullgraph=True), bad arguments, device-side bad data; and autograd, whose backward
runs on the CUDA backend too: the CPU tensors' gradients bit for bit, no host copy (a CUDA graph
of forward and backward), the backward's bad payload and data.

Skips without torch, without a GPU or with a library built without the CUDA backend."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import (
    assert_same,
    capture_graph,
    cpu_result,
    cuda_skip_reason,
    split,
    to_numpy,
    torch_inputs,
)
from test_backward_cpu import ALL_CASES, get_case, upstream
from test_backward_reference import make_case as backward_case
from test_reference import make_case

torch = pytest.importorskip("torch")
from sdm_phase1.torch_ops import GRAD_NAMES  # noqa: E402  (after the skip: imports torch)
from test_torch_autograd import FLOAT_FIELDS, VALUES, as_bf16, options, tensors, zipf_case  # noqa: E402
from test_torch_autograd import forward as autograd_forward  # noqa: E402

_REASON = cuda_skip_reason() or (None if torch.cuda.is_available() else "torch sees no CUDA device")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

DEV = "cuda:0"
DET_ALL = 3071
BITS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048]


def gpu_result(inputs, opts, repeats=None, **kw):
    t = torch_inputs(inputs, DEV)
    return p1.phase1_forward(t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], repeats,
                             beta=t["beta"], **opts, **kw)


def check_case(case, **kw):
    inputs, opts = split(case)
    want = cpu_result(inputs, opts, **kw)
    got = gpu_result(inputs, opts, **kw)
    torch.cuda.synchronize()
    assert_same(want, got)
    return got


# ---- bit-for-bit identity with the CPU backend ---------------------------------------------


@pytest.mark.parametrize("bit", BITS)
def test_each_det_field_bit_matches_cpu(bit):
    case = make_case(bit, N=6, C=32, W=6, R=5, P=2, num_keys=40, valid_last=21,
                     gate="write" if bit in (1, 8, 128, 2048) else "token",
                     vals="bf16" if bit in (2, 16, 64, 512) else "f32",
                     idx=np.int64 if bit in (4, 32, 256) else np.int32,
                     gate_kind="mixed" if bit in (1, 64) else "normal")
    check_case(case, det_fields=bit)


@pytest.mark.parametrize("variant", [
    dict(N=2, C=256, W=4, R=3, P=1, num_keys=200),
    dict(N=4, C=64, W=16, R=16, P=4, num_keys=1 << 20, kmode="distinct", vals="bf16"),
    dict(N=3, C=17, W=9, R=2, P=3, num_keys=16, gate="write", gate_kind="extreme"),
    dict(N=2, C=40, W=3, R=7, P=2, num_keys=30, valid_last=1, gate_kind="tiny", idx=np.int64),
    dict(N=8, C=128, W=8, R=8, P=2, num_keys=512, vals="bf16", gate_kind="strong"),
])
@pytest.mark.parametrize("options", [dict(det_fields=DET_ALL), dict(det_fields=DET_ALL, rec_tile=7,
                                                                         need_read_groups=False)])
def test_shapes_and_options_match_cpu(variant, options):
    check_case(make_case(len(str(variant)), **variant), **options)


def test_default_fields_with_and_without_beta():
    case = make_case(3, N=4, C=16, W=4, R=4, P=2, num_keys=32, valid_last=9)
    check_case(case)  # beta given: the records too
    case["beta"] = None
    got = check_case(case)
    assert got.krec.numel() == 0 and got.pos_k is not None


def test_repeats_counted_in_place():
    case = make_case(5, N=2, C=8, W=3, R=2, P=1, num_keys=16, kmode="random")
    inputs, opts = split(case)
    want = np.array([7], np.int64)
    cpu_result(inputs, opts, repeats=want)
    rep = torch.full((1,), 7, dtype=torch.int64, device=DEV)
    gpu_result(inputs, opts, rep)
    gpu_result(inputs, opts, rep)
    assert int(rep.item()) == 7 + 2 * (int(want[0]) - 7) and want[0] > 7


# ---- the spec's fields and dtypes ----------------------------------------------------------

SPEC_FIELDS = ("a", "qk", "log_k", "log_q", "rex", "cpe", "is_last", "is_only", "k_eff", "q_w",
               "payload", "pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank",
               "krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre",
               "dc_rec", "qrec8")


def _spec_fields():
    """The spec's Phase1 fields, read from spec/phase1_cuda.py where it can be found."""
    here = Path(__file__).resolve()
    for base in [os.environ.get("SDM_SPEC_DIR")] + [str(p / "shared" / "spec") for p in here.parents]:
        path = Path(base or "/nonexistent") / "phase1_cuda.py"
        if path.is_file():
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and node.name == "Phase1":
                    return tuple(s.target.id for s in node.body if isinstance(s, ast.AnnAssign))
    return SPEC_FIELDS


def test_fields_and_dtypes_are_the_specs():
    assert p1.Phase1._fields == SPEC_FIELDS == _spec_fields()
    case = make_case(9, N=2, C=16, W=4, R=4, P=1, num_keys=32, vals="bf16")
    inputs, opts = split(case)
    out = gpu_result(inputs, opts, det_fields=DET_ALL)
    i8, i32, f32, bf = torch.int8, torch.int32, torch.float32, torch.bfloat16
    want = dict(a=f32, qk=f32, log_k=f32, log_q=f32, rex=f32, cpe=bf, is_last=i8, is_only=i8,
                k_eff=bf, q_w=bf, payload=i32, pos_k=i32, pos_q=i32, q_last=i8, q_only=i8,
                spay_k=i32, spay_q=i32, spay_rank=i32, krec=i32, kspa=f32, qrec=i32, tiles_k=i32,
                tiles_q=i32, segb_k=i32, dc_kpos=i32, dc_bpre=i32, dc_rec=i32, qrec8=i32)
    for name in SPEC_FIELDS:
        t = getattr(out, name)
        assert isinstance(t, torch.Tensor) and t.dtype == want[name], name
        assert t.device == torch.device(DEV) and t.is_contiguous(), name
    assert out.dc_rec.numel() == 0
    # Not requested: None, or empty tensors for is_last / is_only and the records.
    out = gpu_result(inputs, opts, det_fields=0, need_read_groups=False)
    for name in ("pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank"):
        assert getattr(out, name) is None, name
    assert out.is_last.shape == (0, 16, 4) and out.is_last.dtype == i8
    assert out.krec.shape == (0,) and out.krec.dtype == i32 and out.kspa.dtype == f32


# ---- streams, plan cache, CUDA graphs --------------------------------------------------------


def test_side_stream_and_plan_cache():
    case = make_case(11, N=4, C=32, W=4, R=4, P=2, num_keys=64)
    inputs, opts = split(case)
    want = cpu_result(inputs, opts)
    t = torch_inputs(inputs, DEV)
    args = [t[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g")]
    p1.phase1_forward(*args, beta=t["beta"], **opts)
    before = p1.plan_cache_info()
    for _ in range(3):  # cached: no plan creation
        p1.phase1_forward(*args, beta=t["beta"], **opts)
    after = p1.plan_cache_info()
    assert after["created"] == before["created"] and after["hits"] == before["hits"] + 3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = p1.phase1_forward(*args, beta=t["beta"], **opts)
        assert got.a.data_ptr() != 0
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert p1.plan_cache_info()["created"] == after["created"] + 1  # a plan for the side stream
    assert_same(want, got)


def test_cuda_graph_capture_and_replay():
    first = make_case(21, N=4, C=32, W=6, R=4, P=2, num_keys=48, valid_last=30)
    second = make_case(22, N=4, C=32, W=6, R=4, P=2, num_keys=48, valid_last=30)
    second["k_idx"][0, 0, 1] = second["k_idx"][0, 0, 0]  # one repeat per call
    kw = dict(det_fields=DET_ALL)
    inputs, opts = split(first)
    static = torch_inputs(inputs, DEV)
    names = ("k_idx", "q_idx", "k_val", "q_val", "g")
    rep = torch.zeros(1, dtype=torch.int64, device=DEV)

    def call():
        return p1.phase1_forward(*(static[n] for n in names), rep, beta=static["beta"], **opts, **kw)

    graph, out = capture_graph(call)
    rep.zero_()
    for case in (second, first, second):
        data, _ = split(case)
        for n, src in torch_inputs(data, DEV).items():
            static[n].copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(cpu_result(data, opts, **kw), out)
    assert int(rep.item()) == 2  # the repeats update is part of the graph
    assert p1.plan_cache_info()["pinned"] >= 1
    p1.synchronize()  # the graph's plan: data check of the last replay, clean


# ---- the operator and torch.compile ------------------------------------------------------------


def test_operator_under_torch_compile_fullgraph():
    from sdm_phase1 import torch_ops

    case = make_case(31, N=4, C=16, W=4, R=4, P=2, num_keys=32, valid_last=11, vals="bf16")
    inputs, opts = split(case)
    want = cpu_result(inputs, opts)
    t = torch_inputs(inputs, DEV)
    rep = torch.zeros(1, dtype=torch.int64, device=DEV)

    def f(k_idx, q_idx, k_val, q_val, g, beta, repeats):
        out = torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, repeats, beta=beta, **opts)
        return out, out.a.sum()  # and some compiled work on an output

    compiled = torch.compile(f, fullgraph=True)
    got, total = compiled(t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], t["beta"], rep)
    torch.cuda.synchronize()
    assert_same(want, got)
    # The compiled sum need not add in eager's order: equal up to float rounding.
    torch.testing.assert_close(total, got.a.sum())
    eager = torch_ops.phase1_forward(t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"],
                                     beta=t["beta"], **opts)
    assert_same(want, eager)


def test_operator_opcheck():
    from sdm_phase1 import torch_ops  # noqa: F401  (registers the operator)

    case = make_case(41, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    t = torch_inputs(inputs, DEV)
    args = (t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], t["g"], t["beta"], opts["num_parallel"],
            opts["stream_offset"], opts["num_keys"], opts["valid_last"], True, 0, DET_ALL, False)
    torch.library.opcheck(torch.ops.sdm_phase1.phase1_forward.default, args)


# ---- bad arguments ---------------------------------------------------------------------------


def _good():
    case = make_case(51, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    return torch_inputs(inputs, DEV), opts


def _call(t, opts, **kw):
    args = [t[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g")]
    return p1.phase1_forward(*args, beta=t.get("beta"), **opts, **kw)


@pytest.mark.parametrize("name, change, error, words", [
    ("g", lambda x: x.cpu(), ValueError, ["g is on cpu", "cuda:0", "one device"]),
    ("q_idx", lambda x: x.cpu(), ValueError, ["q_idx is on cpu"]),
    ("k_val", lambda x: x.half(), ValueError, ["k_val must be float32", "float16"]),
    ("k_idx", lambda x: x.short(), ValueError, ["k_idx must be int32 or int64", "int16"]),
    ("g", lambda x: x.double(), ValueError, ["g must be float32"]),
    ("q_val", lambda x: x.to(torch.bfloat16), ValueError, ["q_val must have k_val's dtype"]),
    ("k_val", lambda x: x.transpose(1, 2).contiguous().transpose(1, 2), ValueError,
     ["k_val is not contiguous", "contiguous()"]),
    ("q_val", lambda x: x[:, :, :1].contiguous(), ValueError, ["q_val has shape"]),
    ("g", lambda x: x[0], ValueError, ["g must be a 3-D array"]),
    ("q_idx", lambda x: x.cpu().numpy(), TypeError, ["q_idx must be a torch.Tensor"]),
])
def test_bad_arguments(name, change, error, words):
    t, opts = _good()
    t[name] = change(t[name])
    with pytest.raises(error) as info:
        _call(t, opts)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_wrong_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    t, opts = _good()
    t["g"] = t["g"].to("cuda:1")
    with pytest.raises(ValueError, match="g is on cuda:1 but k_idx is on cuda:0"):
        _call(t, opts)
    moved = {n: (x.to("cuda:1") if x is not None else None) for n, x in t.items()}
    got = _call(moved, opts)  # all on the second GPU: runs there
    assert got.a.device == torch.device("cuda:1")


def test_bad_repeats_and_backend():
    t, opts = _good()
    for bad in (torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32, device=DEV),
                torch.zeros(2, dtype=torch.int64, device=DEV), np.zeros(1, np.int64)):
        args = [t[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g")]
        with pytest.raises(ValueError, match="repeats"):
            p1.phase1_forward(*args, bad, **opts)
    with pytest.raises(ValueError, match="backend='cpu'"):
        _call(t, opts, backend="cpu")


def test_library_refusal_is_phase1_error():
    t, opts = _good()
    with pytest.raises(ValueError, match="valid_last must be in 1..C"):  # checked in Python
        _call(t, dict(opts, valid_last=0))
    with pytest.raises(p1.Phase1Error) as info:
        _call(t, dict(opts, num_parallel=3))  # N = 2: the library's check
    assert info.value.status == "SDM_P1_ERROR_INVALID_ARGUMENT" and "num_parallel" in info.value.message
    assert type(info.value) is p1.InvalidArgumentError
    with pytest.raises(p1.Phase1Error, match="beta"):
        _call(dict(t, beta=None), opts, det_fields=p1.DET_KSPA)


# ---- device-side bad data ---------------------------------------------------------------------


def _bad_data_cases():
    case = make_case(61, N=4, C=8, W=3, R=2, P=2, num_keys=16, valid_last=5)
    out = []
    for what, edit in (("id", lambda c: c["k_idx"].__setitem__((3, 2, 1), 10**6)),
                       ("q id", lambda c: c["q_idx"].__setitem__((1, 0, 1), -3)),
                       ("gate", lambda c: c["g"].__setitem__((1, 6, 0), np.nan))):
        c = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
        edit(c)
        out.append(pytest.param(c, id=what))
    return out


@pytest.mark.parametrize("case", _bad_data_cases())
def test_device_side_bad_data(case):
    inputs, opts = split(case)
    with pytest.raises(p1.Phase1Error) as cpu:
        cpu_result(inputs, opts)
    assert cpu.value.status == "SDM_P1_ERROR_INVALID_INPUT"
    p1.synchronize()  # nothing pending from earlier tests
    with pytest.raises(p1.Phase1Error) as gpu:
        gpu_result(inputs, opts, check=True)
    assert gpu.value.status == cpu.value.status and gpu.value.message == cpu.value.message
    assert type(gpu.value) is type(cpu.value) is p1.InvalidInputError
    gpu_result(inputs, opts)  # check=False: the call does not raise ...
    with pytest.raises(p1.Phase1Error) as later:  # ... the next synchronize() does
        p1.synchronize()
    assert later.value.message == cpu.value.message and type(later.value) is p1.InvalidInputError
    p1.synchronize()  # reported once
    good = make_case(62, N=4, C=8, W=3, R=2, P=2, num_keys=16, valid_last=5)
    gpu_result(*split(good), check=True)  # the same plan, clean data: no error


def test_check_refused_during_capture():
    t, opts = _good()
    want = cpu_result(*split(make_case(51, N=2, C=8, W=3, R=2, P=1, num_keys=16)))
    _call(t, opts)  # warm-up
    graph = torch.cuda.CUDAGraph()
    error = None
    with torch.cuda.graph(graph):
        try:
            _call(t, opts, check=True)
        except ValueError as e:
            error = e
        out = _call(t, opts)
    assert error is not None and "check=True" in str(error)
    graph.replay()
    torch.cuda.synchronize()
    assert_same(want, out)


def test_outputs_in_torch_memory_and_no_input_copies():
    case = make_case(71, N=8, C=64, W=16, R=16, P=2, num_keys=4096, kmode="distinct")
    inputs, opts = split(case)
    t = torch_inputs(inputs, DEV)
    _call(t, opts)  # the plan (and its workspace) exists from here on
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = _call(t, opts)
    peak = torch.cuda.max_memory_allocated() - before
    outputs = sum(x.numel() * x.element_size() for x in out if x is not None)
    # At most the outputs (and repeats) in the caching allocator's 512-byte blocks: a copy of
    # k_idx (32 KiB) or any larger input would not fit in the slack. (Memory the previous
    # call's results held may be reused, so the peak can also stay below the outputs.)
    assert 0 < peak < outputs + 512 * 32 < outputs + t["k_idx"].numel() * 4
    assert all(x.device == t["k_idx"].device for x in out if x is not None)


# ---- autograd: the backward on the CUDA backend ------------------------------------------------
# The CPU tensors' gradients are held to phase1_backward (NumPy) and the float64 reference in
# test_torch_autograd.py; here the CUDA tensors' gradients are held to theirs, bit for bit.

#: Data families: uniform (distinct ids), hot slots (repeats, padding, per-write gates), Zipf
#: ids, per-stream lengths (a device tensor), bfloat16 values (bfloat16 k_val / q_val
#: gradients, float32 g / beta ones and float32 upstream gradients but for cpe, k_eff, q_w),
#: with and without beta.
BACKWARD_CASES = {
    "uniform": lambda: backward_case(4, N=4, C=32, W=4, R=4, num_keys=4096, kmode="distinct"),
    "hot-slots": lambda: get_case("hot-repeats-gw-pad"),
    "zipf": lambda: zipf_case(5),
    "stream-lengths": lambda: get_case("streams-4-lengths-gw"),
    "bf16-zipf": lambda: as_bf16(zipf_case(6)),
    "bf16-no-beta": lambda: get_case("bf16-gw-no-beta"),
}


def _leaves(case, device):
    """The case's inputs as tensors on ``device``, k_val, q_val, g and beta requiring grad."""
    return {n: (None if x is None else x.detach().to(device).requires_grad_(n in VALUES))
            for n, x in tensors(case).items()}


def _autograd(case, x, ups, f=None):
    """{input: gradient} of the outputs in ``ups`` (tensors on x's device) through autograd."""
    out = autograd_forward(x, case, f)
    names = [n for n in VALUES if x[n] is not None]
    got = torch.autograd.grad([getattr(out, k) for k in ups], [x[n] for n in names],
                              [ups[k] for k in ups])
    return dict(zip(names, got))


def _assert_same_grads(want, got):
    assert set(got) == set(want)
    for n, w in want.items():
        assert got[n].device.type == "cuda" and got[n].dtype == w.dtype, n
        assert got[n].shape == w.shape, n
        assert to_numpy(got[n]).tobytes() == to_numpy(w).tobytes(), f"{n}: bits differ from the CPU's"


@pytest.mark.parametrize("path", ["op", "phase1_forward"])
@pytest.mark.parametrize("name", list(BACKWARD_CASES))
def test_autograd_gradients_match_cpu(name, path):
    """Every float output's upstream gradient at once (NaN in the cells the backward never
    reads): the CUDA tensors' gradients are the CPU tensors', bit for bit, dtypes and shapes.
    A second call, whose plans are cached, makes no synchronizing PyTorch call (no host copy:
    torch.cuda.set_sync_debug_mode("error") would raise)."""
    case = BACKWARD_CASES[name]()
    ups = upstream(case, np.random.default_rng(3), fields=FLOAT_FIELDS)
    f = None if path == "op" else p1.phase1_forward
    want = _autograd(case, _leaves(case, "cpu"), torch_inputs(ups, "cpu"), f)
    x = _leaves(case, DEV)
    up = torch_inputs(ups, DEV)
    _assert_same_grads(want, _autograd(case, x, up, f))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = _autograd(case, x, up, f)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _assert_same_grads(want, again)
    p1.synchronize()  # the backward's data check: clean


def test_forward_and_backward_in_one_cuda_graph():
    """The forward and autograd's backward captured in one CUDA graph (which a host copy or a
    synchronization would break), replayed on new inputs and upstream gradients in the same
    tensors: each replay's gradients are the CPU's for that data."""
    from sdm_phase1 import torch_ops

    cid = "hot-repeats-gw-pad"
    cases = [get_case(cid), backward_case(7, **ALL_CASES[cid]), backward_case(8, **ALL_CASES[cid])]
    rng = np.random.default_rng(5)
    fields = ("a", "qk", "log_k", "rex", "k_eff", "q_w", "kspa")
    ups = [upstream(c, rng, fields=fields) for c in cases]
    x = _leaves(cases[0], DEV)
    up = torch_inputs(ups[0], DEV)
    names = [n for n in VALUES if x[n] is not None]
    opts = options(cases[0])

    def step():
        out = torch_ops.phase1_forward(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"],
                                       beta=x["beta"], **opts)
        return torch.autograd.grad([getattr(out, k) for k in fields], [x[n] for n in names],
                                   [up[k] for k in fields])

    before = p1.plan_cache_info()["pinned"]
    graph, grads = capture_graph(step)
    assert p1.plan_cache_info()["pinned"] >= before + 2  # the forward's plan and the backward's
    for case, u in zip(cases[1:] + cases[:1], ups[1:] + ups[:1]):
        with torch.no_grad():
            for n, src in _leaves(case, DEV).items():
                if src is not None:
                    x[n].copy_(src)
            for k, src in torch_inputs(u, DEV).items():
                up[k].copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        want = _autograd(case, _leaves(case, "cpu"), torch_inputs(u, "cpu"))
        _assert_same_grads({n: want[n] for n in names}, dict(zip(names, grads)))
    p1.synchronize()  # the graph's plans: data checks of the last replay, clean


def _backward_args(case, device, ups, payload="forward"):
    """The backward operator's arguments for the case on ``device``: the forward's payload
    (computed there), or None, or the array given."""
    x = {n: (None if v is None else v.detach().to(device)) for n, v in tensors(case).items()}
    if isinstance(payload, str):
        payload = autograd_forward(x, case).payload
    elif payload is not None:
        payload = torch.from_numpy(payload).to(device)
    up = torch_inputs(ups, device)
    o = options(case)
    return (x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"], x["beta"], payload,
            x["stream_lengths"], [up.get(n) for n in GRAD_NAMES], o["num_parallel"],
            o["stream_offset"], o["num_keys"], o["valid_last"])


def _bad_backward_cases():
    """(name, case, payload): a payload that is not the chunks' sort, an id out of range with
    the ids sorted again (payload None), a NaN gate of a valid token."""
    case = get_case("hot-repeats-g1-pad")
    payload = to_numpy(autograd_forward(tensors(case, requires_grad=()), case).payload).copy()
    payload[1, [0, 1]] = payload[1, [1, 1]]  # one entry named twice
    bad_id = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
    bad_id["k_idx"][1, 2, 1] = 10 ** 6
    bad_gate = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
    bad_gate["g"][1, 3, 0] = np.nan
    return [("payload", case, payload), ("id", bad_id, None), ("gate", bad_gate, "forward")]


@pytest.mark.parametrize("what", ["payload", "id", "gate"])
def test_backward_bad_payload_and_data(what):
    """Bad data reach the CUDA backward only through the operator called directly (autograd's
    forward has checked them): with check=True it raises the library's InvalidInputError with
    the CPU backend's message; with check=False the call returns and the next
    sdm_phase1.synchronize() raises it."""
    _, case, payload = next(c for c in _bad_backward_cases() if c[0] == what)
    gate_case = what == "gate"
    good = get_case("hot-repeats-g1-pad")
    ups = {k: np.nan_to_num(u) for k, u in
           upstream(good, np.random.default_rng(2), fields=("a", "k_eff", "kspa")).items()}
    op = torch.ops.sdm_phase1.phase1_backward

    def args(device):
        if gate_case:  # the payload of the good data, the gate made bad afterwards
            a = list(_backward_args(good, device, ups))
            a[4] = torch.from_numpy(case["g"]).to(device)
            return tuple(a)
        return _backward_args(case, device, ups, payload)

    with pytest.raises(p1.Phase1Error) as cpu:
        op(*args("cpu"))
    assert type(cpu.value) is p1.InvalidInputError and "sdm_p1_execute_backward" in str(cpu.value)
    p1.synchronize()  # nothing pending from earlier tests
    with pytest.raises(p1.Phase1Error) as gpu:
        op(*args(DEV), check=True)
    assert type(gpu.value) is p1.InvalidInputError and gpu.value.message == cpu.value.message
    op(*args(DEV))  # check=False: the call does not raise ...
    with pytest.raises(p1.Phase1Error) as later:  # ... the next synchronize() does
        p1.synchronize()
    assert type(later.value) is p1.InvalidInputError and later.value.message == cpu.value.message
    p1.synchronize()  # reported once
    op(*_backward_args(good, DEV, ups), check=True)  # clean data: no error


def test_backward_bad_arguments():
    case = get_case("hot-repeats-g1-pad")
    ups = {k: np.nan_to_num(u) for k, u in upstream(case, np.random.default_rng(2), fields=("a",)).items()}
    args = list(_backward_args(case, DEV, ups))
    op = torch.ops.sdm_phase1.phase1_backward
    a_place = GRAD_NAMES.index("a")
    bad = list(args)
    bad[8] = list(args[8])
    bad[8][a_place] = args[8][a_place].cpu()
    with pytest.raises(ValueError, match=r"grads\['a'\] is on cpu but k_idx is on cuda:0"):
        op(*bad)
    bad[8][a_place] = args[8][a_place].double()
    with pytest.raises(ValueError, match=r"grads\['a'\] has dtype float64"):
        op(*bad)
    bad = list(args)
    bad[6] = args[6][:, :8].contiguous()
    with pytest.raises(ValueError, match="payload must be the forward's payload output"):
        op(*bad)
    bad[6] = args[6].cpu()
    with pytest.raises(ValueError, match="payload is on cpu"):
        op(*bad)
    bad = list(args)
    bad[2] = args[2].cpu()
    with pytest.raises(ValueError, match="k_val is on cpu"):
        op(*bad)
