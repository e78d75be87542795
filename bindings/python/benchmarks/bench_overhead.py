"""The host time of a cached sdm_phase1 call, per path, next to the kernel's GPU time, for the S6
shape of docs/design.md (N=128, C=128, W=R=64, num_keys=262144, bfloat16 values, per-token gates,
2 streams, the default det_fields), in one table:

    python3 bindings/python/benchmarks/bench_overhead.py [--out FILE] [--json FILE]

Rows: sdm_p1_execute through cffi on the cached plan (outputs preallocated: the C call and its
cffi marshalling alone), sdm_phase1.phase1_forward on PyTorch CUDA tensors, the PyTorch
operator (sdm_phase1.torch_ops.phase1_forward), phase1_forward on CuPy arrays and on JAX
arrays (the same data; a row says why it is missing where that framework is not installed).
Host times are the median over batches of back-to-back calls, each batch short enough that
the GPU's launch queue never makes the host wait, the device synchronized between batches;
the GPU time is that of replays of one captured call (CUDA graph). Rows marked "part" time
one step of the PyTorch paths alone (the plan key and cache lookup, the output block's
allocation, carving the outputs from it, the operator's allocation per output), to show where
a call's host time goes.

Without a GPU (or with --device cpu) it times the same paths on the CPU backend for a tiny
shape (N=2, C=16, W=R=4: NumPy arrays, PyTorch CPU tensors, the operator), where the first row
is the library's own execute and the others add the Python layers' host time to it; the CuPy
and JAX rows then say that they need a GPU.

--out FILE writes the printed table to FILE, --json FILE the same as JSON. A GPU run takes well
under two minutes.

The library is the one sdm_phase1 loads (SDMP1_LIBRARY overrides, see the package README).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# JAX would otherwise take most of the GPU's memory at its first use, beside torch and CuPy.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
import sdm_phase1 as p1  # noqa: E402
from sdm_phase1._core import plan_cache  # noqa: E402
from sdm_phase1._core.options import key_options  # noqa: E402

S6 = dict(N=128, C=128, W=64, R=64, num_keys=262144, num_parallel=2)
TINY = dict(N=2, C=16, W=4, R=4, num_keys=1024, num_parallel=1)
#: Issue 21's targets on an H200 for S6, host microseconds per cached call.
TARGETS = {"cffi": 10.0, "torch": 30.0, "op": 40.0}


def host_inputs(N, C, W, R, num_keys, num_parallel, seed=0):
    """S6-like NumPy inputs: W distinct ids per token (one per block of num_keys / W ids), random
    read ids, bfloat16 values (uint16 bits), per-token gates; stream s owns
    [s * num_keys, (s + 1) * num_keys)."""
    rng = np.random.default_rng(seed)
    block = num_keys // W
    start = rng.integers(0, num_keys, (N, C, 1))
    jitter = rng.integers(0, block, (N, C, W))
    base = (np.arange(N) % num_parallel * num_keys)[:, None, None]
    k_idx = ((start + np.arange(W) * block + jitter) % num_keys + base).astype(np.int32)
    q_idx = (rng.integers(0, num_keys, (N, C, R)) + base).astype(np.int32)
    k_val = p1.bf16_from_float32(rng.standard_normal((N, C, W)).astype(np.float32))
    q_val = p1.bf16_from_float32(rng.standard_normal((N, C, R)).astype(np.float32))
    g = (-rng.random((N, C, 1)) * 0.5).astype(np.float32)
    return k_idx, q_idx, k_val, q_val, g


def options(shape):
    return dict(num_parallel=shape["num_parallel"], stream_offset=shape["num_keys"],
                num_keys=shape["num_keys"], valid_last=shape["C"])


#: The clock of host_us: wall time (the default), or with --clock thread the calling thread's
#: CPU time, steadier on a machine shared with other work (it leaves out the time the thread
#: waits, and the CPU backend's worker threads).
CLOCK = time.perf_counter


def host_us(fn, sync, batches, batch):
    """Median time per call (microseconds, CLOCK) of `batch` back-to-back calls."""
    fn()
    sync()
    per = []
    for _ in range(batches):
        sync()
        t0 = CLOCK()
        for _ in range(batch):
            fn()
        per.append((CLOCK() - t0) / batch * 1e6)
    sync()
    return statistics.median(per)


def has(module):
    return importlib.util.find_spec(module) is not None


def cached_plan(framework):
    """The most recently used cached plan of a framework (the one the warm-up call made)."""
    plans = [p for k, p in plan_cache._cache.plans.items() if k[0] == framework]
    return plans[-1]


def raw_execute(plan, pointers, block):
    """sdm_p1_execute on the cached plan with preallocated outputs: the C call and cffi alone."""
    def call():
        plan.execute_block(*pointers, block)
    return call


def torch_parts(tensors, opts, sync, args):
    """Rows timing the steps of a cached PyTorch call alone: the plan key and cache lookup,
    the output block, carving the outputs from it, and the operator's torch.empty per output."""
    import torch
    from sdm_phase1._frameworks import torch_impl

    k_idx, q_idx, k_val, q_val, g = tensors
    device = k_idx.get_device()
    stream = torch_impl._current_stream(device) if device >= 0 else 0
    o = key_options(opts["num_parallel"], opts["stream_offset"], opts["num_keys"],
                    opts["valid_last"], True, 0, None, False, False)[:7]
    plan = plan_cache.cached_plan(torch_impl.call_key(k_idx, q_idx, k_val, q_val, g, None, None, device,
                                                 stream, *o))
    assert plan is not None, "the torch call's plan is not cached under the key rebuilt here"
    data = plan.extra
    block = torch.empty(data.block_bytes, dtype=torch.uint8, device=data.device)
    n = len(data.specs)

    def lookup():
        plan_cache.cached_plan(torch_impl.call_key(k_idx, q_idx, k_val, q_val, g, None, None, device,
                                              stream, *o))

    def empty():
        torch.empty(data.block_bytes, dtype=torch.uint8, device=data.device)

    def empties():
        [torch.empty(shape, dtype=dtype, device=data.device) for shape, dtype in data.specs]

    return [
        ("  part: the plan key and cache lookup", "part", host_us(lookup, sync, args.batches, args.batch)),
        ("  part: torch.empty of the output block", "part", host_us(empty, sync, args.batches, args.batch)),
        (f"  part: carving the {n} outputs from it (views)", "part",
         host_us(lambda: data.carve(block), sync, args.batches, args.batch)),
        (f"  part: {n} torch.empty (the operator's outputs)", "part",
         host_us(empties, sync, args.batches, args.batch)),
    ]


