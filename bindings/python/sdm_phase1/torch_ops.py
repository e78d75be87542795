"""The PyTorch operator ``torch.ops.sdm_phase1.phase1_forward`` and its spec-signature wrapper.

Importing this module imports torch and registers the operator (``torch.library.Library``:
its schema, one implementation for CUDA and CPU tensors, and a fake implementation that gives
every output's shape and dtype from the inputs' shapes and the options alone), so code calling
:func:`phase1_forward` here traces under ``torch.compile(fullgraph=True)`` without a graph
break, and under FakeTensorMode and ``torch.export``. ``import sdm_phase1`` alone never
imports torch. The operator is registered at this low level rather than through
``torch.library.custom_op``, whose per-call Python wrapping costs more host time than the S6
kernel takes.

Forward only: the operator has no autograd formula. Called while autograd records with an
input that requires grad, it raises the error ``sdm_phase1._torch_impl.FORWARD_ONLY`` says
(from its implementation, which PyTorch's autograd fallback runs with grad mode on), as
:func:`phase1_forward` does before calling it.

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
from ._constants import DET_RECORDS, DET_SHIPPED
from ._fields import REPEATS, VALUE, output_layout
from ._options import call_options, plain_call_options, require_bool
from ._torch_impl import TORCH_DTYPES
from ._types import Phase1

__all__ = ["phase1_forward", "phase1_op", "SCHEMA"]

#: The operator's schema.
SCHEMA = ("phase1_forward(Tensor k_idx, Tensor q_idx, Tensor k_val, Tensor q_val, Tensor g, "
          "Tensor? beta, int num_parallel, int stream_offset, int num_keys, int valid_last, "
          "bool need_read_groups, int rec_tile, int det_fields, bool check, "
          "Tensor? stream_lengths=None) -> Tensor[]")

_LIBRARY = torch.library.Library("sdm_phase1", "DEF")
_LIBRARY.define(SCHEMA)


def _implementation(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
                    valid_last, need_read_groups, rec_tile, det_fields, check,
                    stream_lengths=None) -> List[torch.Tensor]:
    """The computed outputs in field order (those ``det_fields`` and ``need_read_groups``
    select, see ``sdm_phase1._fields.output_layout``), then a one-element int64 tensor with
    the repeats count. ``det_fields`` must be resolved (the wrapper applies the default)."""
    return _torch_impl.run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset,
                           num_keys, valid_last, need_read_groups, rec_tile, det_fields, check,
                           stream_lengths)


_LIBRARY.impl("phase1_forward", _implementation, "CUDA")
_LIBRARY.impl("phase1_forward", _implementation, "CPU")

#: The operator (its default overload).
phase1_op = torch.ops.sdm_phase1.phase1_forward.default


@torch.library.register_fake("sdm_phase1::phase1_forward")
def _phase1_fake(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
                 valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths=None):
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    return [
        k_idx.new_empty(shape, dtype=k_val.dtype if dt == VALUE else TORCH_DTYPES[dt])
        for _, shape, dt in output_layout(N, C, W, R, det_fields, need_read_groups, rec_tile)
    ]


@torch.compiler.assume_constant_result
def _fields_of(det: int, need_read_groups: bool) -> tuple:
    """The computed field ids: they depend on the options alone (the library's views of a
    one-token plan, cached). A constant to torch.compile, which runs it while tracing rather
    than tracing into the library call."""
    return tuple(f for f, _, _ in output_layout(1, 1, 1, 1, det, need_read_groups, 0))


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
    valid_last: Optional[int] = None,
    need_read_groups: bool = True,
    beta: Optional[torch.Tensor] = None,
    rec_tile: int = 0,
    det_fields: Optional[int] = None,
    check: bool = False,
    stream_lengths: Optional[torch.Tensor] = None,
) -> Phase1:
    """The spec's ``phase1_forward`` through the operator: traceable by ``torch.compile``.

    Arguments, results and errors as :func:`sdm_phase1.phase1_forward` for torch tensors
    (``repeats``: None or a one-element int64 tensor on the inputs' device, incremented in
    place; ``stream_lengths``: None or a [num_parallel] int32 / int64 tensor on that device,
    an input of the operator, so a captured graph reads its contents at each replay;
    ``valid_last`` may be left out with them).
    ``check=True`` synchronizes, so leave it off in code that is compiled with CUDA graphs or
    captured. Forward only: inputs that require grad while autograd records raise
    RuntimeError (call under ``torch.no_grad()``, or on detached inputs).
    """
    _torch_impl.refuse_grad(k_val, q_val, g, beta)
    if valid_last is None and stream_lengths is not None:  # ignored there: C (the C API's unset)
        valid_last = k_idx.shape[1]
    if plain_call_options(num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
                          rec_tile, det_fields, check):
        # Plain types: the ranges are checked with the plan (the operator's first call).
        det = det_fields if det_fields is not None else (
            DET_SHIPPED | (DET_RECORDS if beta is not None else 0))
        tile = max(0, rec_tile)
    else:
        o = call_options(k_idx.shape[1], num_parallel, stream_offset, num_keys, valid_last,
                         need_read_groups, rec_tile, det_fields, beta is not None)
        num_parallel, stream_offset, num_keys, valid_last, need_read_groups, tile, det = o
        check = require_bool("check", check)
    if repeats is not None:
        _torch_impl.check_repeats(repeats, k_idx.device)
    got = phase1_op(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
                    valid_last, need_read_groups, tile, det, check, stream_lengths)
    C, W = k_idx.shape[1], k_idx.shape[2]
    fields = _fields_of(det, need_read_groups)
    if repeats is not None:
        repeats.add_(got[fields.index(REPEATS)])
    return _torch_impl.phase1_from_outputs(got, fields, C, W, k_idx.device,
                                           reuse=not torch.compiler.is_compiling())
