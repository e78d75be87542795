//! Safe Rust API for libsdmp1: Phase 1 of the chunked Sparse Delta Memory recurrence.
//!
//! Phase 1 turns N chunks of C tokens, each writing W slots and reading R slots of a slot bank,
//! into every quantity of the recurrence that does not depend on the memory contents (the
//! per-slot log-cumsums of the gates, the intra-chunk matrices `a` and `qk`, the effective
//! weights, group flags, sorted layouts and records). `include/sdm/phase1.h` documents the
//! meaning of every option and output; this crate wraps it:
//!
//! - [`PlanBuilder`] holds the shapes and options and [`build`](PlanBuilder::build)s a
//!   [`Plan`], which frees itself on drop.
//! - [`Plan::execute`] runs the CPU backend on host slices ([`Inputs`]), checked against the
//!   plan (lengths, `i32`/`i64` ids, `f32`/[`Bf16`] values), and returns [`Outputs`]: typed
//!   views of the plan's buffers. [`Plan::execute_into`] writes caller-owned
//!   [`OutputBuffers`] instead. Both take optional per-stream lengths (`Some(&[usize])`, one
//!   per stream) in place of the plan's `valid_last` rule.
//! - [`Plan::execute_backward`] (since 1.3; a plan built with
//!   [`backward(true)`](PlanBuilder::backward), CPU backend) takes upstream gradients by
//!   output field ([`OutputGradients`]) and returns the gradients of `k_val`, `q_val`, `g` and
//!   `beta` ([`InputGradients`]); [`Plan::execute_backward_into`] writes them into reused
//!   vectors.
//! - [`Plan::execute_device`] (`unsafe`) enqueues the CUDA backend on raw device pointers and
//!   a raw stream; [`Plan::execute_status`] reports its data check after a synchronize.
//! - Every failure is an [`Error`]: a [`Status`] and the library's message.
//!
//! Shapes, counts, lengths and slot offsets are `usize` (the CUDA device ordinal `u32`); the
//! crate converts them to the C API's integer types with checks, and a value out of the C
//! range is an [`Error`] naming it. The enums and structs that mirror C enums and versioned
//! C structs are `#[non_exhaustive]`, so that the library's minor releases can add variants
//! and fields: build [`Inputs`] and [`DeviceInputs`] with their `new` constructors, and give
//! `match`es on this crate's enums a `_` arm.
//!
//! The outputs are bit for bit those of the C API (the CPU backend defines every bit).
//!
//! # Example
//!
//! Two streams of two chunks of 8 tokens, each token writing 2 and reading 2 of its stream's
//! 16 slots:
//!
//! ```
//! use sdm_phase1::{Backend, Field, Inputs, PlanBuilder};
//!
//! # fn main() -> Result<(), sdm_phase1::Error> {
//! let (n, c, w, r) = (4, 8, 2, 2); // usize
//! let mut plan = PlanBuilder::new(n, c, w, r)
//!     .num_parallel(2) // chunk i belongs to stream i % 2
//!     .stream_offset(100) // stream s owns the slots [100 * s, 100 * s + 16)
//!     .num_keys(16)
//!     .backend(Backend::Cpu)
//!     .build()?;
//!
//! let tokens = n * c;
//! let (mut k_idx, mut q_idx) = (Vec::new(), Vec::new());
//! for t in 0..tokens {
//!     let base = 100 * ((t / c) % 2) as i32;
//!     let slot = (t % 8) as i32 * 2;
//!     k_idx.extend([base + slot, base + slot + 1]); // distinct slots per token
//!     q_idx.extend([base + slot, base + (slot + 5) % 16]);
//! }
//! let k_val = vec![0.5f32; tokens * 2];
//! let q_val = vec![1.0f32; tokens * 2];
//! let g = vec![-0.1f32; tokens]; // one log-gate per token
//!
//! let inputs = Inputs::new(&k_idx, &q_idx, &k_val, &q_val, &g);
//! let out = plan.execute(&inputs, None)?; // None: no per-stream lengths
//! let a: &[f32] = out.slice(Field::A)?; // [N, C, C]
//! let log_k: &[f32] = out.slice(Field::LogK)?; // [N, C, W]
//! assert_eq!(a.len(), tokens * c);
//! assert_eq!(out.get(Field::LogK).unwrap().shape(), &[4, 8, 2]);
//! assert_eq!(log_k[0], -0.1); // the first write of a slot: its own gate
//! assert_eq!(out.repeats(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Linking
//!
//! `sdm-phase1-sys` finds libsdmp1 through `SDMP1_LIB_DIR`, else `pkg-config sdmp1`, else the
//! source tree's `build/` directory, and links `libsdmp1.a` into the program, which then runs
//! with no library path set. The `shared` feature links `libsdmp1.so` instead (with an rpath
//! for this crate's own tests and examples; a program of yours finds it through the loader's
//! path or an rpath of its own build script).
//!
//! # Threads
//!
//! [`Plan`] is `Send` and `Sync`: a plan may move between threads, and shared references only
//! read it, because every method that runs it takes `&mut self` (the header forbids executing
//! a plan concurrently with itself). Different plans run concurrently from different threads.
#![deny(missing_docs)]

