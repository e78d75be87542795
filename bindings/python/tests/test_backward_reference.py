"""The float64 backward reference (backward_reference.py) against independent computations.

- forward_f64 (dense slot form, no sort) against reference.py's phase1 (sorted, exact gate
  sums): to float32 rounding for log_k / log_q / rex (which reference.py rounds), to 1e-13
  relative otherwise.
- vjp_f64 (sorted-entry form of the design study §1.3) against derivatives of forward_f64:
  * central differences, h = 1e-6: the error of <u, J v> against <J^T u, v>, relative to
    |J^T u| |v|, is at most FD_BOUND = 1e-7 (central differences are good to about h^2
    times the third derivative plus 1e-16 / h of rounding: about 1e-10 here);
  * the complex-step derivative Im L(x + i h v) / h, h = 1e-30, exact to rounding: at most
    CS_BOUND = 1e-12 on the same scale, and elementwise, every coordinate of every gradient,
    within 1e-12 of the sum of its terms' magnitudes (vjp_f64's magnitudes);
  * hand-worked values on a two-token chunk with a repeat.
- exact properties: zero upstream gives zero; None is zero; upstream cells that are constants
  of the forward and padding inputs are never read; padding and repeat lanes' gates get exactly
  0; a field's gradient reaches only the inputs it depends on; gate widths agree; lengths
  that say what valid_last says give the same bits; a library payload gives the same bits as
  the ids.
Run with pytest -s to see the largest error of each check.
"""

from __future__ import annotations

import math

import backward_reference as br
import numpy as np
import pytest
import reference as ref
from error_report import merge_error_report

FD_H = 1e-6
FD_BOUND = 1e-7
CS_H = 1e-30
CS_BOUND = 1e-12
ELEM_BOUND = 1e-12    # elementwise complex step, relative to the sum of the terms' magnitudes
FWD_REL = 1e-13       # forward_f64 against reference.py's float64 truths

ERRORS: dict = {}


def _note(check, value):
    ERRORS[check] = max(ERRORS.get(check, 0.0), float(value))


@pytest.fixture(scope="module", autouse=True)
def _error_summary():
    yield
    print("\n[test_backward_reference] largest error per check:")
    for k, v in sorted(ERRORS.items()):
        print(f"  {k:40s} {v:.3g}")
    merge_error_report("test_backward_reference", {k: {"max_error": v} for k, v in sorted(ERRORS.items())})


# ---- cases ----------------------------------------------------------------------------------
def make_case(seed, *, N=2, C=8, W=3, R=2, P=1, num_keys=4, stream_offset=None, valid_last=None,
              stream_lengths=None, kmode="random", gate="token", gate_kind="normal", vals="f32",
              beta=True, qhit=0.7):
    """Small random inputs. kmode: 'distinct' (distinct slots within a token) or 'random'
    (repeats within and across tokens). Padding tokens get garbage ids and NaN values, gates
    and beta, which neither the forward nor the VJP may read."""
    rng = np.random.default_rng(seed)
    if stream_offset is None:
        stream_offset = num_keys + 17 if P > 1 else 0
    if valid_last is None:
        valid_last = C
    if kmode == "distinct":
        kk = np.stack([rng.permutation(num_keys)[:W] for _ in range(N * C)]).reshape(N, C, W)
    else:
        kk = rng.integers(0, num_keys, size=(N, C, W))
    qk = rng.integers(0, num_keys, size=(N, C, R))
    hit = rng.random((N, C, R)) < qhit   # reads mostly of slots the chunk writes
    for c in range(N):
        qk[c][hit[c]] = rng.choice(kk[c].ravel(), size=int(hit[c].sum()))
    base = (np.arange(N) % P)[:, None, None] * stream_offset
    k_idx = (kk + base).astype(np.int64)
    q_idx = (qk + base).astype(np.int64)
    kv = rng.standard_normal((N, C, W)).astype(np.float32)
    qv = rng.standard_normal((N, C, R)).astype(np.float32)
    gshape = (N, C, 1 if gate == "token" else W)
    if gate_kind == "normal":
        g = -rng.uniform(0.0, 0.5, size=gshape)
    elif gate_kind == "strong":
        g = -rng.uniform(0.0, 5.0, size=gshape)
    elif gate_kind == "signed":
        g = rng.uniform(-1.0, 1.0, size=gshape)
    elif gate_kind == "mixed":   # zero, tiny, -3, ordinary
        g = rng.choice([0.0, -1e-9, -3.0, -0.3, -0.05], size=gshape)
    else:
        raise ValueError(gate_kind)
    g = g.astype(np.float32)
    bt = rng.uniform(0.0, 1.0, size=(N, C)).astype(np.float32) if beta else None
    for c, tv in enumerate(ref.chunk_valid_counts(N, C, P, valid_last, stream_lengths)):
        k_idx[c, tv:] = 2 ** 40 + rng.integers(0, 9, size=(C - tv, W))
        q_idx[c, tv:] = -1
        kv[c, tv:] = np.nan
        qv[c, tv:] = np.nan
        g[c, tv:] = np.nan
        if bt is not None:
            bt[c, tv:] = np.nan
    if vals == "bf16":
        kv = ref.f64_to_bf16_bits(kv)
        qv = ref.f64_to_bf16_bits(qv)
    return dict(k_idx=k_idx, q_idx=q_idx, k_val=kv, q_val=qv, g=g, beta=bt,
                kw=dict(num_parallel=P, stream_offset=stream_offset, num_keys=num_keys,
                        valid_last=valid_last, stream_lengths=stream_lengths))


