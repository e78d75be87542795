"""Phase 1 on PyTorch CUDA tensors: a direct call, the operator under torch.compile, and a CUDA
graph replay. Prints a few numbers; without torch or a GPU it says so and exits 0.

    SDMP1_LIBRARY=build/libsdmp1.so PYTHONPATH=bindings/python python3 examples/phase1_torch.py
"""

from __future__ import annotations

import sys

import sdm_phase1 as p1


def main() -> int:
    try:
        import torch
    except ImportError:
        print("phase1_torch: torch is not installed; nothing to show")
        return 0
    if not torch.cuda.is_available() or not p1.cuda_device_count():
        print("phase1_torch: needs a CUDA device and a libsdmp1 built with the CUDA backend")
        return 0
    from sdm_phase1 import torch_ops

    dev = torch.device("cuda")
    N, C, W, R, P, keys = 8, 64, 16, 16, 2, 4096
    base = (torch.arange(N, device=dev) % P * keys).view(N, 1, 1)  # stream s owns [s * keys, ...)
    # W distinct slots per token: one per block of keys / W ids.
    k_idx = (torch.randint(0, keys // W, (N, C, W), device=dev)
             + torch.arange(W, device=dev) * (keys // W) + base).int()
    q_idx = (torch.randint(0, keys, (N, C, R), device=dev) + base).int()
    k_val = torch.randn(N, C, W, device=dev, dtype=torch.bfloat16)
    q_val = torch.randn(N, C, R, device=dev, dtype=torch.bfloat16)
    g = -torch.rand(N, C, 1, device=dev)  # per-token log-gates
    repeats = torch.zeros(1, dtype=torch.int64, device=dev)
    opts = dict(num_parallel=P, stream_offset=keys, num_keys=keys, valid_last=C)

    # 1. A direct call: asynchronous, on the current stream, outputs from the caching allocator.
    out = p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, repeats, **opts)
    p1.synchronize()  # raises Phase1Error here if the data were bad (or pass check=True)
    print(f"a: {tuple(out.a.shape)} {out.a.dtype}, k_eff: {out.k_eff.dtype}, "
          f"repeats: {int(repeats.item())}")

    # 2. The operator inside a compiled function.
    @torch.compile(fullgraph=True)
    def decayed_writes(k_idx, q_idx, k_val, q_val, g):
        out = torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)
        return out.k_eff.float().sum(dim=-1)

    print(f"compiled: {tuple(decayed_writes(k_idx, q_idx, k_val, q_val, g).shape)}")

    # 3. Capture once, replay with new data written into the same input tensors.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)
    g.copy_(g * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    print(f"graph replay: log_k sum {static.log_k.sum().item():.3f} "
          f"(half of {out.log_k.sum().item():.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
