"""The exception raised when a libsdmp1 call fails."""

from __future__ import annotations

from ._library import ffi, lib

__all__ = ["Phase1Error", "check"]


class Phase1Error(ValueError):
    """A libsdmp1 call failed.

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


def check(function: str, code: int) -> None:
    """Raises :class:`Phase1Error` unless ``code`` is SDM_P1_SUCCESS (call right after the
    failing call, on the same thread, so the last-error message is that call's)."""
    if code == lib.SDM_P1_SUCCESS:
        return
    message = ffi.string(lib.sdm_p1_last_error()).decode("utf-8", "replace")
    status = ffi.string(lib.sdm_p1_status_string(code)).decode("ascii", "replace")
    raise Phase1Error(function, int(code), status, message)
