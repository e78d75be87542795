"""A training step of the SDM layer (sdm_phase1.sdm_layer: Phase 1 through the PyTorch operator,
then the chunked reference recurrence), forward and backward, on the CUDA shapes of
docs/design.md, and Phase 1's share of it:

    python3 bindings/python/benchmarks/bench_train_step.py [--shapes S6,S8,S1] [--steps K] [--D D]

Per shape (bfloat16 k_val / q_val, per-token gates, float32 v and memory of width D): the
median time of a step (the layer's forward, a loss, its backward), then of Phase 1 alone in
the same step (the operator's forward and its backward with the upstream gradients the
recurrence sends it: a, qk, rex, cpe, k_eff, q_w), and their ratio. Ids as the C benchmark
draws them: uniform, or by a Zipf law of exponent 1.1 (S8) mapped to slots by a random
permutation, distinct within a token. Each time is the median of --steps steps (CUDA events)
after two warm-up steps. Needs PyTorch with CUDA and libsdmp1 with the CUDA backend (the one
sdm_phase1 loads; SDMP1_LIBRARY overrides).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import sdm_phase1 as p1  # noqa: E402
import torch  # noqa: E402
from sdm_phase1 import torch_ops  # noqa: E402

# name: (N, C, W, R, num_keys, streams, Zipf exponent or 0 for uniform ids)
SHAPES = {
    "S1": (8192, 64, 32, 32, 65536, 128, 0.0),
    "S6": (128, 128, 64, 64, 262144, 2, 0.0),
    "S8": (128, 128, 64, 64, 262144, 2, 1.1),
}
LAYER_GRADS = ("a", "qk", "rex", "cpe", "k_eff", "q_w")


def slot_ids(rng, tokens, lanes, keys, zipf):
    """[tokens, lanes] slots, distinct within a token: uniform, or Zipf-ranked then permuted."""
    if zipf > 0.0:
        cdf = np.cumsum(np.arange(1, keys + 1, dtype=np.float64) ** -zipf)
        cdf /= cdf[-1]
        perm = rng.permutation(keys)
    out = np.empty((tokens, lanes), np.int64)
    for t in range(tokens):
        row: list = []
        while len(row) < lanes:
            if zipf > 0.0:
                cand = perm[np.minimum(np.searchsorted(cdf, rng.random(2 * lanes)), keys - 1)]
            else:
                cand = rng.integers(0, keys, 2 * lanes)
            for s in cand:
                if len(row) < lanes and int(s) not in row:
                    row.append(int(s))
        out[t] = row
    return out


def make_inputs(name, D, device):
    N, C, W, R, K, P, zipf = SHAPES[name]
    rng = np.random.default_rng(7)
    base = (np.arange(N * C) // C % P * K)[:, None]
    k_idx = torch.tensor((slot_ids(rng, N * C, W, K, zipf) + base).reshape(N, C, W), dtype=torch.int32)
    q_idx = torch.tensor((slot_ids(rng, N * C, R, K, zipf) + base).reshape(N, C, R), dtype=torch.int32)
    x = torch.rand(N, C, 1, generator=torch.Generator().manual_seed(1)) * 10.0 - 2.0
    leaf = dict(k_val=torch.rand(N, C, W) * 2 - 1, q_val=torch.rand(N, C, R) * 2 - 1,
                g=torch.nn.functional.logsigmoid(x), beta=torch.rand(N, C), v=torch.randn(N, C, D),
                memory=torch.zeros(P, K, D))
    t = {k: v.to(device) for k, v in leaf.items()}
    t["k_val"] = t["k_val"].to(torch.bfloat16)
    t["q_val"] = t["q_val"].to(torch.bfloat16)
    for v in t.values():
        v.requires_grad_(True)
    return dict(k_idx=k_idx.to(device), q_idx=q_idx.to(device), **t), dict(num_parallel=P, stream_offset=K,
                                                                              num_keys=K)


def median_ms(step, steps):
    times = []
    for i in range(steps + 2):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def run(name, D, steps, device):
    x, opts = make_inputs(name, D, device)

    def layer_step():
        o, m = p1.sdm_layer(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"], x["beta"], x["v"],
                            x["memory"], **opts)
        (o.square().mean() + m.square().mean()).backward()

    upstream = None

    def phase1_step():
        nonlocal upstream
        out = torch_ops.phase1_forward(x["k_idx"], x["q_idx"], x["k_val"], x["q_val"], x["g"],
                                       valid_last=x["k_idx"].shape[1], need_read_groups=False, det_fields=0,
                                       **opts)
        fields = [getattr(out, f) for f in LAYER_GRADS]
        if upstream is None:
            upstream = [torch.randn_like(f, dtype=torch.float32).to(f.dtype) for f in fields]
        torch.autograd.backward(fields, upstream)

    step = median_ms(layer_step, steps)
    phase1 = median_ms(phase1_step, steps)
    N, C, W, R, K, P, zipf = SHAPES[name]
    ids = f"zipf{zipf}" if zipf else "uniform"
    print(f"{name:4s} N={N} C={C} W={W} R={R} keys={K} streams={P} ids={ids} D={D}: step {step:9.3f} ms, "
          f"Phase 1 (forward + backward) {phase1:8.3f} ms, share {phase1 / step:6.1%}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="S6,S8,S1")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--D", type=int, default=8, help="the value width of v and memory")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_train_step: needs PyTorch with CUDA")
        return 77
    print(f"{torch.cuda.get_device_name()}; libsdmp1 {p1.__version__}; torch {torch.__version__}")
    for name in args.shapes.split(","):
        run(name, args.D, args.steps, "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
