"""JAX GPU arrays on the CUDA backend (gpu_jax_check.py, in its own process). Skips without JAX,
a GPU or a CUDA-enabled library."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_support import child_env, cuda_skip_reason

HERE = Path(__file__).resolve().parent


def test_jax_arrays():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    env = child_env()
    r = subprocess.run([sys.executable, str(HERE / "gpu_jax_check.py")], env=env, capture_output=True,
                       text=True, timeout=300)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode == 77:
        pytest.skip(last)
    assert r.returncode == 0, (r.stdout[-3000:] + r.stderr[-3000:])
    assert last.startswith("ok")
