"""The exceptions raised when a libsdmp1 call fails: :class:`Phase1Error`, the base, and one
subclass per ``sdm_p1_status``, each also derived from the built-in exception of its kind, so
that ``except ValueError`` (a bad option or bad data), ``except MemoryError`` and ``except
RuntimeError`` (the backend, CUDA, a bug) catch what they catch anywhere else."""

from __future__ import annotations

from typing import Dict, Type

from .._c import ffi, lib

__all__ = ["Phase1Error", "InvalidArgumentError", "UnsupportedError", "InvalidInputError",
           "OutOfMemoryError", "BackendUnavailableError", "CudaError", "InternalError",
           "ERROR_CLASSES", "error_class", "check"]


class Phase1Error(Exception):
    """A libsdmp1 call failed: the base of the exceptions below (one per status code).

    Attributes:
        status: the status name, e.g. ``"SDM_P1_ERROR_INVALID_ARGUMENT"``.
        code: the numeric ``sdm_p1_status``.
        message: the library's ``sdm_p1_last_error()`` text.
        function: the C function that failed.
    """

    def __init__(self, function: str, code: int, status: str, message: str):
        where = "" if message.startswith(function) else f"{function}: "
        super().__init__(f"{status}: {where}{message}")
        self.function = function
        self.code = code
        self.status = status
        self.message = message

    def __reduce__(self):
        # Pickled with the constructor's arguments (multiprocessing, torch.distributed): the
        # default would call the class with the formatted text alone.
        return type(self), (self.function, self.code, self.status, self.message)


class InvalidArgumentError(Phase1Error, ValueError):
    """SDM_P1_ERROR_INVALID_ARGUMENT: an option or shape outside its range (num_parallel not
    dividing N, unknown det_fields bits, kspa without beta, ...)."""


class UnsupportedError(Phase1Error, NotImplementedError, ValueError):
    """SDM_P1_ERROR_UNSUPPORTED: a legal request beyond this library's limits (C > 256,
    C * (W + R) > 2**17, a plan too large to address). A NotImplementedError, as the library
    does not implement the case; also a ValueError, as the limit is on argument values and
    code that caught ValueError for them (what every failure was before) keeps working."""


class InvalidInputError(Phase1Error, ValueError):
    """SDM_P1_ERROR_INVALID_INPUT: the data break a rule (a valid token's slot id outside its
    stream's range, a non-finite or too large gate, a stream length out of range)."""


class OutOfMemoryError(Phase1Error, MemoryError):
    """SDM_P1_ERROR_OUT_OF_MEMORY: an allocation (the library's or the framework's) failed,
    or the system refused a resource (a CPU worker thread)."""


class BackendUnavailableError(Phase1Error, RuntimeError):
    """SDM_P1_ERROR_BACKEND_UNAVAILABLE: the backend is not built into the loaded library, has
    no device, or was not built for the device's architecture."""


class CudaError(Phase1Error, RuntimeError):
    """SDM_P1_ERROR_CUDA: a CUDA runtime call failed (the message names it)."""


class InternalError(Phase1Error, RuntimeError):
    """SDM_P1_ERROR_INTERNAL: a bug in libsdmp1 (please report the message)."""


#: sdm_p1_status code -> the exception raised for it.
ERROR_CLASSES: Dict[int, Type[Phase1Error]] = {
    lib.SDM_P1_ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    lib.SDM_P1_ERROR_UNSUPPORTED: UnsupportedError,
    lib.SDM_P1_ERROR_INVALID_INPUT: InvalidInputError,
    lib.SDM_P1_ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    lib.SDM_P1_ERROR_BACKEND_UNAVAILABLE: BackendUnavailableError,
    lib.SDM_P1_ERROR_CUDA: CudaError,
    lib.SDM_P1_ERROR_INTERNAL: InternalError,
}


def error_class(code: int) -> Type[Phase1Error]:
    """The exception class of status ``code``; Phase1Error itself for a code this binding does
    not know (a newer library's)."""
    return ERROR_CLASSES.get(int(code), Phase1Error)


def check(function: str, code: int) -> None:
    """Raises the :class:`Phase1Error` subclass of ``code`` unless it is SDM_P1_SUCCESS (call
    right after the failing call, on the same thread, so the last-error message is that
    call's)."""
    if code == lib.SDM_P1_SUCCESS:
        return
    message = ffi.string(lib.sdm_p1_last_error()).decode("utf-8", "replace")
    status = ffi.string(lib.sdm_p1_status_string(code)).decode("ascii", "replace")
    raise error_class(code)(function, int(code), status, message)
