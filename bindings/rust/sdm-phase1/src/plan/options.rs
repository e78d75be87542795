//! What the library resolved for a plan (`sdm_p1_plan_desc`), and the plan's accessors of it,
//! of its fields, buffers and workspace.
use std::ffi::c_void;
use std::fmt;

use sdm_phase1_sys as sys;

use super::Plan;
use crate::error::{Error, Result, Status};
use crate::outputs::{Field, FieldInfo};
use crate::types::{Backend, DetFields, IndexDtype, OutputMode, ValueDtype};

/// What `sdm_p1_plan_desc` reports, in this crate's types (converted once, at build).
#[derive(Clone, Copy, Debug)]
pub(super) struct Resolved {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) w: usize,
    pub(super) r: usize,
    pub(super) num_parallel: usize,
    pub(super) stream_offset: usize,
    pub(super) num_keys: usize,
    pub(super) valid_last: usize,
    pub(super) index_dtype: IndexDtype,
    pub(super) value_dtype: ValueDtype,
    pub(super) gate_width: usize,
    pub(super) need_read_groups: bool,
    pub(super) det_fields: DetFields,
    pub(super) rec_tile: usize,
    pub(super) backend: Backend,
    pub(super) device: Option<u32>,
    pub(super) num_threads: usize,
    pub(super) output_mode: OutputMode,
    pub(super) backward: bool,
    pub(super) grad_dtype: ValueDtype,
}

/// The value dtype a resolved descriptor field `name` holds (an `sdm_p1_dtype` code).
fn value_dtype_of(name: &str, code: i32) -> Result<ValueDtype> {
    match code as u32 {
        sys::SDM_P1_DTYPE_FLOAT32 => Ok(ValueDtype::F32),
        sys::SDM_P1_DTYPE_BFLOAT16 => Ok(ValueDtype::Bf16),
        _ => Err(unknown(name, code)),
    }
}

impl Resolved {
    pub(super) fn from_desc(desc: &sys::sdm_p1_desc) -> Result<Resolved> {
        let index_dtype = match desc.index_dtype as u32 {
            sys::SDM_P1_DTYPE_INT32 => IndexDtype::I32,
            sys::SDM_P1_DTYPE_INT64 => IndexDtype::I64,
            _ => return Err(unknown("index_dtype", desc.index_dtype)),
        };
        let value_dtype = value_dtype_of("value_dtype", desc.value_dtype)?;
        // Resolved with or without backward: the value dtype unless F32 was asked for.
        let grad_dtype = value_dtype_of("grad_dtype", desc.grad_dtype)?;
        let backend = match desc.backend as u32 {
            sys::SDM_P1_BACKEND_CPU => Backend::Cpu,
            sys::SDM_P1_BACKEND_CUDA => Backend::Cuda,
            _ => return Err(unknown("backend", desc.backend)),
        };
        let output_mode = match desc.output_mode as u32 {
            sys::SDM_P1_OUTPUTS_PLAN => OutputMode::Plan,
            sys::SDM_P1_OUTPUTS_CALLER => OutputMode::Caller,
            _ => return Err(unknown("output_mode", desc.output_mode)),
        };
        let det_fields = u32::try_from(desc.det_fields)
            .ok()
            .and_then(DetFields::from_bits)
            .ok_or_else(|| unknown("det_fields", desc.det_fields))?;
        // The CPU backend keeps the device as given: unset stays SDM_P1_UNSET.
        let device = if desc.device == sys::SDM_P1_UNSET {
            None
        } else {
            Some(from_c("device", desc.device)?)
        };
        Ok(Resolved {
            n: from_c("N", desc.N)?,
            c: from_c("C", desc.C)?,
            w: from_c("W", desc.W)?,
            r: from_c("R", desc.R)?,
            num_parallel: from_c("num_parallel", desc.num_parallel)?,
            stream_offset: from_c("stream_offset", desc.stream_offset)?,
            num_keys: from_c("num_keys", desc.num_keys)?,
            valid_last: from_c("valid_last", desc.valid_last)?,
            index_dtype,
            value_dtype,
            gate_width: from_c("gate_width", desc.gate_width)?,
            need_read_groups: desc.need_read_groups != 0,
            det_fields,
            rec_tile: from_c("rec_tile", desc.rec_tile)?,
            backend,
            device,
            num_threads: from_c("num_threads", desc.num_threads)?,
            output_mode,
            backward: desc.backward != 0,
            grad_dtype,
        })
    }
}

