"""The Python overhead of a cached sdm_phase1 call on PyTorch CUDA tensors, next to the kernel time,
for the S6 shape of DESIGN.md (N=128, C=128, W=R=64, num_keys=262144, bfloat16 values,
per-token gates, 2 streams, the default det_fields).

    SDMP1_LIBRARY=build-gpu/libsdmp1.so python3 bindings/python/benchmarks/bench_overhead.py

Prints one table (microseconds per call); without torch, a GPU or a CUDA-enabled library it
says why and exits 0. Host times are the wall time of back-to-back calls in batches short
enough that the GPU's launch queue never makes the host wait; the GPU time is that of replays
of one captured call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import sdm_phase1 as p1  # noqa: E402

S6 = dict(N=128, C=128, W=64, R=64, num_keys=262144, num_parallel=2)


def skip_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    count = p1.cuda_device_count()
    if count is None:
        return f"{p1.library_path} was built without the CUDA backend"
    if count == 0:
        return "the library sees no CUDA device"
    return None


def make_inputs(torch, device, N, C, W, R, num_keys, num_parallel, seed=0):
    """S6-like inputs: W distinct ids per token (one per block of num_keys / W ids), random read
    ids, bfloat16 values, per-token gates; stream s owns [s * num_keys, (s + 1) * num_keys)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    block = num_keys // W
    start = torch.randint(0, num_keys, (N, C, 1), generator=gen, device=device)
    jitter = torch.randint(0, block, (N, C, W), generator=gen, device=device)
    lanes = torch.arange(W, device=device) * block
    base = (torch.arange(N, device=device) % num_parallel * num_keys).view(N, 1, 1)
    k_idx = ((start + lanes + jitter) % num_keys + base).to(torch.int32)
    q_idx = (torch.randint(0, num_keys, (N, C, R), generator=gen, device=device) + base).to(torch.int32)
    k_val = torch.randn(N, C, W, generator=gen, device=device).to(torch.bfloat16)
    q_val = torch.randn(N, C, R, generator=gen, device=device).to(torch.bfloat16)
    g = -torch.rand(N, C, 1, generator=gen, device=device) * 0.5
    return k_idx, q_idx, k_val, q_val, g


def host_us(torch, fn, batches, batch):
    """Median wall time per call (microseconds) of `batch` back-to-back calls."""
    per = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per.append((time.perf_counter() - t0) / batch * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--replays", type=int, default=200)
    args = ap.parse_args(argv)
    reason = skip_reason()
    if reason:
        print(f"bench_overhead: skipped: {reason}")
        return 0

    import torch
    from sdm_phase1 import _gpu, _torch_impl, torch_ops

    device = torch.device("cuda", torch.cuda.current_device())
    s = S6
    k_idx, q_idx, k_val, q_val, g = make_inputs(torch, device, **s)
    opts = dict(num_parallel=s["num_parallel"], stream_offset=s["num_keys"], num_keys=s["num_keys"],
                valid_last=s["C"])

    def call():
        return p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)

    def call_op():
        return torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)

    call(), call_op()
    torch.cuda.synchronize()

    # The cached plan and preallocated outputs: the cost of the C call alone.
    stream = torch.cuda.current_stream(device).cuda_stream
    plan = next(p for k, p in _gpu._cache.plans.items() if k[0] == "torch" and k[2] == stream)
    outs = [torch.empty(shape, dtype=_torch_impl.TORCH_DTYPES[dt], device=device)
            for _, shape, dt in plan.fields]
    ins = [t.data_ptr() for t in (k_idx, q_idx, k_val, q_val, g)] + [0]
    ptrs = [o.data_ptr() for o in outs]

    def call_c():
        plan.execute(*ins, ptrs)

    created = p1.plan_cache_info()["created"]
    c_us = host_us(torch, call_c, args.batches, args.batch)
    py_us = host_us(torch, call, args.batches, args.batch)
    op_us = host_us(torch, call_op, args.batches, args.batch)
    assert p1.plan_cache_info()["created"] == created, "a timed call created a plan"
    p1.synchronize()

    # GPU time: replays of one captured call.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(args.replays):
        graph.replay()
    end.record()
    end.synchronize()
    gpu = start.elapsed_time(end) * 1e3 / args.replays

    print(f"S6 on {torch.cuda.get_device_name(device)}: N={s['N']} C={s['C']} W={s['W']} "
          f"R={s['R']} num_keys={s['num_keys']} bf16, per-token gates, 2 streams, det_fields "
          f"{p1.DET_SHIPPED}; torch {torch.__version__}")
    rows = [
        ("GPU time per call (CUDA graph replay)", gpu),
        ("host: sdm_p1_execute on the cached plan (C)", c_us),
        ("host: sdm_phase1.phase1_forward (cached plan)", py_us),
        ("host: Python overhead (row 3 - row 2)", py_us - c_us),
        ("host: torch_ops.phase1_forward (custom op)", op_us),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  us/call")
    for what, us in rows:
        print(f"{what:<{width}}  {us:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
