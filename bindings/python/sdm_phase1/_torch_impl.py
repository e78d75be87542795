"""PyTorch tensors: CUDA tensors run on the CUDA backend of their device, on PyTorch's current
stream; outputs are ``torch.empty`` tensors (the caching allocator, current stream) written in
place, and each plan's workspace comes from the same allocator. Nothing here synchronizes,
allocates elsewhere or reads device memory, so a call can be captured in a CUDA graph.
CPU tensors run on the CPU backend through NumPy views (no copy).

Imported only when a torch tensor is passed (this module imports torch).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch

from . import _gpu
from ._checks import check_agreement, check_dtypes, check_rank
from ._constants import DET_RECORDS, DET_SHIPPED
from ._fields import EMPTY_DTYPES, REPEATS, output_layout
from ._types import FIELDS, Phase1

__all__ = ["run", "forward", "assemble", "check_repeats", "resolve_det_fields", "TORCH_DTYPES"]

#: sdm_p1_dtype code -> torch dtype.
TORCH_DTYPES = {1: torch.int8, 2: torch.int32, 3: torch.int64, 4: torch.float32, 5: torch.bfloat16}
_NAMES = {torch.int32: "int32", torch.int64: "int64", torch.float32: "float32",
          torch.bfloat16: "bfloat16"}
_INPUTS = ("k_idx", "q_idx", "k_val", "q_val", "g", "beta")

try:  # the raw cudaStream_t of the current stream, without a Stream object (fast)
    _current_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older or unusual builds
    def _current_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream


class _TorchWorkspace(_gpu.Workspace):
    """A plan's workspace from PyTorch's caching allocator."""

    def __init__(self, device: int):
        self.device = device

    def alloc(self, nbytes: int, stream: int) -> int:
        return torch.cuda.caching_allocator_alloc(nbytes, self.device, stream)

    def free(self, ptr: int) -> None:
        self.sync()  # the block returns to its stream's pool; the plan ran on others
        torch.cuda.caching_allocator_delete(ptr)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)


def _dtype_name(t: torch.Tensor) -> str:
    return _NAMES.get(t.dtype) or str(t.dtype).replace("torch.", "")


def _check_tensors(tensors: dict, device: torch.device) -> None:
    """Type, device, rank and contiguity of every given input."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor like k_idx, got {type(t).__name__}")
        if t.device != device:
            raise ValueError(
                f"{name} is on {t.device} but k_idx is on {device}: every tensor of a call must be "
                "on one device"
            )
        check_rank(name, t.shape)
        if not t.is_contiguous():
            raise ValueError(
                f"{name} is not contiguous (shape {tuple(t.shape)}, strides {t.stride()}); sdm_phase1 "
                f"reads inputs in place: pass {name}.contiguous()"
            )


def _options(shapes, dtypes, num_parallel, stream_offset, num_keys, valid_last, need_read_groups,
             rec_tile, det_fields):
    index, value = check_dtypes(dtypes)
    N, C, W, R, gate_width = check_agreement(shapes)
    return (N, C, W, R, int(num_parallel), int(stream_offset), int(num_keys), int(valid_last), index,
            value, gate_width, bool(need_read_groups), int(det_fields), max(0, int(rec_tile)))


class _PlanData:
    """Per plan, built at its first use: what a call allocates and how it fills Phase1."""

    def __init__(self, plan: _gpu.GpuPlan, device: torch.device):
        self.specs = [(shape, TORCH_DTYPES[dt]) for _, shape, dt in plan.fields]
        self.fields = [f for f, _, _ in plan.fields]
        C, W = plan.options["C"], plan.options["W"]
        position = {f: i for i, f in enumerate(self.fields)}
        # Phase1 field -> (index into the call's outputs, or -1 and the constant value).
        self.template = []
        for f, name in enumerate(FIELDS):
            if f in position:
                self.template.append((position[f], None))
            elif f in EMPTY_DTYPES:
                shape = (0, C, W) if name in ("is_last", "is_only") else (0,)
                self.template.append((-1, _empty(shape, TORCH_DTYPES[EMPTY_DTYPES[f]], device)))
            else:
                self.template.append((-1, None))
        self.repeats = position[REPEATS]


