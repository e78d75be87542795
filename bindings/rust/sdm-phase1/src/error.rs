//! Status codes and the error type.
use std::ffi::CStr;
use std::fmt;

use sdm_phase1_sys as sys;

/// The failure status of a libsdmp1 call (`sdm_p1_status` without `SDM_P1_SUCCESS`).
///
/// Non-exhaustive: a minor release of the library may add codes; until this crate names
/// one, it arrives as [`Status::Unknown`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `SDM_P1_ERROR_INVALID_ARGUMENT`: a malformed request (an option out of its range, a
    /// slice of the wrong length or element type, a null pointer).
    InvalidArgument,
    /// `SDM_P1_ERROR_UNSUPPORTED`: a legal request the library does not support (e.g. C > 256).
    Unsupported,
    /// `SDM_P1_ERROR_INVALID_INPUT`: the input data break a rule (a slot id outside its
    /// stream's range, a bad gate); the message names the first offending chunk, token and lane.
    InvalidInput,
    /// `SDM_P1_ERROR_OUT_OF_MEMORY`: an allocation failed.
    OutOfMemory,
    /// `SDM_P1_ERROR_BACKEND_UNAVAILABLE`: the backend is not built in or has no device.
    BackendUnavailable,
    /// `SDM_P1_ERROR_CUDA`: a CUDA runtime call failed (the message names it).
    Cuda,
    /// `SDM_P1_ERROR_INTERNAL`: a bug in libsdmp1.
    Internal,
    /// A code this crate does not know (from a newer library).
    Unknown(u32),
}

impl Status {
    /// The C value of this status.
    pub fn code(self) -> u32 {
        match self {
            Status::InvalidArgument => sys::SDM_P1_ERROR_INVALID_ARGUMENT,
            Status::Unsupported => sys::SDM_P1_ERROR_UNSUPPORTED,
            Status::InvalidInput => sys::SDM_P1_ERROR_INVALID_INPUT,
            Status::OutOfMemory => sys::SDM_P1_ERROR_OUT_OF_MEMORY,
            Status::BackendUnavailable => sys::SDM_P1_ERROR_BACKEND_UNAVAILABLE,
            Status::Cuda => sys::SDM_P1_ERROR_CUDA,
            Status::Internal => sys::SDM_P1_ERROR_INTERNAL,
            Status::Unknown(code) => code,
        }
    }

    /// The status for a C value; `None` for `SDM_P1_SUCCESS`.
    pub fn from_code(code: u32) -> Option<Status> {
        Some(match code {
            sys::SDM_P1_SUCCESS => return None,
            sys::SDM_P1_ERROR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::SDM_P1_ERROR_UNSUPPORTED => Status::Unsupported,
            sys::SDM_P1_ERROR_INVALID_INPUT => Status::InvalidInput,
            sys::SDM_P1_ERROR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::SDM_P1_ERROR_BACKEND_UNAVAILABLE => Status::BackendUnavailable,
            sys::SDM_P1_ERROR_CUDA => Status::Cuda,
            sys::SDM_P1_ERROR_INTERNAL => Status::Internal,
            other => Status::Unknown(other),
        })
    }

    /// The library's constant name, e.g. `"SDM_P1_ERROR_INVALID_INPUT"`.
    pub fn name(self) -> &'static str {
        // SAFETY: the library returns a non-null pointer to a static, NUL-terminated string.
        let name = unsafe { CStr::from_ptr(sys::sdm_p1_status_string(self.code())) };
        name.to_str().unwrap_or("SDM_P1_UNKNOWN_STATUS")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: the status and the message that explains it.
///
/// Errors from the library carry its message (`sdm_p1_last_error`, read on the same thread
/// right after the failing call). Checks this crate makes before calling the library (slice
/// lengths, element types, the backend a method needs) report [`Status::InvalidArgument`] with
/// a message naming the method and the argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with this status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// The status code.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The message (the library's `sdm_p1_last_error` text for library errors).
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// The result of this crate's fallible calls.
pub type Result<T> = std::result::Result<T, Error>;

/// Ok for `SDM_P1_SUCCESS`, else the status with this thread's last-error message.
pub(crate) fn check(code: sys::sdm_p1_status) -> Result<()> {
    match Status::from_code(code) {
        None => Ok(()),
        Some(status) => Err(Error::new(status, last_error())),
    }
}

/// The calling thread's last libsdmp1 error message.
fn last_error() -> String {
    // SAFETY: never null; valid until this thread's next libsdmp1 call, and copied at once.
    let text = unsafe { CStr::from_ptr(sys::sdm_p1_last_error()) };
    text.to_string_lossy().into_owned()
}
