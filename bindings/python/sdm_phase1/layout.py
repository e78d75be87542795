"""Batches as users hold them, to and from the time-major chunks Phase 1 takes.

:func:`to_chunks` turns batch-major ids, values and gates ([B, T, H, W], one sequence per batch
row, H heads each) or a packed batch ([total_T, H, W] with ``cu_seqlens``, as
flash-linear-attention's varlen mode takes it) into the [N, C, W] inputs of
:func:`sdm_phase1.phase1_forward`: one stream per (sequence, head), ``num_parallel = B * H``
(stream ``b * H + h``), ``steps = ceil(T / C)`` chunks a stream, chunk ``step * num_parallel + s``
holding tokens ``step * C ..`` of stream s, and the per-stream lengths
(``stream_lengths``). :func:`chunk_tokens` does the same for any other per-token array of
the batch (e.g. the values a recurrence writes), and :func:`from_chunks` turns per-token
outputs ([N, C, ...], e.g. log_k, k_eff, q_w) back into the caller's layout.

Both are pure array functions over NumPy, PyTorch, CuPy or JAX arrays (the result is of the
inputs' kind and device): gathers, reshapes and transposes, with no host synchronization
where the lengths are already on the device (``max_len`` given with ``cu_seqlens``).

Lengths past the data are refused (ValueError naming the sequence and the lengths) wherever
they are read on the host without waiting for a GPU: ``lengths`` and ``cu_seqlens`` held on
the host (NumPy arrays, lists, CPU tensors), and ``cu_seqlens`` without ``max_len``, which is
read on the host for max_len anyway. Lengths on a GPU are not read, so that the call does
not synchronize: there a length past its sequence's tokens reads the next sequence's
(clamped to the batch: never out of bounds), and phase1_forward refuses lengths above
steps * C.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

__all__ = ["ChunkLayout", "Chunks", "to_chunks", "chunk_tokens", "from_chunks"]


class ChunkLayout(NamedTuple):
    """Where the chunks' tokens came from: ``batch`` sequences of ``heads`` heads, ``steps``
    chunks of ``chunk_size`` tokens a stream; ``seq_len`` the caller's T (batch-major) or the
    longest sequence (packed); ``lengths`` the sequences' lengths ([B], on the inputs'
    device); ``cu_seqlens`` for a packed batch (None for batch-major); ``total_tokens`` the
    tokens of the flat batch (B * T, or total_T)."""

    batch: int
    heads: int
    steps: int
    chunk_size: int
    seq_len: int
    lengths: Any
    cu_seqlens: Any
    total_tokens: int

    @property
    def num_parallel(self) -> int:
        return self.batch * self.heads

    @property
    def N(self) -> int:
        return self.steps * self.batch * self.heads


class Chunks(NamedTuple):
    """The inputs of phase1_forward (``beta`` None when not given) and how to map back."""

    k_idx: Any
    q_idx: Any
    k_val: Any
    q_val: Any
    g: Any
    beta: Any
    stream_lengths: Any
    num_parallel: int
    layout: ChunkLayout


class _Torch:
    """The few array operations below, for torch tensors (NumPy's names elsewhere)."""

    def __init__(self):
        import torch

        self.t = torch

    def arange(self, n, like):
        # In like's integer dtype (searchsorted needs its operands' dtypes equal).
        dtype = self.t.int64 if like.dtype.is_floating_point else like.dtype
        return self.t.arange(n, dtype=dtype, device=like.device)

    def astype(self, x, like):
        return x.to(like.dtype)

    def full(self, shape, value, like):
        return self.t.full(shape, value, dtype=self.t.int64, device=like.device)

    def where(self, mask, x, zero):
        return self.t.where(mask, x, self.t.zeros((), dtype=x.dtype, device=x.device))

    def repeat(self, x, k):
        # A broadcast, not repeat_interleave, which finds its output size on the host.
        return x.reshape(-1, 1).expand(-1, k).reshape(-1)

    def minimum(self, x, top):
        return x.clamp(max=top)

    def searchsorted(self, a, v, side):
        return self.t.searchsorted(a, v, right=side == "right")

    def index(self, x):
        return x.to(self.t.int64)

    def transpose(self, x, axes):
        return x.permute(*axes).contiguous()


class _NumpyLike:
    """NumPy, CuPy or jax.numpy under the names _Torch has."""

    def __init__(self, xp):
        self.xp = xp

    def arange(self, n, like):
        return self.xp.arange(n)

    def astype(self, x, like):
        return x.astype(like.dtype)

    def full(self, shape, value, like):
        jax = self.xp.__name__.startswith("jax")  # int64 only with x64 there
        return self.xp.full(shape, value, dtype=self.xp.int32 if jax else np.int64)

    def where(self, mask, x, zero):
        return self.xp.where(mask, x, self.xp.zeros((), dtype=x.dtype))

    def repeat(self, x, k):
        return self.xp.broadcast_to(x.reshape(-1, 1), (x.shape[0], k)).reshape(-1)

    def minimum(self, x, top):
        return self.xp.minimum(x, top)

    def searchsorted(self, a, v, side):
        return self.xp.searchsorted(a, v, side=side)

    def index(self, x):
        return x if self.xp.__name__.startswith("jax") else x.astype(np.int64)

    def transpose(self, x, axes):
        return self.xp.ascontiguousarray(x.transpose(axes))


def _ops(x):
    root = type(x).__module__.partition(".")[0]
    if root == "torch":
        return _Torch()
    if root == "cupy":
        import cupy

        return _NumpyLike(cupy)
    if root in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return _NumpyLike(jnp)
    return _NumpyLike(np)


def _on_host(x) -> bool:
    """Whether x's values are read without waiting for a GPU: host arrays and lists, torch CPU
    tensors, JAX CPU arrays."""
    root = type(x).__module__.partition(".")[0]
    if root == "torch":
        return bool(x.device.type == "cpu")
    if root == "cupy":
        return False
    if root in ("jax", "jaxlib"):
        return bool(x.__dlpack_device__()[0] == 1)  # kDLCPU
    return True


def _to_host(x) -> np.ndarray:
    """x's values as an int64 NumPy array (from a GPU: a copy, which waits for it)."""
    root = type(x).__module__.partition(".")[0]
    if root == "torch":
        x = x.detach().cpu().numpy()
    elif root == "cupy":
        x = x.get()
    return np.asarray(x).astype(np.int64)


def _check_lengths(lengths: np.ndarray, T: int) -> None:
    """ValueError unless every batch-major sequence's length lies in 0..T: a longer one would
    read the next sequence's tokens."""
    bad = np.flatnonzero((lengths < 0) | (lengths > T))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"lengths[{b}] = {int(lengths[b])}: sequence {b} has T = {T} tokens in the "
                         f"batch, so its length must be in 0..{T}")