# ---- GPU ------------------------------------------------------------------------------------


def gpu_rows(args):
    import torch
    from sdm_phase1 import torch_ops

    device = torch.device("cuda", torch.cuda.current_device())
    s = S6
    arrays = host_inputs(**s)
    as_torch = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16
                else torch.from_numpy(a) for a in arrays]
    k_idx, q_idx, k_val, q_val, g = (t.to(device) for t in as_torch)
    opts = options(s)
    sync = torch.cuda.synchronize

    def call():
        return p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)

    def call_op():
        return torch_ops.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)

    call(), call_op()
    sync()
    plan = cached_plan("torch")
    block = torch.empty(plan.block_bytes, dtype=torch.uint8, device=device)
    pointers = [t.data_ptr() for t in (k_idx, q_idx, k_val, q_val, g)] + [0]
    created = p1.plan_cache_info()["created"]
    rows = [
        ("sdm_p1_execute through cffi (cached plan)", "cffi",
         host_us(raw_execute(plan, pointers, block.data_ptr()), sync, args.batches, args.batch)),
        ("sdm_phase1.phase1_forward, PyTorch CUDA tensors", "torch",
         host_us(call, sync, args.batches, args.batch)),
        ("torch_ops.phase1_forward (the custom op)", "op", host_us(call_op, sync, args.batches, args.batch)),
    ]
    assert p1.plan_cache_info()["created"] == created, "a timed call created a plan"
    rows += torch_parts([k_idx, q_idx, k_val, q_val, g], opts, sync, args)
    rows.append(cupy_row(args, [k_idx, q_idx, k_val, q_val, g], opts))
    rows.append(jax_row(args, arrays, opts))
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
    sync()
    start.record()
    for _ in range(args.replays):
        graph.replay()
    end.record()
    end.synchronize()
    gpu = start.elapsed_time(end) * 1e3 / args.replays
    title = (f"S6 on {torch.cuda.get_device_name(device)}: N={s['N']} C={s['C']} W={s['W']} "
             f"R={s['R']} num_keys={s['num_keys']} bf16, per-token gates, 2 streams, det_fields "
             f"{p1.DET_SHIPPED}; torch {torch.__version__}; GPU time per call (graph replay) "
             f"{gpu:.1f} us")
    return title, rows, gpu


def cupy_row(args, tensors, opts):
    what = "sdm_phase1.phase1_forward, CuPy arrays"
    if not has("cupy"):
        return (what, "cupy", "cupy is not installed")
    import cupy
    import torch

    # The same device memory, without a copy (bfloat16 as CuPy's uint16 bits).
    k_idx, q_idx, k_val, q_val, g = (
        cupy.asarray(t.view(torch.int16)).view(cupy.uint16) if t.dtype == torch.bfloat16
        else cupy.asarray(t) for t in tensors)

    def call():
        return p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)

    def sync():
        cupy.cuda.get_current_stream().synchronize()

    return (what, "cupy", host_us(call, sync, args.batches, args.batch))


