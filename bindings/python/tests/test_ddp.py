"""examples/train_ddp.py under torchrun on the CPU (gloo): two processes training the SDM layer
with DistributedDataParallel hold the same parameter bits after every step (the example
all-gathers them and compares, --check), and their loss follows a one-process run of the same
script on the same global batches.

Tolerance of the loss: relative 1e-6 a step (about 8 float32 ulps) over 20 steps. Both runs
compute the same float32 means and gradients of the same terms; only the order of the sums
differs (each rank sums its half of the batch, the all-reduce adds the halves and divides by
2), which changes a result by an ulp or so a step, and the updates carry that on. Measured: at
most 1.5e-7 over these 20 steps (1.3 ulps; 6e-6 by step 60, once the loss is near 0 and Adam's
normalized steps magnify such differences)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpu_support import child_env

torch = pytest.importorskip("torch")
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_ddp.py"
STEPS = 20
REL_TOL = 1e-6


def run_example(processes: int) -> list:
    """The per-step global losses of ``torchrun --nproc_per_node=processes train_ddp.py
    --check`` on the CPU, each step's parameters identical on every rank."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without torch.distributed's gloo backend")
    env = child_env(OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={processes}", str(EXAMPLE), "--check", "--device", "cpu",
         "--steps", str(STEPS)],
        env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    losses = []
    for line in r.stdout.splitlines():
        if line.startswith("step "):
            words = line.split()
            assert words[0:2] == ["step", str(len(losses) + 1)], line
            assert line.endswith(f"parameters identical on {processes} ranks"), line
            losses.append(float(words[3]))
    assert len(losses) == STEPS, out[-4000:]
    return losses


def test_two_processes_follow_one_with_identical_parameters():
    two = run_example(2)
    one = run_example(1)
    for step, (got, want) in enumerate(zip(two, one), 1):
        assert abs(got - want) <= REL_TOL * abs(want), (step, got, want)
    assert two[-1] < 0.5 * two[0]  # and it trains