def _prepare(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset, num_keys,
             valid_last, need_read_groups, rec_tile, det_fields):
    """Checks the tensors; returns (tensors by name, options tuple)."""
    if not isinstance(k_idx, torch.Tensor):
        raise TypeError(f"k_idx must be a torch.Tensor, got {type(k_idx).__name__}")
    tensors = {"k_idx": k_idx, "q_idx": q_idx, "k_val": k_val, "q_val": q_val, "g": g}
    if beta is not None:
        tensors["beta"] = beta
    _check_tensors(tensors, k_idx.device)
    options = _options({n: tuple(t.shape) for n, t in tensors.items()},
                       {n: _dtype_name(t) for n, t in tensors.items()}, num_parallel,
                       stream_offset, num_keys, valid_last, need_read_groups, rec_tile, det_fields)
    return tensors, options


def _launch(k_idx, q_idx, k_val, q_val, g, beta, options, check):
    """Enqueues the call on the current stream of k_idx's GPU; returns (plan data, outputs)."""
    device = k_idx.device
    index = device.index
    stream = _current_stream(index)
    capturing = torch.cuda.is_current_stream_capturing()
    if check and capturing:
        raise ValueError("check=True waits for the stream, which a CUDA graph capture forbids; "
                         "call sdm_phase1.synchronize() after a replay instead")
    plan = _gpu.get_plan("torch", index, stream, options, lambda: _TorchWorkspace(index),
                         capturing)
    data = plan.extra
    if data is None:
        data = plan.extra = _PlanData(plan, device)
    outs = [torch.empty(shape, dtype=dt, device=device) for shape, dt in data.specs]
    plan.execute(k_idx.data_ptr(), q_idx.data_ptr(), k_val.data_ptr(), q_val.data_ptr(),
                 g.data_ptr(), 0 if beta is None else beta.data_ptr(), [o.data_ptr() for o in outs])
    if check:
        torch.cuda.current_stream(index).synchronize()
        plan.check_status()
    return data, outs


def run(k_idx, q_idx, k_val, q_val, g, beta, num_parallel: int, stream_offset: int,
        num_keys: int, valid_last: int, need_read_groups: bool, rec_tile: int, det_fields: int,
        check: bool) -> List[Optional[torch.Tensor]]:
    """The outputs by field id (29 entries, repeats last; None where not computed).

    ``det_fields`` resolved (not None). ``check``: wait for the stream and raise the data
    check's Phase1Error (not allowed during graph capture)."""
    tensors, options = _prepare(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset,
                                num_keys, valid_last, need_read_groups, rec_tile, det_fields)
    if k_idx.device.type != "cuda":
        return _run_host(tensors, options)
    data, outs = _launch(k_idx, q_idx, k_val, q_val, g, beta, options, check)
    result: List[Optional[torch.Tensor]] = [None] * (REPEATS + 1)
    for f, o in zip(data.fields, outs):
        result[f] = o
    return result


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    if a.dtype == np.uint16:  # bfloat16 bits
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _run_host(tensors: dict, options: tuple) -> List[Optional[torch.Tensor]]:
    """CPU tensors: the CPU backend on NumPy views of them; outputs wrap the NumPy results."""
    from ._arrays import prepare_inputs
    from ._plan import Plan

    x = prepare_inputs(*(_to_numpy(tensors[n]) for n in ("k_idx", "q_idx", "k_val", "q_val", "g")),
                       _to_numpy(tensors["beta"]) if "beta" in tensors else None)
    N, C, W, R, P, offset, keys, valid_last, index, value, gw, rg, det, tile = options
    repeats = np.zeros(1, np.int64)
    with Plan(N=N, C=C, W=W, R=R, num_parallel=P, stream_offset=offset, num_keys=keys,
              valid_last=valid_last, index_dtype=x.k_idx.dtype, value_dtype=x.k_val.dtype,
              gate_width=gw, need_read_groups=rg, det_fields=det, rec_tile=tile) as plan:
        out = plan._run(x, repeats)
    result: List[Optional[torch.Tensor]] = [None] * (REPEATS + 1)
    for f, _, _ in output_layout(N, C, W, R, det, rg, tile):
        result[f] = _from_numpy(repeats if f == REPEATS else out[f])
    return result


