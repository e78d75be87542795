"""A float64 NumPy reference of Phase 1's backward (the vector-Jacobian product, VJP).

Two independent computations, written from the math (the design study
shared/design/backward.md, §1, and the specification), not from the library's code:

- forward_f64: the differentiable outputs as functions of continuous (k_val, q_val, g, beta),
  in float64 (or complex128, for the complex-step check of the design study's §2). It is
  written in the dense slot form of docs/design.md (per token and slot: summed weights and
  the slot's log-cumsum through the token), with no sort, so it shares no code path with the
  VJP. reference.py's phase1 cannot serve here: it takes float32 values and rounds every gate
  to float32 (exact integer gate sums), so it is not a function of float64 inputs.
- vjp_f64: the VJP of §1.3 in the sorted-entry form: slot groups, repeats, the row and
  column pair sums (rho, gamma), the per-entry combine and the adjoint scans of the
  segmented cumsums. It takes its sort from the ids, or from a forward's `payload` output
  as sdm_p1_execute_backward will (docs/backward.md).

Upstream gradients (`grads`, a dict; a missing key or None is zero) and the forward's
differentiable outputs are paired field by field (pairing()). Shapes, as the library lays the
outputs out (docs/outputs.md), the records given by their float words only (design study §5):
  a, qk [N, C, C]; log_k, rex, cpe, k_eff [N, C, W]; log_q, q_w [N, C, R];
  krec [N, C*W, 2] (krec words 2 and 3: k_val * exp(rex) and cpe), kspa [N, C*W],
  qrec [N, C*R] (qrec word 2) and qrec8 [N, C*R] (qrec8 word 1), by K-row / Q-row index.
Cells of a at j >= i, of qk at j > i, rows and columns of padding tokens, padding entries of
the per-entry fields and padding rows of the records are constants of the forward: the VJP
never reads them (they may hold anything, NaN included). Padding tokens' inputs are never read
either, and get exactly 0 gradient. Rounding of the forward's outputs to float32 / bfloat16
is taken as the identity (the derivative of the exact function, design study §1.3).
The sums here are NumPy's, not in the canonical order of docs/backward.md: a float32
implementation is compared with tolerances scaled by vjp_f64(..., magnitudes=True).
"""

from __future__ import annotations

import numpy as np
import reference as ref

# Differentiable outputs and the inputs each depends on (design study §1.1).
DEPENDS_ON = {
    "a": ("k_val", "g"),
    "qk": ("k_val", "q_val", "g"),
    "log_k": ("g",),
    "log_q": ("g",),
    "rex": ("g",),
    "cpe": ("g",),
    "k_eff": ("k_val", "g"),
    "q_w": ("q_val", "g"),
    "krec": ("k_val", "g"),
    "kspa": ("k_val", "g", "beta"),
    "qrec": ("q_val", "g"),
    "qrec8": ("q_val", "g"),
}
DIFFERENTIABLE = tuple(DEPENDS_ON)
# Every other output of the library (docs/outputs.md): integers, flags, layouts.
NON_DIFFERENTIABLE = ("is_last", "is_only", "payload", "pos_k", "pos_q", "q_last", "q_only",
                      "spay_k", "spay_q", "spay_rank", "tiles_k", "tiles_q", "segb_k",
                      "dc_kpos", "dc_bpre", "dc_rec", "repeats")
INPUTS = ("k_val", "q_val", "g", "beta")


def field_shape(name, N, C, W, R):
    """The shape of a differentiable output (and of its upstream gradient)."""
    return {"a": (N, C, C), "qk": (N, C, C), "log_k": (N, C, W), "log_q": (N, C, R),
            "rex": (N, C, W), "cpe": (N, C, W), "k_eff": (N, C, W), "q_w": (N, C, R),
            "krec": (N, C * W, 2), "kspa": (N, C * W), "qrec": (N, C * R),
            "qrec8": (N, C * R)}[name]


# ---- helpers ------------------------------------------------------------------------------
def _as_number_array(x, allow_complex):
    """float arrays as float64; uint16 as bfloat16 bits (exact); complex128 where allowed."""
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return ref.bf16_to_f64(x)
    if np.iscomplexobj(x):
        if not allow_complex:
            raise TypeError("backward reference: complex inputs are for the forward only")
        return x.astype(np.complex128)
    return x.astype(np.float64)


