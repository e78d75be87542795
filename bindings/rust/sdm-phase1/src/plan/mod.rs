//! Plans: the builder, host and device execution, caller-owned output buffers. By concept:
//! [`builder`] (the shapes and options: `PlanBuilder`), [`inputs`] (host and device inputs and
//! their checks), [`output_buffers`] (caller-owned host buffers), [`options`] (what the
//! library resolved, and the plan's accessors), [`forward`] (the executes) and [`backward`]
//! (the backward's executes); this file holds the plan itself and how it is read back once
//! built.
mod backward;
mod builder;
mod forward;
mod inputs;
mod options;
mod output_buffers;

use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};

use sdm_phase1_sys as sys;

use crate::error::{check, Result};
use crate::outputs::{Field, FieldInfo};

pub use builder::PlanBuilder;
pub use inputs::{DeviceInputs, DeviceStreamLengths, Inputs};
use options::Resolved;
pub use output_buffers::OutputBuffers;

/// Owns the library's plan object and destroys it on drop.
struct RawPlan(NonNull<sys::sdm_p1_plan>);

impl Drop for RawPlan {
    fn drop(&mut self) {
        // SAFETY: the pointer came from sdm_p1_plan_create and is destroyed once, here.
        // Destroying a valid plan cannot fail in a way the caller could act on.
        unsafe { sys::sdm_p1_plan_destroy(self.0.as_ptr()) };
    }
}

/// A plan (`sdm_p1_plan`): shapes, options, output buffers and workspace, freed on drop.
///
/// A plan may be executed any number of times, never concurrently with itself: every execute
/// takes `&mut self`. Outputs are views borrowed from the plan (or from [`OutputBuffers`]),
/// so they cannot outlive it or be overwritten while borrowed.
pub struct Plan {
    raw: RawPlan,
    // The options the library resolved (every unset option replaced by its choice).
    options: Resolved,
    infos: Vec<FieldInfo>,
    // The plan's own output buffers (null in OutputMode::Caller and for fields not computed).
    buffers: Vec<*mut c_void>,
    workspace_size: usize,
    // Whether the plan's host buffers hold the outputs of a successful execute.
    executed: bool,
}

// SAFETY: Send. The plan is a heap object of the library with no tie to the thread that made
// it: the library's only thread-local state is the last-error message, which this crate reads
// on the calling thread right after each failing call, and sdm_p1_plan_destroy (on drop) makes
// the plan's device current itself. So a plan may be built, executed and dropped on different
// threads.
unsafe impl Send for Plan {}

// SAFETY: Sync. Every method that calls into the library with the plan (execute,
// execute_into, execute_device, execute_status, execute_backward, execute_backward_into) or
// that lets it write its buffers takes `&mut self`, so the header's rule "not executed
// concurrently with itself" is enforced by the borrow checker. Methods on `&self` call no
// library function: they read what `build` cached (resolved options, field shapes, buffer
// addresses) and the host output buffers, which nothing writes while a shared borrow
// exists. Sharing `&Plan` between threads is therefore only concurrent reading.
unsafe impl Sync for Plan {}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("options", &self.options)
            .field("workspace_size", &self.workspace_size)
            .finish_non_exhaustive()
    }
}

impl Plan {
    /// Reads back what the library resolved and the output views, once.
    fn describe(raw: RawPlan) -> Result<Plan> {
        let plan = raw.0.as_ptr();
        let mut desc = sys::desc_initializer();
        // SAFETY: a live plan and a descriptor of the right size.
        check(unsafe { sys::sdm_p1_plan_desc(plan, &mut desc) })?;
        let mut views = [empty_view(); Field::COUNT];
        // SAFETY: views has room for Field::COUNT tensors.
        check(unsafe { sys::sdm_p1_outputs(plan, views.as_mut_ptr(), Field::COUNT as i32) })?;
        let mut workspace_size = 0;
        // SAFETY: a live plan and a valid out pointer.
        check(unsafe { sys::sdm_p1_workspace_size(plan, &mut workspace_size) })?;

        let infos = Field::ALL
            .iter()
            .zip(&views)
            .map(|(&f, v)| FieldInfo::from_view(f, v))
            .collect::<Result<Vec<_>>>()?;
        Ok(Plan {
            raw,
            options: Resolved::from_desc(&desc)?,
            infos,
            buffers: views.iter().map(|v| v.data).collect(),
            workspace_size,
            executed: false,
        })
    }
}

fn empty_view() -> sys::sdm_p1_tensor {
    sys::sdm_p1_tensor {
        name: ptr::null(),
        dtype: 0,
        requested: 0,
        ndim: 0,
        shape: [0; 3],
        bytes: 0,
        data: ptr::null_mut(),
    }
}
