"""Tests of the Python binding itself: declarations against the header, library lookup, input
checks, error reporting, result plumbing and a small case worked out by hand."""

from __future__ import annotations

import math
import os
import pickle
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import sdm_phase1 as p1
from sdm_phase1 import _c

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]
HEADER = REPO / "include" / "sdm" / "phase1.h"
#: Functions added since 1.0 (an older library does not export them).
NEW_SINCE_1_0 = {"sdm_p1_execute_status", "sdm_p1_cuda_device_count", "sdm_p1_cuda_architectures",
                 "sdm_p1_desc_init", "sdm_p1_inputs_init", "sdm_p1_describe_outputs",
                 "sdm_p1_execute_backward", "sdm_p1_input_grads_init"}


# ------------------------------------------------------------------------------------------
# helpers


def make_inputs(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50, seed=0,
                gate_width=1, index_dtype=np.int32):
    """Valid random inputs: distinct K ids per token, ids inside each chunk's stream range."""
    rng = np.random.default_rng(seed)
    base = (np.arange(N) % num_parallel * stream_offset)[:, None, None]
    k_idx = np.stack([[rng.choice(num_keys, W, replace=False) for _ in range(C)] for _ in range(N)])
    k_idx = (k_idx + base).astype(index_dtype)
    q_idx = (rng.integers(0, num_keys, (N, C, R)) + base).astype(index_dtype)
    k_val = rng.standard_normal((N, C, W)).astype(np.float32)
    q_val = rng.standard_normal((N, C, R)).astype(np.float32)
    g = (-rng.random((N, C, gate_width)) * 2).astype(np.float32)
    beta = rng.random((N, C)).astype(np.float32)
    opts = dict(num_parallel=num_parallel, stream_offset=stream_offset, num_keys=num_keys,
                valid_last=C)
    return [k_idx, q_idx, k_val, q_val, g], beta, opts


def same_bits(x, y):
    if x is None or y is None:
        return x is None and y is None
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def assert_same_result(r1, r2):
    for name, x, y in zip(p1.Phase1._fields, r1, r2):
        assert same_bits(x, y), name


def compiler():
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no C compiler")


def header_macros():
    """Object-like SDM_P1_* integer macros of the header and of the version header it includes:
    name -> text of the value."""
    text = HEADER.read_text() + (HEADER.parent / "phase1_version.h").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = {}
    for m in re.finditer(r"^#define\s+(SDM_P1_\w+)\s+(.*)$", text, re.M):
        name, value = m.group(1), re.sub(r"/\*.*?\*/", "", m.group(2)).strip()
        if name in ("SDM_P1_API",) or name.endswith("_INITIALIZER") or not value:
            continue
        out[name] = value
    return out


# ------------------------------------------------------------------------------------------
# version, declarations, lookup


def test_version():
    major, minor, patch = (int(x) for x in p1.__version__.split("."))
    assert major == 1
    assert p1.version_number() == major * 10000 + minor * 100 + patch
    assert os.path.exists(p1.library_path) or "libsdmp1" in p1.library_path


def test_versions_are_mesons():
    """One version, Meson's project version: the generated header's macros (checked against
    the binding's declarations in test_layout_and_constants_match_compiler), the loaded
    library, the binding and, for an installed wheel, its metadata."""
    project = re.search(r"project\([^)]*?version:\s*'([0-9.]+)'", (REPO / "meson.build").read_text(), re.S)
    assert project is not None
    version = project.group(1)
    macros = header_macros()
    assert ".".join(macros[f"SDM_P1_VERSION_{k}"] for k in ("MAJOR", "MINOR", "PATCH")) == version
    assert p1.binding_version == version
    assert p1.__version__ == version, f"the loaded library {p1.library_path} is {p1.__version__}"
    from importlib import metadata

    installed = Path(p1.__file__).resolve().parent != PYTHON_DIR / "sdm_phase1"
    if installed:
        assert metadata.version("sdm_phase1") == version


def _declarations(source):
    """The C declarations of ``source`` (no preprocessor lines), normalised by pycparser."""
    pycparser = pytest.importorskip("pycparser")
    from pycparser import c_generator

    types = "".join(f"typedef int {t};" for t in ("size_t", "uint32_t", "int32_t", "int64_t"))
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    body = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    ast = pycparser.CParser().parse(types + "\n" + body)
    gen = c_generator.CGenerator()
    decls = sorted(gen.visit(node) for node in ast.ext[4:])
    assert len(decls) >= 15
    return decls


def _compiler_preprocessed(header, tmp_path):
    """``header`` as the system's C preprocessor sees it (no system headers): the reference
    the binding's declarations, made by sdm_phase1/_c/declarations.py, are checked against."""
    cc = compiler()
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "stddef.h").write_text("")
    (stubs / "stdint.h").write_text("")
    text = subprocess.run([cc, "-E", "-P", "-nostdinc", "-I", str(stubs), "-I", str(REPO / "include"),
                           "-DSDM_P1_API=", str(header)], check=True, capture_output=True,
                          text=True).stdout
    return re.sub(r"__attribute__\s*\(\(.*?\)\)\s*\)?", "", text)