mod error;
mod gradients;
mod outputs;
mod plan;
mod types;

use std::ffi::CStr;

pub use sdm_phase1_sys as sys;

pub use error::{Error, Result, Status};
pub use gradients::{InputGradients, OutputGradients};
pub use outputs::{Field, FieldInfo, Outputs, Tensor};
pub use plan::{DeviceInputs, DeviceStreamLengths, Inputs, OutputBuffers, Plan, PlanBuilder};
pub use types::{
    Backend, Bf16, Data, DetFields, Dtype, Element, Index, IndexDtype, OutputMode, Value,
    ValueDtype,
};

/// The version of the header these bindings were generated from, as
/// major * 10000 + minor * 100 + patch (10400 for 1.4.0).
pub const HEADER_VERSION: u32 = sys::SDM_P1_VERSION_NUMBER;

/// The version of the library actually loaded, as [`HEADER_VERSION`].
pub fn version_number() -> u32 {
    // SAFETY: no arguments, no preconditions.
    unsafe { sys::sdm_p1_version_number() }
}

/// The version of the library actually loaded, as text (`"1.4.0"`).
pub fn version_string() -> &'static str {
    // SAFETY: the library returns a static, NUL-terminated string.
    let text = unsafe { CStr::from_ptr(sys::sdm_p1_version_string()) };
    text.to_str().unwrap_or("?")
}

/// The number of CUDA devices the CUDA backend can use (`sdm_p1_cuda_device_count`): 0 when
/// the backend is built in but the machine has no driver or device;
/// [`Status::BackendUnavailable`] when the library was built without the CUDA backend.
pub fn cuda_device_count() -> Result<usize> {
    let mut count = 0;
    // SAFETY: a valid out pointer.
    error::check(unsafe { sys::sdm_p1_cuda_device_count(&mut count) })?;
    Ok(count.max(0) as usize)
}

/// The GPU architectures the CUDA backend carries kernels for (`sdm_p1_cuda_architectures`,
/// since 1.2): space-separated `sm_XY` (machine code) and `compute_XY` (PTX) names, e.g.
/// `"sm_90"`; [`Status::BackendUnavailable`] when the library was built without the CUDA
/// backend.
pub fn cuda_architectures() -> Result<&'static str> {
    let mut list: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: a valid out pointer; the library stores a static, NUL-terminated string.
    error::check(unsafe { sys::sdm_p1_cuda_architectures(&mut list) })?;
    // SAFETY: set by the successful call above.
    let text = unsafe { CStr::from_ptr(list) };
    Ok(text.to_str().unwrap_or(""))
}