def _check_cu_seqlens(cu: np.ndarray, total: int, max_len: Optional[int]) -> None:
    """ValueError unless the packed sequences lie within the total tokens, in order
    (0 <= cu[0] <= cu[1] <= ... <= cu[B] <= total) and, with max_len, none is longer: a
    sequence past the tokens would read past them (or, at its end, make as many steps)."""
    starts, ends = cu[:-1], cu[1:]
    bad = np.flatnonzero((starts < 0) | (ends < starts) | (ends > total))
    if bad.size:
        b = int(bad[0])
        raise ValueError(
            f"cu_seqlens[{b}:{b + 2}] = [{int(starts[b])}, {int(ends[b])}]: sequence {b} (length "
            f"{int(ends[b] - starts[b])}) must lie within the {total} packed tokens of k_idx "
            f"(0 <= cu_seqlens[{b}] <= cu_seqlens[{b + 1}] <= total_T = {total})")
    if max_len is not None:
        longer = np.flatnonzero(ends - starts > max_len)
        if longer.size:
            b = int(longer[0])
            raise ValueError(f"sequence {b} has {int(ends[b] - starts[b])} tokens (cu_seqlens[{b}:{b + 2}] "
                             f"= [{int(starts[b])}, {int(ends[b])}]), more than max_len = {max_len}")


def _as_array(x):
    # Host inputs (lists included) become NumPy arrays; framework arrays stay as they are.
    root = type(x).__module__.partition(".")[0]
    return x if root in ("torch", "cupy", "jax", "jaxlib", "numpy") else np.asarray(x)


