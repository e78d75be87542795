"""The C side of the binding: libsdmp1's cffi declarations, made from its public header
(declarations.py), and the library loaded with them (library.py)."""

from .library import CDEF, CDEF_SOURCE, ENV_VAR, candidate_paths, ffi, lib, library_path

__all__ = ["CDEF", "CDEF_SOURCE", "ENV_VAR", "candidate_paths", "ffi", "lib", "library_path"]
