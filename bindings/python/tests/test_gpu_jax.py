"""JAX GPU arrays on the CUDA backend (gpu_jax_check.py, in its own process). Skips without JAX,
a GPU or a CUDA-enabled library."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sdm_phase1
from gpu_support import cuda_skip_reason

HERE = Path(__file__).resolve().parent


def test_jax_arrays():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    # The package these tests import (the installed wheel, or the source tree's), for the
    # child processes too: the source tree has no library where only the wheel was built.
    package_root = str(Path(sdm_phase1.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, str(HERE / "gpu_jax_check.py")], env=env, capture_output=True,
                       text=True, timeout=300)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode == 77:
        pytest.skip(last)
    assert r.returncode == 0, (r.stdout[-3000:] + r.stderr[-3000:])
    assert last.startswith("ok")
