"""The whole library through the recurrence it exists for (docs/design.md).

sdm_phase1.recurrence holds both forms in float64: the token-by-token delta rule, and the
chunked WY form from the library's Phase-1 outputs, computed twice: from the per-entry fields
(k_eff, q_w, cpe, rex) and from the mover records (kspa, qrec, krec). Padding tokens do nothing.
Both must match the token-by-token outputs and final memory within a relative tolerance of the
magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref
from error_report import merge_error_report

p1 = pytest.importorskip("sdm_phase1")
rec = p1.recurrence

REL_TOL = 1e-5
# bfloat16 values: k_eff, q_w and cpe are themselves rounded to bfloat16 (relative 2^-9), so the
# chunked result can only agree to a few bfloat16 ulps
REL_TOL_BF16 = 1e-2
WORST: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    if WORST:
        print("\n[test_recurrence] largest error relative to the magnitude:")
        for k, v in sorted(WORST.items()):
            print(f"  {k:20s} {v:.3g}")
        merge_error_report("test_recurrence", {k: {"max_error": v, "unit": "max|err| / max|ref|"}
                                               for k, v in sorted(WORST.items())})


def make_inputs(seed, *, P, steps, C, W, R, D, num_keys, valid_last, gate, gate_kind, vals,
                repeats, idx=np.int32):
    rng = np.random.default_rng(seed)
    N = P * steps
    stream_offset = num_keys + 5 if P > 1 else 0
    if repeats:
        keys = rng.integers(0, num_keys, size=(N, C, W))
    else:
        keys = np.stack([np.stack([rng.permutation(num_keys)[:W] for _ in range(C)]) for _ in range(N)])
    qkeys = rng.integers(0, num_keys, size=(N, C, R))
    hit = rng.random((N, C, R)) < 0.6   # mostly slots written recently
    for c in range(N):
        src = keys[max(0, c - P): c + 1].reshape(-1)
        qkeys[c][hit[c]] = rng.choice(src, size=int(hit[c].sum()))
    base = (np.arange(N) % P)[:, None, None] * stream_offset
    k_idx = (keys + base).astype(idx)
    q_idx = (qkeys + base).astype(idx)
    # unit-norm write vectors keep the delta rule contractive (beta < 1)
    kv = rng.standard_normal((N, C, W))
    kv /= np.linalg.norm(kv, axis=2, keepdims=True)
    qv = rng.standard_normal((N, C, R))
    gshape = (N, C, 1 if gate == "token" else W)
    if gate_kind == "normal":
        g = -rng.uniform(0.0, 0.3, size=gshape)
    elif gate_kind == "mixed":
        g = np.select([rng.random(gshape) < 0.1, rng.random(gshape) < 0.2],
                      [np.full(gshape, -20.0), np.full(gshape, -1e-9)],
                      -rng.uniform(0.0, 1.0, size=gshape))
    else:
        raise ValueError(gate_kind)
    g = g.astype(np.float32)
    beta = rng.uniform(0.1, 0.9, size=(N, C)).astype(np.float32)
    v = rng.standard_normal((N, C, D))
    M0 = rng.standard_normal((P, num_keys, D))
    kv = kv.astype(np.float32)
    qv = qv.astype(np.float32)
    # padding tokens: garbage the library must not read
    for c in range(N - P, N):
        k_idx[c, valid_last:] = np.iinfo(idx).max
        q_idx[c, valid_last:] = -7
        kv[c, valid_last:] = np.nan
        qv[c, valid_last:] = np.nan
        g[c, valid_last:] = np.nan
        beta[c, valid_last:] = np.nan
    if vals == "bf16":
        kv = ref.f64_to_bf16_bits(kv)
        qv = ref.f64_to_bf16_bits(qv)
    return dict(k_idx=k_idx, q_idx=q_idx, k_val=kv, q_val=qv, g=g, beta=beta, v=v, M0=M0,
                num_parallel=P, stream_offset=stream_offset, num_keys=num_keys,
                valid_last=valid_last)


def lengths_of(x):
    N, C = x["k_idx"].shape[:2]
    return rec.chunk_lengths(N, C, x["num_parallel"], valid_last=x["valid_last"])


def token_by_token(x):
    return rec.token_by_token(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"], x["beta"],
                              x["v"], x["M0"], num_parallel=x["num_parallel"],
                              stream_offset=x["stream_offset"], lengths=lengths_of(x))


def chunked(x, out, use_records):
    return rec.chunked(out, x["k_idx"], x["q_idx"], x["k_val"], x["beta"], x["v"], x["M0"],
                       num_parallel=x["num_parallel"], stream_offset=x["stream_offset"],
                       lengths=lengths_of(x), use_records=use_records)


def assert_padding_zero(out, lengths):
    """The library keeps the padding rows and columns of a and qk at zero."""
    for c, n in enumerate(lengths):
        for m in (np.asarray(out.a[c]), np.asarray(out.qk[c])):
            assert not m[n:].any() and not m[:, n:].any(), f"chunk {c}: padding cells not zero"


CASES = [
    # id, kwargs
    ("f32-token-2streams", dict(P=2, steps=3, C=32, W=4, R=3, D=6, num_keys=40, valid_last=20,
                                gate="token", gate_kind="normal", vals="f32", repeats=False)),
    ("bf16-write-mixed", dict(P=3, steps=2, C=16, W=3, R=2, D=4, num_keys=24, valid_last=9,
                              gate="write", gate_kind="mixed", vals="bf16", repeats=False)),
    ("f32-repeats-hot", dict(P=1, steps=3, C=64, W=4, R=4, D=8, num_keys=12, valid_last=64,
                             gate="write", gate_kind="normal", vals="f32", repeats=True,
                             idx=np.int64)),
    ("f32-C64-4streams", dict(P=4, steps=2, C=64, W=2, R=2, D=5, num_keys=64, valid_last=1,
                              gate="token", gate_kind="mixed", vals="f32", repeats=False)),
    ("bf16-C48-repeats", dict(P=2, steps=2, C=48, W=5, R=3, D=7, num_keys=30, valid_last=47,
                              gate="token", gate_kind="normal", vals="bf16", repeats=True)),
]


@pytest.mark.parametrize("use_records", [False, True], ids=["fields", "records"])
@pytest.mark.parametrize("cid,kw", CASES, ids=[c[0] for c in CASES])
def test_chunked_recurrence_matches_token_by_token(cid, kw, use_records):
    x = make_inputs(sum(map(ord, cid)), **kw)
    out = p1.phase1_forward(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"],
                            num_parallel=x["num_parallel"], stream_offset=x["stream_offset"],
                            num_keys=x["num_keys"], valid_last=x["valid_last"], beta=x["beta"])
    assert_padding_zero(out, lengths_of(x))
    o_ref, M_ref = token_by_token(x)
    o, M = chunked(x, out, use_records)
    bf16 = np.asarray(x["k_val"]).dtype == np.uint16
    check_against_token_by_token(cid, (o, M), (o_ref, M_ref), lengths_of(x),
                                 f"{'records' if use_records else 'fields'}{', bf16' if bf16 else ''}",
                                 REL_TOL_BF16 if bf16 else REL_TOL)


def check_against_token_by_token(cid, got, want, lengths, kind, tol):
    """Outputs zero at padding tokens, and o and the final memory within tol of the reference."""
    (o, M), (o_ref, M_ref) = got, want
    valid = np.arange(o.shape[1])[None, :] < np.asarray(lengths)[:, None]
    assert np.all(o[~valid] == 0)
    for name, g, w in (("o", o[valid], o_ref[valid]), ("memory", M, M_ref)):
        err = rec.relative_error(g, w)
        key = f"{name}[{kind}]"
        WORST[key] = max(WORST.get(key, 0.0), err)
        assert err <= tol, f"{cid}: {name} differs by {err:.3g} of its magnitude"


@pytest.mark.parametrize("use_records", [False, True], ids=["fields", "records"])
def test_recurrence_with_chunks_of_any_length(use_records):
    """Chunks of every length from 0 to C, in any position (as per-stream lengths give them):
    tokens past a chunk's length are made neutral for the library (gate 0, values 0, beta 0),
    which then computes the same Phase 1 as if they were padding, and the recurrence module,
    told the lengths, must skip them, empty chunks included."""
    P, steps, C = 3, 3, 16
    x = make_inputs(11, P=P, steps=steps, C=C, W=3, R=2, D=4, num_keys=20, valid_last=C,
                    gate="token", gate_kind="normal", vals="f32", repeats=False)
    lengths = rec.chunk_lengths(P * steps, C, P, stream_lengths=[0, 2 * C + 5, 3 * C])
    pad = np.arange(C)[None, :] >= lengths[:, None]
    for name in ("k_val", "q_val", "g", "beta"):
        x[name][pad] = 0
    out = p1.phase1_forward(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"],
                            num_parallel=P, stream_offset=x["stream_offset"],
                            num_keys=x["num_keys"], valid_last=C, beta=x["beta"])
    args = dict(num_parallel=P, stream_offset=x["stream_offset"], lengths=lengths)
    want = rec.token_by_token(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"], x["beta"],
                              x["v"], x["M0"], **args)
    got = rec.chunked(out, x["k_idx"], x["q_idx"], x["k_val"], x["beta"], x["v"], x["M0"],
                      use_records=use_records, **args)
    assert np.array_equal(got[1][0], x["M0"][0]), "an empty stream's memory changed"
    check_against_token_by_token("lengths", got, want, lengths,
                                 f"{'records' if use_records else 'fields'}, lengths", REL_TOL)


def test_recurrence_detects_a_wrong_output():
    """The check has teeth: the largest qk cell off by 1e-3 of itself is caught."""
    x = make_inputs(3, P=1, steps=1, C=16, W=3, R=3, D=4, num_keys=10, valid_last=16,
                    gate="token", gate_kind="normal", vals="f32", repeats=False)
    out = p1.phase1_forward(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"],
                            num_parallel=1, stream_offset=0, num_keys=10, valid_last=16,
                            beta=x["beta"])
    o_ref, _ = token_by_token(x)
    qk = np.array(out.qk)
    i, j = np.unravel_index(np.argmax(np.abs(qk[0])), qk[0].shape)
    qk[0, i, j] *= 1.001
    o, _ = chunked(x, out._replace(qk=qk), False)
    assert rec.relative_error(o, o_ref) > REL_TOL
