"""One rank of test_gpu_dist.py (started by torch.distributed.run, one GPU per process).

The job: P streams of `steps` time-major chunks. Chunk c belongs to stream c % P and streams
never interact, so rank r runs Phase 1 of its own P / world streams on its own GPU, on a side
stream of its own, through the operator sdm_phase1::phase1_forward. The ranks then gather
their outputs over NCCL; every rank checks the whole against the CPU backend's result of the
whole job, bit for bit, and prints "rank R: ok"."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from gpu_support import cpu_result, split, to_numpy, torch_inputs  # noqa: E402
from sdm_phase1 import torch_ops  # noqa: E402
from test_reference import make_case  # noqa: E402

DET_ALL = 3071


def main() -> int:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    P, steps = 4 * world, 3
    case = make_case(99, N=P * steps, C=16, W=4, R=4, P=P, num_keys=48, stream_offset=0,
                     valid_last=10, vals="bf16")
    inputs, opts = split(case)
    whole = cpu_result(inputs, opts, det_fields=DET_ALL)

    share = P // world
    mine = slice(rank * share, (rank + 1) * share)

    def shard(a):  # [steps * P, ...] -> this rank's streams, time-major: [steps * share, ...]
        return np.ascontiguousarray(a.reshape(steps, P, *a.shape[1:])[:, mine].reshape(-1, *a.shape[1:]))

    local = torch_inputs({n: (None if a is None else shard(a)) for n, a in inputs.items()}, device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        out = torch_ops.phase1_forward(local["k_idx"], local["q_idx"], local["k_val"], local["q_val"],
                                       local["g"], beta=local["beta"], num_parallel=share,
                                       stream_offset=0, num_keys=opts["num_keys"],
                                       valid_last=opts["valid_last"], det_fields=DET_ALL)
    torch.cuda.current_stream(device).wait_stream(side)

    for name, want in zip(out._fields, whole):
        t = getattr(out, name)
        if want is None or want.size == 0:
            assert t is None or t.numel() == 0, name
            continue
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        # [world][steps * share, ...] -> [steps, world * share, ...] -> [N, ...]
        joined = torch.stack([p.reshape(steps, share, *p.shape[1:]) for p in parts], 1)
        got = to_numpy(joined.reshape(steps * P, *t.shape[1:]))
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), f"{name} differs from the CPU backend's"
    dist.barrier()
    print(f"rank {rank}: ok", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