def _shapes(k_idx, q_idx, g):
    N, C, W = np.shape(k_idx)
    R = np.shape(q_idx)[2]
    gw = np.shape(g)[2]
    if gw not in (1, W):
        raise ValueError(f"backward reference: g must be [N, C, 1] or [N, C, {W}]")
    return N, C, W, R, gw


def _check_ids(keys, num_keys, c):
    if keys.size and (keys.min() < 0 or keys.max() >= num_keys):
        raise ValueError(f"backward reference: chunk {c}: a valid slot id lies outside its stream's range")


def pairing(grads, outputs):
    """<grads, outputs> summed over every field given in grads (None: skipped). The scalar
    whose derivative vjp_f64 computes."""
    total = 0.0
    for name, u in grads.items():
        if u is not None:
            total = total + np.sum(_as_number_array(u, False) * outputs[name])
    return total


# ---- the forward ---------------------------------------------------------------------------
def forward_f64(k_idx, q_idx, k_val, q_val, g, beta=None, *, num_parallel, stream_offset,
                num_keys, valid_last, stream_lengths=None):
    """The differentiable Phase-1 outputs in float64 (complex128 if any input is complex), in
    the layout of the module docstring; kspa only with beta. Padding: neutral outputs (0,
    cpe 1, krec's cpe word 1). Written in the dense slot form (docs/design.md): per chunk,
    for token t and slot s, K[t, s] and Q[t, s] are the summed write / read weights of t on s
    and G[t, s] the cumsum over tokens <= t of the gate t adds to s (once per slot a token
    writes: the gate of its first lane there; design study §1.2). Then
      a[i, j]  = sum_s K[i, s] K[j, s] exp(G[i, s] - G[j, s])   j < i, slots both write
      qk[i, j] = sum_s Q[i, s] K[j, s] exp(G[i, s] - G[j, s])   j <= i, slots j writes
    and log_k / log_q = G at the entry's token and slot, rex = the sum of the gates of the
    tokens after t on s, cpe = exp(G[last, s])."""
    N, C, W, R, gw = _shapes(k_idx, q_idx, g)
    kv = _as_number_array(k_val, True)
    qv = _as_number_array(q_val, True)
    gg = _as_number_array(g, True)
    bt = None if beta is None else _as_number_array(beta, True)
    dt = np.result_type(kv, qv, gg, *([bt] if bt is not None else []), np.float64)
    P = num_parallel
    valid = ref.chunk_valid_counts(N, C, P, valid_last, stream_lengths)
    out = {name: np.zeros(field_shape(name, N, C, W, R), dt) for name in DIFFERENTIABLE}
    out["cpe"][:] = 1.0
    out["krec"][..., 1] = 1.0
    if bt is None:
        del out["kspa"]
    for c in range(N):
        tv = valid[c]
        if tv == 0:
            continue
        base = (c % P) * stream_offset
        kk = np.asarray(k_idx)[c, :tv].astype(np.int64) - base
        qq = np.asarray(q_idx)[c, :tv].astype(np.int64) - base
        _check_ids(kk, num_keys, c)
        _check_ids(qq, num_keys, c)
        slots, inv = np.unique(np.concatenate([kk.ravel(), qq.ravel()]), return_inverse=True)
        S = slots.size
        ks = inv[:tv * W].reshape(tv, W)
        qs = inv[tv * W:].reshape(tv, R)
        tk = np.repeat(np.arange(tv), W).reshape(tv, W)
        tq = np.repeat(np.arange(tv), R).reshape(tv, R)
        Kd = np.zeros((tv, S), dt)
        Qd = np.zeros((tv, S), dt)
        np.add.at(Kd, (tk, ks), kv[c, :tv])
        np.add.at(Qd, (tq, qs), qv[c, :tv])
        # The gate a token adds to a slot: its first lane's (row-major first occurrence).
        writes = np.zeros((tv, S), bool)
        X = np.zeros((tv, S), dt)
        flat = tk.ravel() * S + ks.ravel()
        _, first = np.unique(flat, return_index=True)
        ft, fl = np.divmod(first, W)
        writes[ft, ks[ft, fl]] = True
        X[ft, ks[ft, fl]] = gg[c, ft, 0 if gw == 1 else fl]
        G = np.cumsum(X, axis=0)
        total = G[-1]
        # rex as the sum of the later tokens' gates (not total - G, which loses tiny gates)
        after = np.zeros_like(X)
        after[:-1] = np.cumsum(X[::-1], axis=0)[::-1][1:]
        # pair sums: D[i, j, s] = G[i, s] - G[j, s] where token j writes s and j <= i
        lower = np.tril(np.ones((tv, tv), bool))
        m = lower[:, :, None] & writes[None, :, :]
        E = np.exp(np.where(m, G[:, None, :] - G[None, :, :], 0.0))
        Ew = np.where(m, E * Kd[None, :, :], 0.0)            # K[j, s] exp(G[i,s] - G[j,s])
        strict = np.tril(np.ones((tv, tv), bool), -1)
        out["a"][c, :tv, :tv] = np.where(strict, np.einsum("is,ijs->ij", Kd, Ew), 0.0)
        out["qk"][c, :tv, :tv] = np.where(lower, np.einsum("is,ijs->ij", Qd, Ew), 0.0)
        logk = G[tk, ks]
        logq = G[tq, qs]
        rex = after[tk, ks]
        keff = kv[c, :tv] * np.exp(logk)
        qw = qv[c, :tv] * np.exp(logq)
        out["log_k"][c, :tv] = logk
        out["log_q"][c, :tv] = logq
        out["rex"][c, :tv] = rex
        out["cpe"][c, :tv] = np.exp(total[ks])
        out["k_eff"][c, :tv] = keff
        out["q_w"][c, :tv] = qw
        # Records by row index: the valid entries of the kind sorted stably by slot (ties in
        # token, then lane order), then the padding entries (which keep their neutral values).
        krow = np.lexsort((np.arange(tv * W), kk.ravel()))
        qrow = np.lexsort((np.arange(tv * R), qq.ravel()))
        out["krec"][c, :tv * W, 0] = (kv[c, :tv] * np.exp(rex)).ravel()[krow]
        out["krec"][c, :tv * W, 1] = np.exp(total[ks]).ravel()[krow]
        if bt is not None:
            out["kspa"][c, :tv * W] = (-bt[c, :tv, None] * keff).ravel()[krow]
        out["qrec"][c, :tv * R] = qw.ravel()[qrow]
        out["qrec8"][c, :tv * R] = qw.ravel()[qrow]
    return out