def test_cdef_matches_header(tmp_path):
    """Parse the preprocessed header with a fresh cffi FFI and compare every function, struct,
    field and enum with the binding's declarations (the build's file of an installed package,
    made from the header by the package's generator; a source tree's, made at import)."""
    import cffi

    text = _compiler_preprocessed(HEADER, tmp_path)
    # Declaration by declaration, as text (qualifiers included), through pycparser.
    assert _declarations(text) == _declarations(_c.CDEF)
    ref = cffi.FFI()
    ref.cdef(text)
    ours = _c.ffi

    ref_types, ours_types = ref.list_types(), ours.list_types()
    assert sorted(ref_types[0]) == sorted(ours_types[0]), "typedef names"
    assert sorted(ref_types[1]) == sorted(ours_types[1]), "struct names"
    assert sorted(ref_types[2]) == sorted(ours_types[2]), "union names"
    for name in ref_types[0]:
        rt, ot = ref.typeof(name), ours.typeof(name)
        assert rt.kind == ot.kind, name
        assert rt.cname == ot.cname, name
        if rt.kind == "struct" and rt.fields is None:  # opaque (sdm_p1_plan)
            assert ot.fields is None, name
        elif rt.kind == "struct":
            rf = [(f, t.type.cname, t.offset, t.bitsize) for f, t in rt.fields]
            of = [(f, t.type.cname, t.offset, t.bitsize) for f, t in ot.fields]
            assert rf == of, name
            assert ref.sizeof(name) == ours.sizeof(name), name
        elif rt.kind == "enum":
            assert rt.relements == ot.relements, name

    ref_lib = ref.dlopen(p1.library_path)
    ref_names = set(dir(ref_lib))
    # An older library lacks the later functions: their declarations were compared as text
    # above; the rest is compared through the loaded library.
    absent = {n for n in ref_names if not hasattr(ref_lib, n)}
    assert absent <= NEW_SINCE_1_0, absent
    ref_names -= absent
    functions = [n for n in ref_names if isinstance(getattr(ref_lib, n), ref.CData)]
    assert len(functions) + len(absent) == 18
    for name in ref_names:
        assert hasattr(_c.lib, name), name
        rv, ov = getattr(ref_lib, name), getattr(_c.lib, name)
        if name in functions:
            assert ref.typeof(rv).cname == ours.typeof(ov).cname, name
        else:
            assert rv == ov, name
    ours_names = set(dir(_c.lib)) - absent
    ours_functions = {n for n in ours_names if isinstance(getattr(_c.lib, n), ours.CData)}
    assert ours_functions == set(functions), "functions the header lacks"
    # Everything else the binding declares is a header macro.
    extra = ours_names - ref_names
    assert extra <= set(header_macros()), extra


def test_generated_declarations_follow_the_header(tmp_path):
    """The generator run on a changed header gives declarations that no longer match the
    binding's (so the comparison above can fail), and equal what the compiler sees of it."""
    from sdm_phase1._c.declarations import declarations

    changed = tmp_path / "sdm" / "phase1.h"
    changed.parent.mkdir()
    shutil.copy(HEADER.parent / "phase1_version.h", changed.parent)
    field = "    int32_t reserved;"
    changed.write_text(HEADER.read_text().replace(field, field + "\n    int64_t added;"))
    ours = declarations(changed)
    assert "int64_t added;" in ours and _declarations(ours) != _declarations(_c.CDEF)
    assert _declarations(ours) == _declarations(_compiler_preprocessed(changed, tmp_path))
    # Generated from the checkout's header now: what the package loaded (for an installed
    # package, the build's copy is not stale).
    assert declarations(HEADER).splitlines()[1:] == _c.CDEF.splitlines()[1:]


@pytest.mark.parametrize("construct", ["#define SDM_P1_MAX(a, b) ((a) > (b) ? (a) : (b))",
                                       "#pragma once", "#if SDM_P1_UNKNOWN(1)\n#endif",
                                       "#include sdm/other.h", "#error stop"])
def test_declarations_refuse_what_they_do_not_handle(tmp_path, construct):
    """A header construct the generator does not understand is an error naming its line,
    never dropped silently."""
    from sdm_phase1._c.declarations import declarations

    header = tmp_path / "sdm" / "phase1.h"
    header.parent.mkdir()
    header.write_text("/* a header */\ntypedef int sdm_p1_x;\n" + construct + "\n")
    with pytest.raises(ValueError, match=r"phase1\.h:3"):
        declarations(header)


def test_declarations_evaluate_macros_and_conditions(tmp_path):
    from sdm_phase1._c.declarations import declarations

    header = tmp_path / "sdm" / "phase1.h"
    header.parent.mkdir()
    header.write_text(
        "#ifndef GUARD\n#define GUARD\n#define A 0x10u /* sixteen */\n#define B (A * 2 + (-1))\n"
        "#define API\n#if defined(__cplusplus) || defined(_WIN32)\nint windows;\n#elif A > 8 && !defined(X)\n"
        "API int f(int x[B]); // the line\n#else\nint other;\n#endif\n#endif\n")
    assert declarations(header).splitlines()[1:] == [
        "#define A 16", "#define B 31", "int f(int x[31]);"]


def test_layout_and_constants_match_compiler(tmp_path):
    """sizeof / offsetof of every struct field and every enum value and SDM_P1_* macro, as the
    system compiler sees the header, against cffi's."""
    cc = compiler()
    ffi = _c.ffi
    lines, expect = [], []
    for name in ffi.list_types()[0]:
        t = ffi.typeof(name)
        if t.kind == "struct" and t.fields is not None:
            lines.append(f'printf("%zu\\n", sizeof({name}));')
            expect.append((f"sizeof {name}", ffi.sizeof(name)))
            for f, _ in t.fields:
                lines.append(f'printf("%zu\\n", offsetof({name}, {f}));')
                expect.append((f"offsetof {name}.{f}", ffi.offsetof(name, f)))
        elif t.kind == "enum":
            for k, v in t.relements.items():
                lines.append(f'printf("%lld\\n", (long long){k});')
                expect.append((k, v))
    macros = [m for m in header_macros() if not m.startswith("SDM_P1_API")]
    for m in macros:
        lines.append(f'printf("%lld\\n", (long long)({m}));')
        expect.append((m, getattr(_c.lib, m)))
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <sdm/phase1.h>\n"
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", str(REPO / "include"),
                    str(src), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    assert len(got) == len(expect)
    for (what, value), line in zip(expect, got):
        assert int(line) == value, what
    assert set(re.findall(r"#define\s+(\w+)", _c.CDEF)) == set(macros)


def test_python_constants_match_header():
    lib = _c.lib
    for name in ("POS", "SPAY_RANK", "FLAGS", "SPAY_K", "SPAY_Q", "KREC", "KSPA", "QREC",
                 "TILES", "DC_GIDX", "QREC8", "SHIPPED"):
        assert getattr(p1, "DET_" + name) == getattr(lib, "SDM_P1_DET_" + name), name
    assert p1.DET_SHIPPED == 31 and p1.DET_RECORDS == 32 | 64 | 128 | 256
    assert (p1.POS_BITS, p1.POS_MASK, p1.POS_AFTER_SHIFT, p1.POS_SIZE_SHIFT, p1.POS_COUNT_MAX) == (
        17, (1 << 17) - 1, 17, 24, 127)
    assert (p1.SPAY_ENTRY_MASK, p1.SPAY_DIST_SHIFT, p1.SPAY_DIST_MAX) == (0x3FFFF, 18, 4095)
    # The Phase1 fields follow the library's field ids.
    assert len(p1.Phase1._fields) == lib.SDM_P1_FIELD_REPEATS == 28
    for i, name in enumerate(p1.Phase1._fields):
        assert getattr(lib, "SDM_P1_FIELD_" + name.upper()) == i, name