def chunk_tokens(x, layout: ChunkLayout):
    """A per-token array of the batch in the layout of the chunks: [B, T, H, ...] (batch-major)
    or [total_T, H, ...] (packed) -> [N, C, ...], stream b * H + h of chunk step * P + s; the
    padding tokens hold zeros. An array of x's kind, on its device."""
    x = _as_array(x)
    ops = _ops(x)
    B, H, steps, C = layout.batch, layout.heads, layout.steps, layout.chunk_size
    packed = layout.cu_seqlens is not None
    lead = 1 if packed else 2
    want = (layout.total_tokens,) if packed else (B, layout.seq_len)
    if tuple(x.shape[:lead]) != want or x.ndim < lead + 1 or int(x.shape[lead]) != H:
        raise ValueError(f"chunk_tokens: shape {tuple(x.shape)} is not the layout's "
                         f"{list(want) + [H]} + [...]")
    if not packed:
        x = x.reshape((layout.total_tokens,) + tuple(x.shape[2:]))
    # Token p of sequence b is flat token starts[b] + p while p < its length; the padding
    # tokens read token 0 and are zeroed (clamped: a length above T never reads out of bounds).
    like = layout.lengths
    if packed:
        starts = ops.index(layout.cu_seqlens[:-1])
    else:
        starts = ops.index(ops.arange(B, like)) * layout.seq_len
    p = ops.arange(steps * C, like)
    mask = p.reshape((1, -1)) < layout.lengths.reshape((-1, 1))
    idx = ops.where(mask, starts.reshape((-1, 1)) + ops.index(p).reshape((1, -1)), 0)
    idx = ops.minimum(idx, layout.total_tokens - 1)
    tail = tuple(x.shape[2:])
    y = x[idx]  # [B, steps * C, H, ...]
    y = ops.where(mask.reshape((B, steps * C) + (1,) * (y.ndim - 2)), y, 0)
    y = y.reshape((B, steps, C, H) + tail)
    axes = (1, 0, 3, 2) + tuple(range(4, y.ndim))  # [steps, B, H, C, ...]
    return ops.transpose(y, axes).reshape((steps * B * H, C) + tail)


