"""sdm_layer refuses, before anything runs, the arguments that used to give a wrong-shaped
result, garbage or an error from deep inside NumPy or PyTorch: beta, v and memory of shapes
that do not agree with Phase 1's, beta None (no default), arguments of two frameworks, tensors
on other devices (the meta device included) and dtypes the recurrence does not run in. Each
error is compared whole: its type and its message, which names the argument.

The NumPy layer (sdm_phase1.recurrence) and the PyTorch one (sdm_phase1.torch_recurrence)
share the shape checks, so the shape cases run on both."""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1

N, C, W, R, D, P, KEYS = 4, 8, 2, 2, 3, 2, 16
OPTS = dict(num_parallel=P, stream_offset=KEYS, num_keys=KEYS, valid_last=C)
ORDER = ("k_idx", "q_idx", "k_val", "q_val", "g", "beta", "v", "memory")
K_SHAPE = f"(k_idx has shape ({N}, {C}, {W}))"


def layer_args() -> dict:
    """Good arguments of one small layer call, as NumPy arrays."""
    rng = np.random.default_rng(5)
    base = (np.arange(N) % P * KEYS)[:, None, None]
    return dict(
        k_idx=(rng.integers(0, KEYS, (N, C, W)) + base).astype(np.int32),
        q_idx=(rng.integers(0, KEYS, (N, C, R)) + base).astype(np.int32),
        k_val=rng.standard_normal((N, C, W), dtype=np.float32),
        q_val=rng.standard_normal((N, C, R), dtype=np.float32),
        g=-rng.random((N, C, 1), dtype=np.float32),
        beta=rng.random((N, C), dtype=np.float32),
        v=rng.standard_normal((N, C, D)),
        memory=np.zeros((P, KEYS, D)),
    )


def as_torch(args: dict) -> dict:
    torch = pytest.importorskip("torch")
    return {n: torch.from_numpy(a) for n, a in args.items()}


def call(args: dict):
    return p1.sdm_layer(*(args[n] for n in ORDER), **OPTS)


def refused(args: dict, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        call(args)
    assert type(info.value) is error
    assert str(info.value) == message


SHAPES = {
    "v C+1": ("v", (N, C + 1, D), f"v has shape ({N}, {C + 1}, {D}): it must be [N, C, D] = "
              f"({N}, {C}, D) {K_SHAPE}"),
    "v N+1": ("v", (N + 1, C, D), f"v has shape ({N + 1}, {C}, {D}): it must be [N, C, D] = "
              f"({N}, {C}, D) {K_SHAPE}"),
    "v 2-D": ("v", (N, C), f"v has shape ({N}, {C}): it must be [N, C, D] = ({N}, {C}, D) "
              f"{K_SHAPE}"),
    "beta C-1": ("beta", (N, C - 1), f"beta has shape ({N}, {C - 1}): it must be [N, C] = "
                 f"({N}, {C}) {K_SHAPE}"),
    "memory keys+1": ("memory", (P, KEYS + 1, D), f"memory has shape ({P}, {KEYS + 1}, {D}): it "
                      f"must be [num_parallel, num_keys, D] = ({P}, {KEYS}, {D}) (D: v's last "
                      "dimension)"),
    "memory other D": ("memory", (P, KEYS, D + 1), f"memory has shape ({P}, {KEYS}, {D + 1}): it "
                       f"must be [num_parallel, num_keys, D] = ({P}, {KEYS}, {D}) (D: v's last "
                       "dimension)"),
}


def test_good_arguments_run():
    o, memory = call(layer_args())
    assert o.shape == (N, C, D) and memory.shape == (P, KEYS, D)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("case", list(SHAPES))
def test_wrong_shapes_are_refused(framework, case):
    name, shape, message = SHAPES[case]
    args = layer_args()
    args[name] = np.zeros(shape, args[name].dtype)
    if framework == "torch":
        args = as_torch(args)
    refused(args, ValueError, message)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_beta_none_is_refused_by_name(framework):
    args = layer_args()
    if framework == "torch":
        args = as_torch(args)
    args["beta"] = None
    refused(args, TypeError, f"beta is None: sdm_layer needs beta, [N, C] = ({N}, {C}) float32 "
            "write strengths (the delta rule's u = beta * (v - pred)); pass ones for the plain "
            "delta rule")


@pytest.mark.parametrize("name", ["k_val", "beta", "v", "memory"])
def test_torch_tensor_beside_numpy_ids_is_refused(name):
    torch = pytest.importorskip("torch")
    args = layer_args()
    args[name] = torch.from_numpy(args[name]).requires_grad_()
    refused(args, TypeError, f"{name} is a torch.Tensor but k_idx is not: every input of a call "
            "must come from one framework, and k_idx's decides (a host array here: the NumPy "
            f"path); pass torch tensors for all (torch.from_numpy(k_idx), ...) or NumPy arrays "
            f"for all ({name}.detach().numpy())")


@pytest.mark.parametrize("name", ["k_val", "beta", "v", "memory"])
def test_numpy_array_beside_torch_ids_is_refused(name):
    args = as_torch(layer_args())
    args[name] = args[name].numpy()
    refused(args, TypeError, f"{name} must be a torch.Tensor like k_idx, got ndarray")


@pytest.mark.parametrize("name", ["k_val", "g", "beta", "v", "memory"])
def test_meta_tensor_beside_cpu_tensors_is_refused(name):
    args = as_torch(layer_args())
    call(args)  # a cached CPU plan for these shapes: the meta tensor must not find it
    args[name] = args[name].to("meta")
    refused(args, ValueError, f"{name} is on meta but k_idx is on cpu: every tensor of a call "
            "must be on one device")


def test_meta_ids_are_refused():
    args = as_torch(layer_args())
    args = {n: t.to("meta") for n, t in args.items()}
    refused(args, ValueError, "k_idx is on meta: sdm_phase1 computes on CPU and CUDA tensors only "
            "(a meta tensor holds no data)")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unsupported_recurrence_dtype_is_named(dtype):
    torch = pytest.importorskip("torch")
    args = as_torch(layer_args())
    args["v"] = args["v"].to(getattr(torch, dtype))
    args["memory"] = args["memory"].to(getattr(torch, dtype))
    refused(args, ValueError, f"v is torch.{dtype}: sdm_layer runs the recurrence in v's dtype, "
            "which must be torch.float32 or torch.float64 (pass v.float() and memory.float())")


def test_memory_of_another_dtype_is_refused():
    args = as_torch(layer_args())
    args["memory"] = args["memory"].float()
    refused(args, ValueError, "memory is torch.float32 but v is torch.float64: the recurrence "
            "runs in one dtype, v's (float32 or float64)")