/// A resolved option as this crate's type; the library validated it, so a value that does
/// not fit (a negative count) is a library bug.
fn from_c<T: TryFrom<i64>>(option: &str, value: impl Into<i64>) -> Result<T> {
    let value = value.into();
    T::try_from(value).map_err(|_| unknown(option, value))
}

fn unknown(option: &str, value: impl fmt::Display) -> Error {
    Error::new(
        Status::Internal,
        format!("sdm_p1_plan_desc reports {option} = {value}, which this crate cannot represent"),
    )
}

impl Plan {
    /// Whether the plan may run [`Plan::execute_backward`] ([`PlanBuilder::backward`](crate::PlanBuilder::backward)).
    pub fn backward(&self) -> bool {
        self.options.backward
    }

    /// Element type of the `k_val` / `q_val` gradients (resolved: the value dtype unless
    /// [`PlanBuilder::grad_dtype`](crate::PlanBuilder::grad_dtype) asked for `F32`).
    pub fn grad_dtype(&self) -> ValueDtype {
        self.options.grad_dtype
    }

    /// Dtype, whether computed, shape and size of `field`.
    pub fn field_info(&self, field: Field) -> &FieldInfo {
        &self.infos[field.index()]
    }

    /// [`Plan::field_info`] of every field, in field order.
    pub fn fields(&self) -> &[FieldInfo] {
        &self.infos
    }

    /// The address of the plan's own buffer for `field` (device memory for the CUDA backend),
    /// or null when the plan does not compute the field or is in [`OutputMode::Caller`].
    /// Reading it is up to the caller (for CUDA, after synchronizing the execute's stream).
    pub fn buffer_ptr(&self, field: Field) -> *mut c_void {
        self.buffers[field.index()]
    }

    /// Bytes of workspace the plan holds.
    pub fn workspace_size(&self) -> usize {
        self.workspace_size
    }

    /// N: chunks.
    pub fn n(&self) -> usize {
        self.options.n
    }

    /// C: tokens per chunk.
    pub fn c(&self) -> usize {
        self.options.c
    }

    /// W: write slots per token.
    pub fn w(&self) -> usize {
        self.options.w
    }

    /// R: read slots per token.
    pub fn r(&self) -> usize {
        self.options.r
    }

    /// Number of streams.
    pub fn num_parallel(&self) -> usize {
        self.options.num_parallel
    }

    /// Slot-id offset between streams.
    pub fn stream_offset(&self) -> usize {
        self.options.stream_offset
    }

    /// Slots per stream.
    pub fn num_keys(&self) -> usize {
        self.options.num_keys
    }

    /// Valid tokens in each stream's last chunk (resolved: C when unset).
    pub fn valid_last(&self) -> usize {
        self.options.valid_last
    }

    /// Gates per token (1 or W).
    pub fn gate_width(&self) -> usize {
        self.options.gate_width
    }

    /// Element type of the slot ids.
    pub fn index_dtype(&self) -> IndexDtype {
        self.options.index_dtype
    }

    /// Element type of the values.
    pub fn value_dtype(&self) -> ValueDtype {
        self.options.value_dtype
    }

    /// Whether the read-side groups are computed.
    pub fn need_read_groups(&self) -> bool {
        self.options.need_read_groups
    }

    /// The optional outputs computed (resolved: [`DetFields::SHIPPED`] when unset).
    pub fn det_fields(&self) -> DetFields {
        self.options.det_fields
    }

    /// Tile length L (resolved: 128 when unset).
    pub fn rec_tile(&self) -> usize {
        self.options.rec_tile
    }

    /// The backend the plan runs on ([`Backend::Auto`] resolved to CPU or CUDA).
    pub fn backend(&self) -> Backend {
        self.options.backend
    }

    /// The CUDA device ordinal: for the CUDA backend the one the library resolved; for the
    /// CPU backend, which ignores it, what the builder was given (`None`: not set).
    pub fn device(&self) -> Option<u32> {
        self.options.device
    }

    /// CPU worker threads (resolved: the hardware's thread count when unset, at most N).
    pub fn num_threads(&self) -> usize {
        self.options.num_threads
    }

    /// Who provides the output buffers.
    pub fn output_mode(&self) -> OutputMode {
        self.options.output_mode
    }
}