CASES = [
    ("uniform-g1", dict(C=8, W=3, R=2, num_keys=4096, kmode="distinct")),
    ("hot-repeats-g1-pad", dict(C=8, W=3, R=2, num_keys=3, valid_last=5)),
    # W > num_keys: a repeat in every token
    ("hot-repeats-gw-pad", dict(C=8, W=4, R=3, num_keys=3, gate="write", valid_last=6)),
    ("one-slot-gw", dict(N=1, C=8, W=3, R=2, num_keys=1, gate="write")),
    ("one-slot-g1-pad", dict(N=1, C=8, W=2, R=2, num_keys=1, valid_last=7)),
    ("streams-3-gw-mixed", dict(N=6, P=3, C=6, W=3, R=2, num_keys=5, stream_offset=1000, gate="write",
                                gate_kind="mixed", valid_last=4)),
    ("stream-lengths-g1", dict(N=6, P=3, C=6, W=2, R=2, num_keys=4, stream_lengths=[0, 7, 12])),
    ("strong-gates-gw", dict(C=8, W=3, R=3, num_keys=4, gate="write", gate_kind="strong")),
    ("signed-gates-g1", dict(C=8, W=3, R=2, num_keys=6, kmode="distinct", gate_kind="signed")),
    ("bf16-gw-no-beta", dict(C=8, W=3, R=2, num_keys=5, gate="write", vals="bf16", beta=False)),
]
CASE_IDS = [c[0] for c in CASES]


def get_case(cid):
    kw = dict(CASES)[cid]
    return make_case(sum(map(ord, cid)), **kw)


def shape_of(case):
    N, C, W = case["k_idx"].shape
    return N, C, W, case["q_idx"].shape[2]


def random_grads(case, rng, fields=br.DIFFERENTIABLE):
    """Random upstream gradients of every field given, over every cell (the ignored ones too)."""
    N, C, W, R = shape_of(case)
    return {f: rng.standard_normal(br.field_shape(f, N, C, W, R)) for f in fields
            if f != "kspa" or case["beta"] is not None}


def inputs_f64(case):
    """The continuous inputs as float64 (bf16 bits decoded), in INPUTS order (beta may be None)."""
    return [br._as_number_array(case[n], False) if case[n] is not None else None for n in br.INPUTS]


def fwd(case, kv, qv, g, bt):
    return br.forward_f64(case["k_idx"], case["q_idx"], kv, qv, g, bt, **case["kw"])


def vjp(case, grads, **extra):
    return br.vjp_f64(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"], grads,
                      case["beta"], **case["kw"], **extra)


def loss(case, grads, xs):
    return br.pairing(grads, fwd(case, *xs))