def _run_python(code, env_update, cwd=None):
    env = dict(os.environ)
    env.pop("SDMP1_LIBRARY", None)
    env.update(env_update)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=cwd)


def test_env_override_missing_file():
    bad = "/nonexistent/dir/libsdmp1.so"
    r = _run_python(f"import sys; sys.path.insert(0, {str(PYTHON_DIR)!r}); import sdm_phase1",
                    {"SDMP1_LIBRARY": bad})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "SDMP1_LIBRARY" in r.stderr and bad in r.stderr


def test_env_override_real_library(tmp_path):
    real = tmp_path / "copy_of_libsdmp1.so"
    shutil.copy(os.path.realpath(p1.library_path), real)
    r = _run_python(f"import sys; sys.path.insert(0, {str(PYTHON_DIR)!r}); import sdm_phase1; "
                    "print(sdm_phase1.library_path); print(sdm_phase1.__version__)",
                    {"SDMP1_LIBRARY": str(real)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(real), p1.__version__]


def test_candidate_order(tmp_path):
    """The library tried first is the installation's own: a wheel's inside the package, an
    editable install's in its build folder (never the checkout's older ./build); a package
    run from a source tree tries the checkout's build, then the system's."""
    from sdm_phase1._c.library import candidate_paths

    checkout = tmp_path / "repo"
    package = checkout / "bindings" / "python" / "sdm_phase1"
    package.mkdir(parents=True)
    (checkout / "build").mkdir()
    (checkout / "build" / "libsdmp1.so").write_bytes(b"an older build")
    # A source tree: its build, then the system's.
    tried = candidate_paths(package, package)
    assert tried[0] == str(checkout / "build" / "libsdmp1.so") and tried[-1] == "libsdmp1.so.1"
    assert str(package / "libsdmp1.so") not in tried

    class EditableFiles:
        """What importlib.resources.files gives for a meson-python editable install: not a
        folder, but a map of the package's files into the build folder (build/cp311)."""

        def __truediv__(self, name):
            return checkout / "build" / "cp311" / name

    # An editable install: its own build's library only, even before it is built.
    assert candidate_paths(EditableFiles(), package) == [str(checkout / "build" / "cp311" / "libsdmp1.so")]
    # A wheel (or any package holding the library): its own only.
    (package / "libsdmp1.so").write_bytes(b"this installation's")
    assert candidate_paths(package, package) == [str(package / "libsdmp1.so")]
    site = tmp_path / "site-packages" / "sdm_phase1"
    site.mkdir(parents=True)
    # An installed package without its library (no checkout to look in): the system's only.
    assert all(os.path.sep not in name for name in candidate_paths(site, site))


def test_not_found_lists_where_it_looked(tmp_path):
    import ctypes.util

    if ctypes.util.find_library("sdmp1"):
        pytest.skip("libsdmp1 is installed on the system")
    if not isinstance(resources.files("sdm_phase1"), Path):
        pytest.skip("an editable install of sdm_phase1 answers every import of it")
    # A source tree without a build: <tmp>/bindings/python/sdm_phase1 and <tmp>/include.
    shutil.copytree(PYTHON_DIR / "sdm_phase1", tmp_path / "bindings" / "python" / "sdm_phase1",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "phase1_cdef.h"))
    shutil.copytree(REPO / "include", tmp_path / "include")
    r = _run_python(f"import sys; sys.path.insert(0, {str(tmp_path / 'bindings' / 'python')!r}); "
                    "import sdm_phase1", {"LD_LIBRARY_PATH": ""}, cwd=str(tmp_path))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "not found" in r.stderr
    assert str(tmp_path / "build" / "libsdmp1.so") in r.stderr
    assert "libsdmp1.so.1" in r.stderr and "SDMP1_LIBRARY" in r.stderr


# ------------------------------------------------------------------------------------------
# bad inputs


def _with(args, i, value):
    args = list(args)
    args[i] = value
    return args


def _bad_python_side():
    (k, q, kv, qv, g), beta, _ = make_inputs()
    base = [k, q, kv, qv, g]
    cases = {
        "k_idx float": (_with(base, 0, k.astype(np.float32)), {}, "k_idx"),
        "k_idx uint32": (_with(base, 0, k.astype(np.uint32)), {}, "k_idx"),
        "q_idx other index dtype": (_with(base, 1, q.astype(np.int64)), {}, "q_idx"),
        "k_val float64": (_with(base, 2, kv.astype(np.float64)), {}, "k_val"),
        "q_val float16": (_with(base, 3, qv.astype(np.float16)), {}, "q_val"),
        "g float64": (_with(base, 4, g.astype(np.float64)), {}, "g"),
        "beta float64": (base, {"beta": beta.astype(np.float64)}, "beta"),
        "g 2-D": (_with(base, 4, g[..., 0]), {}, "g"),
        "k_idx 2-D": (_with(base, 0, k[0]), {}, "k_idx"),
        "k_idx None": (_with(base, 0, None), {}, "k_idx"),
        "q_idx other N": (_with(base, 1, q[:2]), {}, "q_idx"),
        "q_idx other C": (_with(base, 1, q[:, :3]), {}, "q_idx"),
        "k_val other W": (_with(base, 2, kv[:, :, :2]), {}, "k_val"),
        "q_val other R": (_with(base, 3, qv[:, :, :1]), {}, "q_val"),
        "g other C": (_with(base, 4, g[:, :5]), {}, "g"),
        "beta other shape": (base, {"beta": beta[:, :5]}, "beta"),
        "repeats int32": (base + [np.zeros(1, np.int32)], {}, "repeats"),
        "repeats list": (base + [[0]], {}, "repeats"),
    }
    return cases


@pytest.mark.parametrize("case", list(_bad_python_side()))
def test_bad_arrays_raise_value_error(case):
    args, kw, name = _bad_python_side()[case]
    _, _, opts = make_inputs()
    with pytest.raises(ValueError, match=name) as info:
        p1.phase1_forward(*args, **opts, **kw)
    assert not isinstance(info.value, p1.Phase1Error)


def test_shape_mismatch_message_names_both_shapes():
    (k, q, kv, qv, g), _, opts = make_inputs()
    narrow = np.ascontiguousarray(kv[:, :, :2])
    with pytest.raises(ValueError) as info:
        p1.phase1_forward(k, q, narrow, qv, g, **opts)
    msg = str(info.value)
    assert "k_val" in msg and str(narrow.shape) in msg and str(k.shape) in msg


