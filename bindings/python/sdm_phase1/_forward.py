"""`phase1_forward`: the spec's entry point over a one-shot Plan."""

from __future__ import annotations

from typing import Optional

from ._arrays import HostInputs, prepare_inputs
from ._constants import DET_RECORDS, DET_SHIPPED
from ._plan import Plan
from ._types import Phase1

__all__ = ["phase1_forward"]


def _check_agreement(x: HostInputs) -> None:
    """Every array's shape must agree with k_idx's [N, C, W] and q_idx's R (the library only
    sees the shapes we derive from k_idx, q_idx and g)."""
    N, C, W = x.k_idx.shape
    R = x.q_idx.shape[2]
    kshape = x.k_idx.shape

    def need(name, arr, ok, what):
        if not ok:
            raise ValueError(
                f"{name} has shape {arr.shape}, which does not agree with k_idx's shape {kshape}"
                f"{what}: {name} must be {_fmt(name, N, C, W, R)}"
            )

    need("q_idx", x.q_idx, x.q_idx.shape[:2] == (N, C), "")
    need("k_val", x.k_val, x.k_val.shape == (N, C, W), "")
    need("q_val", x.q_val, x.q_val.shape == (N, C, R), f" and q_idx's shape {x.q_idx.shape}")
    need("g", x.g, x.g.shape[:2] == (N, C), "")
    if x.beta is not None:
        need("beta", x.beta, x.beta.shape == (N, C), "")


def _fmt(name, N, C, W, R):
    return {
        "q_idx": f"[N, C, R] = ({N}, {C}, R)",
        "k_val": f"[N, C, W] = ({N}, {C}, {W})",
        "q_val": f"[N, C, R] = ({N}, {C}, {R})",
        "g": f"[N, C, 1] or [N, C, W] = ({N}, {C}, 1) or ({N}, {C}, {W})",
        "beta": f"[N, C] = ({N}, {C})",
    }[name]


def phase1_forward(
    k_idx,
    q_idx,
    k_val,
    q_val,
    g,
    repeats=None,
    *,
    num_parallel: int,
    stream_offset: int,
    num_keys: int,
    valid_last: int,
    need_read_groups: bool = True,
    beta=None,
    rec_tile: int = 0,
    det_fields: Optional[int] = None,
    backend: Optional[str] = None,
    num_threads: Optional[int] = None,
) -> Phase1:
    """Phase 1 of N = num_parallel * steps time-major chunks (the spec's ``phase1_forward``).

    Args:
        k_idx, q_idx: [N, C, W] / [N, C, R] int32 or int64 slot ids (same dtype). Chunk c
            belongs to stream c % num_parallel, whose ids lie in [s * stream_offset,
            s * stream_offset + num_keys). A token's K slots are normally distinct.
        k_val, q_val: [N, C, W] / [N, C, R] weights: float32, or bfloat16 given as uint16
            arrays of bfloat16 bits (see :func:`bf16_from_float32`) or as arrays of a dtype
            named 'bfloat16' (ml_dtypes, JAX), whose bits are passed through.
        g: [N, C, 1] or [N, C, W] float32 log-gates (per token or per write): finite, of
            magnitude below 2**22 for valid tokens.
        repeats: None, or an int64 NumPy array of shape [1], incremented in place by the
            number of K entries that repeat a slot already written by their token.
        num_parallel: the number of streams; divides N.
        stream_offset, num_keys: stream s owns the ids [s * stream_offset, s * stream_offset
            + num_keys).
        valid_last: valid tokens in the last chunk of each stream (1..C); the last
            num_parallel chunks are the streams' last chunks. Later tokens are padding: their
            ids, values and gates are never read.
        need_read_groups: compute q_last, q_only, spay_q, qrec, qrec8 and tiles_q.
        beta: [N, C] float32, needed by kspa.
        rec_tile: tile length of tiles_k / tiles_q / segb_k; <= 0: 128.
        det_fields: DET_* bits of the optional outputs. Default: DET_SHIPPED, plus
            DET_KREC | DET_KSPA | DET_QREC | DET_TILES when beta is given.
        backend: None or "cpu" for NumPy arrays; "cuda" is passed to the library (device
            arrays are not supported by this version, so it fails).
        num_threads: CPU worker threads; None: the hardware's count. Results do not depend
            on it.

    Returns:
        A :class:`Phase1` of fresh NumPy arrays (value-dtype fields in k_val's dtype).

    Raises:
        ValueError: an input is not an array of the right ndim/dtype, or the shapes disagree.
        Phase1Error: the library refused the call (limits, options, ids out of range,
            non-finite or too large gates, kspa without beta, ...); ``.status`` names it.
    """
    x = prepare_inputs(k_idx, q_idx, k_val, q_val, g, beta)
    _check_agreement(x)
    N, C, W = x.k_idx.shape
    if det_fields is None:
        det_fields = DET_SHIPPED | (DET_RECORDS if beta is not None else 0)
    with Plan(
        N=N,
        C=C,
        W=W,
        R=x.q_idx.shape[2],
        num_parallel=num_parallel,
        stream_offset=stream_offset,
        num_keys=num_keys,
        valid_last=valid_last,
        index_dtype=x.k_idx.dtype,
        value_dtype=x.k_val.dtype,
        gate_width=x.g.shape[2],
        need_read_groups=need_read_groups,
        det_fields=det_fields,
        rec_tile=rec_tile if rec_tile > 0 else 0,
        backend=backend,
        num_threads=num_threads,
    ) as plan:
        return plan._run(x, repeats)