# ---- the sort (from the ids, or from a payload) ---------------------------------------------
def _sorted_from_ids(c, k_idx, q_idx, P, stream_offset, num_keys, tv, W, R):
    """The chunk's valid entries (entry e = t * (W + R) + j) in sorted order: stably by slot,
    i.e. by (slot, entry); and the group heads (first entry of each slot)."""
    base = (c % P) * stream_offset
    kk = np.asarray(k_idx)[c, :tv].astype(np.int64) - base
    qq = np.asarray(q_idx)[c, :tv].astype(np.int64) - base
    _check_ids(kk, num_keys, c)
    _check_ids(qq, num_keys, c)
    keys = np.concatenate([kk, qq], axis=1).ravel()
    order = np.lexsort((np.arange(keys.size), keys))
    ks = keys[order]
    head = np.r_[True, ks[1:] != ks[:-1]] if ks.size else np.zeros(0, bool)
    return order, head


def _sorted_from_payload(c, words, tv, C, W, R):
    """The same from the forward's payload row (lane bits 0-7, Q bit 8, token bits 9-16,
    padding bit 17, head bit 31: docs/outputs.md). It must be a permutation of the chunk's
    entries, with padding bits that match the chunk's valid tokens and padding last."""
    WR = W + R
    n = C * WR
    w = np.asarray(words)[:n].astype(np.int64) & 0xFFFFFFFF
    if w.size != n:
        raise ValueError(f"backward reference: chunk {c}: payload row shorter than C * (W + R)")
    lane = w & ref.LANE_MASK
    isq = (w & ref.Q_BIT) != 0
    tok = (w >> ref.TOKEN_SHIFT) & 0xFF
    pad = (w & ref.INVALID_BIT) != 0
    head = (w & ref.HEAD_BIT) != 0
    ent = tok * WR + np.where(isq, W + lane, lane)
    ok = (tok < C) & (lane < np.where(isq, R, W)) & (pad == (tok >= tv))
    if not (ok.all() and np.array_equal(np.sort(ent), np.arange(n))):
        raise ValueError(f"backward reference: chunk {c}: payload is not a permutation of the "
                         "chunk's entries")
    nv = tv * WR
    if pad[:nv].any() or (nv and not head[0]):
        raise ValueError(f"backward reference: chunk {c}: payload has padding before valid entries")
    return ent[:nv], head[:nv]


