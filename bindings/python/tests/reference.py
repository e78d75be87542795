"""An independent float64 / exact-integer NumPy reference of every Phase-1 output.

Written from the behavioural specification (spec/phase1_cuda.py: Phase1, DET_*, pos_pack,
SPAY_*, the Records comment and the kernels' per-entry definitions), not from the library's
sources. It is slow on purpose where speed would cost exactness:

- Gate sums are exact. Every float32 gate is an integer multiple of 2^-149, so the reference
  keeps each gate as a Python integer in units of 2^-149 and every log-cumsum (log_k, log_q,
  rex, the group totals, the pair differences log_k_e - log_k_f) is an exact integer sum.
  Rounded outputs (log_k, log_q, rex) are the float32 nearest that exact sum (ties to even);
  everything built on an exponential uses exp() of the float64 nearest the exact sum.
- Every other float output is returned as its float64 truth; the tests compare the library
  within a few float32 (or bfloat16) ulps of it.
- Pair sums (a, qk) are accumulated in extended precision; the reference also returns, per
  cell, the sum of the terms' magnitudes and the number of terms (for the tolerances).

Layout facts used (spec): entry e = t * (W + R) + j of a chunk, j < W the K lane j, j >= W the
Q lane j - W; the sorted row orders the entries stably by slot key with padding entries last;
payload word = lane | Q << 8 | token << 9 | padding << 17 | LAST-K << 30 | HEAD << 31; rows are
padded to a multiple of 16 with HEAD | padding words.
"""

from __future__ import annotations

import math

import numpy as np

# ---- bit layout (spec facts) ------------------------------------------------------------
LANE_MASK = 0xFF
Q_BIT = 1 << 8
TOKEN_SHIFT = 9
INVALID_BIT = 1 << 17
LASTK_BIT = 1 << 30
HEAD_BIT = 1 << 31
ENTRY_MASK = 0x3FFFF
DIST_SHIFT = 18
DIST_MAX = 4095
POS_AFTER_SHIFT = 17
POS_SIZE_SHIFT = 24
POS_COUNT_MAX = 127
ROW_ALIGN = 16

DET_POS = 1
DET_SPAY_RANK = 2
DET_FLAGS = 4
DET_SPAY_K = 8
DET_SPAY_Q = 16
DET_KREC = 32
DET_KSPA = 64
DET_QREC = 128
DET_TILES = 256
DET_DC_GIDX = 512
DET_QREC8 = 2048
DET_SHIPPED = DET_POS | DET_SPAY_RANK | DET_FLAGS | DET_SPAY_K | DET_SPAY_Q

# Gates are held as integers in units of 2^-SCALE (exact for every float32).
SCALE = 149


