"""Per-stream lengths on the GPU (PyTorch, CuPy): every output bit equal to the CPU backend's
for the same lengths, through phase1_forward and the operator; a CUDA graph replayed after new
lengths are written into the same tensor; bad lengths reported by the device-side check with
the CPU's message; the layout functions on CUDA tensors without a host synchronization.
(JAX: gpu_jax_check.py.) Skips without torch, a GPU or a CUDA-enabled library."""

from __future__ import annotations

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import assert_same, capture_graph, cpu_result, cuda_skip_reason, split, torch_inputs
from test_reference import LENGTHS, make_case

torch = pytest.importorskip("torch")
_REASON = cuda_skip_reason() or (None if torch.cuda.is_available() else "torch sees no CUDA device")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

DEV = "cuda:0"
DET_ALL = 3071
NAMES = ("k_idx", "q_idx", "k_val", "q_val", "g")


def _torch_lengths(lengths, dtype=None):
    a = np.asarray(lengths)
    return torch.from_numpy(a.astype(dtype or (np.int64 if a.dtype == np.int64 else np.int32))).to(DEV)


@pytest.mark.parametrize("op", ["forward", "operator"])
@pytest.mark.parametrize("cid,case_kw,lengths", LENGTHS, ids=[c[0] for c in LENGTHS])
def test_lengths_match_cpu(cid, case_kw, lengths, op):
    case = make_case(hash(cid) % 1000, stream_lengths=lengths, **case_kw)
    inputs, opts = split(case)
    want = cpu_result(inputs, opts, det_fields=DET_ALL, stream_lengths=lengths)
    t = torch_inputs(inputs, DEV)
    if op == "operator":
        from sdm_phase1 import torch_ops

        fn = torch_ops.phase1_forward
    else:
        fn = p1.phase1_forward
    del opts["valid_last"]  # ignored with stream_lengths: left out here, given to the CPU's call
    got = fn(*(t[n] for n in NAMES), beta=t["beta"], det_fields=DET_ALL,
             stream_lengths=_torch_lengths(lengths), **opts)
    torch.cuda.synchronize()
    assert_same(want, got)


