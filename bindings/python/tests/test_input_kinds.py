"""phase1_forward refuses inputs of the wrong kind by name, where it used to blame another
argument, fail deep inside a framework or compute on garbage: a Python list for an array
(NumPy would give it int64 or float64, and the check of the next input would fail), torch
tensors beside NumPy ids (converted silently, or "not convertible" when they require grad),
NumPy arrays beside torch ids, and tensors on the meta device (no data: a meta k_val beside
CPU tensors used to find the CPU call's cached plan and read address 0, or reach the
operator's fake implementation and return uninitialized memory). Each error is compared whole:
its type and its message."""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1

N, C, W, R, P, KEYS = 4, 8, 2, 2, 2, 16
OPTS = dict(num_parallel=P, stream_offset=KEYS, num_keys=KEYS, valid_last=C)
ORDER = ("k_idx", "q_idx", "k_val", "q_val", "g")


def inputs() -> dict:
    rng = np.random.default_rng(3)
    base = (np.arange(N) % P * KEYS)[:, None, None]
    return dict(
        k_idx=(rng.integers(0, KEYS, (N, C, W)) + base).astype(np.int32),
        q_idx=(rng.integers(0, KEYS, (N, C, R)) + base).astype(np.int32),
        k_val=rng.standard_normal((N, C, W), dtype=np.float32),
        q_val=rng.standard_normal((N, C, R), dtype=np.float32),
        g=-rng.random((N, C, 1), dtype=np.float32),
    )


def refused(call, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error
    assert str(info.value) == message


LISTS = {
    "k_idx": "int32 or int64 slot ids (np.asarray(k_idx, np.int32))",
    "q_idx": "int32 or int64 slot ids (np.asarray(q_idx, np.int32))",
    "k_val": "float32 or bfloat16 values (np.asarray(k_val, np.float32))",
    "q_val": "float32 or bfloat16 values (np.asarray(q_val, np.float32))",
    "g": "float32 log-gates (np.asarray(g, np.float32))",
}


@pytest.mark.parametrize("name", list(LISTS))
def test_a_list_is_refused_by_its_name(name):
    x = inputs()
    x[name] = x[name].tolist()
    refused(lambda: p1.phase1_forward(*(x[n] for n in ORDER), **OPTS), TypeError,
            f"{name} is a Python list, not an array: pass a NumPy array of {LISTS[name]}")


def test_a_list_of_stream_lengths_is_still_converted():
    x = inputs()
    got = p1.phase1_forward(*(x[n] for n in ORDER), **dict(OPTS, stream_lengths=[2 * C, 5]))
    want = p1.phase1_forward(*(x[n] for n in ORDER),
                             **dict(OPTS, stream_lengths=np.array([2 * C, 5], np.int64)))
    assert np.array_equal(got.a, want.a)


def torch_or_skip():
    return pytest.importorskip("torch")


def mixed(name: str) -> str:
    return (f"{name} is a torch.Tensor but k_idx is not: every input of a call must come from one "
            "framework, and k_idx's decides (a host array here: the NumPy path); pass torch "
            f"tensors for all (torch.from_numpy(k_idx), ...) or NumPy arrays for all "
            f"({name}.detach().numpy())")


# (name, whether it requires grad): integer tensors (ids, lengths) cannot.
BESIDE_NUMPY = [(n, False) for n in ("q_idx", "k_val", "q_val", "g", "beta", "stream_lengths")] + [
    (n, True) for n in ("k_val", "q_val", "g", "beta")]


@pytest.mark.parametrize("name, grad", BESIDE_NUMPY)
def test_torch_tensor_beside_numpy_ids_is_refused(name, grad):
    torch = torch_or_skip()
    x = inputs()
    x["beta"] = np.ones((N, C), np.float32)
    x["stream_lengths"] = np.array([2 * C, 5], np.int64)
    x[name] = torch.from_numpy(x[name]).requires_grad_(grad)
    refused(lambda: p1.phase1_forward(*(x[n] for n in ORDER), beta=x["beta"],
                                      stream_lengths=x["stream_lengths"], **OPTS),
            TypeError, mixed(name))


def test_torch_ids_in_a_numpy_plan_are_refused():
    torch = torch_or_skip()
    x = inputs()
    with p1.Plan(N=N, C=C, W=W, R=R, **OPTS) as plan:
        refused(lambda: plan.execute(torch.from_numpy(x["k_idx"]), *(x[n] for n in ORDER[1:])),
                TypeError, "k_idx is a torch.Tensor where host (NumPy) arrays are expected: "
                "sdm_phase1.Plan and phase1_backward take NumPy arrays (phase1_forward and "
                "sdm_layer take torch tensors, differentiable by autograd)")


@pytest.mark.parametrize("name", ["q_idx", "k_val", "g"])
def test_numpy_array_beside_torch_ids_is_refused(name):
    torch = torch_or_skip()
    x = {n: torch.from_numpy(a) for n, a in inputs().items()}
    x[name] = x[name].numpy()
    refused(lambda: p1.phase1_forward(*(x[n] for n in ORDER), **OPTS), TypeError,
            f"{name} must be a torch.Tensor like k_idx, got ndarray")


@pytest.mark.parametrize("entry", ["phase1_forward", "torch_ops", "torch_ops with grad"])
@pytest.mark.parametrize("name", ["q_idx", "k_val", "q_val", "g"])
def test_a_meta_tensor_beside_cpu_tensors_is_refused(entry, name):
    torch = torch_or_skip()
    from sdm_phase1 import torch_ops

    x = {n: torch.from_numpy(a) for n, a in inputs().items()}
    f = p1.phase1_forward if entry == "phase1_forward" else torch_ops.phase1_forward
    f(*(x[n] for n in ORDER), **OPTS)  # a cached CPU plan for these shapes
    x[name] = x[name].to("meta")
    if entry.endswith("with grad"):
        other = "k_val" if name != "k_val" else "q_val"
        x[other] = x[other].requires_grad_()
    refused(lambda: f(*(x[n] for n in ORDER), **OPTS), ValueError,
            f"{name} is on meta but k_idx is on cpu: every tensor of a call must be on one device")


def test_meta_ids_are_refused():
    torch = torch_or_skip()
    x = {n: torch.from_numpy(a).to("meta") for n, a in inputs().items()}
    refused(lambda: p1.phase1_forward(*(x[n] for n in ORDER), **OPTS), ValueError,
            "k_idx is on meta: sdm_phase1 computes on CPU and CUDA tensors only (a meta tensor "
            "holds no data)")


def test_the_operator_on_meta_tensors_alone_gives_meta_outputs():
    """Meta tensors throughout are PyTorch's shape inference: the operator's fake
    implementation answers them (as torch.compile's tracing does), without the library."""
    torch = torch_or_skip()
    from sdm_phase1 import torch_ops

    x = {n: torch.from_numpy(a).to("meta") for n, a in inputs().items()}
    out = torch_ops.phase1_forward(*(x[n] for n in ORDER), **OPTS)
    assert out.a.device.type == "meta" and tuple(out.a.shape) == (N, C, C)


def test_float16_values_name_the_dtype_and_the_supported_ones():
    torch = torch_or_skip()
    x = {n: torch.from_numpy(a) for n, a in inputs().items()}
    x["k_val"], x["q_val"] = x["k_val"].half(), x["q_val"].half()
    refused(lambda: p1.phase1_forward(*(x[n] for n in ORDER), **OPTS), ValueError,
            "k_val must be float32, or bfloat16 (uint16 bit patterns or a 'bfloat16' dtype), "
            "got dtype float16")
