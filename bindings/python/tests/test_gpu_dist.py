"""torch.distributed: two processes, one GPU each, each running the Phase 1 of its own streams
through the PyTorch operator on its own side stream; NCCL gathers the outputs, which must equal
the CPU backend's for the whole job (dist_worker.py). Skips unless two GPUs are present."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpu_support import child_env, cuda_skip_reason

torch = pytest.importorskip("torch")
HERE = Path(__file__).resolve().parent


def test_two_processes_one_gpu_each():
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("torch without NCCL")
    env = child_env()
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node=2", str(HERE / "dist_worker.py")],
                       env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "rank 0: ok" in out and "rank 1: ok" in out
