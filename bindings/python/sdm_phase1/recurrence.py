"""The Sparse Delta Memory recurrence (Phase 2) in float64 NumPy: chunked, from libsdmp1's
Phase-1 outputs, and token by token, from the inputs alone, so that one can be checked against
the other; and :func:`sdm_layer`, Phase 1 then the chunked recurrence in one call.

A reference, not a fast kernel: it runs chunk after chunk in Python. The differentiable
PyTorch form is :mod:`sdm_phase1.torch_recurrence` (which :func:`sdm_layer` takes for torch
tensors).

A memory holds one row of D numbers per slot per stream. Chunk c of a batch belongs to stream
c % num_parallel and follows chunk c - num_parallel of that stream; its first lengths[c] tokens
are valid and the rest (up to all C of them) are padding, which neither reads nor changes the
memory and whose outputs are zero. The token-by-token delta rule, for each valid token t in
time order:

    every distinct slot the token writes decays once: M[s] *= exp(gate)   (repeats: not again)
    pred = sum_w k_w M[s_w];  u = beta_t (v_t - pred);  M[s_w] += k_w u for every lane w
    o_t = sum_r q_r M[s_r]

The chunked form (the WY form of docs/design.md), per chunk with start state S0 and the chunk's
Phase-1 outputs a, qk, k_eff, q_w, cpe, rex:

    (I + diag(beta) a) u = diag(beta) (v - k_eff S0)
    o = q_w S0 + qk u
    S_end[slot] = cpe S0[slot] (once per slot) + sum over the chunk's writes of k exp(rex) u

It can also be computed from the mover records a Phase 2 reads (kspa, qrec, krec) instead of the
per-entry fields. Both forms equal the token-by-token recurrence up to rounding.

Arrays are the library's: ids [N, C, W] and [N, C, R] (int32 or int64, stream s's slots at
s * stream_offset + 0 .. num_keys - 1), values float32 or uint16 bfloat16 bits, gates g
[N, C, 1] (per token) or [N, C, W] (per write), beta [N, C], v [N, C, D], and the start memory
M0 [num_parallel, num_keys, D].
"""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["chunk_lengths", "as_f64", "token_by_token", "chunked", "chunk_step_fields",
           "chunk_step_records", "relative_error", "sdm_layer"]

# Record words (the spec's Records layout): the element word holds the token at bit 9 and
# marks padding entries with bit 17.
TOKEN_SHIFT = 9
TOKEN_MASK = 0xFF
INVALID_BIT = 1 << 17


def chunk_lengths(N: int, C: int, num_parallel: int, *, valid_last: Optional[int] = None,
                  stream_lengths=None) -> np.ndarray:
    """The number of valid tokens of each chunk, [N] int64.

    With stream_lengths ([num_parallel] tokens per stream), chunk c (stream c % P, step c // P)
    has clamp(len - step * C, 0, C) valid tokens. Otherwise every chunk is full except each
    stream's last, which has valid_last (default C)."""
    P = num_parallel
    step = np.arange(N) // P
    if stream_lengths is not None:
        lens = np.asarray(stream_lengths, np.int64)[np.arange(N) % P]
        return np.clip(lens - step * C, 0, C)
    lengths = np.full(N, C, np.int64)
    lengths[N - P:] = C if valid_last is None else valid_last
    return lengths


