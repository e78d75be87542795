"""The library against the independent NumPy reference (reference.py), field by field.

Integer, flag, payload and record integer words must match exactly. Floats:
- log_k, log_q, rex: the float32 nearest the exact sum of the gates (0 ulp);
- cpe, k_eff, q_w: within F32_ULPS float32 ulps of the float64 truth, or (bfloat16 values)
  within 1 bfloat16 ulp of it;
- record floats (krec scale, kspa, qrec scale): within F32_ULPS float32 ulps; krec's cpe word
  is the library's own cpe output widened, bit for bit;
- a, qk: |lib - ref| <= PAIR_ULPS * ulp(ref) + PAIR_REL * sum of |terms| of the cell.
The largest error seen per field is printed at the end of the module (pytest -s) and written
as JSON to the file named by SDMP1_ERROR_REPORT, if set.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference as ref
from error_report import merge_error_report

p1 = pytest.importorskip("sdm_phase1")

F32_ULPS = 4.0
BF16_ULPS = 1.0
PAIR_ULPS = 4.0
PAIR_REL = 2.0 ** -40

# field -> largest error seen (units in ERR_UNITS)
ERRORS: dict = {}
ERR_UNITS = {
    "log_k": "f32 ulp", "log_q": "f32 ulp", "rex": "f32 ulp",
    "cpe": "f32 ulp", "k_eff": "f32 ulp", "q_w": "f32 ulp",
    "cpe_bf16": "bf16 ulp", "k_eff_bf16": "bf16 ulp", "q_w_bf16": "bf16 ulp",
    "a": "f32 ulp(ref)", "qk": "f32 ulp(ref)",
    "a_rel_abs": "2^-24 * sum|terms| (sum >= 2^-100)",
    "qk_rel_abs": "2^-24 * sum|terms| (sum >= 2^-100)",
    "krec_scale": "f32 ulp", "krec_cpe": "f32 ulp", "krec_cpe_bf16": "bf16 ulp",
    "kspa": "f32 ulp", "qrec_scale": "f32 ulp",
}
CASES_RUN = [0]


def _note(field, value):
    value = float(value)
    if value > ERRORS.get(field, 0.0) or field not in ERRORS:
        ERRORS[field] = value


def write_error_report(extra: dict | None = None):
    """Prints the summary and merges it into $SDMP1_ERROR_REPORT (JSON) if set."""
    summary = {k: {"max_error": v, "unit": ERR_UNITS.get(k, "")} for k, v in sorted(ERRORS.items())}
    print("\n[test_reference] largest error per float field over %d library calls:" % CASES_RUN[0])
    for k, v in summary.items():
        print(f"  {k:16s} {v['max_error']:.4g} {v['unit']}")
    report = {"test_reference": {"library_calls": CASES_RUN[0], "fields": summary}}
    report.update(extra or {})
    for section, payload in report.items():
        merge_error_report(section, payload)


@pytest.fixture(scope="module", autouse=True)
def _error_summary():
    yield
    write_error_report()


# ---- inputs -------------------------------------------------------------------------------
TINY_GATES = np.array([-1e-9, -2.0611537e-09, -1e-12, -3.5e-10], np.float32)


def make_gates(rng, shape, kind):
    if kind == "zero":
        return np.zeros(shape, np.float32)
    if kind == "tiny":
        return rng.choice(TINY_GATES, size=shape).astype(np.float32)
    if kind == "strong":
        return (-rng.uniform(10.0, 20.0, size=shape)).astype(np.float32)
    if kind == "normal":
        return (-rng.uniform(0.0, 0.5, size=shape)).astype(np.float32)
    if kind == "signed":   # positive gates are legal too (|g| < 2^22)
        return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    if kind == "extreme":  # the largest legal magnitudes next to the smallest exact ones
        mag = rng.choice([4.0e6, 4194303.5, 20.0, 1.0, 1e-9, 2.0 ** -72, 1.7 * 2.0 ** -60], size=shape)
        return (-mag * rng.choice([1.0, 0.75, 0.5], size=shape)).astype(np.float32)
    if kind == "mixed":
        pick = rng.integers(0, 6, size=shape)
        vals = np.select(
            [pick == 0, pick == 1, pick == 2, pick == 3, pick == 4],
            [np.zeros(shape), rng.choice(TINY_GATES, size=shape).astype(np.float64),
             -rng.uniform(0, 0.1, size=shape), -rng.uniform(0, 3.0, size=shape),
             np.full(shape, -20.0)],
            -rng.uniform(10.0, 20.0, size=shape))
        return vals.astype(np.float32)
    raise ValueError(kind)


def make_values(rng, shape, kind):
    if kind == "normal":
        v = rng.standard_normal(shape)
    elif kind == "mixed":
        v = rng.choice([-1.0, 1.0], size=shape) * 10.0 ** rng.uniform(-3, 3, size=shape)
    elif kind == "one":
        v = np.ones(shape)
    else:
        raise ValueError(kind)
    return v.astype(np.float32)


def distinct_sample(rng, pop, k):
    """k distinct integers of [0, pop) in random order."""
    if pop <= 4 * k:
        return rng.permutation(pop)[:k].astype(np.int64)
    while True:
        ks = rng.integers(0, pop, size=2 * k + 8, dtype=np.int64)
        _, first = np.unique(ks, return_index=True)
        if first.size >= k:
            return ks[np.sort(first)][:k]


def make_keys(rng, N, C, W, num_keys, mode, pool):
    """[N, C, W] keys (stream-relative). mode: 'distinct' (per token), 'random' (repeats
    allowed), 'pool' (distinct per token, drawn from a per-chunk pool of `pool` keys), 'top'
    (likewise from the `pool` highest keys), 'zipf' (distinct per token by a Zipf law of
    exponent 1.1: rank r with probability proportional to r^-1.1, ranks mapped to keys by a
    random permutation; a few hot slots in most tokens, long slot groups)."""
    if mode == "random":
        return rng.integers(0, num_keys, size=(N, C, W), dtype=np.int64)
    if mode == "zipf":
        p = np.arange(1, num_keys + 1, dtype=np.float64) ** -1.1
        perm = rng.permutation(num_keys)
        draws = [rng.choice(num_keys, size=W, replace=False, p=p / p.sum()) for _ in range(N * C)]
        return perm[np.array(draws, np.int64)].reshape(N, C, W)
    out = np.empty((N, C, W), np.int64)
    for c in range(N):
        m = max(W, min(pool, num_keys))
        src = None
        if mode == "pool":
            src = distinct_sample(rng, num_keys, m)
        elif mode == "top":   # the highest keys of the range
            src = num_keys - 1 - distinct_sample(rng, m, m)
        for t in range(C):
            if src is not None:
                out[c, t] = src[distinct_sample(rng, src.size, W)]
            else:
                out[c, t] = distinct_sample(rng, num_keys, W)
    return out


def make_case(seed, *, N=2, C=16, W=4, R=4, P=1, num_keys=64, stream_offset=None, valid_last=None,
              idx=np.int32, vals="f32", gate="token", gate_kind="normal", val_kind="normal",
              kmode="pool", pool=None, qhit=0.7, beta=True, stream_lengths=None):
    """Random inputs with padding tokens (t >= valid_last of the last P chunks, or past each
    stream's length with stream_lengths) filled with garbage ids / NaNs, which the library
    must never read."""
    rng = np.random.default_rng(seed)
    if stream_offset is None:
        stream_offset = num_keys + 17 if P > 1 else 0
    if valid_last is None:
        valid_last = C
    if pool is None:
        pool = max(W, C * W // 4)
    kkeys = make_keys(rng, N, C, W, num_keys, kmode, pool)
    # Q keys: mostly slots the chunk writes (so read groups meet write groups), else random
    qkeys = rng.integers(0, num_keys, size=(N, C, R), dtype=np.int64)
    for c in range(N):
        flat = kkeys[c].ravel()
        hit = rng.random((C, R)) < qhit
        qkeys[c][hit] = rng.choice(flat, size=int(hit.sum()))
    base = (np.arange(N) % P).astype(np.int64)[:, None, None] * stream_offset
    k_idx = kkeys + base
    q_idx = qkeys + base
    kv = make_values(rng, (N, C, W), val_kind)
    qv = make_values(rng, (N, C, R), val_kind)
    g = make_gates(rng, (N, C, 1 if gate == "token" else W), gate_kind)
    bt = rng.uniform(0.0, 1.0, size=(N, C)).astype(np.float32) if beta else None
    # padding: garbage everywhere
    big = np.iinfo(idx).max
    for c, tv in enumerate(ref.chunk_valid_counts(N, C, P, valid_last, stream_lengths)):
        k_idx[c, tv:] = big - rng.integers(0, 1000, size=(C - tv, W))
        q_idx[c, tv:] = -1 - rng.integers(0, 1000, size=(C - tv, R))
        kv[c, tv:] = np.nan
        qv[c, tv:] = np.inf
        g[c, tv:] = np.nan
        if bt is not None:
            bt[c, tv:] = np.nan
    k_idx = k_idx.astype(idx)
    q_idx = q_idx.astype(idx)
    if vals == "bf16":
        kv = ref.f64_to_bf16_bits(kv)
        qv = ref.f64_to_bf16_bits(qv)
    return dict(k_idx=k_idx, q_idx=q_idx, k_val=kv, q_val=qv, g=g, beta=bt, num_parallel=P,
                stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
                stream_lengths=stream_lengths)


# ---- comparison ---------------------------------------------------------------------------
def _u32(x):
    return np.asarray(x).astype(np.int64) & 0xFFFFFFFF


def _f32_bits_to_f64(words):
    return np.ascontiguousarray(np.asarray(words, dtype=np.int32)).view(np.float32).astype(np.float64)


def _where(name, mask, lib, want, extra=""):
    idx = np.argwhere(mask)
    first = tuple(int(i) for i in idx[0])
    return (f"{name}: {len(idx)} mismatches; first at {first}: library {lib[first]!r}, "
            f"reference {want[first]!r}{extra}")


def check_exact(name, lib, want):
    lib = _u32(lib)
    want = _u32(want)
    assert lib.shape == want.shape, f"{name}: shape {lib.shape} != {want.shape}"
    bad = lib != want
    if bad.any():
        pytest.fail(_where(name, bad, lib, want))


def check_f32(name, lib, want, tol_ulps, note=None):
    lib = np.asarray(lib, dtype=np.float64)
    assert lib.shape == want.shape, f"{name}: shape {lib.shape} != {want.shape}"
    assert np.all(np.isfinite(lib)), f"{name}: non-finite values"
    err = np.abs(lib - want) / ref.ulp_f32(want)
    if err.size:
        _note(note or name, err.max())
    bad = err > tol_ulps
    if bad.any():
        pytest.fail(_where(name, bad, lib, want, f" (errors up to {err.max():.3g} f32 ulp)"))


def check_bf16(name, lib_bits, want, tol_ulps=BF16_ULPS):
    assert np.asarray(lib_bits).dtype == np.uint16, f"{name}: expected bf16 bits (uint16)"
    lib = ref.bf16_to_f64(lib_bits)
    assert lib.shape == want.shape, f"{name}: shape {lib.shape} != {want.shape}"
    err = np.abs(lib - want) / ref.ulp_bf16(want)
    if err.size:
        _note(name + "_bf16", err.max())
    bad = err > tol_ulps
    if bad.any():
        pytest.fail(_where(name, bad, lib, want, f" (errors up to {err.max():.3g} bf16 ulp)"))


def check_values(name, lib, want, bf16):
    if bf16:
        check_bf16(name, lib, want)
    else:
        assert np.asarray(lib).dtype == np.float32, f"{name}: dtype {np.asarray(lib).dtype}"
        check_f32(name, lib, want, F32_ULPS)


def check_pairs(name, lib, want, abs_sum, cnt):
    lib = np.asarray(lib)
    assert lib.dtype == np.float32 and lib.shape == want.shape, f"{name}: {lib.dtype} {lib.shape}"
    lib = lib.astype(np.float64)
    # cells without terms (incl. the upper triangle, padding rows/columns) are exactly 0
    empty = cnt == 0
    if np.any(lib[empty] != 0):
        pytest.fail(_where(name + " (cells without terms)", empty & (lib != 0), lib, want))
    err = np.abs(lib - want)
    ulps = err / ref.ulp_f32(want)
    _note(name, ulps.max() if ulps.size else 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # in units of 2^-24 * sum|terms|, over cells whose terms are in float32's normal range
        # (below it the 2^-149 floor of the ulp term governs)
        rel = np.where(abs_sum >= 2.0 ** -100, err / (2.0 ** -24 * abs_sum), 0.0)
    _note(name + "_rel_abs", rel.max() if rel.size else 0)
    tol = PAIR_ULPS * ref.ulp_f32(want) + PAIR_REL * abs_sum
    bad = err > tol
    if bad.any():
        pytest.fail(_where(name, bad, lib, want,
                           f" (max {ulps.max():.3g} ulp(ref), {rel.max():.3g} x 2^-24 sum|terms|)"))


def requested(det, rg, beta):
    if det is None:
        det = ref.DET_SHIPPED | ((ref.DET_KREC | ref.DET_KSPA | ref.DET_QREC | ref.DET_TILES)
                                 if beta is not None else 0)
    want = {
        "pos_k": det & ref.DET_POS, "pos_q": det & ref.DET_POS,
        "is_last": det & ref.DET_FLAGS, "is_only": det & ref.DET_FLAGS,
        "q_last": rg and det & ref.DET_FLAGS, "q_only": rg and det & ref.DET_FLAGS,
        "spay_k": det & ref.DET_SPAY_K, "spay_q": rg and det & ref.DET_SPAY_Q,
        "spay_rank": det & ref.DET_SPAY_RANK,
        "krec": det & ref.DET_KREC, "kspa": det & ref.DET_KSPA,
        "qrec": rg and det & ref.DET_QREC,
        "tiles_k": det & ref.DET_TILES, "segb_k": det & ref.DET_TILES,
        "tiles_q": rg and det & ref.DET_TILES,
        "dc_kpos": det & ref.DET_DC_GIDX, "dc_bpre": det & ref.DET_DC_GIDX,
        "dc_rec": 0, "qrec8": rg and det & ref.DET_QREC8,
    }
    return {k: bool(v) for k, v in want.items()}


# Fields the spec returns as empty tensors when not requested (the others are then None).
ALWAYS_ARRAYS = {"is_last", "is_only", "krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k",
                 "dc_kpos", "dc_bpre", "dc_rec", "qrec8"}


def run_and_compare(case, *, det_fields=None, need_read_groups=True, rec_tile=0, num_threads=None,
                    use_beta=True, pairs=True):
    case = dict(case)
    beta = case.pop("beta") if use_beta else None
    case.pop("beta", None)
    rep = np.array([7], np.int64)
    out = p1.phase1_forward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                            rep, num_parallel=case["num_parallel"],
                            stream_offset=case["stream_offset"], num_keys=case["num_keys"],
                            valid_last=case["valid_last"], need_read_groups=need_read_groups,
                            beta=beta, rec_tile=rec_tile, det_fields=det_fields,
                            num_threads=num_threads, stream_lengths=case.get("stream_lengths"))
    CASES_RUN[0] += 1
    L = rec_tile if rec_tile > 0 else 128
    want = ref.phase1(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                      num_parallel=case["num_parallel"], stream_offset=case["stream_offset"],
                      num_keys=case["num_keys"], valid_last=case["valid_last"], beta=beta,
                      rec_tile=L, pairs=pairs, stream_lengths=case.get("stream_lengths"))
    compare(out, want, rep, case, det_fields, need_read_groups, beta)
    return out, want


def compare(out, want, rep, case, det_fields, rg, beta):
    assert isinstance(out, p1.Phase1)
    assert list(out._fields[:28]) == [
        "a", "qk", "log_k", "log_q", "rex", "cpe", "is_last", "is_only", "k_eff", "q_w",
        "payload", "pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank",
        "krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre", "dc_rec",
        "qrec8"]
    bf16 = np.asarray(case["k_val"]).dtype == np.uint16
    N, C, W = case["k_idx"].shape
    R = case["q_idx"].shape[2]
    req = requested(det_fields, rg, beta)

    assert int(rep[0]) == 7 + want["repeats"], f"repeats: {int(rep[0]) - 7} != {want['repeats']}"

    if "a" in want:   # else: the reference skipped the pair sums (huge groups)
        check_pairs("a", out.a, want["a"], want["a_abs"], want["a_cnt"])
        check_pairs("qk", out.qk, want["qk"], want["qk_abs"], want["qk_cnt"])
    for name in ("log_k", "log_q", "rex"):
        lib = np.asarray(getattr(out, name))
        assert lib.dtype == np.float32
        check_f32(name, lib, want[name], 0.0)
    check_values("cpe", out.cpe, want["cpe"], bf16)
    check_values("k_eff", out.k_eff, want["k_eff"], bf16)
    check_values("q_w", out.q_w, want["q_w"], bf16)
    check_exact("payload", out.payload, want["payload"])

    for name in ("pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank",
                 "is_last", "is_only", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre"):
        lib = getattr(out, name)
        if req[name]:
            assert lib is not None and np.asarray(lib).size > 0, f"{name} requested but missing"
            if name in ("is_last", "is_only", "q_last", "q_only"):
                assert np.asarray(lib).dtype == np.int8, f"{name}: dtype {np.asarray(lib).dtype}"
            else:
                assert np.asarray(lib).dtype == np.int32, f"{name}: dtype {np.asarray(lib).dtype}"
            check_exact(name, lib, want[name])
        elif name in ALWAYS_ARRAYS:
            assert lib is not None and np.asarray(lib).size == 0, f"{name}: not requested, not empty"
        elif lib is not None:  # an unrequested optional field may still be given: then right
            check_exact(name, lib, want[name])

    # records
    nk, nq = C * W, C * R
    elem_k = want["krec_elem"]
    if req["krec"]:
        krec = np.asarray(out.krec)
        assert krec.dtype == np.int32 and krec.shape == (N, nk, 4), f"krec {krec.dtype} {krec.shape}"
        check_exact("krec[0] (element)", krec[..., 0], elem_k)
        check_exact("krec[1] (slot)", krec[..., 1], want["krec_slot"])
        check_f32("krec[2] (k*exp(rex))", _f32_bits_to_f64(krec[..., 2]), want["krec_scale"],
                  F32_ULPS, note="krec_scale")
        cpe_w = _f32_bits_to_f64(krec[..., 3])
        # the library's own cpe output at the same entry, widened (padding: 1.0)
        tok = (elem_k >> ref.TOKEN_SHIFT) & 0xFF
        lane = elem_k & 0xFF
        valid = (elem_k & ref.INVALID_BIT) == 0
        cpe_lib = ref.bf16_to_f64(out.cpe) if bf16 else np.asarray(out.cpe, np.float64)
        own = np.where(valid, cpe_lib[np.arange(N)[:, None], tok, lane], 1.0)
        bad = cpe_w != own
        if bad.any():
            pytest.fail(_where("krec[3] vs cpe output", bad, cpe_w, own))
        if bf16:
            err = np.abs(cpe_w - want["krec_cpe"]) / ref.ulp_bf16(want["krec_cpe"])
            _note("krec_cpe_bf16", err.max())
            assert err.max() <= BF16_ULPS
        else:
            check_f32("krec[3] (cpe)", cpe_w, want["krec_cpe"], F32_ULPS, note="krec_cpe")
    if req["kspa"]:
        kspa = np.asarray(out.kspa)
        assert kspa.dtype == np.float32 and kspa.shape == (N, nk), f"kspa {kspa.dtype} {kspa.shape}"
        check_f32("kspa", kspa, want["kspa"], F32_ULPS)
    if req["qrec"]:
        qrec = np.asarray(out.qrec)
        assert qrec.dtype == np.int32 and qrec.shape == (N, nq, 4), f"qrec {qrec.dtype} {qrec.shape}"
        check_exact("qrec[0] (element)", qrec[..., 0], want["qrec_elem"])
        check_exact("qrec[1] (slot)", qrec[..., 1], want["qrec_slot"])
        check_f32("qrec[2] (q*exp(log_q))", _f32_bits_to_f64(qrec[..., 2]), want["qrec_scale"],
                  F32_ULPS, note="qrec_scale")
        check_exact("qrec[3]", qrec[..., 3], np.zeros((N, nq), np.int64))
    if req["qrec8"]:
        q8 = np.asarray(out.qrec8)
        assert q8.dtype == np.int32 and q8.shape == (N, nq, 2), f"qrec8 {q8.dtype} {q8.shape}"
        check_exact("qrec8[0] (slot)", q8[..., 0], want["qrec_slot"])
        check_f32("qrec8[1]", _f32_bits_to_f64(q8[..., 1]), want["qrec_scale"], F32_ULPS,
                  note="qrec_scale")
        if req["qrec"]:
            check_exact("qrec8 vs qrec words 1-2", q8, np.asarray(out.qrec)[..., 1:3])
    # padding entries' record words, bit for bit: krec {element, 0, +0.0f, 1.0f}, kspa +0.0f,
    # qrec {element, 0, +0.0f, 0}, qrec8 {0, +0.0f}
    kpad = (_u32(want["krec_elem"]) & ref.INVALID_BIT) != 0
    qpad = (_u32(want["qrec_elem"]) & ref.INVALID_BIT) != 0
    if kpad.any():
        if req["krec"]:
            check_exact("krec padding words 1-3", np.asarray(out.krec)[kpad][:, 1:],
                        np.tile([0, 0, 0x3F800000], (int(kpad.sum()), 1)))
        if req["kspa"]:
            check_exact("kspa padding", np.asarray(out.kspa)[kpad].view(np.int32), np.zeros(int(kpad.sum())))
    if qpad.any():
        if req["qrec"]:
            check_exact("qrec padding words 1-3", np.asarray(out.qrec)[qpad][:, 1:],
                        np.zeros((int(qpad.sum()), 3)))
        if req["qrec8"]:
            check_exact("qrec8 padding", np.asarray(out.qrec8)[qpad], np.zeros((int(qpad.sum()), 2)))
    for name in ("krec", "kspa", "qrec", "qrec8", "dc_rec"):
        if not req[name]:
            lib = getattr(out, name)
            assert lib is not None and np.asarray(lib).size == 0, f"{name}: not requested, not empty"


# ---- tests --------------------------------------------------------------------------------
def test_reference_hand_worked():
    """The reference itself on a 2-token chunk worked out by hand (no library involved)."""
    k_idx = np.array([[[3, 5], [5, 7]]], np.int32)
    q_idx = np.array([[[3], [5]]], np.int32)
    kv = np.array([[[1, 2], [3, 4]]], np.float32)
    qv = np.array([[[0.5], [0.25]]], np.float32)
    g = np.array([[[-1], [-2]]], np.float32)
    o = ref.phase1(k_idx, q_idx, kv, qv, g, num_parallel=1, stream_offset=0, num_keys=10,
                   valid_last=2, beta=np.array([[0.5, 2.0]], np.float32), rec_tile=1)
    e = math.exp
    # sorted row: e0 (t0 K0 @3), e2 (t0 Q @3), e1 (t0 K1 @5), e3 (t1 K0 @5), e5 (t1 Q @5), e4 (t1 K1 @7)
    assert o["log_k"][0].tolist() == [[-1, -1], [-3, -2]]
    assert o["log_q"][0].tolist() == [[-1], [-3]]
    assert o["rex"][0].tolist() == [[0, -2], [0, 0]]
    np.testing.assert_allclose(o["cpe"][0], [[e(-1), e(-3)], [e(-3), e(-2)]], rtol=1e-15)
    np.testing.assert_allclose(o["k_eff"][0], [[e(-1), 2 * e(-1)], [3 * e(-3), 4 * e(-2)]], rtol=1e-15)
    np.testing.assert_allclose(o["q_w"][0], [[0.5 * e(-1)], [0.25 * e(-3)]], rtol=1e-15)
    np.testing.assert_allclose(o["a"][0], [[0, 0], [6 * e(-2), 0]], rtol=1e-15)
    np.testing.assert_allclose(o["qk"][0], [[0.5, 0], [0.5 * e(-2), 0.75]], rtol=1e-15)
    assert o["is_last"][0].tolist() == [[1, 0], [1, 1]]
    assert o["is_only"][0].tolist() == [[1, 0], [0, 1]]
    assert o["q_last"][0].tolist() == [[1], [1]] and o["q_only"][0].tolist() == [[1], [1]]
    assert o["pos_k"][0].tolist() == [[1 << 24, 2 | 1 << 17 | 2 << 24], [3 | 2 << 24, 5 | 1 << 24]]
    assert o["pos_q"][0].tolist() == [[1 | 1 << 24], [4 | 1 << 24]]
    assert [hex(x) for x in o["payload"][0][:7]] == [
        "0xc0000000", "0x100", "0x80000001", "0x40000200", "0x300", "0xc0000201", "0x80020000"]
    assert o["payload"].shape == (1, 16)
    assert [hex(x) for x in o["spay_k"][0]] == ["0xc0000000", "0x80000001", "0x40040200", "0xc0000201"]
    assert [hex(x) for x in o["spay_q"][0]] == ["0xc0000100", "0xc0000300"]
    assert o["spay_rank"][0].tolist() == [[0, 1 | 4 | 8 | 32]]
    assert o["dc_kpos"][0].tolist() == [[0, 1], [-1, 2]]
    assert o["dc_bpre"][0].tolist() == [0, 3]
    assert o["tiles_k"][0].tolist() == [0, 1, 3, 3, 4]
    assert o["segb_k"][0].tolist() == [0, 1, 2, 2, 3]
    assert o["tiles_q"][0].tolist() == [0, 1, 2]
    assert o["krec_slot"][0].tolist() == [3, 5, 5, 7]
    np.testing.assert_allclose(o["krec_scale"][0], [1, 2 * e(-2), 3, 4], rtol=1e-15)
    np.testing.assert_allclose(o["kspa"][0], [-0.5 * e(-1), -0.5 * 2 * e(-1), -2 * 3 * e(-3),
                                              -2 * 4 * e(-2)], rtol=1e-15)
    assert o["repeats"] == 0
    # the same chunk with token 1 as padding (garbage ids, NaN values and gate)
    k2, q2, kv2, qv2, g2 = k_idx.copy(), q_idx.copy(), kv.copy(), qv.copy(), g.copy()
    k2[0, 1] = 2 ** 31 - 1
    q2[0, 1] = -9
    kv2[0, 1] = np.nan
    qv2[0, 1] = np.nan
    g2[0, 1] = np.nan
    o = ref.phase1(k2, q2, kv2, qv2, g2, num_parallel=1, stream_offset=0, num_keys=10,
                   valid_last=1, rec_tile=2)
    # sorted: e0, e2, e1, then padding e3, e4, e5 in entry order
    assert [hex(x) for x in o["payload"][0][:6]] == [
        "0xc0000000", "0x100", "0xc0000001", "0x80020200", "0x80020201", "0x80020300"]
    assert o["log_k"][0].tolist() == [[-1, -1], [0, 0]] and o["cpe"][0].tolist() == [[e(-1), e(-1)], [1, 1]]
    assert o["pos_k"][0].tolist() == [[1 << 24, 2 | 1 << 24], [3, 4]]
    assert [hex(x) for x in o["spay_k"][0]] == ["0xc0000000", "0xc0000001", "0xc0020200", "0xc0020201"]
    assert o["dc_kpos"][0].tolist() == [[0, 1], [-1, -1]] and o["dc_bpre"][0].tolist() == [0, 2]
    assert o["tiles_k"][0].tolist() == [0, 2, 4] and o["segb_k"][0].tolist() == [0, 2, 2]
    assert not o["a"].any() and o["qk"][0].tolist() == [[0.5, 0], [0, 0]]


def test_reference_repeats_hand_worked():
    """A token writing one slot twice: the repeat adds no gate, both lanes pair (reference only)."""
    k_idx = np.array([[[4, 4], [4, 1]]], np.int64)
    q_idx = np.array([[[4], [4]]], np.int64)
    kv = np.array([[[1, 2], [3, 5]]], np.float32)
    qv = np.array([[[1], [1]]], np.float32)
    g = np.array([[[-1, -7], [-2, -3]]], np.float32)   # per write
    o = ref.phase1(k_idx, q_idx, kv, qv, g, num_parallel=1, stream_offset=0, num_keys=8, valid_last=2)
    e = math.exp
    assert o["repeats"] == 1
    assert o["log_k"][0].tolist() == [[-1, -1], [-3, -3]]
    assert o["rex"][0].tolist() == [[-2, -2], [0, 0]]
    np.testing.assert_allclose(o["a"][0], [[0, 0], [3 * (1 + 2) * e(-2), 0]], rtol=1e-15)
    np.testing.assert_allclose(o["qk"][0], [[1 + 2, 0], [(1 + 2) * e(-2), 3]], rtol=1e-15)
    assert o["is_last"][0].tolist() == [[0, 0], [1, 1]] and o["is_only"][0].tolist() == [[0, 0], [0, 1]]


COVER = [
    # (id, make_case kwargs, run kwargs)
    ("f32-basic", dict(N=4, P=2, C=64, W=32, R=32, num_keys=4096), {}),
    ("bf16-int64-perwrite-mixed", dict(N=4, P=2, C=64, W=32, R=32, num_keys=4096, idx=np.int64,
                                       vals="bf16", gate="write", gate_kind="mixed", val_kind="mixed"), {}),
    ("repeats-small", dict(N=2, C=7, W=3, R=3, num_keys=5, kmode="random", gate_kind="mixed"), {}),
    ("repeats-perwrite-bf16", dict(N=2, C=7, W=32, R=3, num_keys=9, kmode="random", gate="write",
                                   vals="bf16", val_kind="mixed"), {}),
    ("hot-1", dict(N=2, C=64, W=3, R=3, num_keys=1, kmode="random", gate_kind="mixed"), {}),
    ("hot-2-perwrite", dict(N=2, C=64, W=3, R=1, num_keys=2, kmode="random", gate="write",
                            gate_kind="mixed", val_kind="mixed"), {}),
    ("hot-16-distinct", dict(N=2, C=64, W=3, R=3, num_keys=16, kmode="distinct", gate_kind="normal"), {}),
    ("hot-16-C256", dict(N=1, C=256, W=1, R=1, num_keys=16, kmode="random", gate_kind="tiny"), {}),
    ("singletons-int64", dict(N=2, C=256, W=3, R=1, num_keys=2 ** 31 - 1, idx=np.int64,
                              kmode="distinct", qhit=0.0, gate_kind="strong"), {}),
    ("singletons-int64-qhit", dict(N=1, C=64, W=32, R=32, num_keys=2 ** 31 - 1, idx=np.int64,
                                   kmode="distinct", qhit=0.5, gate_kind="mixed"), {}),
    ("C1-W64-R64", dict(N=3, P=3, C=1, W=64, R=64, num_keys=16, kmode="random", gate="write",
                        gate_kind="mixed", stream_offset=1000), {}),
    ("C1-W1-R1", dict(N=2, P=2, C=1, W=1, R=1, num_keys=3, kmode="random"), {}),
    ("C256-W32-bf16-strong", dict(N=1, C=256, W=32, R=32, num_keys=65536, vals="bf16",
                                  gate_kind="strong"), {}),
    ("C256-W64-R64-tiny", dict(N=1, C=256, W=64, R=64, num_keys=65536, pool=8192,
                               gate_kind="tiny"), {}),
    ("C256-valid_last", dict(N=2, P=2, C=256, W=3, R=3, num_keys=300, valid_last=100,
                             gate="write", gate_kind="mixed", kmode="random"), {}),
    ("C7-W3-R32", dict(N=4, P=2, C=7, W=3, R=32, num_keys=20, kmode="pool", gate_kind="zero"), {}),
    ("C7-W64-R1", dict(N=2, C=7, W=64, R=1, num_keys=100, kmode="distinct", gate="write",
                       gate_kind="strong", val_kind="mixed"), {}),
    ("streams-4-valid_last-1", dict(N=8, P=4, C=16, W=3, R=3, num_keys=40, stream_offset=1000,
                                    valid_last=1, kmode="random", gate_kind="mixed"), {}),
    ("streams-3-valid_last-C-1", dict(N=6, P=3, C=64, W=1, R=3, num_keys=32, valid_last=63,
                                      gate_kind="normal", kmode="random", vals="bf16"), {}),
    ("extreme-gates", dict(N=2, C=64, W=4, R=2, num_keys=6, kmode="random", gate="write",
                           gate_kind="extreme", val_kind="mixed"), {}),
    ("signed-gates-bf16", dict(N=2, C=32, W=4, R=4, num_keys=10, kmode="distinct", gate_kind="signed",
                               vals="bf16"), {}),
    ("hot-6-C256-W4", dict(N=1, C=256, W=4, R=2, num_keys=6, kmode="distinct", gate_kind="mixed",
                           val_kind="mixed"), {}),
    ("zero-gates-one-values", dict(N=2, C=64, W=3, R=3, num_keys=8, kmode="random",
                                   gate_kind="zero", val_kind="one"), {}),
    ("no-read-groups", dict(N=2, P=2, C=32, W=8, R=8, num_keys=64, valid_last=20,
                            gate_kind="mixed", kmode="random"), dict(need_read_groups=False)),
    ("no-beta-default-det", dict(N=2, C=32, W=8, R=8, num_keys=64, gate_kind="mixed"),
     dict(use_beta=False)),
    ("int64-huge-offset-no-records", dict(N=4, P=2, C=16, W=4, R=4, num_keys=1000,
                                          stream_offset=2 ** 40, idx=np.int64, kmode="random",
                                          beta=False), {}),
    ("int64-num_keys-2^32", dict(N=1, C=64, W=8, R=8, num_keys=2 ** 32, idx=np.int64,
                                 kmode="distinct", qhit=0.5, beta=False), {}),
    ("int32-top-ids", dict(N=1, C=32, W=4, R=4, num_keys=2 ** 31 - 1, kmode="top", pool=40,
                           gate_kind="mixed"), {}),
    ("threads-1", dict(N=5, C=16, W=4, R=4, num_keys=32, kmode="random", gate_kind="mixed"),
     dict(num_threads=1)),
    # big chunks, two streams, bf16, per-write gates, padding
    ("C256-W64-R64-2streams-bf16", dict(N=2, P=2, C=256, W=64, R=64, num_keys=20000, pool=4096,
                                        valid_last=200, vals="bf16", gate="write",
                                        gate_kind="mixed", idx=np.int64), {}),
    # one slot for everything: 8192 K entries in one group (positions' peer counts saturate at
    # 127, sorted rows' distances at 4095; 31 repeats per token); pair sums not referenced
    ("saturation-one-slot", dict(N=1, C=256, W=32, R=4, num_keys=1, kmode="random",
                                 gate_kind="mixed", val_kind="mixed"), dict(pairs=False)),
    ("hot-1-C256-W2", dict(N=1, C=256, W=2, R=2, num_keys=1, kmode="random", gate_kind="tiny"), {}),
    # skewed slots: a few popular slots in most tokens (long groups, reads on them)
    ("zipf-1.1", dict(N=2, C=64, W=16, R=16, num_keys=4096, kmode="zipf", gate_kind="mixed"), {}),
    ("zipf-1.1-bf16-perwrite", dict(N=2, P=2, C=32, W=8, R=8, num_keys=512, kmode="zipf", vals="bf16",
                                    gate="write", val_kind="mixed", qhit=0.9), {}),
]


@pytest.mark.parametrize("cid,case_kw,run_kw", COVER, ids=[c[0] for c in COVER])
def test_library_matches_reference(cid, case_kw, run_kw):
    seed = sum(map(ord, cid)) * 7919
    case = make_case(seed, **case_kw)
    run_and_compare(case, **run_kw)


ALL_BITS = (ref.DET_POS | ref.DET_SPAY_RANK | ref.DET_FLAGS | ref.DET_SPAY_K | ref.DET_SPAY_Q
            | ref.DET_KREC | ref.DET_KSPA | ref.DET_QREC | ref.DET_TILES | ref.DET_DC_GIDX
            | ref.DET_QREC8)
DET_SETS = [0, ref.DET_POS, ref.DET_SPAY_RANK, ref.DET_FLAGS, ref.DET_SPAY_K, ref.DET_SPAY_Q,
            ref.DET_KREC, ref.DET_KSPA, ref.DET_QREC, ref.DET_TILES, ref.DET_DC_GIDX,
            ref.DET_QREC8, ref.DET_DC_GIDX | ref.DET_KREC, ALL_BITS]


@pytest.mark.parametrize("det", DET_SETS, ids=[f"det{d}" for d in DET_SETS])
@pytest.mark.parametrize("rg", [True, False], ids=["rg", "norg"])
def test_det_fields(det, rg):
    case = make_case(1000 + det, N=2, P=2, C=24, W=5, R=6, num_keys=12, valid_last=17,
                     kmode="random", gate="write", gate_kind="mixed", vals="bf16" if det & 1 else "f32")
    run_and_compare(case, det_fields=det, need_read_groups=rg, rec_tile=5)


@pytest.mark.parametrize("L", [1, 5, 128, 0])
def test_rec_tile(L):
    case = make_case(2000 + L, N=2, C=40, W=7, R=5, num_keys=30, kmode="pool", pool=20,
                     gate_kind="normal", valid_last=33)
    run_and_compare(case, det_fields=ALL_BITS, rec_tile=L)


@pytest.mark.parametrize("seed", range(40))
def test_random_shapes(seed):
    """Seeded random shapes, options and data."""
    rng = np.random.default_rng(50 + seed)
    C = int(rng.choice([1, 2, 7, 16, 33, 64, 128, 256]))
    W = int(rng.choice([1, 3, 8, 32]))
    R = int(rng.choice([1, 3, 8, 32]))
    P = int(rng.choice([1, 2, 3]))
    N = P * int(rng.integers(1, 3))
    num_keys = int(rng.choice([1, 4, 16, 100, 5000]))
    # pairs grow as (C W)^2 / num_keys: keep them below ~4e5 per chunk
    num_keys = max(num_keys, -(-(C * W) ** 2 // 400000))
    kmode = "random" if num_keys < W or rng.random() < 0.4 else str(rng.choice(["pool", "distinct"]))
    case = make_case(seed, N=N, C=C, W=W, R=R, P=P, num_keys=num_keys,
                     valid_last=int(rng.integers(1, C + 1)), idx=[np.int32, np.int64][seed % 2],
                     vals=["f32", "bf16"][(seed // 2) % 2], gate=["token", "write"][seed % 3 == 0],
                     gate_kind=str(rng.choice(["zero", "tiny", "strong", "normal", "mixed", "signed"])),
                     val_kind=str(rng.choice(["normal", "mixed"])), kmode=kmode)
    run_and_compare(case, det_fields=ALL_BITS, rec_tile=int(rng.choice([1, 3, 32, 128])))


def test_bits_independent_of_threads_and_repeatable():
    case = make_case(77, N=6, P=3, C=32, W=8, R=8, num_keys=50, valid_last=30, kmode="random",
                     gate="write", gate_kind="mixed", val_kind="mixed")
    outs = []
    for nt in (1, 3, None, 1):
        c = dict(case)
        beta = c.pop("beta")
        outs.append(p1.phase1_forward(c["k_idx"], c["q_idx"], c["k_val"], c["q_val"], c["g"],
                                      np.zeros(1, np.int64), num_parallel=c["num_parallel"],
                                      stream_offset=c["stream_offset"], num_keys=c["num_keys"],
                                      valid_last=c["valid_last"], beta=beta, det_fields=ALL_BITS,
                                      rec_tile=7, num_threads=nt))
    for o in outs[1:]:
        for name in outs[0]._fields:
            x, y = getattr(outs[0], name), getattr(o, name)
            if x is None:
                assert y is None, name
                continue
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert x.tobytes() == y.tobytes(), f"{name} differs between thread counts / calls"


MUTANTS = ["a", "qk", "log_k", "log_q", "rex", "cpe", "is_last", "is_only", "k_eff", "q_w",
           "payload", "pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank",
           "krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre", "qrec8"]


@pytest.mark.parametrize("field", MUTANTS)
@pytest.mark.parametrize("vals", ["f32", "bf16"])
def test_comparison_has_teeth(field, vals):
    """One element of one output off by the smallest step (1 ulp, 1 bit, 1 count) must fail."""
    case = make_case(99, N=2, C=16, W=4, R=4, num_keys=12, kmode="random", gate_kind="normal",
                     vals=vals, valid_last=11)
    c = dict(case)
    beta = c.pop("beta")
    rep = np.array([7], np.int64)   # compare() expects the counter to start at 7
    out = p1.phase1_forward(c["k_idx"], c["q_idx"], c["k_val"], c["q_val"], c["g"], rep,
                            num_parallel=1, stream_offset=0, num_keys=12, valid_last=11,
                            beta=beta, det_fields=ALL_BITS, rec_tile=4)
    want = ref.phase1(c["k_idx"], c["q_idx"], c["k_val"], c["q_val"], c["g"], num_parallel=1,
                      stream_offset=0, num_keys=12, valid_last=11, beta=beta, rec_tile=4)
    compare(out, want, rep.copy(), c, ALL_BITS, True, beta)   # unmutated: passes
    arr = np.array(getattr(out, field))
    flat = arr.reshape(-1)
    if field in ("a", "qk"):
        i = int(np.argmax(np.abs(flat)))             # the largest cell, by 8 ulps
        flat.view(np.int32)[i] += 8
    elif arr.dtype == np.float32:
        i = int(np.argmax(np.abs(flat)))
        flat.view(np.int32)[i] += 1 if field in ("log_k", "log_q", "rex") else 8
    elif arr.dtype == np.uint16:                      # bf16 bits: 2 bf16 ulps
        i = int(np.argmax(flat & 0x7FFF))
        flat[i] += 2
    elif field in ("krec", "qrec"):
        flat[2] += 1 << 4                              # the first record's scale word
    else:
        flat[len(flat) // 2] ^= 1
    saved = dict(ERRORS)   # the mutant's errors are not the library's
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            compare(out._replace(**{field: arr}), want, rep.copy(), c, ALL_BITS, True, beta)
    finally:
        ERRORS.clear()
        ERRORS.update(saved)


# ---- per-stream lengths -------------------------------------------------------------------

LENGTHS = [
    ("zero-one-full", dict(N=8, P=4, C=16, W=3, R=3, num_keys=40, stream_offset=1000, kmode="random",
                           gate_kind="mixed"), [0, 1, 32, 16]),
    ("mixed-int32-bf16-write", dict(N=9, P=3, C=24, W=5, R=4, num_keys=30, kmode="random", vals="bf16",
                                    gate="write", gate_kind="mixed", idx=np.int64),
     np.array([71, 25, 48], np.int32)),
    ("multiples-of-C", dict(N=6, P=2, C=32, W=8, R=8, num_keys=64), np.array([64, 32], np.int64)),
    ("P1-short", dict(N=4, P=1, C=16, W=4, R=4, num_keys=12, kmode="random"), [37]),
    ("C1", dict(N=12, P=4, C=1, W=6, R=2, num_keys=8, kmode="random", gate_kind="mixed"), [3, 0, 1, 2]),
]


@pytest.mark.parametrize("cid,case_kw,lengths", LENGTHS, ids=[c[0] for c in LENGTHS])
def test_stream_lengths_match_reference(cid, case_kw, lengths):
    case = make_case(hash(cid) % 1000, stream_lengths=lengths, **case_kw)
    run_and_compare(case, det_fields=ALL_BITS, rec_tile=5)


def test_stream_lengths_as_valid_last_same_bytes():
    """Lengths that say what valid_last says give the valid_last rule's bytes (the plan's own
    valid_last is then ignored); one Plan serves several length vectors."""
    case = make_case(5, N=6, P=3, C=16, W=4, R=4, num_keys=20, valid_last=9, kmode="random")
    c = dict(case)
    beta = c.pop("beta")
    c.pop("stream_lengths")
    kw = dict(num_parallel=3, stream_offset=c["stream_offset"], num_keys=20, beta=beta,
              det_fields=ALL_BITS)
    args = (c["k_idx"], c["q_idx"], c["k_val"], c["q_val"], c["g"])
    rule = p1.phase1_forward(*args, valid_last=9, **kw)
    lengths = p1.phase1_forward(*args, valid_last=16, stream_lengths=np.full(3, 16 + 9, np.int32), **kw)
    for name in rule._fields:
        x, y = getattr(rule, name), getattr(lengths, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), name
    with p1.Plan(N=6, C=16, W=4, R=4, num_parallel=3, stream_offset=c["stream_offset"], num_keys=20,
                 det_fields=ALL_BITS) as plan:
        for vec in ([25, 25, 25], [0, 25, 3]):   # within the valid data (padding: garbage)
            got = plan.execute(*args, beta=beta, stream_lengths=vec)
            want = p1.phase1_forward(*args, valid_last=16, stream_lengths=vec, **kw)
            assert got.a.tobytes() == want.a.tobytes() and got.payload.tobytes() == want.payload.tobytes()
        assert not np.array_equal(got.payload, rule.payload)


def test_bad_stream_lengths():
    case = make_case(6, N=4, P=2, C=8, W=2, R=2, num_keys=10)
    c = dict(case)
    c.pop("beta")
    c.pop("stream_lengths")
    args = (c["k_idx"], c["q_idx"], c["k_val"], c["q_val"], c["g"])
    kw = dict(num_parallel=2, stream_offset=c["stream_offset"], num_keys=10, valid_last=8)
    bad = (([16, -1], 1, -1), ([17, 3], 0, 17), (np.array([5, 2**31 - 1], np.int32), 1, 2**31 - 1))
    for lengths, stream, value in bad:
        with pytest.raises(p1.Phase1Error) as e:
            p1.phase1_forward(*args, stream_lengths=lengths, **kw)
        assert e.value.status == "SDM_P1_ERROR_INVALID_INPUT" and type(e.value) is p1.InvalidInputError
        message = f"stream_lengths[{stream}] = {value}: stream {stream}'s length must be in 0..16"
        assert message in str(e.value)
    with pytest.raises(ValueError, match="num_parallel = 2 lengths"):
        p1.phase1_forward(*args, stream_lengths=[1, 2, 3], **kw)
    with pytest.raises(ValueError, match="int32 or int64"):
        p1.phase1_forward(*args, stream_lengths=np.array([1.0, 2.0]), **kw)