# ------------------------------------------------------------------------------------------
# the exceptions of failed library calls

#: Each status: its exception class and the built-in exceptions that class is, exactly (the
#: table of docs/python.md).
ERROR_KINDS = {
    "SDM_P1_ERROR_INVALID_ARGUMENT": (p1.InvalidArgumentError, {ValueError}),
    "SDM_P1_ERROR_UNSUPPORTED": (p1.UnsupportedError, {NotImplementedError, RuntimeError, ValueError}),
    "SDM_P1_ERROR_INVALID_INPUT": (p1.InvalidInputError, {ValueError}),
    "SDM_P1_ERROR_OUT_OF_MEMORY": (p1.OutOfMemoryError, {MemoryError}),
    "SDM_P1_ERROR_BACKEND_UNAVAILABLE": (p1.BackendUnavailableError, {RuntimeError}),
    "SDM_P1_ERROR_CUDA": (p1.CudaError, {RuntimeError}),
    "SDM_P1_ERROR_INTERNAL": (p1.InternalError, {RuntimeError}),
}
_BUILTINS = (ValueError, NotImplementedError, RuntimeError, MemoryError)


def assert_error_kind(e, status):
    """``e`` is exactly the class of ``status`` and exactly its built-ins."""
    cls, builtins = ERROR_KINDS[status]
    assert type(e) is cls, (type(e), status)
    assert {b for b in _BUILTINS if isinstance(e, b)} == builtins, status


def test_every_status_of_the_header_has_a_class():
    statuses = set(re.findall(r"\b(SDM_P1_ERROR_\w+) = \d+", HEADER.read_text()))
    assert statuses == set(ERROR_KINDS)
    for cls, _ in ERROR_KINDS.values():
        assert issubclass(cls, p1.Phase1Error) and cls.__name__ in p1.__all__
        assert getattr(p1, cls.__name__) is cls
    assert p1.Phase1Error.__bases__ == (Exception,)


@pytest.mark.parametrize("status", list(ERROR_KINDS))
def test_check_raises_the_class_of_each_status(status):
    from sdm_phase1._core.errors import check

    code = getattr(_c.lib, status)
    with pytest.raises(p1.Phase1Error) as info:
        check("sdm_p1_example", code)
    e = info.value
    assert_error_kind(e, status)
    assert (e.function, e.code, e.status) == ("sdm_p1_example", code, status)
    assert str(e).startswith(f"{status}: ")
    # Pickled (multiprocessing, torch.distributed) with its class and attributes.
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and str(back) == str(e)
    assert (back.function, back.code, back.status, back.message) == (e.function, e.code, e.status, e.message)


def test_check_of_success_and_of_an_unknown_code():
    from sdm_phase1._core.errors import check

    assert check("sdm_p1_example", _c.lib.SDM_P1_SUCCESS) is None
    with pytest.raises(p1.Phase1Error) as info:
        check("sdm_p1_example", 99)  # a newer library's status: the base class
    assert type(info.value) is p1.Phase1Error and info.value.status == "SDM_P1_UNKNOWN_STATUS"


def _expect_phase1_error(status, words, *args, **kw):
    with pytest.raises(p1.Phase1Error) as info:
        p1.phase1_forward(*args, **kw)
    e = info.value
    assert e.status == status, str(e)
    assert_error_kind(e, status)
    assert e.message and e.message in str(e) and e.status in str(e)
    for w in words:
        assert re.search(w, e.message, re.I), (w, e.message)
    return e


def test_chunk_too_long():
    (k, q, kv, qv, g), _, opts = make_inputs(N=1, C=257, W=1, R=1, num_parallel=1)
    opts["valid_last"] = 257
    _expect_phase1_error("SDM_P1_ERROR_UNSUPPORTED", ["C"], k, q, kv, qv, g, **opts)


def test_zero_write_slots():
    (k, q, kv, qv, g), _, opts = make_inputs()
    _expect_phase1_error("SDM_P1_ERROR_INVALID_ARGUMENT", ["W"], k[:, :, :0], q, kv[:, :, :0], qv,
                         g, **opts)


def test_num_parallel_not_dividing_n():
    (k, q, kv, qv, g), _, opts = make_inputs(N=4, num_parallel=2)
    opts["num_parallel"] = 3
    _expect_phase1_error("SDM_P1_ERROR_INVALID_ARGUMENT", ["num_parallel"], k, q, kv, qv, g, **opts)


@pytest.mark.parametrize("valid_last", [0, 9, -5, -1])
def test_valid_last_out_of_range(valid_last):
    # -1 too: the C API's "unset" is no Python value (valid_last is required, 1..C).
    (k, q, kv, qv, g), _, opts = make_inputs(C=8)
    opts["valid_last"] = valid_last
    with pytest.raises(ValueError, match=r"valid_last must be in 1\.\.C = 1\.\.8, got " + str(valid_last)):
        p1.phase1_forward(k, q, kv, qv, g, **opts)
    with pytest.raises(ValueError, match="valid_last must be None or in 1..C"):
        p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50,
                valid_last=valid_last)


@pytest.mark.parametrize("which,value", [("k", 50), ("k", -1), ("k", 150), ("q", 150),
                                         ("q", 99), ("k64", 2**40)])
def test_id_out_of_stream_range(which, value):
    (k, q, kv, qv, g), _, opts = make_inputs(index_dtype=np.int64 if which == "k64" else np.int32)
    # chunk 3 is stream 1 (ids 100..149); chunk 2 is stream 0 (ids 0..49); token 2 is valid
    arr = q if which == "q" else k
    chunk = 3 if value != 50 and value != -1 else 2
    arr[chunk, 2, 0] = value
    _expect_phase1_error("SDM_P1_ERROR_INVALID_INPUT", [], k, q, kv, qv, g, **opts)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 2.0**22, -(2.0**22), -3e38])
def test_bad_gate(value):
    (k, q, kv, qv, g), _, opts = make_inputs(gate_width=3)
    g[1, 4, 2] = value
    _expect_phase1_error("SDM_P1_ERROR_INVALID_INPUT", [], k, q, kv, qv, g, **opts)


def test_gate_just_below_limit_is_accepted():
    (k, q, kv, qv, g), _, opts = make_inputs()
    g[1, 4, 0] = -np.float32(2.0**22 - 0.5)
    r = p1.phase1_forward(k, q, kv, qv, g, **opts)
    assert np.isfinite(r.log_k).all()