def directional(case, grads, which, rng, method):
    """(lhs, rhs, scale): the derivative of the loss along a random direction v of the inputs
    named in `which` by central differences ('fd') or the complex step ('cs'); <J^T u, v>;
    and |J^T u| |v| over those inputs."""
    x0 = inputs_f64(case)
    gr = vjp(case, grads)
    vs = [rng.standard_normal(x.shape) if (x is not None and n in which) else None
          for n, x in zip(br.INPUTS, x0)]
    rhs = sum(float(np.sum(gr[n] * v)) for n, v in zip(br.INPUTS, vs) if v is not None)
    scale = math.sqrt(sum(float(np.sum(gr[n] ** 2)) for n, v in zip(br.INPUTS, vs) if v is not None)) \
        * math.sqrt(sum(float(np.sum(v ** 2)) for v in vs if v is not None))
    if method == "fd":
        plus = [x if v is None else x + FD_H * v for x, v in zip(x0, vs)]
        minus = [x if v is None else x - FD_H * v for x, v in zip(x0, vs)]
        lhs = (loss(case, grads, plus) - loss(case, grads, minus)) / (2 * FD_H)
    else:
        xc = [x if v is None else x + 1j * CS_H * v for x, v in zip(x0, vs)]
        lhs = loss(case, grads, xc).imag / CS_H
    return float(lhs), rhs, scale


def rel_err(lhs, rhs, scale):
    if scale == 0.0:
        return abs(lhs - rhs)   # no gradient along v: the derivative must vanish too
    return abs(lhs - rhs) / scale


# ---- the forward ----------------------------------------------------------------------------
@pytest.mark.parametrize("cid", CASE_IDS)
def test_forward_matches_reference(cid):
    """forward_f64 on float32 inputs against reference.py's float64 / exact-sum truths."""
    case = get_case(cid)
    out = fwd(case, *inputs_f64(case))
    want = ref.phase1(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                      beta=case["beta"], **case["kw"])
    for name, arr in out.items():
        assert np.all(np.isfinite(arr)), f"{name}: not finite (padding read?)"
    for name in ("a", "qk"):   # relative to the cell's sum of |terms| (0 where no terms)
        err = np.abs(out[name] - want[name])
        assert np.all(err <= FWD_REL * want[name + "_abs"]), name
        _note("forward a/qk (x sum|terms|)", np.max(err / np.maximum(want[name + "_abs"], 1e-300)))
    for name in ("log_k", "log_q", "rex"):   # reference.py rounds these to float32
        err = np.abs(out[name] - want[name]) / ref.ulp_f32(want[name])
        assert err.max() <= 0.5 + 1e-6, name
        _note("forward logs (f32 ulp)", err.max())
    pairs = [("cpe", want["cpe"]), ("k_eff", want["k_eff"]), ("q_w", want["q_w"]),
             ("qrec", want["qrec_scale"]), ("qrec8", want["qrec_scale"]),
             ("krec", np.stack([want["krec_scale"], want["krec_cpe"]], axis=-1))]
    if case["beta"] is not None:
        pairs.append(("kspa", want["kspa"]))
    for name, w in pairs:
        err = np.abs(out[name] - w)
        assert np.all(err <= FWD_REL * np.abs(w)), name
        _note("forward exp fields (rel)", np.max(err / np.maximum(np.abs(w), 1e-300)))


# ---- the VJP against derivatives ---------------------------------------------------------
WHICH = [("k_val",), ("q_val",), ("g",), ("beta",), br.INPUTS]


@pytest.mark.parametrize("cid", CASE_IDS)
def test_vjp_central_differences(cid):
    case = get_case(cid)
    rng = np.random.default_rng(sum(map(ord, cid)) + 1)
    grads = random_grads(case, rng)
    for which in WHICH:
        if "beta" in which and case["beta"] is None and len(which) == 1:
            continue
        err = rel_err(*directional(case, grads, which, rng, "fd"))
        _note("central differences (rel)", err)
        assert err <= FD_BOUND, (which, err)


@pytest.mark.parametrize("cid", CASE_IDS)
def test_vjp_complex_step(cid):
    case = get_case(cid)
    rng = np.random.default_rng(sum(map(ord, cid)) + 2)
    grads = random_grads(case, rng)
    for which in WHICH:
        if "beta" in which and case["beta"] is None and len(which) == 1:
            continue
        err = rel_err(*directional(case, grads, which, rng, "cs"))
        _note("complex step, directional (rel)", err)
        assert err <= CS_BOUND, (which, err)