# ---- number helpers ---------------------------------------------------------------------
def bf16_to_f64(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float64 (exact)."""
    b = np.asarray(bits).astype(np.uint32) << np.uint32(16)
    return b.view(np.float32).astype(np.float64)


def f64_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float64 -> nearest bfloat16 (ties to even) via an exact float32 step where possible.

    Only used by tests to build inputs (values that are exactly bf16), not to judge outputs."""
    f = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (f + 0x7FFF + ((f >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def values_f64(v: np.ndarray) -> np.ndarray:
    """k_val / q_val as float64: float32 arrays as is, uint16 arrays as bfloat16 bits."""
    v = np.asarray(v)
    if v.dtype == np.uint16:
        return bf16_to_f64(v)
    if v.dtype != np.float32:
        raise TypeError(f"values must be float32 or uint16 (bf16 bits), got {v.dtype}")
    return v.astype(np.float64)


def _gate_int(x: float) -> int:
    """A float32 value (given as a Python float) as an exact integer in units of 2^-SCALE."""
    if x == 0.0:
        return 0
    num, den = float(x).as_integer_ratio()  # den is a power of two <= 2^149
    return num * ((1 << SCALE) // den)


def _int_to_f32(x: int) -> float:
    """The float32 nearest x * 2^-SCALE (ties to even), returned as a Python float (exact)."""
    if x == 0:
        return 0.0
    a = -x if x < 0 else x
    bl = a.bit_length()
    sh = bl - 24
    if sh <= 0:  # at most 24 significant bits, or a float32 subnormal (units of 2^-149): exact
        q = a
        sh = 0
    else:
        q = a >> sh
        rem = a - (q << sh)
        half = 1 << (sh - 1)
        if rem > half or (rem == half and (q & 1)):
            q += 1
    r = math.ldexp(q, sh - SCALE)
    return -r if x < 0 else r


_int_to_f32_vec = np.frompyfunc(_int_to_f32, 1, 1)


def ints_to_f32(xs: np.ndarray) -> np.ndarray:
    """Object array of exact integers -> float64 array holding the nearest float32 values."""
    if xs.size == 0:
        return np.zeros(xs.shape, np.float64)
    return _int_to_f32_vec(xs).astype(np.float64)


def ints_to_f64(xs: np.ndarray) -> np.ndarray:
    """Object array of exact integers -> float64 nearest x * 2^-SCALE."""
    if xs.size == 0:
        return np.zeros(xs.shape, np.float64)
    return np.ldexp(xs.astype(np.float64), -SCALE)


def ulp_f32(ref: np.ndarray) -> np.ndarray:
    """The float32 ulp at |ref| (float64 array), 2^-149 at least."""
    a = np.abs(np.asarray(ref, dtype=np.float64))
    _, e = np.frexp(a)
    u = np.ldexp(1.0, e - 24)
    return np.maximum(u, 2.0 ** -149)


def ulp_bf16(ref: np.ndarray) -> np.ndarray:
    """The bfloat16 ulp at |ref| (float64 array), 2^-133 at least."""
    a = np.abs(np.asarray(ref, dtype=np.float64))
    _, e = np.frexp(a)
    u = np.ldexp(1.0, e - 8)
    return np.maximum(u, 2.0 ** -133)


# ---- the reference ----------------------------------------------------------------------
def _group_bounds(head: np.ndarray):
    n = head.size
    idx = np.arange(n)
    gs = np.maximum.accumulate(np.where(head, idx, 0))
    # the last index of each entry's group: the next head - 1
    nxt_head = np.where(np.r_[head[1:], True], idx, n)
    ge = np.minimum.accumulate(nxt_head[::-1])[::-1]
    return gs, ge


def _peer_counts(flag: np.ndarray, gs: np.ndarray, ge: np.ndarray):
    """Per entry: flagged entries of its group before it and after it (itself excluded)."""
    f = flag.astype(np.int64)
    incl = np.cumsum(f)
    excl = incl - f
    before = excl - excl[gs]
    after = incl[ge] - incl
    return before, after


def _chunk(c, k_idx, q_idx, kv, qv, g, beta, P, stream_offset, num_keys, tv, L, pairs):
    """All outputs of chunk c (a dict of arrays), whose first tv tokens are valid (0..C)."""
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    WR = W + R
    n = C * WR
    s = c % P
    id_base = s * stream_offset

    # entries in entry order
    tok_e = np.repeat(np.arange(C), WR)
    j_e = np.tile(np.arange(WR), C)
    isq_e = j_e >= W
    lane_e = np.where(isq_e, j_e - W, j_e)
    valid_e = tok_e < tv
    key_e = np.zeros(n, np.int64)
    vk = valid_e & ~isq_e
    vq = valid_e & isq_e
    key_e[vk] = k_idx[c][tok_e[vk], lane_e[vk]].astype(np.int64) - id_base
    key_e[vq] = q_idx[c][tok_e[vq], lane_e[vq]].astype(np.int64) - id_base
    if valid_e.any():
        kk = key_e[valid_e]
        if kk.min() < 0 or kk.max() >= num_keys:
            raise ValueError(f"reference: chunk {c}: a valid slot id lies outside its stream's range")

    # the stable sort: valid entries by key, then padding entries, ties in entry order
    order = np.lexsort((np.arange(n), key_e, ~valid_e))
    tok = tok_e[order]
    isq = isq_e[order]
    lane = lane_e[order]
    valid = valid_e[order]
    key = key_e[order]
    isk = valid & ~isq  # valid K entries
    isqv = valid & isq  # valid Q entries

    prev_valid = np.r_[False, valid[:-1]]
    prev_key = np.r_[-1, key[:-1]]
    head = ~valid | ~prev_valid | (key != prev_key)
    head[0] = True
    gs, ge = _group_bounds(head)

    # repeats: a valid K entry whose predecessor in its group is a K entry of the same token
    prev_isk = np.r_[False, isk[:-1]]
    prev_tok = np.r_[-1, tok[:-1]]
    rep = isk & ~head & prev_isk & (prev_tok == tok)

    # exact gate sums
    x = np.zeros(n, dtype=object)
    x[:] = 0
    xi = np.nonzero(isk & ~rep)[0]
    if xi.size:
        if g.shape[2] == 1:
            gv = g[c][tok[xi], 0]
        else:
            gv = g[c][tok[xi], lane[xi]]
        gv = np.asarray(gv, dtype=np.float32).astype(np.float64)
        if not np.all(np.isfinite(gv)):
            raise ValueError("reference: non-finite gate of a valid token")
        x[xi] = [_gate_int(float(v)) for v in gv]
    cum = np.cumsum(x) if n else x
    excl = cum - x
    base = excl[gs]
    incl = cum - base            # inclusive log-cumsum (exact) at every entry
    total = cum[ge] - base       # group total
    rexi = total - incl          # sum after the entry
    incl_f64 = ints_to_f64(incl)
    total_f64 = ints_to_f64(total)
    rex_f64 = ints_to_f64(rexi)

    kb, ka = _peer_counts(isk, gs, ge)
    qb, qa = _peer_counts(isqv, gs, ge)
    lastk = isk & (ka == 0)
    lastq = isqv & (qa == 0)

    # values of the sorted entries (0 for padding)
    v = np.zeros(n, np.float64)
    kvi = np.nonzero(isk)[0]
    qvi = np.nonzero(isqv)[0]
    v[kvi] = kv[c][tok[kvi], lane[kvi]]
    v[qvi] = qv[c][tok[qvi], lane[qvi]]

    out = {}
    # ---- per-entry fields (scattered back to [C, W] / [C, R])
    ki = np.nonzero(~isq)[0]   # sorted positions of all K entries (padding included), K-row order
    qi = np.nonzero(isq)[0]
    kdst = (tok[ki], lane[ki])
    qdst = (tok[qi], lane[qi])

    def scatter(shape, dst, vals, fill, dtype):
        a = np.full(shape, fill, dtype=dtype)
        a[dst] = vals
        return a

    log_r = np.where(valid, ints_to_f32(incl), 0.0)
    rex_r = np.where(isk, ints_to_f32(rexi), 0.0)
    exp_incl = np.where(valid, np.exp(incl_f64), 0.0)
    cpe_r = np.where(isk, np.exp(total_f64), 1.0)
    weff = np.where(valid, v * exp_incl, 0.0)

    out["log_k"] = scatter((C, W), kdst, log_r[ki], 0.0, np.float64)
    out["log_q"] = scatter((C, R), qdst, log_r[qi], 0.0, np.float64)
    out["rex"] = scatter((C, W), kdst, rex_r[ki], 0.0, np.float64)
    out["cpe"] = scatter((C, W), kdst, cpe_r[ki], 1.0, np.float64)
    out["k_eff"] = scatter((C, W), kdst, weff[ki], 0.0, np.float64)
    out["q_w"] = scatter((C, R), qdst, weff[qi], 0.0, np.float64)
    out["is_last"] = scatter((C, W), kdst, lastk[ki], 0, np.int64)
    out["is_only"] = scatter((C, W), kdst, (lastk & (kb == 0))[ki], 0, np.int64)
    out["q_last"] = scatter((C, R), qdst, lastq[qi], 0, np.int64)
    out["q_only"] = scatter((C, R), qdst, (lastq & (qb == 0))[qi], 0, np.int64)

    r = np.arange(n, dtype=np.int64)

    def pos_word(before, after):
        a_ = np.minimum(after, POS_COUNT_MAX)
        sz = np.minimum(before + 1 + after, POS_COUNT_MAX)
        return np.where(valid, r | (a_ << POS_AFTER_SHIFT) | (sz << POS_SIZE_SHIFT), r)

    out["pos_k"] = scatter((C, W), kdst, pos_word(kb, ka)[ki], 0, np.int64)
    out["pos_q"] = scatter((C, R), qdst, pos_word(qb, qa)[qi], 0, np.int64)

    # ---- payload row
    pay = (lane.astype(np.int64) | np.where(isq, Q_BIT, 0) | (tok.astype(np.int64) << TOKEN_SHIFT)
           | np.where(valid, 0, INVALID_BIT))
    row = -(-n // ROW_ALIGN) * ROW_ALIGN
    payload = np.full(row, HEAD_BIT | INVALID_BIT, dtype=np.int64)
    payload[:n] = pay | np.where(head, HEAD_BIT, 0) | np.where(lastk, LASTK_BIT, 0)
    out["payload"] = payload

    # ---- sorted K / Q rows
    def sorted_elems(idx, before, after):
        vv = valid[idx]
        bb = before[idx]
        aa = after[idx]
        role = ((np.minimum(bb, DIST_MAX) << DIST_SHIFT) | np.where(bb == 0, HEAD_BIT, 0)
                | np.where(aa == 0, LASTK_BIT, 0))
        return (pay[idx] & ENTRY_MASK) | np.where(vv, role, HEAD_BIT | LASTK_BIT)

    spk = sorted_elems(ki, kb, ka)
    spq = sorted_elems(qi, qb, qa)
    out["spay_k"] = spk
    out["spay_q"] = spq

    # ---- rank table
    nb = -(-n // 32)
    kmask = (~isq).astype(np.int64)
    kcum = np.r_[0, np.cumsum(kmask)]
    rank = np.zeros((nb, 2), np.int64)
    rank[:, 0] = kcum[np.arange(nb) * 32]
    padded = np.zeros(nb * 32, np.int64)
    padded[:n] = kmask
    rank[:, 1] = (padded.reshape(nb, 32) << np.arange(32, dtype=np.int64)).sum(axis=1)
    out["spay_rank"] = rank

    # ---- records
    slot = np.where(valid, key + id_base, 0)
    kval_k = v[ki]
    out["krec_elem"] = spk
    out["krec_slot"] = slot[ki]
    out["krec_scale"] = np.where(valid[ki], kval_k * np.exp(rex_f64[ki]), 0.0)
    out["krec_cpe"] = np.where(valid[ki], cpe_r[ki], 1.0)
    if beta is not None:
        bt = np.zeros(n, np.float64)
        bt[kvi] = np.asarray(beta[c], dtype=np.float32).astype(np.float64)[tok[kvi]]
        out["kspa"] = np.where(valid[ki], -bt[ki] * weff[ki], 0.0)
    out["qrec_elem"] = spq
    out["qrec_slot"] = slot[qi]
    out["qrec_scale"] = np.where(valid[qi], weff[qi], 0.0)

    # ---- tiles and group indices (K row: ki order; Q row: qi order)
    nk, nq = C * W, C * R
    kfirst = (spk & HEAD_BIT) != 0
    qfirst = (spq & HEAD_BIT) != 0
    kvalid_first = kfirst & valid[ki]

    def next_first(first, m):
        idx = np.arange(m)
        cand = np.where(first, idx, m)
        return np.minimum.accumulate(cand[::-1])[::-1]  # smallest FIRST index >= j (m if none)

    vf_cum = np.r_[0, np.cumsum(kvalid_first.astype(np.int64))]  # valid FIRSTs before index j
    ntk = -(-nk // L)
    ntq = -(-nq // L)
    nfk = np.r_[next_first(kfirst, nk), nk]
    nfq = np.r_[next_first(qfirst, nq), nq]
    tk = np.empty(ntk + 1, np.int64)
    tk[:ntk] = nfk[np.arange(ntk) * L]
    tk[ntk] = nk
    tq = np.empty(ntq + 1, np.int64)
    tq[:ntq] = nfq[np.arange(ntq) * L]
    tq[ntq] = nq
    sb = np.empty(ntk + 1, np.int64)
    sb[:ntk] = vf_cum[np.arange(ntk) * L]
    sb[ntk] = vf_cum[nk]
    out["tiles_k"] = tk
    out["tiles_q"] = tq
    out["segb_k"] = sb
    nwk = -(-nk // 32)
    bp = np.empty(nwk + 1, np.int64)
    bp[:nwk] = vf_cum[np.arange(nwk) * 32]
    bp[nwk] = vf_cum[nk]
    out["dc_bpre"] = bp
    out["dc_kpos"] = scatter((C, W), kdst, np.where(kvalid_first, vf_cum[:nk], -1), -1, np.int64)

    out["repeats"] = int(rep.sum())
    if not pairs:
        return out

    # ---- pair sums
    a = np.zeros(C * C, np.longdouble)
    qk = np.zeros(C * C, np.longdouble)
    a_abs = np.zeros(C * C, np.float64)
    qk_abs = np.zeros(C * C, np.float64)
    a_cnt = np.zeros(C * C, np.int64)
    qk_cnt = np.zeros(C * C, np.int64)
    kl = np.nonzero(isk)[0]                  # valid K entries in sorted order
    kfirst_idx = np.cumsum(isk) - isk        # index in kl of the first valid K of the group ...
    kfirst_idx = kfirst_idx[gs]              # ... (count of valid K before the group's head)
    sel = np.nonzero((isk | isqv) & (kb > 0))[0]
    if sel.size:
        cnt = kb[sel]
        tot = int(cnt.sum())
        e_rep = np.repeat(sel, cnt)
        off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        f_rep = kl[np.repeat(kfirst_idx[sel], cnt) + off]
        d = ints_to_f64(incl[e_rep] - incl[f_rep])
        term = v[e_rep] * v[f_rep] * np.exp(d)
        cell = tok[e_rep].astype(np.int64) * C + tok[f_rep]
        is_a = isk[e_rep] & (tok[f_rep] != tok[e_rep])
        is_qk = isqv[e_rep]
        np.add.at(a, cell[is_a], term[is_a].astype(np.longdouble))
        np.add.at(qk, cell[is_qk], term[is_qk].astype(np.longdouble))
        a_abs += np.bincount(cell[is_a], weights=np.abs(term[is_a]), minlength=C * C)
        qk_abs += np.bincount(cell[is_qk], weights=np.abs(term[is_qk]), minlength=C * C)
        a_cnt += np.bincount(cell[is_a], minlength=C * C)
        qk_cnt += np.bincount(cell[is_qk], minlength=C * C)
    out["a"] = a.astype(np.float64).reshape(C, C)
    out["qk"] = qk.astype(np.float64).reshape(C, C)
    out["a_abs"] = a_abs.reshape(C, C)
    out["qk_abs"] = qk_abs.reshape(C, C)
    out["a_cnt"] = a_cnt.reshape(C, C)
    out["qk_cnt"] = qk_cnt.reshape(C, C)
    return out


def chunk_valid_counts(N, C, num_parallel, valid_last, stream_lengths=None):
    """Valid tokens of each of the N chunks: with stream_lengths (stream s has
    stream_lengths[s] tokens, 0..steps * C), chunk c (stream c % P, step c // P) has
    min(max(len - step * C, 0), C); without, C but valid_last in the last P chunks."""
    P = num_parallel
    if stream_lengths is None:
        return [valid_last if c >= N - P else C for c in range(N)]
    lengths = [int(x) for x in np.asarray(stream_lengths).reshape(-1)]
    if len(lengths) != P or any(not 0 <= x <= N // P * C for x in lengths):
        raise ValueError("reference: stream_lengths must hold num_parallel lengths in 0..steps * C")
    return [min(max(lengths[c % P] - c // P * C, 0), C) for c in range(N)]


def phase1(k_idx, q_idx, k_val, q_val, g, *, num_parallel, stream_offset, num_keys, valid_last,
           beta=None, rec_tile=128, pairs=True, stream_lengths=None):
    """Every Phase-1 output of all N chunks, computed independently (see the module docstring).
    stream_lengths: per-stream lengths (chunk_valid_counts), replacing the valid_last rule.

    Returns a dict: float fields as float64 truths, integer fields as int64, packed words as
    their unsigned values in int64, records split into their words:
      a, qk [N, C, C]; a_abs, qk_abs (sum of |terms| per cell); a_cnt, qk_cnt (terms per cell)
      log_k, rex, cpe, k_eff, is_last, is_only, pos_k, dc_kpos [N, C, W]
      log_q, q_w, q_last, q_only, pos_q [N, C, R]
      payload [N, row]; spay_k [N, C*W]; spay_q [N, C*R]; spay_rank [N, ceil(C(W+R)/32), 2]
      krec_elem, krec_slot, krec_scale, krec_cpe [N, C*W]; kspa [N, C*W] (when beta is given)
      qrec_elem, qrec_slot, qrec_scale [N, C*R]
      tiles_k, segb_k [N, ceil(C*W/L)+1]; tiles_q [N, ceil(C*R/L)+1]; dc_bpre [N, ceil(C*W/32)+1]
      repeats (int)
    log_k / log_q / rex are the float32 nearest the exact sums; the others are float64 truths
    (cpe and k_eff / q_w before any rounding to the value dtype). pairs=False skips a / qk
    (and their a_abs, a_cnt, ...), whose cost grows with the square of the group sizes."""
    k_idx = np.asarray(k_idx)
    q_idx = np.asarray(q_idx)
    N, C, W = k_idx.shape
    kv = values_f64(k_val)
    qv = values_f64(q_val)
    g = np.asarray(g, dtype=np.float32)
    if num_parallel < 1 or N % num_parallel:
        raise ValueError("reference: num_parallel must divide N")
    if not 1 <= valid_last <= C:
        raise ValueError("reference: valid_last must be in 1..C")
    L = int(rec_tile) if rec_tile and rec_tile > 0 else 128
    valid = chunk_valid_counts(N, C, num_parallel, valid_last, stream_lengths)
    chunks = [_chunk(c, k_idx, q_idx, kv, qv, g, beta, num_parallel, stream_offset, num_keys,
                     valid[c], L, pairs) for c in range(N)]
    out = {}
    for name in chunks[0]:
        if name == "repeats":
            out[name] = sum(ch[name] for ch in chunks)
        else:
            out[name] = np.stack([ch[name] for ch in chunks])
    return out