def to_chunks(k_idx, q_idx, k_val, q_val, g, *, chunk_size: int, beta=None, lengths=None,
              cu_seqlens=None, max_len: Optional[int] = None,
              stream_offset: Optional[int] = None) -> Chunks:
    """Batch-major or packed inputs as phase1_forward's time-major chunks.

    Args:
        k_idx, q_idx, k_val, q_val: [B, T, H, W] / [B, T, H, R] (batch-major), or
            [total_T, H, W] / [total_T, H, R] with ``cu_seqlens`` (packed).
        g: [B, T, H] (per token), [B, T, H, 1] or [B, T, H, W] (per write); packed:
            [total_T, H], [total_T, H, 1] or [total_T, H, W].
        chunk_size: C, the tokens of a chunk (1..256).
        beta: None, or [B, T, H] / [total_T, H].
        lengths: batch-major only: None (every sequence has T tokens), or [B] int32 / int64
            lengths (each in 0..T) on the inputs' device.
        cu_seqlens: packed only: [B + 1] int32 / int64 cumulative sequence lengths
            (non-decreasing, from 0 to total_T) on the inputs' device.
        max_len: packed only: the longest sequence (steps = ceil(max_len / C)); None: read from
            cu_seqlens (a host synchronization for GPU arrays).
        stream_offset: None: the ids are used as given; else they are stream-relative (in
            0..num_keys) and stream s's get s * stream_offset added (in the ids' dtype), as
            phase1_forward's stream_offset needs.

    Returns:
        :class:`Chunks`: k_idx [N, C, W], q_idx [N, C, R], k_val, q_val, g [N, C, 1 or W],
        beta [N, C] (or None), stream_lengths [B * H] (the lengths' dtype; int64 for
        batch-major without lengths), num_parallel = B * H and the layout for
        :func:`from_chunks`. Padding tokens hold zeros. Pass ``stream_lengths`` to
        phase1_forward (``valid_last`` is then not needed).

    Raises:
        ValueError: shapes that do not fit the layout, or lengths past the data where they are
            read on the host (see the module's documentation): a batch-major length outside
            0..T, packed sequences out of order or past the total_T tokens, or longer than
            ``max_len``. The message names the sequence and its lengths.
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    k_idx, q_idx, k_val, q_val, g = (_as_array(x) for x in (k_idx, q_idx, k_val, q_val, g))
    beta = None if beta is None else _as_array(beta)
    ops = _ops(k_idx)
    packed = cu_seqlens is not None
    lead = 1 if packed else 2  # the token dimensions before H
    if k_idx.ndim != lead + 2:
        want = "[total_T, H, W] with cu_seqlens" if packed else "[B, T, H, W]"
        raise ValueError(f"k_idx must be {want}, got shape {tuple(k_idx.shape)}")
    H = int(k_idx.shape[lead])
    C = chunk_size
    if packed:
        if lengths is not None:
            raise ValueError("pass lengths (batch-major) or cu_seqlens (packed), not both")
        cu_seqlens = _as_array(cu_seqlens)
        if cu_seqlens.ndim != 1:
            raise ValueError(f"cu_seqlens must be a 1-D array [B + 1], got shape {tuple(cu_seqlens.shape)}")
        B = int(cu_seqlens.shape[0]) - 1
        total = int(k_idx.shape[0])
        if max_len is None or _on_host(cu_seqlens):
            # One read of the B + 1 offsets: free on the host, and needed for max_len anyway.
            cu_host = _to_host(cu_seqlens)
            _check_cu_seqlens(cu_host, total, max_len)
            if max_len is None:
                max_len = int((cu_host[1:] - cu_host[:-1]).max()) if B > 0 else 0
        seq_lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        T = int(max_len)
    else:
        if max_len is not None:
            raise ValueError("max_len is for packed batches (cu_seqlens)")
        B, T = int(k_idx.shape[0]), int(k_idx.shape[1])
        total = B * T
        if lengths is None:
            seq_lengths = ops.full((B,), T, k_idx)
        else:
            seq_lengths = _as_array(lengths)
            if tuple(seq_lengths.shape) != (B,):
                raise ValueError(f"lengths must be a 1-D array of B = {B} lengths, got shape "
                                 f"{tuple(seq_lengths.shape)}")
            if _on_host(seq_lengths):
                _check_lengths(_to_host(seq_lengths), T)
    if B < 1 or T < 1:
        raise ValueError(f"to_chunks needs at least one sequence and one token (B = {B}, T = {T})")
    layout = ChunkLayout(B, H, -(-T // C), C, T, seq_lengths, cu_seqlens if packed else None, total)

    def chunked(x, name, trailing):
        if x.ndim != lead + trailing:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, not the layout of k_idx "
                             f"{tuple(k_idx.shape)}")
        return chunk_tokens(x, layout)

    gate = g if g.ndim == lead + 2 else g.reshape(tuple(g.shape) + (1,))
    k_c, q_c, kv_c, qv_c, g_c = (chunked(x, n, 2) for x, n in (
        (k_idx, "k_idx"), (q_idx, "q_idx"), (k_val, "k_val"), (q_val, "q_val"), (gate, "g")))
    if stream_offset is not None:
        base = (ops.arange(layout.N, k_idx) % (B * H)) * int(stream_offset)  # chunk c: stream c % P
        base = ops.astype(base.reshape((-1, 1, 1)), k_c)
        k_c, q_c = k_c + base, q_c + base
    beta_c = None if beta is None else chunked(beta, "beta", 1)
    stream_lengths = ops.repeat(seq_lengths, H)  # stream b * H + h: sequence b
    return Chunks(k_c, q_c, kv_c, qv_c, g_c, beta_c, stream_lengths, B * H, layout)


def from_chunks(y, layout: ChunkLayout):
    """Per-token outputs [N, C, ...] (N = layout.N) in the caller's layout: [B, T, H, ...]
    (batch-major; tokens past a sequence's length hold the outputs of padding) or
    [total_T, H, ...] (packed). Arrays of the outputs' kind, on their device."""
    y = _as_array(y)
    ops = _ops(y)
    B, H, steps, C = layout.batch, layout.heads, layout.steps, layout.chunk_size
    if tuple(y.shape[:2]) != (layout.N, C):
        raise ValueError(f"from_chunks: y has shape {tuple(y.shape)}, the layout [N, C, ...] = "
                         f"[{layout.N}, {C}, ...]")
    tail = tuple(y.shape[2:])
    z = y.reshape((steps, B, H, C) + tail)
    z = ops.transpose(z, (1, 0, 3, 2) + tuple(range(4, z.ndim)))  # [B, steps, C, H, ...]
    z = z.reshape((B, steps * C, H) + tail)
    if layout.cu_seqlens is None:
        return z[:, :layout.seq_len]
    cu = layout.cu_seqlens
    i = ops.arange(layout.total_tokens, cu)
    b = ops.index(ops.searchsorted(cu, i, "right")) - 1  # each packed token's sequence
    pos = ops.index(i) - ops.index(cu)[b]
    return z[b, pos]
