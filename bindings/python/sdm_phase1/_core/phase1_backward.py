"""phase1_backward: the backward of :func:`phase1_forward` in one call, on NumPy arrays (the
CPU backend) or CuPy arrays (the CUDA backend), for callers that hold the forward's inputs and
upstream gradients and no :class:`Plan` (docs/backward.md)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from .forward import framework_of
from .options import require_bool
from .plan import Plan

__all__ = ["phase1_backward"]


def phase1_backward(
    k_idx,
    q_idx,
    k_val,
    q_val,
    g,
    grads: dict,
    *,
    num_parallel: int,
    stream_offset: int,
    num_keys: int,
    valid_last: Optional[int] = None,
    beta=None,
    stream_lengths=None,
    payload=None,
    grad_dtype=None,
    num_threads: Optional[int] = None,
    check: bool = False,
) -> Dict[str, Optional[Any]]:
    """The gradients of k_val, q_val, g and beta for upstream gradients ``grads`` of the
    outputs of ``phase1_forward`` at these inputs (the same options); see
    :meth:`Plan.execute_backward` for ``grads``, ``payload``, the result and the errors.

    ``grad_dtype``: the k_val / q_val gradients' dtype, None (the value dtype) or float32.
    The gradients do not depend on need_read_groups, det_fields or rec_tile, so they are not
    options here.

    NumPy (host) arrays run on the CPU backend: each call creates a plan (and its worker
    threads) and frees it; for repeated calls keep a ``Plan(..., backward=True)`` and call its
    :meth:`Plan.execute_backward`. CuPy arrays (every input, gradient, ``stream_lengths`` and
    ``payload`` on one GPU) run on the CUDA backend, as :func:`phase1_forward` does: on CuPy's
    current stream, without a host synchronization, through a cached plan, the gradients in
    CuPy arrays (bfloat16 as uint16); ``check``: wait for the stream and raise a device-side
    data error here (else at the next :func:`synchronize`; ignored on the CPU, which always
    raises at once). ``num_threads`` is ignored there. The bits are the CPU backend's.
    PyTorch tensors take autograd (or the operator ``torch.ops.sdm_phase1.phase1_backward``).
    """
    if framework_of(k_idx) == "cupy":
        from .._frameworks.cupy_impl import backward

        return backward(k_idx, q_idx, k_val, q_val, g, grads, num_parallel=num_parallel,
                        stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
                        beta=beta, stream_lengths=stream_lengths, payload=payload,
                        grad_dtype=grad_dtype, check=check)
    require_bool("check", check)
    k = np.asarray(k_idx)
    q = np.asarray(q_idx)
    vals = np.asarray(k_val)
    gates = np.asarray(g)
    if k.ndim != 3 or q.ndim != 3 or gates.ndim != 3:
        raise ValueError(f"k_idx, q_idx and g must be 3-D ([N, C, W], [N, C, R], [N, C, 1 or W]), "
                         f"got shapes {k.shape}, {q.shape}, {gates.shape}")
    N, C, W = k.shape
    if valid_last is None and stream_lengths is None:
        raise TypeError("phase1_backward: valid_last may be left out only with stream_lengths")
    with Plan(N=N, C=C, W=W, R=q.shape[2], num_parallel=num_parallel, stream_offset=stream_offset,
              num_keys=num_keys, valid_last=C if valid_last is None else valid_last,
              index_dtype=k.dtype, value_dtype=vals.dtype, gate_width=gates.shape[2],
              det_fields=0, num_threads=num_threads, backward=True, grad_dtype=grad_dtype) as plan:
        return plan.execute_backward(k_idx, q_idx, k_val, q_val, g, grads, beta=beta,
                                     stream_lengths=stream_lengths, payload=payload)
