"""Tests of the package around the GPU path that need no GPU and no torch (they run in CI): the
output layout the PyTorch fake implementation uses against the library's views, array
dispatch, DLPack reading, ``python -m sdm_phase1``, the torch-free import and packaging (the
wheel's file list and metadata; CI runs these tests against the installed wheel)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import sdm_phase1 as p1
from sdm_phase1 import _c
from sdm_phase1._c import lib
from sdm_phase1._core import dtypes as _dtypes
from sdm_phase1._core import fields as _fields
from sdm_phase1._core.forward import framework_of
from sdm_phase1._frameworks.dlpack import capsule_pointer, read_capsule

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]
#: CI's run against the wheel installed in a fresh virtual environment.
INSTALLED = os.environ.get("SDMP1_TEST_INSTALLED") == "1"
#: The expected NumPy dtype of each sdm_p1_dtype, written out (bfloat16 as its uint16 bits).
_NUMPY_OF_CODE = {lib.SDM_P1_DTYPE_INT8: np.int8, lib.SDM_P1_DTYPE_INT32: np.int32,
                  lib.SDM_P1_DTYPE_INT64: np.int64, lib.SDM_P1_DTYPE_FLOAT32: np.float32,
                  lib.SDM_P1_DTYPE_BFLOAT16: np.uint16}


def _env():
    """The environment of a child Python that imports the same sdm_phase1 as these tests."""
    env = dict(os.environ)
    if not INSTALLED:
        env["PYTHONPATH"] = str(PYTHON_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("det_fields", [0, p1.DET_SHIPPED, 3071, 1, 2, 4, 8, 16, 32, 64, 128, 256,
                                        512, 2048, 32 | 256])
@pytest.mark.parametrize("read_groups", [True, False])
def test_output_layout_matches_library(det_fields, read_groups):
    dt = _NUMPY_OF_CODE
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
    dt = _NUMPY_OF_CODE
    for f, d in _fields.EMPTY_DTYPES.items():
        x = r[f]
        assert x is not None and x.size == 0 and x.dtype == dt[d], p1.Phase1._fields[f]


def test_dtype_table_follows_the_header():
    """_core.dtypes, the one table of element types: every sdm_p1_dtype of the header, named as the
    frameworks name them, with its NumPy dtype and size."""
    assert _dtypes.NAMES == {lib.SDM_P1_DTYPE_INT8: "int8", lib.SDM_P1_DTYPE_INT32: "int32",
                             lib.SDM_P1_DTYPE_INT64: "int64", lib.SDM_P1_DTYPE_FLOAT32: "float32",
                             lib.SDM_P1_DTYPE_BFLOAT16: "bfloat16"}
    assert _dtypes.NUMPY == {code: np.dtype(dt) for code, dt in _NUMPY_OF_CODE.items()}
    assert _dtypes.ITEMSIZE[lib.SDM_P1_DTYPE_BFLOAT16] == 2
    assert _dtypes.CODES["uint16"] == _dtypes.CODES["bfloat16"] == lib.SDM_P1_DTYPE_BFLOAT16

    class Framework:
        int8, int32, int64, float32, bfloat16 = "i1", "i4", "i8", "f4", "bf16"

    assert _dtypes.framework_dtypes(Framework) == {
        lib.SDM_P1_DTYPE_INT8: "i1", lib.SDM_P1_DTYPE_INT32: "i4", lib.SDM_P1_DTYPE_INT64: "i8",
        lib.SDM_P1_DTYPE_FLOAT32: "f4", lib.SDM_P1_DTYPE_BFLOAT16: "bf16"}


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


def test_capsule_pointer_numpy():
    if not hasattr(np.ndarray, "__dlpack__"):
        pytest.skip("NumPy without DLPack export")
    base = np.zeros((5, 4), np.int32)
    for a in (base, base[2:], base[1:, 3:]):
        capsule = a.__dlpack__()
        assert capsule_pointer(capsule) == a.ctypes.data == read_capsule(capsule).ptr


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
    assert f"library: {p1.library_path}" in lines and f"declarations: {_c.CDEF_SOURCE}" in lines
    archs = p1.cuda_architectures()
    if p1.cuda_device_count() is not None:
        assert any(line.startswith("GPUs:") for line in lines)
        assert f"CUDA architectures: {' '.join(archs)}" in lines
        assert archs and all(re.fullmatch(r"(sm|compute)_\d+[af]?", a) for a in archs), archs
    else:
        assert archs is None and not any("CUDA architectures" in line for line in lines)


def test_import_does_not_import_gpu_frameworks():
    code = ("import sys, sdm_phase1; "
            "print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_wheel_installs_every_module():
    """bindings/python/meson.build, the wheel's file list, names every file of the package
    (its subpackages' too)."""
    listed = set(re.findall(r"'sdm_phase1/([^']+\.\w+)'", (PYTHON_DIR / "meson.build").read_text()))
    package = PYTHON_DIR / "sdm_phase1"
    present = {f.relative_to(package).as_posix() for f in package.rglob("*")
               if f.is_file() and f.suffix != ".pyc"}
    assert listed == present


def test_pyproject_builds_the_library_with_meson():
    """The root pyproject.toml: meson-python, Meson's version, the lazily imported extras."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "mesonpy"
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    assert {"torch", "cupy", "jax", "ml_dtypes"} <= set(project["project"]["optional-dependencies"])
    assert "-Dpython_package=true" in project["tool"]["meson-python"]["args"]["setup"]
    assert not (PYTHON_DIR / "pyproject.toml").exists(), "one pyproject.toml: the repository root's"


def test_installed_copy_is_self_contained():
    """The copy under test: the source tree's, an editable install's, or
    (SDMP1_TEST_INSTALLED=1) a wheel's, which loads the libsdmp1.so inside it and carries
    py.typed and Meson's version."""
    package = Path(p1.__file__).resolve().parent
    files = resources.files("sdm_phase1")
    if not isinstance(files, Path):
        # An editable install (pip install -e .): the modules are the checkout's, the library
        # and the declarations its own build's (meson-python maps them), never ./build's.
        own = files / "libsdmp1.so"
        assert Path(p1.library_path) == own and own.parent != REPO / "build"
        assert Path(_c.CDEF_SOURCE).is_relative_to(own.parent)
        return
    if not INSTALLED:
        assert package == PYTHON_DIR / "sdm_phase1"
        return
    from importlib import metadata

    assert package != PYTHON_DIR / "sdm_phase1", "the tests imported the source tree's copy"
    assert Path(p1.library_path) == package / "libsdmp1.so"
    # The declarations the build made from the header, not the checkout's header.
    assert Path(_c.CDEF_SOURCE) == package / "_c" / "phase1_cdef.h"
    assert "SDMP1_LIBRARY" not in os.environ
    assert (package / "py.typed").is_file()
    assert metadata.version("sdm_phase1") == p1.binding_version == p1.__version__
    extras = set(metadata.metadata("sdm_phase1").get_all("Provides-Extra") or [])
    assert {"torch", "cupy", "jax", "ml-dtypes"} <= {e.replace("_", "-") for e in extras}


def test_overhead_benchmark_writes_one_table_of_every_path(tmp_path):
    """bench_overhead.py on the CPU backend (a few calls a row): its table, printed and written
    to the file named by --out, has a row for every path (cffi forward and backward, NumPy,
    PyTorch without and with grad, the backward, the operator, CuPy, JAX), timed or saying why
    not, each PyTorch row with its time over the library's execute."""
    bench = PYTHON_DIR / "benchmarks" / "bench_overhead.py"
    out = tmp_path / "table.txt"
    r = subprocess.run([sys.executable, str(bench), "--device", "cpu", "--batches", "2", "--batch", "2",
                        "--out", str(out)], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith(f"libsdmp1 {p1.__version__}") and lines[1].startswith("path")
    assert "over execute" in lines[1]
    assert "\n".join(lines) in r.stdout
    over = ("phase1_forward, CPU tensors", "forward, no grad: torch_ops", "forward, grad: torch_ops",
            "backward: its formula", "backward: torch.autograd.grad", "the bare operator")
    torch_rows = over + ("sdm_p1_execute_backward through cffi",)
    for path in ("sdm_p1_execute through cffi", "NumPy arrays", "CuPy arrays", "JAX arrays") + torch_rows:
        row = [line for line in lines if path in line]
        if path in torch_rows and not row:
            assert any("torch is not installed" in line for line in lines), lines
            continue
        assert len(row) == 1, (path, lines)
        why = r"\((needs a GPU|torch is not installed)\)"
        if path in over:
            assert len(re.findall(r"-?\d+\.\d", row[0])) == 2, row  # host time, over execute
        assert re.search(r"\d+\.\d", row[0]) or re.search(why, row[0]), row