def test_kspa_without_beta():
    (k, q, kv, qv, g), _, opts = make_inputs()
    _expect_phase1_error("SDM_P1_ERROR_INVALID_ARGUMENT", ["beta"], k, q, kv, qv, g,
                         det_fields=p1.DET_SHIPPED | p1.DET_KSPA, **opts)


@pytest.mark.parametrize("bits", [1024, 4096])
def test_unknown_det_fields(bits):
    (k, q, kv, qv, g), _, opts = make_inputs()
    _expect_phase1_error("SDM_P1_ERROR_INVALID_ARGUMENT", ["det_fields"], k, q, kv, qv, g,
                         det_fields=bits, **opts)


@pytest.mark.parametrize("bits", [-1, -2])
def test_negative_det_fields(bits):
    # -1 would be the C API's "unset" (the default set): refused, None is the default.
    (k, q, kv, qv, g), _, opts = make_inputs()
    with pytest.raises(ValueError, match="det_fields must be None or a combination of the DET_"):
        p1.phase1_forward(k, q, kv, qv, g, det_fields=bits, **opts)


# The options' types: bools only for bool options, ints (not bools) for int options.
_INT_OPTIONS = ("num_parallel", "stream_offset", "num_keys", "valid_last", "rec_tile", "det_fields",
                "num_threads")


@pytest.mark.parametrize("name", _INT_OPTIONS)
@pytest.mark.parametrize("bad", [True, False, 2.0, "2", None])
def test_int_options_take_ints_only(name, bad):
    (k, q, kv, qv, g), _, opts = make_inputs()
    if bad is None and name in ("det_fields", "num_threads"):
        return  # None is their documented default
    kw = dict(opts, **{name: bad})
    with pytest.raises(TypeError, match=f"{name} must be an int, got {type(bad).__name__}"):
        p1.phase1_forward(k, q, kv, qv, g, **kw)


@pytest.mark.parametrize("name", ["need_read_groups", "check"])
@pytest.mark.parametrize("bad", ["no", 0, 1, None, np.int32(1)])
def test_bool_options_take_bools_only(name, bad):
    (k, q, kv, qv, g), _, opts = make_inputs()
    with pytest.raises(TypeError, match=f"{name} must be a bool"):
        p1.phase1_forward(k, q, kv, qv, g, **{name: bad}, **opts)
    with pytest.raises(TypeError, match="need_read_groups must be a bool"):
        p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50,
                need_read_groups="no")


@pytest.mark.parametrize("name, value, words", [
    ("num_parallel", 0, "num_parallel must be >= 1"),
    ("stream_offset", -1, "stream_offset must be >= 0"),
    ("num_keys", 0, r"num_keys must be in 1..2\*\*32"),
    ("num_keys", 2**32 + 1, r"num_keys must be in 1..2\*\*32"),
    ("num_threads", -1, "num_threads must be None or 0"),
])
def test_option_ranges(name, value, words):
    (k, q, kv, qv, g), _, opts = make_inputs()
    with pytest.raises(ValueError, match=words):
        p1.phase1_forward(k, q, kv, qv, g, **dict(opts, **{name: value}))


def test_numpy_integer_options_are_ints():
    (k, q, kv, qv, g), _, opts = make_inputs()
    want = p1.phase1_forward(k, q, kv, qv, g, **opts)
    np_opts = {n: np.int64(v) for n, v in opts.items()}
    got = p1.phase1_forward(k, q, kv, qv, g, det_fields=np.int32(p1.DET_SHIPPED),
                            need_read_groups=np.bool_(True), **np_opts)
    assert_same_result(want, got)
    with p1.Plan(N=np.int64(4), C=np.int32(8), W=3, R=2, num_parallel=2, stream_offset=100,
                 num_keys=50, device=np.int64(0)) as plan:
        assert plan.desc["C"] == 8 and plan.desc["num_parallel"] == 2
    with pytest.raises(TypeError, match="device must be an int"):
        p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50, device=True)
    with pytest.raises(ValueError, match="device must be None or a device ordinal"):
        p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50, device=-1)


def test_rec_tile_too_large():
    (k, q, kv, qv, g), beta, opts = make_inputs()
    _expect_phase1_error("SDM_P1_ERROR_INVALID_ARGUMENT", ["rec_tile"], k, q, kv, qv, g,
                         beta=beta, rec_tile=2**20 + 1, **opts)
    r = p1.phase1_forward(k, q, kv, qv, g, beta=beta, rec_tile=2**20, **opts)
    assert r.tiles_k.shape == (4, 2)


def test_unknown_backend_and_cuda_backend():
    (k, q, kv, qv, g), _, opts = make_inputs()
    with pytest.raises(ValueError, match="backend"):
        p1.phase1_forward(k, q, kv, qv, g, backend="tpu", **opts)
    with pytest.raises(p1.Phase1Error) as info:
        # NumPy arrays on the CUDA backend: refused by the library (no device, or host memory).
        p1.phase1_forward(k, q, kv, qv, g, backend="cuda", **opts)
    if not p1.cuda_device_count():  # no CUDA backend, or no device: whatever the library says
        assert_error_kind(info.value, "SDM_P1_ERROR_BACKEND_UNAVAILABLE")
        with pytest.raises(p1.BackendUnavailableError):
            p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50, backend="cuda")


def test_padding_tokens_may_hold_garbage():
    N, C, W, R = 4, 6, 3, 2
    (k, q, kv, qv, g), beta, opts = make_inputs(N=N, C=C, W=W, R=R, gate_width=W)
    valid_last = 2
    opts["valid_last"] = valid_last
    clean = p1.phase1_forward(k, q, kv, qv, g, beta=beta, **opts)
    for arr, bad in ((k, -7), (q, 2**31 - 1), (kv, np.nan), (qv, np.inf), (g, np.nan),
                     (beta, np.nan)):
        arr[2:, valid_last:] = bad
    dirty = p1.phase1_forward(k, q, kv, qv, g, beta=beta, **opts)
    assert_same_result(clean, dirty)
    pad = (slice(2, None), slice(valid_last, None))
    assert (dirty.log_k[pad] == 0).all() and (dirty.log_q[pad] == 0).all()
    assert (dirty.rex[pad] == 0).all() and (dirty.k_eff[pad] == 0).all()
    assert (dirty.q_w[pad] == 0).all() and (dirty.cpe[pad] == 1).all()
    assert (dirty.is_last[pad] == 0).all() and (dirty.q_only[pad] == 0).all()
    assert (dirty.a[2:, valid_last:] == 0).all() and (dirty.a[2:, :, valid_last:] == 0).all()
    assert (dirty.qk[2:, valid_last:] == 0).all() and (dirty.qk[2:, :, valid_last:] == 0).all()
    for x in dirty:
        if x is not None and x.dtype.kind == "f":
            assert np.isfinite(x).all()