def resolve_det_fields(det_fields: Optional[int], beta) -> int:
    """The spec's default: DET_SHIPPED, plus the records when beta is given."""
    if det_fields is None:
        return DET_SHIPPED | (DET_RECORDS if beta is not None else 0)
    return int(det_fields)


def assemble(outs: List[Optional[torch.Tensor]], device, C: int, W: int, reuse: bool = True) -> Phase1:
    """A Phase1 from outputs by field id: fields not computed are None, or empty tensors for
    is_last / is_only ([0, C, W] int8) and the record fields (as the spec returns them).
    ``reuse``: share those empty tensors between calls (eager only; not while tracing)."""
    fields = []
    for f, name in enumerate(FIELDS):
        t = outs[f]
        if t is None and f in EMPTY_DTYPES:
            dt = TORCH_DTYPES[EMPTY_DTYPES[f]]
            shape = (0, C, W) if name in ("is_last", "is_only") else (0,)
            t = _empty(shape, dt, device) if reuse else torch.empty(shape, dtype=dt, device=device)
        fields.append(t)
    return Phase1(*fields)


_EMPTIES: dict = {}


def _empty(shape, dtype, device) -> torch.Tensor:
    # Zero-element tensors hold no data, so one per (shape, dtype, device) serves every call.
    key = (shape, dtype, device)
    t = _EMPTIES.get(key)
    if t is None:
        t = _EMPTIES[key] = torch.empty(shape, dtype=dtype, device=device)
    return t


def check_repeats(repeats, device) -> None:
    if repeats is None:
        return
    if not (isinstance(repeats, torch.Tensor) and repeats.dtype == torch.int64 and repeats.numel() == 1
            and repeats.device == device):
        got = type(repeats).__name__
        if isinstance(repeats, torch.Tensor):
            got += f" of dtype {repeats.dtype}, shape {tuple(repeats.shape)} on {repeats.device}"
        raise ValueError(
            f"repeats must be None or an int64 tensor of one element on {device} (incremented in "
            f"place), got {got}"
        )


def forward(k_idx, q_idx, k_val, q_val, g, repeats, *, num_parallel, stream_offset, num_keys,
            valid_last, need_read_groups, beta, rec_tile, det_fields, check) -> Phase1:
    """phase1_forward on torch tensors (see sdm_phase1.phase1_forward)."""
    if isinstance(k_idx, torch.Tensor):
        check_repeats(repeats, k_idx.device)
    det = resolve_det_fields(det_fields, beta)
    tensors, options = _prepare(k_idx, q_idx, k_val, q_val, g, beta, num_parallel, stream_offset,
                                num_keys, valid_last, need_read_groups, rec_tile, det)
    if k_idx.device.type != "cuda":
        outs = _run_host(tensors, options)
        if repeats is not None:
            repeats.view(-1).add_(outs[REPEATS].view(-1))
        return assemble(outs, k_idx.device, k_idx.shape[1], k_idx.shape[2])
    data, outs = _launch(k_idx, q_idx, k_val, q_val, g, beta, options, check)
    if repeats is not None:
        repeats.view(-1).add_(outs[data.repeats].view(-1))
    return Phase1._make([c if i < 0 else outs[i] for i, c in data.template])
