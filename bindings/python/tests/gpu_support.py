"""Helpers of the GPU tests: whether they can run, inputs moved to a framework, results brought
back to NumPy (bfloat16 as its uint16 bits) and compared bit for bit with the CPU backend's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import sdm_phase1 as p1

INPUTS = ("k_idx", "q_idx", "k_val", "q_val", "g", "beta")
OPTIONS = ("num_parallel", "stream_offset", "num_keys", "valid_last")


def cuda_skip_reason():
    """None when the loaded library has a CUDA backend with a device, else why not."""
    count = p1.cuda_device_count()
    if count is None:
        return f"{p1.library_path} was built without the CUDA backend"
    if count == 0:
        return "no CUDA device"
    return None


def child_env(**extra) -> dict:
    """The environment of a child Python that imports the same sdm_phase1 as these tests (the
    installed wheel's, or the source tree's: the source tree has no library where only the
    wheel was built), with ``extra`` variables set."""
    package_root = str(Path(p1.__file__).resolve().parent.parent)
    path = [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), **extra)


def split(case: dict):
    """(inputs by name, options) of a test_reference.make_case case."""
    return {n: case[n] for n in INPUTS}, {n: case[n] for n in OPTIONS}


def cpu_result(inputs: dict, opts: dict, **kw):
    return p1.phase1_forward(inputs["k_idx"], inputs["q_idx"], inputs["k_val"], inputs["q_val"],
                             inputs["g"], beta=inputs["beta"], **opts, **kw)


def torch_inputs(inputs: dict, device):
    """NumPy inputs as torch tensors on ``device`` (uint16 values as torch.bfloat16)."""
    import torch

    out = {}
    for n, a in inputs.items():
        if a is None:
            out[n] = None
        elif a.dtype == np.uint16:
            out[n] = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
        else:
            out[n] = torch.from_numpy(a).to(device)
    return out


def to_numpy(x):
    """A torch / CuPy / JAX / NumPy array as a NumPy array on the host (bfloat16 as uint16)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__.partition(".")[0]
    if mod == "torch":
        import torch

        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    if mod == "cupy":
        return x.get()
    a = np.asarray(x)  # JAX
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def assert_same(cpu, gpu):
    """Every field of two Phase1 results: both None, or the same dtype, shape and bytes."""
    assert type(gpu).__name__ == "Phase1"
    for name, want, got in zip(p1.Phase1._fields, cpu, gpu):
        got = to_numpy(got)
        if want is None:
            assert got is None, name
            continue
        assert got is not None, name
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        if got.tobytes() != want.tobytes():
            bad = np.argwhere(got.view(np.uint8).reshape(-1) != want.view(np.uint8).reshape(-1))
            raise AssertionError(f"{name}: bits differ from the CPU backend's at byte "
                                 f"{int(bad[0][0])} of {want.nbytes} ({len(bad)} bytes differ)")


def capture_graph(call):
    """(a torch CUDA graph of ``call()``, the outputs it writes at each replay), after one
    warm-up call on a side stream, as torch.cuda.graph's docs do."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    return graph, out