def full_complex_step(case, grads):
    """Every coordinate of every input gradient by the complex step (exact to rounding)."""
    x0 = inputs_f64(case)
    out = {}
    for i, name in enumerate(br.INPUTS):
        if x0[i] is None:
            continue
        d = np.zeros(x0[i].shape)
        for idx in np.ndindex(x0[i].shape):
            xs = [x if x is None else x.astype(np.complex128) for x in x0]
            xs[i][idx] += 1j * CS_H
            d[idx] = loss(case, grads, xs).imag / CS_H
        out[name] = d
    return out


def compare_elementwise(got, want, mags):
    """max |got - want| / sum|terms| (cells whose magnitude is 0 must be exactly equal)."""
    worst = 0.0
    for name, w in want.items():
        err = np.abs(got[name] - w)
        m = mags[name + "_abs"]
        assert np.all(err[m == 0] == 0), name
        worst = max(worst, float(np.max(np.where(m > 0, err / np.where(m > 0, m, 1), 0.0))))
    return worst


FULL = ["hot-repeats-gw-pad", "one-slot-g1-pad", "streams-3-gw-mixed", "stream-lengths-g1"]


@pytest.mark.parametrize("cid", FULL)
def test_vjp_every_coordinate_complex_step(cid):
    """Each gradient element against the complex step, within ELEM_BOUND of the sum of its
    terms' magnitudes; exactly 0 at padding tokens in both; |gradient| <= magnitudes."""
    case = get_case(cid)
    rng = np.random.default_rng(sum(map(ord, cid)) + 3)
    grads = random_grads(case, rng)
    got = vjp(case, grads, magnitudes=True)
    want = full_complex_step(case, grads)
    err = compare_elementwise(got, want, got)
    _note("complex step, every coordinate (x sum|terms|)", err)
    assert err <= ELEM_BOUND
    for name in want:
        assert np.all(np.abs(got[name]) <= got[name + "_abs"] * (1 + 1e-12)), name
    N, C = case["k_idx"].shape[:2]
    for c, tv in enumerate(ref.chunk_valid_counts(N, C, case["kw"]["num_parallel"], case["kw"]["valid_last"],
                                                 case["kw"]["stream_lengths"])):
        for name in want:
            assert not np.any(want[name][c, tv:]) and not np.any(got[name][c, tv:]), (name, c)


def test_elementwise_check_has_teeth():
    """The elementwise check fails on a gradient off by 1e-9 of its magnitude at one element."""
    case = get_case("one-slot-g1-pad")
    grads = random_grads(case, np.random.default_rng(5))
    got = vjp(case, grads, magnitudes=True)
    want = full_complex_step(case, grads)
    assert compare_elementwise(got, want, got) <= ELEM_BOUND
    for name in ("k_val", "q_val", "g", "beta"):
        bad = {k: v.copy() for k, v in got.items()}
        i = np.unravel_index(np.argmax(bad[name + "_abs"]), bad[name].shape)
        bad[name][i] += 1e-9 * bad[name + "_abs"][i]
        assert compare_elementwise(bad, want, got) > ELEM_BOUND, name


@pytest.mark.parametrize("field", br.DIFFERENTIABLE)
def test_each_field_alone(field):
    """One field's upstream gradient alone: the complex-step check, and exactly zero gradient
    for the inputs the field does not depend on (design study §1.1)."""
    case = get_case("hot-repeats-gw-pad")
    rng = np.random.default_rng(7 + br.DIFFERENTIABLE.index(field))
    grads = random_grads(case, rng, fields=(field,))
    err = rel_err(*directional(case, grads, br.INPUTS, rng, "cs"))
    _note("complex step, one field at a time (rel)", err)
    assert err <= CS_BOUND
    got = vjp(case, grads)
    for name in br.INPUTS:
        if name in br.DEPENDS_ON[field]:
            assert np.any(got[name]), (field, name)
        else:
            assert not np.any(got[name]), (field, name)


