"""sdm_phase1.sdm_layer: Phase 1 then the chunked recurrence (Phase 2), in PyTorch
(differentiable, sdm_phase1.torch_recurrence) and in float64 NumPy (sdm_phase1.recurrence).

The PyTorch layer's outputs and its gradients with respect to k_val, q_val, g, beta, v and the
start memory are held to torch autograd of the token-by-token delta rule written here, in
float64 PyTorch, from the inputs alone (no Phase 1, no chunks): relative error (max |error| /
max |reference|) at most 1e-5, Phase 1's outputs being float32. Data: hot slots with repeated
writes, padding, per-write gates, per-stream lengths with an empty stream. The NumPy layer is
held to the token-by-token recurrence of sdm_phase1.recurrence.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1
from sdm_phase1 import recurrence as rec

torch = pytest.importorskip("torch")

REL_TOL = 1e-5
INPUTS = ("k_val", "q_val", "g", "beta", "v", "memory")


def make_layer_case(seed, *, P, steps, C, W, R, D, num_keys, gate="token", repeats=True,
                    valid_last=None, stream_lengths=None):
    """Layer inputs: unit-norm write weights (a contractive delta rule), reads mostly of slots
    written in the chunk or the one before, gates in [-0.5, 0], NaN and wild ids in padding
    tokens (which nothing may read)."""
    rng = np.random.default_rng(seed)
    N = P * steps
    stream_offset = num_keys + 3
    if repeats:
        keys = rng.integers(0, num_keys, size=(N, C, W))
    else:
        keys = np.stack([rng.permutation(num_keys)[:W] for _ in range(N * C)]).reshape(N, C, W)
    qkeys = rng.integers(0, num_keys, size=(N, C, R))
    hit = rng.random((N, C, R)) < 0.7
    for c in range(N):
        src = keys[max(0, c - P): c + 1].reshape(-1)
        qkeys[c][hit[c]] = rng.choice(src, size=int(hit[c].sum()))
    base = (np.arange(N) % P)[:, None, None] * stream_offset
    kv = rng.standard_normal((N, C, W))
    kv /= np.linalg.norm(kv, axis=2, keepdims=True)
    x = dict(k_idx=(keys + base).astype(np.int64), q_idx=(qkeys + base).astype(np.int64),
             k_val=kv.astype(np.float32),
             q_val=rng.standard_normal((N, C, R)).astype(np.float32),
             g=-rng.uniform(0.0, 0.5, size=(N, C, 1 if gate == "token" else W)).astype(np.float32),
             beta=rng.uniform(0.1, 0.9, size=(N, C)).astype(np.float32),
             v=rng.standard_normal((N, C, D)), memory=rng.standard_normal((P, num_keys, D)))
    opts = dict(num_parallel=P, stream_offset=stream_offset, num_keys=num_keys)
    if stream_lengths is not None:
        opts["stream_lengths"] = np.asarray(stream_lengths, np.int64)
    else:
        opts["valid_last"] = C if valid_last is None else valid_last
    lengths = rec.chunk_lengths(N, C, P, valid_last=opts.get("valid_last"),
                                stream_lengths=opts.get("stream_lengths"))
    for c, n in enumerate(lengths):
        x["k_idx"][c, n:] = 2 ** 40
        x["q_idx"][c, n:] = -1
        for name in ("k_val", "q_val", "g", "beta", "v"):
            x[name][c, n:] = np.nan
    return x, opts, lengths


CASES = {
    "hot-repeats-padding": dict(P=2, steps=3, C=8, W=3, R=2, D=4, num_keys=6, valid_last=5),
    "write-gates-lengths": dict(P=3, steps=2, C=8, W=3, R=3, D=3, num_keys=10, gate="write",
                                repeats=False, stream_lengths=[11, 0, 16]),
    "one-stream-long": dict(P=1, steps=4, C=16, W=2, R=2, D=5, num_keys=12, valid_last=16),
}


def token_by_token_torch(x, lengths, *, num_parallel, stream_offset):
    """The delta rule token by token in float64 PyTorch, functional (each memory row a tensor
    of its own), so autograd differentiates it: (o [N, C, D], final memory [P, K, D])."""
    k_idx, q_idx = x["k_idx"], x["q_idx"]
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    P = num_parallel
    D = x["v"].shape[2]
    rows = [[x["memory"][s, k] for k in range(x["memory"].shape[1])] for s in range(P)]
    zero = torch.zeros(D, dtype=torch.float64)
    o = []
    for c in range(N):
        s = c % P
        Ms = rows[s]
        base = s * stream_offset
        for t in range(C):
            if t >= int(lengths[c]):
                o.append(zero)
                continue
            slots = [int(k) - base for k in k_idx[c, t]]
            seen = set()
            for w, sl in enumerate(slots):  # each distinct slot decays once: its first lane's gate
                if sl not in seen:
                    seen.add(sl)
                    gate = x["g"][c, t, 0] if x["g"].shape[2] == 1 else x["g"][c, t, w]
                    Ms[sl] = Ms[sl] * torch.exp(gate)
            pred = sum(x["k_val"][c, t, w] * Ms[sl] for w, sl in enumerate(slots))
            u = x["beta"][c, t] * (x["v"][c, t] - pred)
            for w, sl in enumerate(slots):
                Ms[sl] = Ms[sl] + x["k_val"][c, t, w] * u
            o.append(sum(x["q_val"][c, t, r] * Ms[int(q_idx[c, t, r]) - base] for r in range(R)))
    return torch.stack(o).reshape(N, C, D), torch.stack([torch.stack(r) for r in rows])


def relative_error(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def loss_weights(N, C, P, K, D, seed=0):
    rng = np.random.default_rng(seed)
    return (torch.from_numpy(rng.standard_normal((N, C, D))),
            torch.from_numpy(rng.standard_normal((P, K, D))))


@pytest.mark.parametrize("cid", list(CASES))
def test_gradients_match_token_by_token_autograd(cid):
    x, opts, lengths = make_layer_case(sum(map(ord, cid)), **CASES[cid])
    N, C = x["k_idx"].shape[:2]
    P, K, D = x["memory"].shape
    wo, wm = loss_weights(N, C, P, K, D)
    valid = torch.from_numpy(np.arange(C)[None, :] < lengths[:, None])

    # The layer: Phase 1 from float32 leaves, Phase 2 in float64 (v's dtype).
    leaves = {n: torch.from_numpy(x[n]).requires_grad_() for n in INPUTS}
    kw = dict(opts)
    if "stream_lengths" in kw:
        kw["stream_lengths"] = torch.from_numpy(kw["stream_lengths"])
    ids = (torch.from_numpy(x["k_idx"]), torch.from_numpy(x["q_idx"]))
    o, M = p1.sdm_layer(*ids, *(leaves[n] for n in INPUTS), **kw)
    assert torch.all(o[~valid] == 0), "padding tokens read something"
    ((o * wo).sum() + (M * wm).sum()).backward()

    # The reference: float64 leaves of the same values; padding NaNs never enter it.
    ref = {n: torch.from_numpy(x[n].astype(np.float64)).requires_grad_() for n in INPUTS}
    o_ref, M_ref = token_by_token_torch(dict(ref, k_idx=x["k_idx"], q_idx=x["q_idx"]), lengths,
                                        num_parallel=P, stream_offset=opts["stream_offset"])
    ((o_ref * wo).sum() + (M_ref * wm).sum()).backward()

    assert relative_error(o[valid].detach(), o_ref[valid].detach()) <= REL_TOL
    assert relative_error(M.detach(), M_ref.detach()) <= REL_TOL
    for n in INPUTS:
        got, want = leaves[n].grad, ref[n].grad
        assert got is not None and want is not None, n
        if n != "memory":  # padding tokens: no gradient (the reference never touches them)
            pad = ~valid if n in ("beta",) else ~valid[..., None].expand(want.shape)
            assert torch.all(got[pad] == 0), n
            got, want = got[~pad], want[~pad]
        err = relative_error(got.double(), want)
        assert err <= REL_TOL, f"{cid}: d/d{n} off by {err:.3g} of its magnitude"


def test_the_gradient_check_has_teeth():
    """A Phase-2 gradient that misses a term fails the comparison: the layer with the decay's
    gradient cut off (cpe detached) differs from the reference's d/dg by far more than 1e-5."""
    x, opts, lengths = make_layer_case(1, **CASES["hot-repeats-padding"])
    N, C = x["k_idx"].shape[:2]
    P, K, D = x["memory"].shape
    wo, wm = loss_weights(N, C, P, K, D)
    from sdm_phase1 import torch_ops, torch_recurrence

    g = torch.from_numpy(x["g"]).requires_grad_()
    t = {n: torch.from_numpy(x[n]) for n in ("k_idx", "q_idx", "k_val", "q_val", "beta", "v", "memory")}
    out = torch_ops.phase1_forward(t["k_idx"], t["q_idx"], t["k_val"], t["q_val"], g,
                                   det_fields=0, need_read_groups=False, **opts)
    full = torch_recurrence.chunked(out, t["k_idx"], t["q_idx"], t["k_val"], t["beta"], t["v"],
                                    t["memory"], num_parallel=P, stream_offset=opts["stream_offset"],
                                    lengths=torch.from_numpy(lengths))
    cut = torch_recurrence.chunked(out._replace(cpe=out.cpe.detach()), t["k_idx"], t["q_idx"],
                                   t["k_val"], t["beta"], t["v"], t["memory"], num_parallel=P,
                                   stream_offset=opts["stream_offset"], lengths=torch.from_numpy(lengths))
    (dg_full,) = torch.autograd.grad((full[0] * wo).sum() + (full[1] * wm).sum(), [g],
                                     retain_graph=True)  # Phase 1 serves both
    (dg_cut,) = torch.autograd.grad((cut[0] * wo).sum() + (cut[1] * wm).sum(), [g])
    assert relative_error(dg_cut.double(), dg_full.double()) > 100 * REL_TOL


