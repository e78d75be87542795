"""Finding and loading libsdmp1.so through cffi (ABI mode), with the declarations made from the
public header (declarations.py): the build's copy where this installation has one, else the
checkout's header at import."""

from __future__ import annotations

import ctypes.util
import os
from importlib import resources
from pathlib import Path
from typing import Any, List, Optional, Tuple

import cffi

from .declarations import CDEF_FILE, declarations

__all__ = ["CDEF", "CDEF_SOURCE", "ENV_VAR", "LIBRARY_FILE", "ffi", "lib", "library_path",
           "candidate_paths", "checkout_root"]

#: The environment variable naming the exact library file to load.
ENV_VAR = "SDMP1_LIBRARY"
#: The library's file name inside the package (the wheel's, or an editable install's build).
LIBRARY_FILE = "libsdmp1.so"
#: The library major version this binding speaks.
ABI_MAJOR = 1
_PACKAGE = "sdm_phase1"
#: This package's folder as Python sees it: <repo>/bindings/python/sdm_phase1 in a checkout
#: (an editable install too), site-packages/sdm_phase1 for a wheel.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def checkout_root(package_dir: Path) -> Optional[Path]:
    """The repository root when ``package_dir`` is <repo>/bindings/python/sdm_phase1 of a
    checkout, else None (an installed package)."""
    if package_dir.parent.name == "python" and package_dir.parent.parent.name == "bindings":
        return package_dir.parents[2]
    return None


def _load_declarations() -> Tuple[str, str]:
    """(the declarations, the file they were read or made from): the build's generated file
    where this installation has one (a wheel; an editable install, whose build folder
    meson-python maps into the package's files), else made from the checkout's header."""
    generated = resources.files(f"{_PACKAGE}._c") / CDEF_FILE
    if generated.is_file():
        return generated.read_text(encoding="utf-8"), str(generated)
    root = checkout_root(_PACKAGE_DIR)
    header = root / "include" / "sdm" / "phase1.h" if root is not None else None
    if header is None or not header.is_file():
        raise ImportError(
            f"sdm_phase1: no C declarations: neither the build's {CDEF_FILE} (an installed package "
            f"has it in {_PACKAGE}/_c) nor a checkout's include/sdm/phase1.h (from which a source "
            f"tree makes them) was found for the package in {_PACKAGE_DIR}"
        )
    return declarations(header), str(header)


def candidate_paths(package_files: Any = None, package_dir: Optional[Path] = None) -> List[str]:
    """The library files (or names) tried, in order, after the SDMP1_LIBRARY override.

    1. The installation's own libsdmp1.so: inside the package (a wheel) or in the build folder
       of an editable install (meson-python maps the package's files there, so they are not a
       plain folder). When the installation has one, or is an editable install, nothing else
       is tried: an installation never loads another build's library.
    2. The checkout's build/libsdmp1.so, for a package run from a source tree (not installed).
    3. The system's (find_library, then libsdmp1.so.1).

    ``package_files`` (``importlib.resources.files("sdm_phase1")``) and ``package_dir`` (the
    package's folder) are given by the tests; they default to this package's.
    """
    files = package_files if package_files is not None else resources.files(_PACKAGE)
    own = files / LIBRARY_FILE
    editable = not isinstance(files, Path)
    if editable:
        return [os.fspath(own)] if isinstance(own, Path) else []
    if own.is_file():
        return [str(own)]
    root = checkout_root(package_dir if package_dir is not None else _PACKAGE_DIR)
    tree = [str(root / "build" / LIBRARY_FILE)] if root is not None else []
    found = ctypes.util.find_library("sdmp1")
    system = [found] if found else []
    if "libsdmp1.so.1" not in system:
        system.append("libsdmp1.so.1")
    return tree + system


def _load(ffi: cffi.FFI) -> Tuple[Any, str]:
    """dlopens libsdmp1 (see candidate_paths for the order); returns (lib, path)."""
    override = os.environ.get(ENV_VAR)
    if override:
        if not os.path.isfile(override):
            raise ImportError(
                f"sdm_phase1: {ENV_VAR}={override!r} does not name an existing file "
                "(it must be the path of libsdmp1.so)"
            )
        try:
            return ffi.dlopen(override), override
        except OSError as e:
            raise ImportError(f"sdm_phase1: cannot load {ENV_VAR}={override!r}: {e}") from e
    tried = [f"{ENV_VAR}: not set"]
    candidates = candidate_paths()
    own = resources.files(_PACKAGE) / LIBRARY_FILE
    if candidates[:1] != [str(own)]:
        tried.append(f"{own} (no such file: the package's own, which a wheel has)")
    if checkout_root(_PACKAGE_DIR) is None:
        tried.append(f"a checkout's build/{LIBRARY_FILE}: not tried ({_PACKAGE_DIR} is an "
                     "installed package, not bindings/python/sdm_phase1 of a checkout)")
    for cand in candidates:
        if os.path.sep in cand and not os.path.isfile(cand):
            tried.append(f"{cand} (no such file)")
            continue
        try:
            return ffi.dlopen(cand), cand
        except OSError as e:
            tried.append(f"{cand} ({e})")
    raise ImportError(
        "sdm_phase1: libsdmp1 not found. Install the package (pip install . from the repository "
        "root, which builds it inside the package), build it (meson setup build && ninja -C "
        f"build), install it (meson install -C build, then ldconfig), or set {ENV_VAR} to the "
        "path of libsdmp1.so. Tried, in order:\n  " + "\n  ".join(tried)
    )


def _check_version(lib: Any, path: str) -> None:
    number = int(lib.sdm_p1_version_number())
    if number // 10000 != ABI_MAJOR:
        raise ImportError(
            f"sdm_phase1: {path} is libsdmp1 {ffi.string(lib.sdm_p1_version_string()).decode()}"
            f" (version number {number}); this binding needs major version {ABI_MAJOR}"
        )


#: The C declarations given to cffi (include/sdm/phase1.h without its comments and
#: preprocessor logic), and the file they were read from (the build's) or made from (the
#: checkout's header).
CDEF, CDEF_SOURCE = _load_declarations()
ffi = cffi.FFI()
ffi.cdef(CDEF)
#: ``lib``: the loaded library; ``library_path``: the file or name it was loaded from.
lib, library_path = _load(ffi)
_check_version(lib, library_path)