# ---- the VJP --------------------------------------------------------------------------------
def _get_grads(grads, N, C, W, R, has_beta):
    """Upstream gradients as float64 arrays (None: zero); refuses non-differentiable fields."""
    U = {}
    for name, u in (grads or {}).items():
        if name in NON_DIFFERENTIABLE:
            raise ValueError(f"backward reference: output '{name}' is not differentiable")
        if name not in DEPENDS_ON:
            raise ValueError(f"backward reference: no output named '{name}'")
        if u is None:
            continue
        u = _as_number_array(u, False)
        if u.shape != field_shape(name, N, C, W, R):
            raise ValueError(f"backward reference: gradient of '{name}' has shape {u.shape}, "
                             f"expected {field_shape(name, N, C, W, R)}")
        if name == "kspa" and not has_beta:
            raise ValueError("backward reference: a gradient of 'kspa' needs beta")
        U[name] = u
    return U


def _chunk_vjp(c, ent, head, kv, qv, g, bt, U, res, W, R, sgn):
    """The VJP of one chunk (design study §1.3), accumulated into res. ent / head: the valid
    entries in sorted order and the group heads. sgn = -1 gives the gradient; sgn = +1, with
    every input and upstream gradient made non-negative, gives the sum of the magnitudes of
    its terms (vjp_f64's magnitudes)."""
    WR = W + R
    tok = ent // WR
    j = ent % WR
    isq = j >= W
    lane = np.where(isq, j - W, j)
    isk = ~isq
    m = ent.size
    gw = g.shape[2]
    v = np.where(isq, qv[c, tok, np.minimum(lane, R - 1)], kv[c, tok, np.minimum(lane, W - 1)])
    # Row indices (padding sorts last, so a valid entry's row index is its rank in its kind).
    krow = np.cumsum(isk) - 1
    qrow = np.cumsum(isq) - 1

    def up(name, rows=None, word=None):
        """The upstream gradient of `name` at each entry of the kind it belongs to (0 if absent)."""
        u = U.get(name)
        if u is None:
            return np.zeros(m)
        if rows is None:
            kind_lane = np.minimum(lane, (R if name in ("log_q", "q_w") else W) - 1)
            return u[c, tok, kind_lane]
        idx = np.maximum(rows, 0)
        return u[c, idx] if word is None else u[c, idx, word]

    keff_b = up("k_eff")
    logk_b = up("log_k")
    rex_b = up("rex")
    cpe_b = up("cpe") + up("krec", krow, 1)           # krec word 3 is cpe (§1.3)
    kpost_b = up("krec", krow, 0)                     # krec word 2 is k exp(rex)
    kspa_b = up("kspa", krow)
    qw_b = up("q_w") + up("qrec", qrow) + up("qrec8", qrow)   # both scales are q_w (§1.3)
    logq_b = up("log_q")
    A_b = U.get("a")
    QK_b = U.get("qk")
    beta_t = bt[c, tok] if bt is not None else np.zeros(m)

    # Repeats and gate contributions x_f (§1.2).
    prev = np.maximum(np.arange(m) - 1, 0)
    rep = isk & ~head & isk[prev] & (tok[prev] == tok)
    x = np.zeros(m)
    gate_lane = np.zeros(m, np.int64) if gw == 1 else np.minimum(lane, W - 1)
    xk = isk & ~rep
    x[xk] = g[c, tok[xk], gate_lane[xk]]

    starts = np.flatnonzero(head)
    ends = np.r_[starts[1:], m]
    for s0, s1 in zip(starts, ends):
        sl = slice(s0, s1)
        xs, vs, ts, ks_ = x[sl], v[sl], tok[sl], isk[sl]
        G = np.cumsum(xs)                 # log_k / log_q (§1.2)
        Gam = G[-1]
        rexs = Gam - G
        eG = np.exp(G)
        n_s = s1 - s0
        rho = np.zeros(n_s)
        gam = np.zeros(n_s)
        kpos = np.flatnonzero(ks_)
        # Pair sums (§1.3): each entry e with its earlier K peers f; a K entry skips its own
        # token's (delta from a), a Q entry keeps them (delta from qk, diagonal included).
        for e in range(1, n_s):
            f = kpos[kpos < e]
            if ks_[e]:
                f = f[ts[f] != ts[e]]
                if f.size == 0 or A_b is None:
                    continue
                delta = A_b[c, ts[e], ts[f]]
            else:
                if f.size == 0 or QK_b is None:
                    continue
                delta = QK_b[c, ts[e], ts[f]]
            w = delta * np.exp(G[e] - G[f])
            rho[e] = np.sum(w * vs[f])        # row side
            gam[f] += w * vs[e]               # column side (f are distinct)
        # Combine per entry (§1.3).
        kb, lb, rb, pb, sb = keff_b[sl], logk_b[sl], rex_b[sl], kpost_b[sl], kspa_b[sl]
        qb, lqb = qw_b[sl], logq_b[sl]
        bts = beta_t[sl]
        erex = np.exp(rexs)
        dv = np.where(ks_, rho + gam + kb * eG + pb * erex + sgn * bts * sb * eG, rho + qb * eG)
        Gbar = np.where(ks_, vs * (rho + sgn * gam) + kb * vs * eG + lb + sgn * bts * sb * vs * eG,
                        vs * rho + qb * vs * eG + lqb)
        rexbar = np.where(ks_, rb + pb * vs * erex, 0.0)
        Gambar = np.sum(np.where(ks_, cpe_b[sl] * np.exp(Gam), 0.0))
        # Adjoint scans (§1.3): suffix sums of Gbar (G is a prefix sum), exclusive prefix sums
        # of rexbar (rex is a suffix sum), plus the total's adjoint.
        xbar = np.cumsum(Gbar[::-1])[::-1] + (np.cumsum(rexbar) - rexbar) + Gambar
        # Writes: values by entry, gates once per non-repeat K entry, beta by token.
        te, le = ts, lane[sl]
        kq = ~ks_
        res["k_val"][c, te[ks_], le[ks_]] = dv[ks_]
        res["q_val"][c, te[kq], le[kq]] = dv[kq]
        nr = xk[sl]
        if gw == 1:
            res["g"][c, te[nr], 0] += xbar[nr]     # a token writes a slot once: distinct te
        else:
            res["g"][c, te[nr], le[nr]] = xbar[nr]
        if bt is not None:
            np.add.at(res["beta"][c], te[ks_], (sgn * sb * vs * eG)[ks_])