# ---- hand-worked values -----------------------------------------------------------------------
def test_hand_worked_repeat_chunk():
    """Token 0 writes slot 4 twice (lane 1 repeats: its gate -7 is unused), token 1 writes slots
    4 and 1; both read slot 4. Per-write gates. log_k = [[-1, -1], [-3, -3]]; K row (by slot):
    (1,1) @1, then (0,0), (0,1), (1,0) @4."""
    e = math.exp
    k_idx = np.array([[[4, 4], [4, 1]]])
    q_idx = np.array([[[4], [4]]])
    kv = np.array([[[1.0, 2.0], [3.0, 5.0]]])
    qv = np.array([[[1.0], [1.0]]])
    g = np.array([[[-1.0, -7.0], [-2.0, -3.0]]])
    beta = np.array([[0.5, 2.0]])
    kw = dict(num_parallel=1, stream_offset=0, num_keys=8, valid_last=2)

    def run(field, index, word=None):
        shape = br.field_shape(field, 1, 2, 2, 1)
        u = np.zeros(shape)
        u[index] = 1.0
        return br.vjp_f64(k_idx, q_idx, kv, qv, g, {field: u}, beta, **kw)

    def check(got, dk=None, dq=None, dg=None, db=None):
        for name, want in (("k_val", dk), ("q_val", dq), ("g", dg), ("beta", db)):
            want = np.zeros(got[name].shape) if want is None else np.reshape(want, got[name].shape)
            np.testing.assert_allclose(got[name], want, rtol=1e-15, atol=1e-15, err_msg=name)

    # a[1, 0] = 3 (1 + 2) e^-2: exp(G_1 - G_0) depends on g[1, 0] alone
    check(run("a", (0, 1, 0)), dk=[3 * e(-2), 3 * e(-2), 3 * e(-2), 0], dg=[0, 0, 9 * e(-2), 0])
    # qk[1, 0] = q_1 (k_00 + k_01) e^-2; qk[1, 1] = q_1 k_10 (exp of 0: no gate gradient)
    check(run("qk", (0, 1, 0)), dk=[e(-2), e(-2), 0, 0], dq=[0, 3 * e(-2)], dg=[0, 0, 3 * e(-2), 0])
    check(run("qk", (0, 1, 1)), dk=[0, 0, 1, 0], dq=[0, 3])
    # cpe of slot 4 = exp(g00 + g10); rex of the repeat lane (0, 1) = g10
    check(run("cpe", (0, 0, 0)), dg=[e(-3), 0, e(-3), 0])
    check(run("rex", (0, 0, 1)), dg=[0, 0, 1, 0])
    # log_q of token 1 = g00 + g10; k_eff[1, 1] = 5 e^-3 (slot 1: its own gate)
    check(run("log_q", (0, 1, 0)), dg=[1, 0, 1, 0])
    check(run("k_eff", (0, 1, 1)), dk=[0, 0, 0, e(-3)], dg=[0, 0, 0, 5 * e(-3)])
    # krec row 2 is entry (0, 1): word 2 = 2 exp(rex) = 2 e^-2; word 3 = cpe = e^-3
    check(run("krec", (0, 2, 0)), dk=[0, e(-2), 0, 0], dg=[0, 0, 2 * e(-2), 0])
    check(run("krec", (0, 2, 1)), dg=[e(-3), 0, e(-3), 0])
    # kspa row 1 is entry (0, 0): -0.5 * 1 * e^-1
    check(run("kspa", (0, 1)), dk=[-0.5 * e(-1), 0, 0, 0], dg=[-0.5 * e(-1), 0, 0, 0], db=[-e(-1), 0])
    # qrec / qrec8 row 1 is token 1's read: q_w = 1 * e^-3
    for f in ("qrec", "qrec8"):
        check(run(f, (0, 1)), dq=[0, e(-3)], dg=[e(-3), 0, e(-3), 0])
    # per-token gates: the same chunk with g = [-1, -2]; a[1, 0] gives token 1's gate 9 e^-2
    gt = np.array([[[-1.0], [-2.0]]])
    u = np.zeros((1, 2, 2))
    u[0, 1, 0] = 1.0
    got = br.vjp_f64(k_idx, q_idx, kv, qv, gt, {"a": u}, **kw)
    np.testing.assert_allclose(got["g"].ravel(), [0, 9 * e(-2)], rtol=1e-15, atol=1e-15)