def as_f64(values) -> np.ndarray:
    """float32 values as float64, uint16 arrays read as bfloat16 bits (exact either way)."""
    values = np.asarray(values)
    if values.dtype == np.uint16:
        values = (values.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return values.astype(np.float64)


def token_by_token(k_idx, q_idx, k_val, q_val, g, beta, v, M0, *, num_parallel: int,
                   stream_offset: int, lengths):
    """The delta rule one token at a time, in float64.

    lengths: [N] valid tokens per chunk (chunk_lengths). Returns (o [N, C, D], the final
    memory [num_parallel, num_keys, D]); o is zero at padding tokens."""
    kv, qv = as_f64(k_val), as_f64(q_val)
    g = np.asarray(g, np.float64)
    beta = np.asarray(beta, np.float64)
    v = np.asarray(v, np.float64)
    N, C, W = np.shape(k_idx)
    M = np.array(M0, np.float64)
    o = np.zeros_like(v)
    for c in range(N):
        s = c % num_parallel
        base = s * stream_offset
        Ms = M[s]
        for t in range(int(lengths[c])):
            slots = np.asarray(k_idx[c, t], np.int64) - base
            seen = set()
            for w in range(W):
                if slots[w] not in seen:
                    seen.add(slots[w])
                    Ms[slots[w]] *= np.exp(g[c, t, 0] if g.shape[2] == 1 else g[c, t, w])
            pred = (kv[c, t][:, None] * Ms[slots]).sum(axis=0)
            u = beta[c, t] * (v[c, t] - pred)
            for w in range(W):
                Ms[slots[w]] += kv[c, t, w] * u
            qs = np.asarray(q_idx[c, t], np.int64) - base
            o[c, t] = (qv[c, t][:, None] * Ms[qs]).sum(axis=0)
    return o, M


def _f32_words(words) -> np.ndarray:
    """Record words that hold float32 bits, as float64."""
    return np.ascontiguousarray(np.asarray(words, np.int32)).view(np.float32).astype(np.float64)


def _record_entries(records, base, n):
    """(valid, token, slot) of each entry of one chunk's krec or qrec rows: valid where the
    entry is not padding and its token is one of the chunk's first n."""
    elem = np.asarray(records[:, 0], np.int64) & 0xFFFFFFFF
    token = (elem >> TOKEN_SHIFT) & TOKEN_MASK
    valid = ((elem & INVALID_BIT) == 0) & (token < n)
    slot = np.asarray(records[:, 1], np.int64) - base
    return valid, token, slot


def chunk_step_fields(out, c, S0, k_idx, q_idx, k_val, beta, v, base, n):
    """One chunk from the per-entry fields: (o [n, D] of its n valid tokens, S_end)."""
    slots = np.asarray(k_idx[c, :n], np.int64) - base
    qslots = np.asarray(q_idx[c, :n], np.int64) - base
    a = np.asarray(out.a[c, :n, :n], np.float64)
    qk = np.asarray(out.qk[c, :n, :n], np.float64)
    b = np.asarray(beta[c, :n], np.float64)
    k_eff = as_f64(out.k_eff[c, :n])
    q_w = as_f64(out.q_w[c, :n])
    pred0 = np.einsum("tw,twd->td", k_eff, S0[slots])
    u = np.linalg.solve(np.eye(n) + b[:, None] * a, b[:, None] * (np.asarray(v[c, :n]) - pred0))
    o = np.einsum("tr,trd->td", q_w, S0[qslots]) + qk @ u
    S = S0.copy()
    written = slots.reshape(-1)
    # every entry of a slot carries the same cpe, so assigning per entry decays a slot once
    S[written] = as_f64(out.cpe[c, :n]).reshape(-1)[:, None] * S0[written]
    kexp = as_f64(k_val[c, :n]) * np.exp(np.asarray(out.rex[c, :n], np.float64))
    np.add.at(S, written, (kexp[:, :, None] * u[:, None, :]).reshape(-1, S.shape[1]))
    return o, S


def chunk_step_records(out, c, S0, beta, v, base, n):
    """One chunk from the mover records: kspa = -beta k_eff by K-row entry, krec = {element,
    slot, k exp(rex), cpe}, qrec = {element, slot, q_w}. Returns (o [n, D], S_end)."""
    D = S0.shape[1]
    a = np.asarray(out.a[c, :n, :n], np.float64)
    qk = np.asarray(out.qk[c, :n, :n], np.float64)
    b = np.asarray(beta[c, :n], np.float64)
    krec = np.asarray(out.krec[c])
    valid, tok, slot = _record_entries(krec, base, n)
    kspa = np.asarray(out.kspa[c], np.float64)
    bpred = np.zeros((n, D))   # -diag(beta) k_eff S0, gathered by entry
    np.add.at(bpred, tok[valid], -kspa[valid][:, None] * S0[slot[valid]])
    u = np.linalg.solve(np.eye(n) + b[:, None] * a, b[:, None] * np.asarray(v[c, :n]) - bpred)
    qvalid, qtok, qslot = _record_entries(np.asarray(out.qrec[c]), base, n)
    qscale = _f32_words(np.asarray(out.qrec[c])[:, 2])
    o = qk @ u
    np.add.at(o, qtok[qvalid], qscale[qvalid][:, None] * S0[qslot[qvalid]])
    S = S0.copy()
    written = slot[valid]
    S[written] = _f32_words(krec[:, 3])[valid][:, None] * S0[written]
    np.add.at(S, written, _f32_words(krec[:, 2])[valid][:, None] * u[tok[valid]])
    return o, S


def chunked(out, k_idx, q_idx, k_val, beta, v, M0, *, num_parallel: int, stream_offset: int,
            lengths, use_records: bool = False):
    """The chunked recurrence on a Phase-1 result `out` (sdm_phase1.phase1_forward's Phase1,
    NumPy arrays), chunk after chunk in time order, in float64.

    lengths: [N] valid tokens per chunk (chunk_lengths); a chunk with none leaves its stream's
    memory as it is. use_records: read kspa, krec and qrec (the records a Phase 2 consumes)
    instead of k_eff, q_w, cpe and rex. Returns (o [N, C, D], the final memory
    [num_parallel, num_keys, D]); o is zero at padding tokens."""
    v = np.asarray(v, np.float64)
    M = np.array(M0, np.float64)
    o = np.zeros_like(v)
    for c in range(len(lengths)):
        n = int(lengths[c])
        if n == 0:
            continue
        s = c % num_parallel
        base = s * stream_offset
        if use_records:
            o[c, :n], M[s] = chunk_step_records(out, c, M[s], beta, v, base, n)
        else:
            o[c, :n], M[s] = chunk_step_fields(out, c, M[s], k_idx, q_idx, k_val, beta, v, base, n)
    return o, M


def relative_error(got, want) -> float:
    """max |got - want| / max |want|: the error relative to the magnitude."""
    want = np.asarray(want)
    return float(np.abs(np.asarray(got) - want).max() / max(np.abs(want).max(), 1e-30))


def sdm_layer(k_idx, q_idx, k_val, q_val, g, beta, v, memory, *, num_parallel: int,
              stream_offset: int, num_keys: int, valid_last: Optional[int] = None,
              stream_lengths=None):
    """The memory of one Sparse Delta Memory layer over time-major chunks: Phase 1 (libsdmp1's
    :func:`sdm_phase1.phase1_forward`), then the chunked recurrence. Returns ``(o, memory)``:
    the reads o [N, C, D] (zero at padding tokens) and each stream's final memory
    [num_parallel, num_keys, D].

    torch tensors go to :func:`sdm_phase1.torch_recurrence.sdm_layer`: differentiable in
    k_val, q_val, g, beta, v and memory, Phase 2 in v's dtype (read its limits there). Other
    arrays run here, in float64 NumPy on the CPU backend (:func:`chunked`, forward only).

    Args:
        k_idx, q_idx, k_val, q_val, g, num_parallel, stream_offset, num_keys, stream_lengths:
            Phase 1's inputs, as :func:`sdm_phase1.phase1_forward` takes them.
        beta: [N, C] float32 write strengths (in the delta rule, u = beta (v - pred)).
        v: [N, C, D] the values the tokens write.
        memory: [num_parallel, num_keys, D] each stream's memory before the first chunk.
        valid_last: valid tokens of each stream's last chunk; None: C (or ignored with
            stream_lengths, as in phase1_forward).

    Raises:
        TypeError: beta is None (it has no default: pass ones for the plain delta rule), or
            the arguments mix frameworks (torch tensors beside host arrays; all follow k_idx).
        ValueError: beta, v or memory has a shape other than [N, C], [N, C, D] and
            [num_parallel, num_keys, D]; and phase1_forward's errors for its inputs.
    """
    from ._core.arrays import check_host
    from ._core.forward import framework_of, phase1_forward
    from ._core.layer_args import check_layer_shapes

    if framework_of(k_idx) == "torch":
        from .torch_recurrence import sdm_layer as torch_layer

        return torch_layer(k_idx, q_idx, k_val, q_val, g, beta, v, memory,
                           num_parallel=num_parallel, stream_offset=stream_offset,
                           num_keys=num_keys, valid_last=valid_last,
                           stream_lengths=stream_lengths)
    for name, x in (("beta", beta), ("v", v), ("memory", memory)):
        if x is not None:
            check_host(name, x)
    check_layer_shapes(np.shape(k_idx), None if beta is None else np.shape(beta), np.shape(v),
                       np.shape(memory), num_parallel, num_keys)
    N, C = np.shape(k_idx)[:2]
    if valid_last is None:
        valid_last = C
    out = phase1_forward(k_idx, q_idx, k_val, q_val, g, num_parallel=num_parallel,
                         stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
                         beta=beta, stream_lengths=stream_lengths, need_read_groups=False,
                         det_fields=0)
    lengths = chunk_lengths(N, C, num_parallel, valid_last=valid_last,
                            stream_lengths=stream_lengths)
    return chunked(out, k_idx, q_idx, k_val, beta, v, memory, num_parallel=num_parallel,
                   stream_offset=stream_offset, lengths=lengths)
