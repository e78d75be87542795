"""The PyTorch operators ``torch.ops.sdm_phase1.phase1_forward`` and ``phase1_backward``, the
forward's autograd formula, and the spec-signature wrapper :func:`phase1_forward`.

Importing this module imports torch and registers the operators (``torch.library.Library``:
their schemas, one implementation for CUDA and CPU tensors, and fake implementations that give
every output's shape and dtype from the inputs' shapes and the options alone), so code calling
:func:`phase1_forward` here traces under ``torch.compile(fullgraph=True)`` without a graph
break, and under FakeTensorMode and ``torch.export``. ``import sdm_phase1`` alone never
imports torch. The operators are registered at this low level rather than through
``torch.library.custom_op``, whose per-call Python wrapping costs more host time than the S6
kernel takes.

Autograd (``torch.library.register_autograd``): k_val, q_val, g and beta are differentiable.
The backward calls ``phase1_backward``, the library's ``sdm_p1_execute_backward``
(docs/backward.md) on the forward's inputs and its ``payload`` output (the sort, not done
again), with the upstream gradients of the float outputs (a, qk, log_k, log_q, rex, cpe,
k_eff, q_w, kspa). The integer outputs (payload, positions, flags, the records' words) get no
gradient; the ids, the options and ``stream_lengths`` are not differentiable. It runs where
the forward ran, as the forward does: CUDA tensors on the CUDA backend, on the current stream
of their device (which autograd sets to the forward's), through a cached CUDA plan made with
backward = 1, with device pointers and gradients from PyTorch's caching allocator (no host
copy, no synchronization: capturable in a CUDA graph); CPU tensors on the CPU backend. The
forward's ``check`` applies to it too (else a GPU's data errors surface at
:func:`sdm_phase1.synchronize`). The gradients are the same bits on both.
The backward is not itself differentiable: a double backward raises
(:data:`NOT_TWICE_DIFFERENTIABLE`).

In eager mode :func:`phase1_forward` does not dispatch the operator: an autograd Function
(``_frameworks.torch_impl._Phase1Function``) runs the same library calls with the same
formula, without the dispatcher's and ``register_autograd``'s Python layers (their host time
is several times the S6 kernel's). The operator and its registered formula are what
torch.compile's graphs, ``torch.export``, dispatch modes (FakeTensorMode), functorch
transforms and tensor subclasses get, and what ``torch.ops.sdm_phase1.phase1_forward``
called directly runs; both give the same bits.

The forward operator takes the inputs and options and returns the computed outputs as a list
(in field order, ``repeats``' count last); :func:`phase1_forward` turns that into the spec's
``Phase1`` and adds the count into ``repeats`` in place, outside the operator, so the
operator itself mutates nothing. CUDA tensors run on the current stream of their device
(see :func:`sdm_phase1.phase1_forward`), CPU tensors on the CPU backend.

With ``torch.distributed``, each process runs the operator on its own GPU and its own streams;
nothing in it communicates or synchronizes across processes.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from ._c import lib
from ._core.backward import DIFFERENTIABLE
from ._core.constants import DET_RECORDS, DET_SHIPPED
from ._core.fields import REPEATS, VALUE, output_layout
from ._core.options import call_options, plain_call_options, require_bool
from ._core.types import Phase1
from ._frameworks import torch_impl
from ._frameworks.torch_impl import TORCH_DTYPES

__all__ = ["phase1_forward", "phase1_op", "phase1_backward_op", "SCHEMA", "BACKWARD_SCHEMA",
           "GRAD_NAMES", "NOT_TWICE_DIFFERENTIABLE"]

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
    select, see ``sdm_phase1._core.fields.output_layout``), then a one-element int64 tensor with
    the repeats count. ``det_fields`` must be resolved (the wrapper applies the default)."""
    return torch_impl.run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset,
                           num_keys, valid_last, need_read_groups, rec_tile, det_fields, check,
                           stream_lengths)