# ------------------------------------------------------------------------------------------
# results


def test_not_requested_fields():
    N, C, W, R = 4, 8, 3, 2
    (k, q, kv, qv, g), _, opts = make_inputs(N=N, C=C, W=W, R=R)
    r = p1.phase1_forward(k, q, kv, qv, g, det_fields=0, need_read_groups=False, **opts)
    for name in ("a", "qk", "log_k", "log_q", "rex", "cpe", "k_eff", "q_w", "payload"):
        assert getattr(r, name) is not None and getattr(r, name).shape[0] == N, name
    for name in ("pos_k", "pos_q", "q_last", "q_only", "spay_k", "spay_q", "spay_rank"):
        assert getattr(r, name) is None, name
    for name in ("is_last", "is_only"):
        x = getattr(r, name)
        assert x.shape == (0, C, W) and x.dtype == np.int8, name
    for name in ("krec", "kspa", "qrec", "tiles_k", "tiles_q", "segb_k", "dc_kpos", "dc_bpre",
                 "dc_rec", "qrec8"):
        x = getattr(r, name)
        assert x.shape == (0,) and x.dtype == (np.float32 if name == "kspa" else np.int32), name


def test_default_fields_and_shapes():
    N, C, W, R = 4, 8, 3, 2
    (k, q, kv, qv, g), beta, opts = make_inputs(N=N, C=C, W=W, R=R)
    r = p1.phase1_forward(k, q, kv, qv, g, **opts)
    expect = {
        "a": ((N, C, C), np.float32), "qk": ((N, C, C), np.float32),
        "log_k": ((N, C, W), np.float32), "log_q": ((N, C, R), np.float32),
        "rex": ((N, C, W), np.float32), "cpe": ((N, C, W), np.float32),
        "is_last": ((N, C, W), np.int8), "is_only": ((N, C, W), np.int8),
        "k_eff": ((N, C, W), np.float32), "q_w": ((N, C, R), np.float32),
        "payload": ((N, 48), np.int32), "pos_k": ((N, C, W), np.int32),
        "pos_q": ((N, C, R), np.int32), "q_last": ((N, C, R), np.int8),
        "q_only": ((N, C, R), np.int8), "spay_k": ((N, C * W), np.int32),
        "spay_q": ((N, C * R), np.int32), "spay_rank": ((N, 2, 2), np.int32),
    }
    for name, (shape, dtype) in expect.items():
        x = getattr(r, name)
        assert x.shape == shape and x.dtype == dtype, name
    assert r.krec.shape == (0,)
    # With beta the records come by default; without read groups the read side is None.
    r = p1.phase1_forward(k, q, kv, qv, g, beta=beta, rec_tile=5, need_read_groups=False, **opts)
    assert r.q_last is None and r.spay_q is None and r.spay_k.shape == (N, C * W)
    assert r.krec.shape == (N, C * W, 4) and r.kspa.shape == (N, C * W)
    assert r.qrec.shape == (0,) and r.tiles_q.shape == (0,)
    assert r.tiles_k.shape == (N, math.ceil(C * W / 5) + 1) == r.segb_k.shape
    r = p1.phase1_forward(k, q, kv, qv, g, beta=beta, det_fields=p1.DET_DC_GIDX | p1.DET_QREC8,
                          **opts)
    assert r.dc_kpos.shape == (N, C, W) and r.dc_bpre.shape == (N, 1 + 1)
    assert r.qrec8.shape == (N, C * R, 2) and r.dc_rec.shape == (0,)
    assert r.krec.shape == (0,) and r.pos_k is None