def vjp_f64(k_idx, q_idx, k_val, q_val, g, grads, beta=None, *, num_parallel, stream_offset,
            num_keys, valid_last, stream_lengths=None, payload=None, magnitudes=False):
    """The gradients of L = pairing(grads, forward_f64(...)) with respect to k_val [N, C, W],
    q_val [N, C, R], g [N, C, gate_width] and beta [N, C] (zero without a kspa gradient), as
    a dict of float64 arrays (design study §1.3). grads: {field: array or None}; fields not
    given are zero; a non-differentiable field raises ValueError. Padding tokens get 0.

    payload: the forward's payload output [N, row] (the sort), in place of the ids (which may
    then be None); checked to be a permutation of each chunk's entries.
    magnitudes: also return '<input>_abs', the sums of the magnitudes of every term of each
    gradient (the same computation on |inputs| and |upstream| with every sign made +): the
    scale of a tolerance for a float32 implementation, as reference.py's a_abs."""
    N, C, W, R, gw = _shapes(k_idx if k_idx is not None else np.empty(np.shape(k_val)),
                             q_idx if q_idx is not None else np.empty(np.shape(q_val)), g)
    kv = _as_number_array(k_val, False)
    qv = _as_number_array(q_val, False)
    gg = _as_number_array(g, False)
    bt = None if beta is None else _as_number_array(beta, False)
    U = _get_grads(grads, N, C, W, R, bt is not None)
    valid = ref.chunk_valid_counts(N, C, num_parallel, valid_last, stream_lengths)
    shapes = {"k_val": (N, C, W), "q_val": (N, C, R), "g": (N, C, gw), "beta": (N, C)}
    res = {name: np.zeros(shp) for name, shp in shapes.items()}
    res_abs = {name: np.zeros(shp) for name, shp in shapes.items()}
    U_abs = {name: np.abs(u) for name, u in U.items()}
    abs_args = (np.abs(kv), np.abs(qv), gg, None if bt is None else np.abs(bt))
    for c in range(N):
        tv = valid[c]
        if tv == 0:
            continue
        if payload is not None:
            ent, head = _sorted_from_payload(c, np.asarray(payload)[c], tv, C, W, R)
        else:
            ent, head = _sorted_from_ids(c, k_idx, q_idx, num_parallel, stream_offset, num_keys, tv, W, R)
        _chunk_vjp(c, ent, head, kv, qv, gg, bt, U, res, W, R, -1.0)
        if magnitudes:
            _chunk_vjp(c, ent, head, *abs_args, U_abs, res_abs, W, R, 1.0)
    if magnitudes:
        res.update({name + "_abs": a for name, a in res_abs.items()})
    return res
