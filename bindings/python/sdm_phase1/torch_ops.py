"""The PyTorch operator ``torch.ops.sdm_phase1.phase1_forward`` and its spec-signature wrapper.

Importing this module imports torch and registers the operator (``torch.library.custom_op``)
with a fake implementation that gives every output's shape and dtype from the inputs' shapes
and the options alone, so code calling :func:`phase1_forward` here traces under
``torch.compile(fullgraph=True)`` without a graph break, and under FakeTensorMode and
``torch.export``. ``import sdm_phase1`` alone never imports torch.

The operator takes the inputs and options and returns the computed outputs as a list (in
field order, ``repeats``' count last); :func:`phase1_forward` turns that into the spec's
``Phase1`` and adds the count into ``repeats`` in place, outside the operator, so the
operator itself mutates nothing. CUDA tensors run on the current stream of their device
(see :func:`sdm_phase1.phase1_forward`), CPU tensors on the CPU backend.

With ``torch.distributed``, each process runs the operator on its own GPU and its own streams;
nothing in it communicates or synchronizes across processes.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from . import _torch_impl
from ._fields import REPEATS, VALUE, output_layout
from ._torch_impl import TORCH_DTYPES
from ._types import Phase1

__all__ = ["phase1_forward", "phase1_op"]


@torch.library.custom_op("sdm_phase1::phase1_forward", mutates_args=())
def phase1_op(
    k_idx: torch.Tensor,
    q_idx: torch.Tensor,
    k_val: torch.Tensor,
    q_val: torch.Tensor,
    g: torch.Tensor,
    beta: Optional[torch.Tensor],
    num_parallel: int,
    stream_offset: int,
    num_keys: int,
    valid_last: int,
    need_read_groups: bool,
    rec_tile: int,
    det_fields: int,
    check: bool,
) -> List[torch.Tensor]:
    """The computed outputs in field order (those ``det_fields`` and ``need_read_groups``
    select, see ``sdm_phase1._fields.output_layout``), then a one-element int64 tensor with
    the repeats count. ``det_fields`` must be resolved (the wrapper applies the default)."""
    outs = _torch_impl.run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset,
                           num_keys, valid_last, need_read_groups, rec_tile, det_fields, check)
    return [t for t in outs if t is not None]


@phase1_op.register_fake
def _phase1_fake(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
                 valid_last, need_read_groups, rec_tile, det_fields, check):
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    return [
        k_idx.new_empty(shape, dtype=k_val.dtype if dt == VALUE else TORCH_DTYPES[dt])
        for _, shape, dt in output_layout(N, C, W, R, det_fields, need_read_groups, rec_tile)
    ]


def phase1_forward(
    k_idx: torch.Tensor,
    q_idx: torch.Tensor,
    k_val: torch.Tensor,
    q_val: torch.Tensor,
    g: torch.Tensor,
    repeats: Optional[torch.Tensor] = None,
    *,
    num_parallel: int,
    stream_offset: int,
    num_keys: int,
    valid_last: int,
    need_read_groups: bool = True,
    beta: Optional[torch.Tensor] = None,
    rec_tile: int = 0,
    det_fields: Optional[int] = None,
    check: bool = False,
) -> Phase1:
    """The spec's ``phase1_forward`` through the operator: traceable by ``torch.compile``.

    Arguments, results and errors as :func:`sdm_phase1.phase1_forward` for torch tensors
    (``repeats``: None or a one-element int64 tensor on the inputs' device, incremented in
    place). ``check=True`` synchronizes, so leave it off in code that is compiled with CUDA
    graphs or captured.
    """
    det = _torch_impl.resolve_det_fields(det_fields, beta)
    rec_tile = max(0, int(rec_tile))
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    if repeats is not None:
        _torch_impl.check_repeats(repeats, k_idx.device)
    got = torch.ops.sdm_phase1.phase1_forward(
        k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys, valid_last,
        bool(need_read_groups), rec_tile, det, bool(check))
    outs: List[Optional[torch.Tensor]] = [None] * (REPEATS + 1)
    for (f, _, _), t in zip(output_layout(N, C, W, R, det, need_read_groups, rec_tile), got):
        outs[f] = t
    if repeats is not None:
        repeats.view(-1).add_(outs[REPEATS].view(-1))
    return _torch_impl.assemble(outs, k_idx.device, C, W, reuse=False)