def test_hand_worked_case():
    """C=2, W=1, R=1: both tokens write and read slot 5; gates -1, -2; k 1, 2; q 3, 0.5."""
    k = np.array([[[5], [5]]], np.int32)
    q = np.array([[[5], [5]]], np.int32)
    kv = np.array([[[1.0], [2.0]]], np.float32)
    qv = np.array([[[3.0], [0.5]]], np.float32)
    g = np.array([[[-1.0], [-2.0]]], np.float32)
    beta = np.array([[0.5, 0.25]], np.float32)
    repeats = np.array([7], np.int64)
    r = p1.phase1_forward(k, q, kv, qv, g, repeats, num_parallel=1, stream_offset=0, num_keys=8,
                          valid_last=2, beta=beta, det_fields=3071)
    e = np.exp
    f32 = np.float32
    assert repeats[0] == 7
    np.testing.assert_array_equal(r.log_k.ravel(), [-1, -3])
    np.testing.assert_array_equal(r.log_q.ravel(), [-1, -3])
    np.testing.assert_array_equal(r.rex.ravel(), [-2, 0])
    np.testing.assert_allclose(r.cpe.ravel(), [e(-3), e(-3)], rtol=1e-6)
    np.testing.assert_allclose(r.a[0], [[0, 0], [2 * e(-2), 0]], rtol=1e-6)
    np.testing.assert_allclose(r.qk[0], [[3, 0], [0.5 * e(-2), 1]], rtol=1e-6)
    np.testing.assert_allclose(r.k_eff.ravel(), [e(-1), 2 * e(-3)], rtol=1e-6)
    np.testing.assert_allclose(r.q_w.ravel(), [3 * e(-1), 0.5 * e(-3)], rtol=1e-6)
    np.testing.assert_array_equal(r.is_last.ravel(), [0, 1])
    np.testing.assert_array_equal(r.is_only.ravel(), [0, 0])
    np.testing.assert_array_equal(r.q_last.ravel(), [0, 1])
    np.testing.assert_array_equal(r.q_only.ravel(), [0, 0])
    # Sorted row: (t0 write), (t0 read), (t1 write), (t1 read); 4 entries padded to 16.
    head, last, pad, read, tok1 = 1 << 31, 1 << 30, 1 << 17, 1 << 8, 1 << 9
    payload = [head, read, tok1 | last, tok1 | read] + [head | pad] * 12
    np.testing.assert_array_equal(r.payload.view(np.uint32).ravel(), payload)
    np.testing.assert_array_equal(r.pos_k.ravel(), [p1.pos_pack(0, 1, 2), p1.pos_pack(2, 0, 2)])
    np.testing.assert_array_equal(r.pos_q.ravel(), [p1.pos_pack(1, 1, 2), p1.pos_pack(3, 0, 2)])
    dist1 = 1 << p1.SPAY_DIST_SHIFT
    np.testing.assert_array_equal(r.spay_k.view(np.uint32).ravel(), [head, tok1 | dist1 | last])
    np.testing.assert_array_equal(r.spay_q.view(np.uint32).ravel(),
                                  [head | read, tok1 | read | dist1 | last])
    np.testing.assert_array_equal(r.spay_rank.ravel(), [0, 0b101])
    # Records: krec {spay_k element, slot, bits of k * exp(rex), bits of cpe}.
    bits = lambda x: np.array(x, f32).view(np.int32)  # noqa: E731
    np.testing.assert_array_equal(r.krec[0, :, 0], r.spay_k[0])
    np.testing.assert_array_equal(r.krec[0, :, 1], [5, 5])
    np.testing.assert_allclose(r.krec[0, :, 2].view(f32), [e(-2), 2.0], rtol=1e-6)
    np.testing.assert_array_equal(r.krec[0, :, 3], bits(r.cpe.ravel()))
    np.testing.assert_allclose(r.kspa.ravel(), [-0.5 * e(-1), -0.25 * 2 * e(-3)], rtol=1e-6)
    np.testing.assert_array_equal(r.qrec[0, :, 0], r.spay_q[0])
    np.testing.assert_array_equal(r.qrec[0, :, 1], [5, 5])
    np.testing.assert_array_equal(r.qrec[0, :, 2], bits(r.q_w.ravel()))
    np.testing.assert_array_equal(r.qrec[0, :, 3], [0, 0])
    np.testing.assert_array_equal(r.qrec8[0], r.qrec[0, :, 1:3])
    np.testing.assert_array_equal(r.tiles_k.ravel(), [0, 2])  # one group starting at 0
    np.testing.assert_array_equal(r.segb_k.ravel(), [0, 1])
    np.testing.assert_array_equal(r.dc_kpos.ravel(), [0, -1])
    np.testing.assert_array_equal(r.dc_bpre.ravel(), [0, 1])


def test_repeats_counted_once():
    # W=2: token 1 writes slot 3 twice (a repeat: its gate is not added again).
    k = np.array([[[1, 2], [3, 3], [3, 4]]], np.int64)
    q = np.array([[[3], [3], [3]]], np.int64)
    kv = np.ones((1, 3, 2), np.float32)
    qv = np.ones((1, 3, 1), np.float32)
    g = np.full((1, 3, 1), -1.0, np.float32)
    repeats = np.array([5], np.int64)
    opts = dict(num_parallel=1, stream_offset=0, num_keys=8, valid_last=3)
    r = p1.phase1_forward(k, q, kv, qv, g, repeats, **opts)
    assert repeats[0] == 6
    np.testing.assert_array_equal(r.log_k[0, 1], [-1, -1])  # the gate counted once
    np.testing.assert_array_equal(r.log_k[0, 2], [-2, -1])
    p1.phase1_forward(k, q, kv, qv, g, repeats, **opts)
    assert repeats[0] == 7
    p1.phase1_forward(k, q, kv, qv, g, **opts)  # repeats optional
    k[0, 1] = [3, 0]
    p1.phase1_forward(k, q, kv, qv, g, repeats, **opts)
    assert repeats[0] == 7


def test_plan_reuse_gives_identical_bits():
    (k, q, kv, qv, g), beta, opts = make_inputs(N=6, C=16, W=4, R=3, num_parallel=3)
    (k2, q2, kv2, qv2, g2), beta2, _ = make_inputs(N=6, C=16, W=4, R=3, num_parallel=3, seed=1)
    want = p1.phase1_forward(k, q, kv, qv, g, beta=beta, **opts)
    want2 = p1.phase1_forward(k2, q2, kv2, qv2, g2, beta=beta2, **opts)
    with p1.Plan(N=6, C=16, W=4, R=3, det_fields=p1.DET_SHIPPED | p1.DET_RECORDS, **opts) as plan:
        assert plan.desc["rec_tile"] == 128 and plan.desc["backend"] == 1
        assert plan.workspace_size >= 0
        assert plan.fields["a"] == (np.dtype(np.float32), (6, 16, 16))
        r1 = plan.execute(k, q, kv, qv, g, beta=beta)
        r2 = plan.execute(k2, q2, kv2, qv2, g2, beta=beta2)
        r3 = plan.execute(k, q, kv, qv, g, beta=beta)
        assert r1.a is not r3.a
        with pytest.raises(ValueError, match="k_idx"):
            plan.execute(k[:3], q, kv, qv, g, beta=beta)
        with pytest.raises(ValueError, match="index dtype"):
            plan.execute(k.astype(np.int64), q.astype(np.int64), kv, qv, g, beta=beta)
    assert_same_result(r1, want)
    assert_same_result(r2, want2)
    assert_same_result(r3, want)
    assert plan.closed
    with pytest.raises(ValueError, match="closed"):
        plan.execute(k, q, kv, qv, g, beta=beta)
    plan.close()  # idempotent


def test_plan_refused_by_library_and_del():
    with pytest.raises(p1.Phase1Error) as info:  # sdm_p1_desc.N not a multiple of num_parallel
        p1.Plan(N=3, C=4, W=1, R=1, num_parallel=2, stream_offset=0, num_keys=4)
    assert_error_kind(info.value, "SDM_P1_ERROR_INVALID_ARGUMENT")
    with pytest.raises(ValueError, match="num_parallel"):  # caught as before the classes
        p1.Plan(N=3, C=4, W=1, R=1, num_parallel=2, stream_offset=0, num_keys=4)
    plan = p1.Plan(N=2, C=4, W=1, R=1, num_parallel=2, stream_offset=0, num_keys=4)
    del plan  # __del__ frees it