# ---- exact properties -------------------------------------------------------------------------
@pytest.mark.parametrize("cid", CASE_IDS)
def test_zero_upstream_gives_zero(cid):
    case = get_case(cid)
    N, C, W, R = shape_of(case)
    zeros = {f: np.zeros(br.field_shape(f, N, C, W, R)) for f in br.DIFFERENTIABLE
             if f != "kspa" or case["beta"] is not None}
    for grads in ({}, None, {f: None for f in zeros}, zeros):
        got = vjp(case, grads)
        for name in br.INPUTS:
            assert got[name].dtype == np.float64
            assert not np.any(got[name]), name


def test_none_is_zero():
    """A field given as None or as zeros gives the same gradients."""
    case = get_case("hot-repeats-gw-pad")
    grads = random_grads(case, np.random.default_rng(11))
    for f in br.DIFFERENTIABLE:
        a = vjp(case, {**grads, f: None})
        b = vjp(case, {**grads, f: np.zeros_like(grads[f])})
        for name in br.INPUTS:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{f} -> {name}")


def ignored_mask(case, field):
    """Cells of a field's upstream gradient that are constants of the forward: a at j >= i, qk
    at j > i, padding tokens' rows and columns, padding entries, padding rows of records."""
    N, C, W, R = shape_of(case)
    kw = case["kw"]
    valid = ref.chunk_valid_counts(N, C, kw["num_parallel"], kw["valid_last"], kw["stream_lengths"])
    mask = np.zeros(br.field_shape(field, N, C, W, R), bool)
    for c, tv in enumerate(valid):
        if field in ("a", "qk"):
            mask[c] = np.triu(np.ones((C, C), bool), 0 if field == "a" else 1)
            mask[c, tv:, :] = True
            mask[c, :, tv:] = True
        elif field in ("krec", "kspa"):
            mask[c, tv * W:] = True
        elif field in ("qrec", "qrec8"):
            mask[c, tv * R:] = True
        else:
            mask[c, tv:] = True
    return mask


@pytest.mark.parametrize("cid", ["hot-repeats-g1-pad", "streams-3-gw-mixed", "stream-lengths-g1"])
def test_ignored_upstream_cells_never_read(cid):
    """NaN in every upstream cell that is a constant of the forward changes no bit."""
    case = get_case(cid)
    grads = random_grads(case, np.random.default_rng(13))
    clean = {f: np.where(ignored_mask(case, f), 0.0, u) for f, u in grads.items()}
    dirty = {f: np.where(ignored_mask(case, f), np.nan, u) for f, u in grads.items()}
    assert all(np.isnan(u).any() for u in dirty.values())
    a, b = vjp(case, clean), vjp(case, dirty)
    for name in br.INPUTS:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("cid", ["hot-repeats-gw-pad", "streams-3-gw-mixed", "stream-lengths-g1",
                                 "one-slot-g1-pad"])
def test_padding_and_repeat_gates_get_exact_zero(cid):
    """Padding inputs (NaN here) are never read and get 0; so do repeat lanes' per-write gates;
    other padding values give the same bits."""
    case = get_case(cid)
    grads = random_grads(case, np.random.default_rng(17))
    got = vjp(case, grads)
    N, C, W, R = shape_of(case)
    kw = case["kw"]
    valid = ref.chunk_valid_counts(N, C, kw["num_parallel"], kw["valid_last"], kw["stream_lengths"])
    for name in br.INPUTS:
        assert np.all(np.isfinite(got[name])), name
        for c, tv in enumerate(valid):
            assert not np.any(got[name][c, tv:]), (name, c)
    if case["g"].shape[2] == W:   # a repeat lane: an earlier lane of its token has its slot
        base = (np.arange(N) % kw["num_parallel"]) * kw["stream_offset"]
        for c, tv in enumerate(valid):
            for t in range(tv):
                ids = list(case["k_idx"][c, t] - base[c])
                for lane in range(W):
                    if ids[lane] in ids[:lane]:
                        assert got["g"][c, t, lane] == 0.0
    other = dict(case)
    for name in ("k_val", "q_val", "g", "beta"):
        arr = np.array(case[name], dtype=np.float64) if case[name] is not None else None
        if arr is not None:
            for c, tv in enumerate(valid):
                arr[c, tv:] = 1.5
            other[name] = arr
    again = vjp(other, grads)
    for name in br.INPUTS:
        np.testing.assert_array_equal(got[name], again[name], err_msg=name)


