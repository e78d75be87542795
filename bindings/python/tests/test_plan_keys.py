"""The PyTorch path's plan key: a plan per device and stream, checked without a GPU.

CUDA tensors are FakeTensorMode's (shapes, dtypes and devices, no memory), the current stream
of each device a stand-in number, and the plan cache's creation a recorder, so the test sees
the key and the workspace a call would make its plan with: tensors on cuda:1 get a plan on
device 1, on cuda:1's current stream, with workspace from cuda:1's allocator, whatever
device is current; another stream gets another plan; a tensor on another device than k_idx is
refused before any plan is made. On the CPU, each tensor's device is in the key, so a meta
tensor never finds a CPU call's plan (get_device() is -1 for both)."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest
from sdm_phase1._core import plan_cache

torch = pytest.importorskip("torch")
torch_impl = pytest.importorskip("sdm_phase1._frameworks.torch_impl")

N, C, W, R, P, KEYS = 4, 8, 2, 2, 2, 16
ORDER = ("k_idx", "q_idx", "k_val", "q_val", "g")
SHAPES = {"k_idx": ((N, C, W), torch.int32), "q_idx": ((N, C, R), torch.int32),
          "k_val": ((N, C, W), torch.float32), "q_val": ((N, C, R), torch.float32),
          "g": ((N, C, 1), torch.float32)}
#: A stand-in for each device's current cudaStream_t.
STREAMS = {0: 0x1000, 1: 0x2000}


def fake_inputs(devices: dict) -> dict:
    """Fake tensors of the inputs' shapes and dtypes on the given devices (name -> device)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            return {n: torch.empty(shape, dtype=dtype, device=devices[n])
                    for n, (shape, dtype) in SHAPES.items()}
    except (RuntimeError, AssertionError) as e:  # a torch that cannot fake CUDA tensors
        pytest.skip(f"FakeTensorMode cannot make CUDA tensors here: {e}")


@pytest.fixture
def made(monkeypatch):
    """The plans a call would create: (key, workspace) each, recorded instead of created."""
    monkeypatch.setattr(plan_cache._cache, "plans", OrderedDict())
    monkeypatch.setattr(torch_impl, "_FAST", {})  # the fast lookup in front of the cache
    monkeypatch.setattr(torch_impl, "_current_stream", lambda device: STREAMS[device])
    monkeypatch.setattr(torch_impl, "_capturing", lambda: False)
    record = []

    def get_plan_for(key, options, make_workspace, capturing=False, **kw):
        record.append((key, make_workspace()))
        plan = SimpleNamespace(extra="plan data", handle=1, pinned=False, used=0, stream=key[2])
        plan_cache._cache.plans[key] = plan
        return plan

    monkeypatch.setattr(plan_cache, "get_plan_for", get_plan_for)
    return record


def plan_for(t: dict):
    return torch_impl._call_plan(*(t[n] for n in ORDER), None, None, P, KEYS, KEYS, C, True, 0,
                                 None, False, None)


def test_tensors_on_the_second_gpu_get_a_plan_there(made):
    plan, device, _, _ = plan_for(fake_inputs({n: "cuda:1" for n in ORDER}))
    assert device == 1
    (key, workspace), = made
    assert key[:3] == ("torch", 1, STREAMS[1])  # the plan's device (its desc) and stream
    assert isinstance(workspace, torch_impl._TorchWorkspace) and workspace.device == 1
    # The first GPU's call is another plan, on its own device and stream.
    plan_for(fake_inputs({n: "cuda:0" for n in ORDER}))
    assert made[1][0][:3] == ("torch", 0, STREAMS[0]) and made[1][1].device == 0
    # The same call again finds its plan: nothing is made.
    assert plan_for(fake_inputs({n: "cuda:1" for n in ORDER}))[0] is plan
    assert len(made) == 2


def test_another_stream_gets_another_plan(made, monkeypatch):
    t = fake_inputs({n: "cuda:1" for n in ORDER})
    plan_for(t)
    monkeypatch.setattr(torch_impl, "_current_stream", lambda device: STREAMS[device] + 1)
    plan_for(t)
    assert [key[:3] for key, _ in made] == [("torch", 1, STREAMS[1]), ("torch", 1, STREAMS[1] + 1)]


@pytest.mark.parametrize("name", ORDER[1:])
def test_a_tensor_on_another_gpu_is_refused(made, name):
    devices = {n: "cuda:1" for n in ORDER}
    devices[name] = "cuda:0"
    with pytest.raises(ValueError) as info:
        plan_for(fake_inputs(devices))
    assert str(info.value) == (f"{name} is on cuda:0 but k_idx is on cuda:1: every tensor of a "
                               "call must be on one device")
    assert made == []


@pytest.mark.parametrize("name", ORDER)
def test_the_key_tells_a_meta_tensor_from_a_cpu_one(name):
    rng = np.random.default_rng(0)
    t = {n: torch.from_numpy(rng.integers(0, 4, shape).astype(np.float32)).to(dtype)
         for n, (shape, dtype) in SHAPES.items()}
    meta = dict(t, **{name: t[name].to("meta")})

    def key(x):
        return torch_impl.call_key(*(x[n] for n in ORDER), None, None, -1, 0, P, KEYS, KEYS, C,
                                   True, 0, 0)

    assert t[name].get_device() == meta[name].get_device() == -1
    assert key(meta) != key(t)