def test_threads_give_identical_bits():
    (k, q, kv, qv, g), beta, opts = make_inputs(N=16, C=32, W=4, R=4, num_parallel=4,
                                                gate_width=4)
    r1 = p1.phase1_forward(k, q, kv, qv, g, beta=beta, num_threads=1, det_fields=3071,
                           **opts)
    r2 = p1.phase1_forward(k, q, kv, qv, g, beta=beta, num_threads=2, det_fields=3071,
                           **opts)
    assert_same_result(r1, r2)
    for n in (1, 2):
        with p1.Plan(N=16, C=32, W=4, R=4, num_threads=n, **opts) as plan:
            assert plan.desc["num_threads"] == n


@pytest.mark.parametrize("name", ["k_idx", "q_idx", "k_val", "q_val", "g", "beta", "stream_lengths"])
def test_non_contiguous_input_is_refused(name):
    """A non-contiguous input is refused, naming it and the fix, by phase1_forward and
    Plan.execute alike (as for torch, CuPy and JAX: inputs are never copied unseen)."""
    (k, q, kv, qv, g), beta, opts = make_inputs()  # N 4, C 8, num_parallel 2: lengths <= 16
    arrays = dict(k_idx=k, q_idx=q, k_val=kv, q_val=qv, g=g, beta=beta,
                  stream_lengths=np.array([13, 16], np.int64))
    want = p1.phase1_forward(*(arrays[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g")),
                             beta=beta, stream_lengths=arrays["stream_lengths"], **opts)
    strided = np.repeat(arrays[name], 2, axis=-1)[..., ::2]  # the same values, every other element
    assert np.array_equal(strided, arrays[name]) and not strided.flags.c_contiguous
    message = (f"{name} is not contiguous (shape {strided.shape}, strides {strided.strides}): sdm_phase1 "
               f"reads its inputs in place, without copying them; pass np.ascontiguousarray({name})")

    def call(x, run):
        given = dict(arrays, **{name: x})
        return run(*(given[n] for n in ("k_idx", "q_idx", "k_val", "q_val", "g")), beta=given["beta"],
                   stream_lengths=given["stream_lengths"])

    def forward(*args, **kw):
        return p1.phase1_forward(*args, **kw, **opts)

    with p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50,
                 det_fields=p1.DET_SHIPPED | p1.DET_RECORDS) as plan:
        for run in (forward, plan.execute):
            with pytest.raises(ValueError) as info:
                call(strided, run)
            assert str(info.value) == message and not isinstance(info.value, p1.Phase1Error)
            assert_same_result(call(np.ascontiguousarray(strided), run), want)  # the fix it names
    fortran = np.asfortranarray(k)
    with pytest.raises(ValueError, match=r"k_idx is not contiguous .* np\.ascontiguousarray\(k_idx\)"):
        p1.phase1_forward(fortran, q, kv, qv, g, **opts)


def test_valid_last_may_be_left_out_with_stream_lengths():
    """With stream_lengths, valid_last is ignored and may be left out: the same bytes as any
    explicit valid_last. Without them it is required (TypeError, as for None)."""
    (k, q, kv, qv, g), beta, opts = make_inputs()  # N 4, C 8, num_parallel 2
    del opts["valid_last"]
    lengths = np.array([13, 5], np.int32)
    kw = dict(beta=beta, det_fields=3071, stream_lengths=lengths, **opts)
    got = p1.phase1_forward(k, q, kv, qv, g, **kw)
    for valid_last in (8, 3):
        assert_same_result(got, p1.phase1_forward(k, q, kv, qv, g, valid_last=valid_last, **kw))
    full = p1.phase1_forward(k, q, kv, qv, g, **dict(kw, stream_lengths=np.array([16, 16], np.int32)))
    assert not same_bits(got.payload, full.payload)  # the lengths took effect
    with p1.Plan(N=4, C=8, W=3, R=2, num_parallel=2, stream_offset=100, num_keys=50,
                 det_fields=3071) as plan:
        assert_same_result(got, plan.execute(k, q, kv, qv, g, beta=beta, stream_lengths=lengths))
    with pytest.raises(TypeError, match=r"valid_last must be an int, got NoneType None \(it may be "
                                        r"left out only with stream_lengths\)"):
        p1.phase1_forward(k, q, kv, qv, g, **opts)


def test_bfloat16_values():
    (k, q, kv, qv, g), _, opts = make_inputs()
    kb, qb = p1.bf16_from_float32(kv), p1.bf16_from_float32(qv)
    r = p1.phase1_forward(k, q, kb, qb, g, **opts)
    assert r.cpe.dtype == r.k_eff.dtype == r.q_w.dtype == np.uint16
    f = p1.phase1_forward(k, q, p1.bf16_to_float32(kb), p1.bf16_to_float32(qb), g, **opts)
    np.testing.assert_array_equal(r.log_k, f.log_k)
    np.testing.assert_allclose(p1.bf16_to_float32(r.k_eff), f.k_eff, rtol=2**-8)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rb = p1.phase1_forward(k, q, kb.view(ml_dtypes.bfloat16), qb.view(ml_dtypes.bfloat16), g,
                           **opts)
    assert rb.k_eff.dtype == ml_dtypes.bfloat16
    assert rb.k_eff.view(np.uint16).tobytes() == r.k_eff.tobytes()


def test_bf16_helpers():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, np.inf, -np.inf, 0.0,
                  -0.0, 3.4e38, np.nan], np.float32)
    b = p1.bf16_from_float32(x)
    assert b.dtype == np.uint16
    # ties to even: 1 + 2^-8 -> 1.0; 1 + 3 * 2^-8 -> 1 + 2^-6; just above the tie rounds up
    assert list(b[:9]) == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7F80, 0xFF80, 0, 0x8000]
    assert b[9] == 0x7F80  # overflows to inf
    assert np.isnan(p1.bf16_to_float32(b[10]))
    np.testing.assert_array_equal(p1.bf16_to_float32(b[:5]), [1, 1, 1 + 2**-6, 1 + 2**-7, -2.5])
    assert p1.bf16_to_float32(np.uint16(0x4049)) == np.float32(3.140625)


def test_pos_pack():
    assert p1.pos_pack(5, 2, 3) == 5 | 2 << 17 | 3 << 24
    assert p1.pos_pack(5, 300, 1000) == 5 | 127 << 17 | 127 << 24
    pos = np.array([0, 7], np.int32)
    got = p1.pos_pack(pos, np.array([1, 200], np.int32), np.array([2, 500], np.int32))
    np.testing.assert_array_equal(got, [1 << 17 | 2 << 24, 7 | 127 << 17 | 127 << 24])
    assert got.dtype == np.int32