@pytest.mark.parametrize("cid", ["hot-repeats-g1-pad", "one-slot-g1-pad", "stream-lengths-g1"])
def test_gate_widths_agree(cid):
    """Per-token gates g[t] are per-write gates g[t, l] = g[t] for every lane: the per-token
    gradient is the sum over lanes of the per-write one (repeat lanes contribute 0)."""
    case = get_case(cid)
    W = case["k_idx"].shape[2]
    grads = random_grads(case, np.random.default_rng(19))
    wide = dict(case, g=np.repeat(case["g"], W, axis=2))
    a, b = vjp(case, grads), vjp(wide, grads)
    np.testing.assert_allclose(a["g"][..., 0], b["g"].sum(axis=2), rtol=1e-13, atol=1e-300)
    for name in ("k_val", "q_val", "beta"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_stream_lengths_as_valid_last_same_bits():
    case = make_case(23, N=6, P=3, C=6, W=3, R=2, num_keys=4, valid_last=4, gate="write")
    grads = random_grads(case, np.random.default_rng(23))
    lengths = dict(case, kw=dict(case["kw"], valid_last=6, stream_lengths=np.full(3, 6 + 4)))
    a, b = vjp(case, grads), vjp(lengths, grads)
    for name in br.INPUTS:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_refuses_bad_gradients():
    case = get_case("hot-repeats-g1-pad")
    N, C, W, R = shape_of(case)
    for name in br.NON_DIFFERENTIABLE:
        with pytest.raises(ValueError, match=f"'{name}' is not differentiable"):
            vjp(case, {name: np.zeros(3)})
    with pytest.raises(ValueError, match="no output named 'k_val'"):
        vjp(case, {"k_val": np.zeros((N, C, W))})
    with pytest.raises(ValueError, match="gradient of 'krec' has shape"):
        vjp(case, {"krec": np.zeros((N, C * W, 4))})
    nobeta = dict(case, beta=None)
    with pytest.raises(ValueError, match="'kspa' needs beta"):
        vjp(nobeta, {"kspa": np.zeros((N, C * W))})


# ---- the library's payload as the sort ---------------------------------------------------------
@pytest.mark.parametrize("cid", ["hot-repeats-gw-pad", "streams-3-gw-mixed", "stream-lengths-g1"])
def test_payload_gives_the_same_bits(cid):
    """The sort taken from the library's payload output (the backward's residual, design study
    §4.1), ids absent, gives the same gradients bit for bit; a payload that is not a
    permutation of the chunk's entries is refused."""
    p1 = pytest.importorskip("sdm_phase1")
    case = get_case(cid)
    kw = case["kw"]
    out = p1.phase1_forward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                            num_parallel=kw["num_parallel"], stream_offset=kw["stream_offset"],
                            num_keys=kw["num_keys"], valid_last=kw["valid_last"],
                            stream_lengths=kw["stream_lengths"], det_fields=0)
    payload = np.asarray(out.payload)
    grads = random_grads(case, np.random.default_rng(29))
    want = vjp(case, grads)
    got = br.vjp_f64(None, None, case["k_val"], case["q_val"], case["g"], grads, case["beta"], **kw,
                     payload=payload)
    for name in br.INPUTS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    c = int(np.argmax(ref.chunk_valid_counts(payload.shape[0], case["k_idx"].shape[1],
                                             kw["num_parallel"], kw["valid_last"], kw["stream_lengths"])))
    bad = payload.copy()
    bad[c, 1] = bad[c, 0]   # one entry twice, another missing
    with pytest.raises(ValueError, match="not a permutation"):
        br.vjp_f64(None, None, case["k_val"], case["q_val"], case["g"], grads, case["beta"], **kw,
                   payload=bad)
