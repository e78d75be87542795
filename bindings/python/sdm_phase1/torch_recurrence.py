"""The chunked Sparse Delta Memory recurrence (Phase 2) in PyTorch, differentiable, on Phase 1
from the operator ``torch.ops.sdm_phase1.phase1_forward`` (whose autograd formula is the
library's backward): :func:`sdm_layer` is a whole layer's memory, ``o, memory =
sdm_layer(...)``, and gradients reach k_val, q_val, g, beta, v and the start memory.

The recurrence is that of :mod:`sdm_phase1.recurrence` (the WY form of docs/design.md, its
docstring says what it computes), batched over the streams of each step: chunk
``step * num_parallel + s`` is stream s's chunk at that step. Per step, for the P chunks at
once, with start memory S0:

    (I + diag(beta) a) u = diag(beta) (v - k_eff S0)      a unit lower-triangular solve
    o = q_w S0 + qk u
    S_end[slot] = cpe S0[slot] (once per slot) + sum over the chunk's writes of k exp(rex) u

Limits (this is a reference, not a fast kernel):
- Python loops over the steps; each step gathers from, scales and scatters into the whole
  memory [num_parallel, num_keys, D] out of place, and autograd keeps every step's memory:
  time and memory grow with steps * num_parallel * num_keys * D. Fine for tests, examples and
  small models; a real Phase 2 is a fused kernel that updates only the slots a chunk touches.
- It runs in v's dtype (float32 or float64; memory must have the same), the Phase-1 outputs
  widened to it. Phase 1's own outputs are float32 (or bfloat16 for cpe, k_eff, q_w).
- Gathers, scatter_add and scatter_reduce: on CUDA, PyTorch implements them (and gather's
  backward) with atomics, so the bits may change from run to run unless
  ``torch.use_deterministic_algorithms(True)`` is set. On the CPU they are deterministic.
- The backward of Phase 1 runs on the CPU backend (CUDA tensors are copied to the host and
  back, see :mod:`sdm_phase1.torch_ops`).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import torch_ops
from ._core.layer_args import check_layer_shapes, missing_beta
from ._frameworks.torch_impl import check_device, check_one_device

__all__ = ["chunk_lengths", "chunked", "sdm_layer", "check_layer_tensors", "LAYER_DTYPES"]


def chunk_lengths(N: int, C: int, num_parallel: int, *, valid_last: Optional[int] = None,
                  stream_lengths: Optional[torch.Tensor] = None, device=None) -> torch.Tensor:
    """The valid tokens of each chunk, [N] int64 (as :func:`sdm_phase1.recurrence.chunk_lengths`),
    computed on the device (stream_lengths' by default): no host read of the lengths."""
    P = num_parallel
    if stream_lengths is not None:
        device = stream_lengths.device if device is None else device
        c = torch.arange(N, device=device)
        lens = stream_lengths.to(device=device, dtype=torch.int64)[c % P]
        return (lens - (c // P) * C).clamp(0, C)
    lengths = torch.full((N,), C, dtype=torch.int64, device=device)
    lengths[N - P:] = C if valid_last is None else valid_last
    return lengths


def chunked(out: Any, k_idx: torch.Tensor, q_idx: torch.Tensor, k_val: torch.Tensor,
            beta: torch.Tensor, v: torch.Tensor, memory: torch.Tensor, *, num_parallel: int,
            stream_offset: int, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The chunked recurrence on ``out``, a Phase1 of torch tensors (a, qk, k_eff, q_w, cpe and
    rex are read), in v's dtype. Differentiable in out's fields, k_val, beta, v and memory.

    Args:
        k_idx, q_idx, k_val, beta: Phase 1's inputs ([N, C, W], [N, C, R], [N, C, W], [N, C]).
        v: [N, C, D] values. memory: [num_parallel, num_keys, D], v's dtype.
        lengths: [N] valid tokens per chunk (:func:`chunk_lengths`). Inputs of padding tokens
            are never used (they may hold NaN or ids out of range).

    Returns:
        (o [N, C, D], zero at padding tokens; the final memory [num_parallel, num_keys, D]).
    """
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    P = num_parallel
    steps = N // P
    K, D = memory.shape[1], memory.shape[2]
    dt, dev = v.dtype, v.device
    if memory.dtype != dt:
        raise ValueError(f"memory is {memory.dtype} but v is {dt}: the recurrence runs in one dtype")
    valid = torch.arange(C, device=dev) < lengths.to(dev)[:, None]  # [N, C]
    kvalid = valid[:, :, None].expand(N, C, W)
    base = (torch.arange(N, device=dev) % P * stream_offset)[:, None, None]
    # Each stream's slots index its memory; padding entries (any id) go to an extra row K that
    # holds zeros: read, they contribute nothing, and what is written there is zero too.
    kslot = torch.where(kvalid, k_idx.long() - base, K).reshape(steps, P, C * W)
    qslot = torch.where(valid[:, :, None].expand(N, C, R), q_idx.long() - base,
                        K).reshape(steps, P, C * R)
    # Padding inputs may be NaN: selected away (a NaN times 0 would still be NaN).
    zero = torch.zeros((), dtype=dt, device=dev)
    b = torch.where(valid, beta.to(dt), zero).reshape(steps, P, C)
    vv = torch.where(valid[:, :, None], v, zero).reshape(steps, P, C, D)
    kv = torch.where(kvalid, k_val.to(dt), zero)
    # Phase 1 gives padding tokens neutral outputs (rex, k_eff, q_w 0, cpe 1, zero rows and
    # columns of a and qk), so its fields need no masking.
    kexp = (kv * torch.exp(out.rex.to(dt))).reshape(steps, P, C, W, 1)
    k_eff = out.k_eff.to(dt).reshape(steps, P, C, W, 1)
    q_w = out.q_w.to(dt).reshape(steps, P, C, R, 1)
    cpe = out.cpe.to(dt).reshape(steps, P, C * W)
    a = out.a.to(dt).reshape(steps, P, C, C)
    qk = torch.tril(out.qk.to(dt)).reshape(steps, P, C, C)  # j <= i only, as Phase 1 defines it
    eye = torch.eye(C, dtype=dt, device=dev)

    M = torch.cat([memory, memory.new_zeros(P, 1, D)], dim=1)  # [P, K + 1, D]
    outs = []
    for s in range(steps):
        kidx = kslot[s][:, :, None].expand(P, C * W, D)
        S_k = M.gather(1, kidx).reshape(P, C, W, D)
        S_q = M.gather(1, qslot[s][:, :, None].expand(P, C * R, D)).reshape(P, C, R, D)
        pred0 = (k_eff[s] * S_k).sum(2)
        # a is strictly lower triangular: I + diag(beta) a is unit lower triangular.
        u = torch.linalg.solve_triangular(eye + b[s][:, :, None] * a[s],
                                          b[s][:, :, None] * (vv[s] - pred0),
                                          upper=False, unitriangular=True)
        outs.append((q_w[s] * S_q).sum(2) + qk[s] @ u)
        # Every entry of a slot carries the slot's cpe: amax takes it once per slot (and
        # splits its gradient evenly between the entries, so the slot's total is right).
        decay = M.new_ones(P, K + 1).scatter_reduce(1, kslot[s], cpe[s], "amax",
                                                    include_self=False)
        writes = (kexp[s] * u[:, :, None, :]).reshape(P, C * W, D)
        M = (M * decay[:, :, None]).scatter_add(1, kidx, writes)
    o = torch.stack(outs).reshape(N, C, D)
    return o, M[:, :K]


#: The dtypes the recurrence runs in (v's; memory's must be the same).
LAYER_DTYPES = (torch.float32, torch.float64)


def check_layer_tensors(k_idx, q_idx, k_val, q_val, g, beta, v, memory, stream_lengths) -> None:
    """What the layer needs of its tensors beyond Phase 1's checks, before anything runs: every
    argument a torch.Tensor (TypeError naming it; beta None included), all on k_idx's device,
    a CPU or CUDA one (ValueError), v float32 or float64 and memory of v's dtype (ValueError)."""
    tensors = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g,
               "beta": beta, "v": v, "memory": memory}
    if stream_lengths is not None:
        tensors["stream_lengths"] = stream_lengths
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            if name == "beta" and t is None and isinstance(k_idx, torch.Tensor):
                raise missing_beta(k_idx.shape[0], k_idx.shape[1])
            like = "" if name == "k_idx" else " like k_idx"
            raise TypeError(f"{name} must be a torch.Tensor{like}, got {type(t).__name__}")
    check_device("k_idx", k_idx.device)
    check_one_device(tensors, k_idx.device)
    if v.dtype not in LAYER_DTYPES:
        raise ValueError(f"v is {v.dtype}: sdm_layer runs the recurrence in v's dtype, which must "
                         "be torch.float32 or torch.float64 (pass v.float() and memory.float())")
    if memory.dtype != v.dtype:
        raise ValueError(f"memory is {memory.dtype} but v is {v.dtype}: the recurrence runs in one "
                         "dtype, v's (float32 or float64)")


def sdm_layer(k_idx: torch.Tensor, q_idx: torch.Tensor, k_val: torch.Tensor, q_val: torch.Tensor,
              g: torch.Tensor, beta: torch.Tensor, v: torch.Tensor, memory: torch.Tensor, *,
              num_parallel: int, stream_offset: int, num_keys: int,
              valid_last: Optional[int] = None,
              stream_lengths: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """One SDM layer's memory over time-major chunks: Phase 1 through the operator (autograd:
    the library's backward), then :func:`chunked`. Returns ``(o, memory)``: the reads
    [N, C, D] (zero at padding tokens) and the final memory [num_parallel, num_keys, D].

    Differentiable in k_val, q_val, g, beta, v and memory. Arguments as
    :func:`sdm_phase1.recurrence.sdm_layer`: Phase 1's inputs (as
    :func:`sdm_phase1.torch_ops.phase1_forward` takes them; valid_last None: C), beta [N, C]
    float32, v [N, C, D] and memory [num_parallel, num_keys, D], float32 or float64 (the
    recurrence's dtype). See the module's docstring for the limits: a reference Phase 2, not
    a fast kernel; ``torch.use_deterministic_algorithms(True)`` for repeatable bits on CUDA.

    Raises (before anything runs, :func:`check_layer_tensors` and
    ``_core.layer_args.check_layer_shapes``): TypeError for an argument that is not a tensor
    (beta None included: it has no default); ValueError for a tensor on another device than
    k_idx's (or k_idx on one the library does not compute on, such as meta), a v of another
    dtype than float32 or float64, memory of another dtype than v's, or beta, v, memory of
    other shapes than [N, C], [N, C, D], [num_parallel, num_keys, D]; then Phase 1's errors.
    """
    check_layer_tensors(k_idx, q_idx, k_val, q_val, g, beta, v, memory, stream_lengths)
    N, C = k_idx.shape[0], k_idx.shape[1]
    check_layer_shapes(tuple(k_idx.shape), tuple(beta.shape), tuple(v.shape),
                       tuple(memory.shape), num_parallel, num_keys)
    if valid_last is None:
        valid_last = C
    # beta is not Phase 1's input here: it reaches Phase 1 only through kspa, which Phase 2
    # does not read (det_fields 0: the fields every call computes; no read-side groups).
    out = torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, num_parallel=num_parallel,
                                   stream_offset=stream_offset, num_keys=num_keys,
                                   valid_last=valid_last, need_read_groups=False, det_fields=0,
                                   stream_lengths=stream_lengths)
    lengths = chunk_lengths(N, C, num_parallel, valid_last=valid_last,
                            stream_lengths=stream_lengths, device=v.device)
    return chunked(out, k_idx, q_idx, k_val, beta, v, memory, num_parallel=num_parallel,
                   stream_offset=stream_offset, lengths=lengths)