def test_graph_replay_with_new_lengths_in_the_same_tensor():
    case = make_case(31, N=6, C=16, W=4, R=4, P=3, num_keys=30, kmode="random")  # valid everywhere
    inputs, opts = split(case)
    t = torch_inputs(inputs, DEV)
    lengths = torch.tensor([32, 32, 32], dtype=torch.int32, device=DEV)

    def call():
        return p1.phase1_forward(*(t[n] for n in NAMES), beta=t["beta"], det_fields=DET_ALL,
                                 stream_lengths=lengths, **opts)

    graph, out = capture_graph(call)
    for vec in ([32, 0, 17], [1, 16, 31], [0, 0, 0], [32, 32, 32]):
        lengths.copy_(torch.tensor(vec, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert_same(cpu_result(inputs, opts, det_fields=DET_ALL, stream_lengths=np.array(vec, np.int32)), out)
    lengths.copy_(torch.tensor([32, -1, 5], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    with pytest.raises(p1.Phase1Error) as cpu:
        cpu_result(inputs, opts, det_fields=DET_ALL, stream_lengths=np.array([32, -1, 5], np.int32))
    with pytest.raises(p1.Phase1Error) as gpu:
        p1.synchronize()
    assert gpu.value.message == cpu.value.message
    assert "stream_lengths[1] = -1" in gpu.value.message
    # The graph's plan stays pinned, its check pending: a clean replay clears the report, so
    # later synchronize() calls (other tests') see no error.
    lengths.copy_(torch.tensor([32, 32, 32], dtype=torch.int32))
    graph.replay()
    p1.synchronize()


@pytest.mark.parametrize("bad", [[-1, 3], [3, 33], [2**40, 0]])
def test_bad_lengths_on_the_device(bad):
    case = make_case(32, N=4, C=16, W=3, R=3, P=2, num_keys=20)
    inputs, opts = split(case)
    with pytest.raises(p1.Phase1Error) as cpu:
        cpu_result(inputs, opts, stream_lengths=np.array(bad, np.int64))
    t = torch_inputs(inputs, DEV)
    with pytest.raises(p1.Phase1Error) as gpu:
        p1.phase1_forward(*(t[n] for n in NAMES), beta=t["beta"], check=True,
                          stream_lengths=_torch_lengths(bad, np.int64), **opts)
    assert gpu.value.message == cpu.value.message


def test_bad_length_arguments():
    case = make_case(33, N=4, C=16, W=3, R=3, P=2, num_keys=20)
    inputs, opts = split(case)
    t = torch_inputs(inputs, DEV)
    args = [t[n] for n in NAMES]
    for lengths, error, words in (
        (torch.tensor([3, 4], dtype=torch.int32), ValueError, "stream_lengths is on cpu"),
        (torch.tensor([3, 4, 5], dtype=torch.int32, device=DEV), ValueError, "num_parallel = 2"),
        (torch.tensor([3.0, 4.0], device=DEV), ValueError, "int32 or int64"),
        (torch.tensor([3, 0, 4, 0], dtype=torch.int32, device=DEV)[::2], ValueError, "contiguous"),
        ([3, 4], TypeError, "torch.Tensor"),
    ):
        with pytest.raises(error, match=words):
            p1.phase1_forward(*args, beta=t["beta"], stream_lengths=lengths, **opts)


def test_layout_on_cuda_tensors_without_a_host_sync():
    """to_chunks and from_chunks on CUDA tensors give the NumPy functions' arrays, and with
    phase1_forward run without one synchronization (torch's sync debug mode raises on any)."""
    rng = np.random.default_rng(34)
    B, T, H, W, R, C, keys = 3, 19, 2, 4, 3, 8, 30
    host = dict(k=rng.integers(0, keys, (B, T, H, W)).astype(np.int32),
                q=rng.integers(0, keys, (B, T, H, R)).astype(np.int32),
                kv=rng.standard_normal((B, T, H, W)).astype(np.float32),
                qv=rng.standard_normal((B, T, H, R)).astype(np.float32),
                g=-rng.uniform(0, 1, (B, T, H)).astype(np.float32))
    lengths = np.array([19, 0, 9], np.int32)
    want = p1.to_chunks(*host.values(), chunk_size=C, lengths=lengths, stream_offset=keys)
    dev = {n: torch.from_numpy(a).to(DEV) for n, a in host.items()}
    dev_lengths = torch.from_numpy(lengths).to(DEV)
    kw = dict(num_parallel=want.num_parallel, stream_offset=keys, num_keys=keys, valid_last=C)
    p1.phase1_forward(want.k_idx, want.q_idx, want.k_val, want.q_val, want.g, **kw,
                      stream_lengths=want.stream_lengths)  # warm the CPU plan cache
    warm = p1.to_chunks(*dev.values(), chunk_size=C, lengths=dev_lengths, stream_offset=keys)
    p1.phase1_forward(warm.k_idx, warm.q_idx, warm.k_val, warm.q_val, warm.g, **kw,
                      stream_lengths=warm.stream_lengths)  # the GPU plan, created once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = p1.to_chunks(*dev.values(), chunk_size=C, lengths=dev_lengths, stream_offset=keys)
        out = p1.phase1_forward(got.k_idx, got.q_idx, got.k_val, got.q_val, got.g, **kw,
                                stream_lengths=got.stream_lengths)
        back = p1.from_chunks(out.k_eff, got.layout)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for name in ("k_idx", "q_idx", "k_val", "q_val", "g", "stream_lengths"):
        np.testing.assert_array_equal(getattr(got, name).cpu().numpy(), getattr(want, name), err_msg=name)
    ref = p1.phase1_forward(want.k_idx, want.q_idx, want.k_val, want.q_val, want.g, **kw,
                            stream_lengths=want.stream_lengths)
    np.testing.assert_array_equal(back.cpu().numpy(), p1.from_chunks(ref.k_eff, want.layout))


def test_cupy_lengths_match_cpu():
    cupy = pytest.importorskip("cupy")
    lengths = np.array([40, 7, 0], np.int32)
    case = make_case(35, N=9, C=16, W=4, R=4, P=3, num_keys=30, kmode="random", stream_lengths=lengths)
    inputs, opts = split(case)
    want = cpu_result(inputs, opts, det_fields=DET_ALL, stream_lengths=lengths)
    x = {n: None if a is None else cupy.asarray(a) for n, a in inputs.items()}
    got = p1.phase1_forward(*(x[n] for n in NAMES), beta=x["beta"], det_fields=DET_ALL,
                            stream_lengths=cupy.asarray(lengths), **opts)
    cupy.cuda.get_current_stream().synchronize()
    assert_same(want, got)
    with pytest.raises(p1.Phase1Error) as gpu:
        p1.phase1_forward(*(x[n] for n in NAMES), check=True,
                          stream_lengths=cupy.asarray(np.array([40, 49, 0], np.int32)), **opts)
    assert "stream_lengths[1] = 49" in gpu.value.message
    with pytest.raises(TypeError, match="cupy.ndarray"):   # a NumPy array, as for torch's list
        p1.phase1_forward(*(x[n] for n in NAMES), stream_lengths=lengths, **opts)
