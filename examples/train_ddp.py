"""Trains the tiny recall model of examples/train_sdm_layer.py (an SDM layer: Phase 1 through
libsdmp1, the chunked recurrence of sdm_phase1.torch_recurrence) on several processes with
PyTorch's DistributedDataParallel. Start it with torchrun, one process per device:

    SDMP1_LIBRARY=build/libsdmp1.so PYTHONPATH=bindings/python \
        torchrun --standalone --nproc_per_node=2 examples/train_ddp.py [--steps N] [--check]

Each process (rank) trains on its share of every global batch of B sequences: B / world
sequences, rank r taking sequences r * B / world onwards, each one stream of the layer's
memory (streams never interact, so a batch splits between processes by sequence). Where CUDA
is available with a device per process and libsdmp1 has its CUDA backend, rank r runs on
cuda:LOCAL_RANK and the processes talk over NCCL; otherwise (or with --device cpu) on the CPU
over gloo. DDP broadcasts rank 0's initial parameters and averages the gradients over the
ranks during backward, so every rank applies the same update: all ranks hold the same
parameters, and the training follows a one-process run on the whole batch up to the order of
float sums (each rank sums its half; the all-reduce adds the halves).

Prints the global loss (the mean over the ranks' losses, i.e. over the whole batch) every few
steps on rank 0, and exits 1 unless the final loss is below half the first. --check prints
the global loss of every step in full precision and, after every step, gathers every rank's
parameters and exits 1 unless they are the same bits on all ranks
(bindings/python/tests/test_ddp.py runs it so, on two processes and on one).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import sdm_phase1 as p1
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from train_sdm_layer import KEYS, LR, VALUES, B, Model, batch

PRINT_EVERY = 10


def choose_device(want: str, world: int, local_rank: int):
    """(device, process group backend): this rank's GPU and NCCL where CUDA has a device per
    process and the library its CUDA backend (unless ``want`` is "cpu"), else the CPU and
    gloo."""
    on_gpu = (want != "cpu" and torch.cuda.is_available() and torch.cuda.device_count() >= world
              and bool(p1.cuda_device_count()) and dist.is_nccl_available())
    if want == "cuda" and not on_gpu:
        raise SystemExit("train_ddp: --device cuda, but CUDA (a device per process, libsdmp1's "
                         "CUDA backend and NCCL) is not available")
    if on_gpu:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def same_on_every_rank(model: nn.Module, world: int) -> bool:
    """Whether every rank holds the same parameter bits as this one (an all-gather of them)."""
    bits = torch.cat([p.detach().reshape(-1).view(torch.int32) for p in model.parameters()])
    parts = [torch.empty_like(bits) for _ in range(world)]
    dist.all_gather(parts, bits)
    return all(torch.equal(parts[0], other) for other in parts[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--check", action="store_true",
                        help="print every step's loss; compare the ranks' parameters every step")
    args = parser.parse_args()
    if "RANK" not in os.environ:
        raise SystemExit("train_ddp: start it with torchrun (torchrun --standalone "
                         "--nproc_per_node=2 examples/train_ddp.py)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if B % world:
        raise SystemExit(f"train_ddp: the batch of {B} sequences does not split over {world} "
                         "processes")
    device, backend = choose_device(args.device, world, int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    if device.type == "cuda":
        # The recurrence's scatters and gathers: repeatable bits on CUDA (torch_recurrence).
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.set_num_threads(1)  # tensors of a few KiB: more threads only wait on each other
    torch.manual_seed(0)
    model = DistributedDataParallel(Model().to(device),
                                    device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    share = B // world
    mine = slice(rank * share, (rank + 1) * share)
    gen = torch.Generator().manual_seed(1)  # every rank draws the same global batches
    if rank == 0:
        print(f"train_ddp: {world} processes on {device.type} ({backend}), {share} of the "
              f"{B} sequences of each batch a process")
    start = time.perf_counter()
    losses = []
    for step in range(1, args.steps + 1):
        keys, vals, is_query, answers = (a[mine] for a in batch(gen, device))
        logits = model(keys, vals, is_query)[:, KEYS:]
        loss = nn.functional.cross_entropy(logits.reshape(-1, VALUES), answers.reshape(-1))
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks here
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)  # every rank's share is the same size
        if args.check:
            if not same_on_every_rank(model, world):
                print(f"train_ddp: rank {rank}: the ranks' parameters differ after step {step}")
                return 1
            if rank == 0:
                print(f"step {step} loss {losses[-1]!r} parameters identical on {world} ranks")
        elif rank == 0 and (step == 1 or step % PRINT_EVERY == 0):
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    # Everything that holds the process group (DDP's reducer, in reference cycles) released
    # first, so that destroying the group joins its worker threads while Python still runs: a
    # gloo thread that let go of a tensor after Python's exit aborted the process.
    del model, opt
    gc.collect()
    dist.destroy_process_group()
    first, final = losses[0], sum(losses[-10:]) / len(losses[-10:])
    if rank == 0:
        print(f"first loss {first:.4f}, final loss (mean of the last 10 steps) {final:.4f}, "
              f"{time.perf_counter() - start:.1f} s")
    if not args.check and not final < 0.5 * first:
        print("train_ddp: the loss did not fall below half its first value")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