_LIBRARY.impl("phase1_forward", _implementation, "CUDA")
_LIBRARY.impl("phase1_forward", _implementation, "CPU")

#: The operator (its default overload).
phase1_op = torch.ops.sdm_phase1.phase1_forward.default
_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd


@torch.library.register_fake("sdm_phase1::phase1_forward")
def _phase1_fake(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
                 valid_last, need_read_groups, rec_tile, det_fields, check, stream_lengths=None):
    torch_impl.check_one_device({"q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g,
                                 "beta": beta, "stream_lengths": stream_lengths}, k_idx.device)
    N, C, W = k_idx.shape
    R = q_idx.shape[2]
    return [
        k_idx.new_empty(shape, dtype=k_val.dtype if dt == VALUE else TORCH_DTYPES[dt])
        for _, shape, dt in output_layout(N, C, W, R, det_fields, need_read_groups, rec_tile)
    ]


#: The backward operator's schema. ``grads``: one upstream gradient or None per name of
#: :data:`GRAD_NAMES`, in that order (shapes and dtypes of docs/backward.md). Returns
#: [dk_val, dq_val, dg], then dbeta where beta is given: k_val and q_val's in the value dtype.
#: ``check``: as the forward's (GPU tensors: wait for the stream and raise a data error here).
#: ``payload_trusted``: the payload comes from the forward of these very ids (the autograd
#: formula's, saved with them), so it is not checked against them; else a payload that is not
#: the sort of the ids is refused (a data error), at a cost (docs/backward.md).
BACKWARD_SCHEMA = ("phase1_backward(Tensor k_idx, Tensor q_idx, Tensor k_val, Tensor q_val, "
                   "Tensor g, Tensor? beta, Tensor? payload, Tensor? stream_lengths, "
                   "Tensor?[] grads, int num_parallel, int stream_offset, int num_keys, "
                   "int valid_last, bool check=False, bool payload_trusted=False) -> Tensor[]")
#: The outputs that take an upstream gradient, in the order of the backward's ``grads``.
GRAD_NAMES = tuple(DIFFERENTIABLE)
#: The error of a second differentiation (docs/backward.md: "Once differentiable").
NOT_TWICE_DIFFERENTIABLE = torch_impl.NOT_TWICE_DIFFERENTIABLE

_LIBRARY.define(BACKWARD_SCHEMA)


def _backward_implementation(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths, grads,
                             num_parallel, stream_offset, num_keys, valid_last,
                             check=False, payload_trusted=False) -> List[torch.Tensor]:
    return torch_impl.run_backward(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths,
                                    grads, num_parallel, stream_offset, num_keys, valid_last, check,
                                    payload_trusted)


_LIBRARY.impl("phase1_backward", _backward_implementation, "CUDA")
_LIBRARY.impl("phase1_backward", _backward_implementation, "CPU")

#: The backward operator (its default overload).
phase1_backward_op = torch.ops.sdm_phase1.phase1_backward.default


@torch.library.register_fake("sdm_phase1::phase1_backward")
def _phase1_backward_fake(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths, grads,
                          num_parallel, stream_offset, num_keys, valid_last, check=False,
                          payload_trusted=False):
    torch_impl.check_one_device(dict({"q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g,
                                      "beta": beta, "payload": payload,
                                      "stream_lengths": stream_lengths},
                                     **{f"grads[{n!r}]": u for n, u in zip(GRAD_NAMES, grads)}),
                                k_idx.device)
    inputs = (k_val, q_val, g) if beta is None else (k_val, q_val, g, beta)
    return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in inputs]


def _not_twice(ctx, grads):
    raise RuntimeError(NOT_TWICE_DIFFERENTIABLE)


# The backward's autograd kernel raises where its result would be differentiated again, so a
# double backward fails loudly instead of returning zeros.
torch.library.register_autograd("sdm_phase1::phase1_backward", _not_twice)

