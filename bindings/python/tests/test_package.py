"""Tests of the package around the GPU path that need no GPU and no torch (they run in CI): the
output layout the PyTorch fake implementation uses against the library's views, array
dispatch, DLPack reading, ``python -m sdm_phase1``, the torch-free import and packaging."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sdm_phase1 as p1
from sdm_phase1 import _fields
from sdm_phase1._dlpack import read_capsule
from sdm_phase1._forward import framework_of

PYTHON_DIR = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PYTHON_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("det_fields", [0, p1.DET_SHIPPED, 3071, 1, 2, 4, 8, 16, 32, 64, 128, 256,
                                        512, 2048, 32 | 256])
@pytest.mark.parametrize("read_groups", [True, False])
def test_output_layout_matches_library(det_fields, read_groups):
    dt = {_fields.INT8: np.int8, _fields.INT32: np.int32, _fields.INT64: np.int64,
          _fields.FLOAT32: np.float32}
    for (N, C, W, R), tile in itertools.product([(2, 8, 3, 2), (4, 37, 5, 9), (2, 256, 1, 7)],
                                                [0, 1, 5, 128, 1000]):
        with p1.Plan(N=N, C=C, W=W, R=R, num_parallel=2, stream_offset=0, num_keys=64,
                     det_fields=det_fields, need_read_groups=read_groups, rec_tile=tile,
                     value_dtype="bfloat16") as plan:
            want = plan.fields
        got = {}
        for f, shape, d in _fields.output_layout(N, C, W, R, det_fields, read_groups, tile):
            name = "repeats" if f == _fields.REPEATS else p1.Phase1._fields[f]
            got[name] = (np.dtype(np.uint16) if d == _fields.VALUE else np.dtype(dt[d]), shape)
        assert got == want, (N, C, W, R, tile)


def test_empty_field_dtypes_match_cpu_results():
    (k, q, kv, qv, g) = _small()
    r = p1.phase1_forward(k, q, kv, qv, g, num_parallel=1, stream_offset=0, num_keys=8, valid_last=2,
                          det_fields=0)
    dt = {_fields.INT8: np.int8, _fields.INT32: np.int32, _fields.FLOAT32: np.float32}
    for f, d in _fields.EMPTY_DTYPES.items():
        x = r[f]
        assert x is not None and x.size == 0 and x.dtype == dt[d], p1.Phase1._fields[f]


def _small():
    k = np.array([[[5], [5]]], np.int32)
    kv = np.ones((1, 2, 1), np.float32)
    g = np.full((1, 2, 1), -1.0, np.float32)
    return k, k.copy(), kv, kv.copy(), g


def test_framework_of():
    k = np.zeros((1, 1, 1), np.int32)
    assert framework_of(k) is None
    assert framework_of([[[1]]]) is None

    class FakeGpuArray:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<i4", "data": (0, False), "version": 3}

    class FakeDlpack:
        def __dlpack_device__(self):
            return (2, 0)

    assert framework_of(FakeGpuArray()) == "other"
    assert framework_of(FakeDlpack()) == "other"
    with pytest.raises(TypeError, match="PyTorch, CuPy and JAX"):
        p1.phase1_forward(FakeGpuArray(), k, k, k, k, num_parallel=1, stream_offset=0, num_keys=1,
                          valid_last=1)
    with pytest.raises(ValueError, match="GPU array"):
        p1.phase1_forward(k, FakeGpuArray(), k, k, k, num_parallel=1, stream_offset=0, num_keys=1,
                          valid_last=1)


def test_read_capsule_numpy():
    if not hasattr(np.ndarray, "__dlpack__"):
        pytest.skip("NumPy without DLPack export")
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    info = read_capsule(a.__dlpack__())
    assert info.ptr == a.ctypes.data and info.shape == (2, 3, 4) and info.dtype == "float32"
    assert info.device == (1, 0) and info.contiguous
    t = a.transpose(0, 2, 1)
    info = read_capsule(t.__dlpack__())
    assert not info.contiguous and info.shape == (2, 4, 3)
    assert not read_capsule(np.zeros((3, 1, 2), np.int64)[:, :, 1:].__dlpack__()).contiguous
    assert read_capsule(np.zeros((3, 2), np.int64)[:, None, :].__dlpack__()).contiguous  # size-1 dim
    sliced = np.zeros((3, 4, 2), np.int64)[1:]
    info = read_capsule(sliced.__dlpack__())
    assert info.contiguous and info.ptr == sliced.ctypes.data
    assert read_capsule(np.zeros(2, np.uint16).__dlpack__()).dtype == "uint16"


def test_gpu_helpers_without_gpu():
    count = p1.cuda_device_count()
    assert count is None or count >= 0
    p1.synchronize()  # nothing pending: a no-op
    info = p1.plan_cache_info()
    assert set(info) == {"plans", "created", "hits", "pinned"}
    p1.clear_plan_cache()


def test_main_prints_library_and_backends():
    r = subprocess.run([sys.executable, "-m", "sdm_phase1"], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"sdm_phase1 {p1.binding_version}: libsdmp1 {p1.__version__}")
    assert any(line.startswith("backends: CPU") for line in lines)
    if p1.cuda_device_count() is not None:
        assert any(line.startswith("GPUs:") for line in lines)


def test_import_does_not_import_gpu_frameworks():
    code = ("import sys, sdm_phase1; "
            "print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_pyproject_version_matches_package():
    text = (PYTHON_DIR / "pyproject.toml").read_text()
    assert f'version = "{p1.binding_version}"' in text
    assert p1.binding_version.split(".")[:2] == ["1", "1"]


def _pip_install(target, isolated):
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--retries", "0",
           "--timeout", "10", "--target", str(target), str(PYTHON_DIR)]
    if not isolated:
        cmd.insert(4, "--no-build-isolation")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(target.parent))


def test_pip_install(tmp_path):
    """`pip install bindings/python` gives a package that imports outside the source tree (the
    library then comes from SDMP1_LIBRARY)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("packaging is not what the sanitizer run checks (pip under ASan is slow)")
    target = tmp_path / "site"
    # The installed setuptools first (no download); else pip's isolated build (from PyPI).
    r = _pip_install(target, isolated=False)
    if r.returncode != 0:
        r = _pip_install(target, isolated=True)
    if r.returncode != 0 and ("No module named pip" in r.stderr or "setuptools" in r.stderr):
        pytest.skip("pip cannot build here (no pip, or no setuptools and no index): "
                    + r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (target / "sdm_phase1" / "torch_ops.py").exists()
    # The installed copy first; the rest of the path still gives cffi where it is not in the
    # interpreter's site-packages (the GPU machine's wheels).
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([str(target)] + rest)
    env = dict(os.environ, PYTHONPATH=path, SDMP1_LIBRARY=os.path.realpath(p1.library_path))
    code = "import sdm_phase1, sdm_phase1.__main__ as m; print(sdm_phase1.__file__); m.main()"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(str(target)), r.stdout  # the installed copy, not the source tree
    assert lines[1].startswith(f"sdm_phase1 {p1.binding_version}")