@pytest.mark.parametrize("cid", list(CASES))
def test_numpy_layer_matches_token_by_token(cid):
    """The NumPy layer (float64 Phase 2) against the NumPy token-by-token recurrence, and the
    PyTorch layer's forward against the NumPy layer (the same Phase-1 bits, float64 both)."""
    x, opts, lengths = make_layer_case(sum(map(ord, cid)) + 1, **CASES[cid])
    args = [x[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g", "beta", "v", "memory")]
    o, M = p1.sdm_layer(*args, **opts)
    o_ref, M_ref = rec.token_by_token(*args, num_parallel=opts["num_parallel"],
                                      stream_offset=opts["stream_offset"], lengths=lengths)
    valid = np.arange(o.shape[1])[None, :] < lengths[:, None]
    assert np.all(o[~valid] == 0)
    assert rec.relative_error(o[valid], o_ref[valid]) <= REL_TOL
    assert rec.relative_error(M, M_ref) <= REL_TOL
    kw = {k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in opts.items()}
    with torch.no_grad():
        o_t, M_t = p1.sdm_layer(*(torch.from_numpy(a) for a in args), **kw)
    assert rec.relative_error(o_t.numpy()[valid], o[valid]) <= 1e-10
    assert rec.relative_error(M_t.numpy(), M) <= 1e-10