def jax_row(args, arrays, opts):
    what = "sdm_phase1.phase1_forward, JAX arrays"
    if not has("jax"):
        return (what, "jax", "jax is not installed")
    import jax
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return (what, "jax", "JAX sees no GPU")
    k_idx, q_idx, k_val, q_val, g = (
        jax.device_put(jnp.asarray(a.view(jnp.bfloat16)) if a.dtype == np.uint16 else jnp.asarray(a),
                       gpus[0]) for a in arrays)
    last = []

    def call():
        last[:] = [p1.phase1_forward(k_idx, q_idx, k_val, q_val, g, **opts)]

    def sync():
        if last:
            jax.block_until_ready(last[0].a)

    return (what, "jax", host_us(call, sync, args.batches, args.batch))


# ---- CPU ------------------------------------------------------------------------------------


def cpu_rows(args):
    s = TINY
    arrays = host_inputs(**s)
    opts = options(s)

    def none():
        pass

    def call_numpy():
        return p1.phase1_forward(*arrays, **opts)

    call_numpy()
    plan = cached_plan("numpy")
    block = np.empty(plan.block_bytes, np.uint8)
    pointers = [a.ctypes.data for a in arrays] + [0]
    rows = [
        ("sdm_p1_execute through cffi (cached plan, CPU backend)", "cffi",
         host_us(raw_execute(plan, pointers, block.ctypes.data), none, args.batches, args.batch)),
        ("sdm_phase1.phase1_forward, NumPy arrays", "numpy",
         host_us(call_numpy, none, args.batches, args.batch)),
    ]
    if has("torch"):
        import torch
        from sdm_phase1 import torch_ops

        tensors = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16
                   else torch.from_numpy(a) for a in arrays]
        rows.append(("sdm_phase1.phase1_forward, PyTorch CPU tensors", "torch",
                     host_us(lambda: p1.phase1_forward(*tensors, **opts), none, args.batches,
                             args.batch)))
        rows.append(("torch_ops.phase1_forward (the custom op), CPU tensors", "op",
                     host_us(lambda: torch_ops.phase1_forward(*tensors, **opts), none,
                             args.batches, args.batch)))
        rows += torch_parts(tensors, opts, none, args)
    else:
        rows.append(("sdm_phase1.phase1_forward, PyTorch CPU tensors", "torch", "torch is not installed"))
        rows.append(("torch_ops.phase1_forward (the custom op), CPU tensors", "op",
                     "torch is not installed"))
    rows.append(("sdm_phase1.phase1_forward, CuPy arrays", "cupy", "needs a GPU"))
    rows.append(("sdm_phase1.phase1_forward, JAX arrays", "jax", "needs a GPU"))
    title = (f"CPU backend (no GPU timing): N={s['N']} C={s['C']} W={s['W']} R={s['R']} "
             f"num_keys={s['num_keys']} bf16, per-token gates, det_fields {p1.DET_SHIPPED}; "
             f"the first row is the library's execute, the others add the Python layers")
    return title, rows, None


# ---- main -----------------------------------------------------------------------------------


def gpu_reason():
    if not has("torch"):
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    count = p1.cuda_device_count()
    if count is None:
        return f"{p1.library_path} was built without the CUDA backend"
    if count == 0:
        return "the library sees no CUDA device"
    return None


def table(title, rows, gpu):
    """The printed table, as lines."""
    lines = [f"libsdmp1 {p1.__version__} ({p1.library_path}); {title}"]
    width = max(len(r[0]) for r in rows)
    lines.append(f"{'path':<{width}}  host us/call  target   GPU us/call")
    base = rows[0][2]
    for what, tag, us in rows:
        target = f"{TARGETS[tag]:6.0f}" if gpu is not None and tag in TARGETS else "     -"
        if isinstance(us, str):
            lines.append(f"{what:<{width}}  {'-':>12}  {target}   ({us})")
            continue
        extra = (f"   (+{us - base:.1f} over the first row)"
                 if gpu is None and tag not in ("cffi", "part") else "")
        gpu_col = f"{gpu:11.1f}" if gpu is not None and tag != "part" else "          -"
        lines.append(f"{what:<{width}}  {us:12.1f}  {target}   {gpu_col}{extra}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--out", help="also write the printed table to this file")
    ap.add_argument("--json", help="also write the table to this file as JSON")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall time, or the calling thread's CPU time (steadier on a shared machine)")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.thread_time
    reason = gpu_reason() if args.device != "cpu" else "--device cpu"
    if reason and args.device == "cuda":
        print(f"bench_overhead: no GPU run: {reason}")
        return 1
    if reason:
        print(f"bench_overhead: the CPU backend ({reason})")
        title, rows, gpu = cpu_rows(args)
    else:
        title, rows, gpu = gpu_rows(args)

    if args.clock == "thread":
        title += "; clock: the calling thread's CPU time"
    lines = table(title, rows, gpu)
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": title, "gpu_us": gpu, "version": p1.__version__,
                       "rows": [{"path": w, "tag": t, "host_us": u if not isinstance(u, str) else None,
                                 "note": u if isinstance(u, str) else None} for w, t, u in rows]},
                      f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
