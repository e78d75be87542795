"""The entry of torch tensors into :func:`sdm_phase1.phase1_forward`: every call in eager mode
goes to :func:`torch_impl.forward <sdm_phase1._frameworks.torch_impl.forward>` (with grad
through its autograd Function); a call whose inputs require grad while autograd records, under
torch.compile, a torch function or dispatch mode or a functorch transform, or on tensor
subclasses, goes through the operator of ``torch_ops``, which has the same autograd formula
(imported at the first such call: it registers the operators).

This choice lives here, apart from both, so that the imports run one way: ``torch_ops`` imports
``torch_impl``, and this module imports both; ``torch_impl`` imports neither.

Imported only when a torch tensor is passed (this module imports torch, through torch_impl).
"""

from __future__ import annotations

from .._core.types import Phase1
from . import torch_impl


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check,
            stream_lengths=None) -> Phase1:
    """phase1_forward on torch tensors (see sdm_phase1.phase1_forward)."""
    grad = torch_impl.needs_grad(k_val, q_val, g, beta)
    if grad and not torch_impl.eager(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths):
        from .. import torch_ops  # the operator and its autograd formula

        return torch_ops.phase1_forward(
            k_idx, q_idx, k_val, q_val, g, repeats, num_parallel=num_parallel,
            stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
            need_read_groups=need_read_groups, beta=beta, rec_tile=rec_tile,
            det_fields=det_fields, check=check, stream_lengths=stream_lengths)
    return torch_impl.forward(
        k_idx, q_idx, k_val, q_val, g, repeats, num_parallel=num_parallel,
        stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
        need_read_groups=need_read_groups, beta=beta, rec_tile=rec_tile,
        det_fields=det_fields, check=check, stream_lengths=stream_lengths, grad=grad)