# Output field id -> its place in GRAD_NAMES, for the float outputs. The records' gradients
# (krec, qrec, qrec8) are those of float words inside int32 outputs, which autograd never
# gives a gradient.
_GRAD_PLACE = {DIFFERENTIABLE[name]: GRAD_NAMES.index(name) for name in torch_impl.FLOAT_GRAD_NAMES}
_PAYLOAD = lib.SDM_P1_FIELD_PAYLOAD


def _setup_context(ctx, inputs, output):
    (k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys, valid_last,
     need_read_groups, _rec_tile, det_fields, check, stream_lengths) = inputs
    fields = _fields_of(det_fields, need_read_groups)
    # The payload (the sort) is always computed; it spares the backward sorting again.
    payload = output[fields.index(_PAYLOAD)] if _PAYLOAD in fields else None
    ctx.save_for_backward(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths)
    ctx.fields = fields
    ctx.options = (num_parallel, stream_offset, num_keys, valid_last)
    ctx.check = check
    # Outputs the loss does not use come as None, not zeros: the library reads NULL as zero.
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths = ctx.saved_tensors
    ups: List[Optional[torch.Tensor]] = [None] * len(GRAD_NAMES)
    for field, grad in zip(ctx.fields, grads):
        place = _GRAD_PLACE.get(field)
        if place is not None and grad is not None:
            ups[place] = grad.contiguous()  # e.g. sum()'s gradient is an expanded (strided) one
    need = ctx.needs_input_grad
    if all(u is None for u in ups) or not any(need[2:6]):
        return (None,) * len(need)
    # The payload and the ids were saved from one forward: not checked against each other.
    got = phase1_backward_op(k_idx, q_idx, k_val, q_val, g, beta, payload, stream_lengths, ups,
                             *ctx.options, check=ctx.check, payload_trusted=True)
    dk, dq, dg = got[0], got[1], got[2]
    dbeta = got[3] if beta is not None else None
    return ((None, None, dk if need[2] else None, dq if need[3] else None,
             dg if need[4] else None, dbeta if need[5] else None) + (None,) * (len(need) - 6))


torch.library.register_autograd("sdm_phase1::phase1_forward", _backward,
                                setup_context=_setup_context)


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
    captured. Differentiable in k_val, q_val, g and beta (see the module's docstring).

    In eager mode (not traced by torch.compile, no torch function or dispatch mode, no
    functorch transform, plain tensors) the call skips the operator's dispatch:
    :func:`torch_impl.forward <sdm_phase1._frameworks.torch_impl.forward>` runs it, with grad
    through an autograd Function of the same formula, the outputs carved from one block as
    :func:`sdm_phase1.phase1_forward`'s (docs/python.md, "PyTorch autograd"). The bits are
    the same.
    """
    if torch_impl.eager(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths):
        return torch_impl.forward(
            k_idx, q_idx, k_val, q_val, g, repeats, num_parallel=num_parallel,
            stream_offset=stream_offset, num_keys=num_keys, valid_last=valid_last,
            need_read_groups=need_read_groups, beta=beta, rec_tile=rec_tile,
            det_fields=det_fields, check=check, stream_lengths=stream_lengths)
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
        torch_impl.check_repeats(repeats, k_idx.device)
    args = (k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys, valid_last,
            need_read_groups, tile, det, check, stream_lengths)
    if torch.compiler.is_compiling() or torch_impl.needs_grad(k_val, q_val, g, beta):
        got = phase1_op(*args)
    else:
        # Eager without grad: straight to the implementation's dispatch key, as the autograd
        # kernel would after its Python checks (which cost host time per call).
        with _BELOW_AUTOGRAD():
            got = phase1_op(*args)
    C, W = k_idx.shape[1], k_idx.shape[2]
    fields = _fields_of(det, need_read_groups)
    if repeats is not None:
        repeats.add_(got[fields.index(REPEATS)])
    return torch_impl.phase1_from_outputs(got, fields, C, W, k_idx.device,
                                           reuse=not torch.compiler.is_compiling())
