//! The shapes and options of a plan: `PlanBuilder`, which builds it.
use std::fmt;
use std::ptr::{self, NonNull};

use sdm_phase1_sys as sys;

use super::{Plan, RawPlan};
use crate::error::{check, Error, Result, Status};
use crate::types::{Backend, DetFields, IndexDtype, OutputMode, ValueDtype};

/// The shapes and options of a plan (`sdm_p1_desc`); [`build`](PlanBuilder::build) creates it.
///
/// Every option left alone keeps the header's default: the descriptor starts from
/// [`sys::desc_initializer`] (this crate's one copy of `SDM_P1_DESC_INITIALIZER`) and only the
/// options set here are written over it. The library validates them all at
/// [`build`](PlanBuilder::build) and reports the first bad one by name. `num_keys` has no
/// usable default and must be set.
///
/// Shapes, counts and slot offsets are `usize`; the CUDA device ordinal is `u32` (ordinals
/// are small and never negative). [`build`](PlanBuilder::build) converts each to the
/// descriptor's C type and fails with [`Status::InvalidArgument`] naming the option when it
/// does not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanBuilder {
    n: usize,
    c: usize,
    w: usize,
    r: usize,
    // None: the initializer's value.
    num_parallel: Option<usize>,
    stream_offset: Option<usize>,
    num_keys: Option<usize>,
    valid_last: Option<usize>,
    index_dtype: Option<IndexDtype>,
    value_dtype: Option<ValueDtype>,
    gate_width: Option<usize>,
    need_read_groups: Option<bool>,
    det_fields: Option<DetFields>,
    rec_tile: Option<usize>,
    backend: Option<Backend>,
    device: Option<u32>,
    num_threads: Option<usize>,
    output_mode: Option<OutputMode>,
    backward: Option<bool>,
    grad_dtype: Option<ValueDtype>,
}

impl PlanBuilder {
    /// A plan of `n` chunks of `c` tokens (1..=256), each writing `w` and reading `r` slots
    /// (1..=256 each, with `c * (w + r) <= 2^17`). Defaults (the header's): one stream at
    /// offset 0, i32 ids, f32 values, one gate per token, read groups on, the spec's default
    /// det_fields, the library's choice of backend, the plan's own output buffers.
    pub fn new(n: usize, c: usize, w: usize, r: usize) -> PlanBuilder {
        PlanBuilder {
            n,
            c,
            w,
            r,
            num_parallel: None,
            stream_offset: None,
            num_keys: None,
            valid_last: None,
            index_dtype: None,
            value_dtype: None,
            gate_width: None,
            need_read_groups: None,
            det_fields: None,
            rec_tile: None,
            backend: None,
            device: None,
            num_threads: None,
            output_mode: None,
            backward: None,
            grad_dtype: None,
        }
    }

    /// Number of streams: chunk `i` belongs to stream `i % num_parallel` (it must divide N;
    /// default 1).
    pub fn num_parallel(mut self, num_parallel: usize) -> PlanBuilder {
        self.num_parallel = Some(num_parallel);
        self
    }

    /// Stream `s` owns the slot ids `[s * stream_offset, s * stream_offset + num_keys)`
    /// (default 0).
    pub fn stream_offset(mut self, stream_offset: usize) -> PlanBuilder {
        self.stream_offset = Some(stream_offset);
        self
    }

    /// Slots per stream, 1..=2^32 (required).
    pub fn num_keys(mut self, num_keys: usize) -> PlanBuilder {
        self.num_keys = Some(num_keys);
        self
    }

    /// Valid tokens in each stream's last chunk, 1..=C (default C); later tokens are padding.
    pub fn valid_last(mut self, valid_last: usize) -> PlanBuilder {
        self.valid_last = Some(valid_last);
        self
    }

    /// Element type of `k_idx` and `q_idx` (default `i32`).
    pub fn index_dtype(mut self, dtype: IndexDtype) -> PlanBuilder {
        self.index_dtype = Some(dtype);
        self
    }

    /// Element type of `k_val`, `q_val`, `cpe`, `k_eff` and `q_w` (default `f32`).
    pub fn value_dtype(mut self, dtype: ValueDtype) -> PlanBuilder {
        self.value_dtype = Some(dtype);
        self
    }

    /// Gates per token: 1 (`g` is `[N, C, 1]`, the default) or W (`g` is `[N, C, W]`).
    pub fn gate_width(mut self, gate_width: usize) -> PlanBuilder {
        self.gate_width = Some(gate_width);
        self
    }

    /// Whether to compute the read-side groups (`q_last`, `q_only`, `spay_q`, `qrec`,
    /// `qrec8`, `tiles_q`); default yes.
    pub fn need_read_groups(mut self, need: bool) -> PlanBuilder {
        self.need_read_groups = Some(need);
        self
    }

    /// The optional outputs to compute (default [`DetFields::SHIPPED`]).
    pub fn det_fields(mut self, fields: DetFields) -> PlanBuilder {
        self.det_fields = Some(fields);
        self
    }

    /// Tile length L of `tiles_k`, `tiles_q` and `segb_k`, 1..=2^20 (default, or 0: 128).
    pub fn rec_tile(mut self, rec_tile: usize) -> PlanBuilder {
        self.rec_tile = Some(rec_tile);
        self
    }

    /// Where the plan runs (default [`Backend::Auto`]; host slices need [`Backend::Cpu`]).
    pub fn backend(mut self, backend: Backend) -> PlanBuilder {
        self.backend = Some(backend);
        self
    }

    /// CUDA device ordinal (default: the current device); ignored by the CPU backend. A `u32`:
    /// ordinals are small and never negative (the C field is an `int32_t`).
    pub fn device(mut self, device: u32) -> PlanBuilder {
        self.device = Some(device);
        self
    }

    /// CPU worker threads, >= 1 (default, or 0: the hardware's thread count). The output bits
    /// never depend on it.
    pub fn num_threads(mut self, num_threads: usize) -> PlanBuilder {
        self.num_threads = Some(num_threads);
        self
    }

    /// Who provides the output buffers (default [`OutputMode::Plan`]).
    pub fn output_mode(mut self, mode: OutputMode) -> PlanBuilder {
        self.output_mode = Some(mode);
        self
    }

    /// Whether the plan may also run [`Plan::execute_backward`] (since 1.3; its workspace is
    /// then sized for both); default no, and a plan without it refuses the backward.
    pub fn backward(mut self, backward: bool) -> PlanBuilder {
        self.backward = Some(backward);
        self
    }

    /// Element type of the `k_val` / `q_val` gradients of [`Plan::execute_backward`] (since
    /// 1.3): [`ValueDtype::F32`] or the value dtype itself, which is the default. The library
    /// refuses `Bf16` for a plan of `f32` values. Ignored without
    /// [`backward`](PlanBuilder::backward).
    pub fn grad_dtype(mut self, dtype: ValueDtype) -> PlanBuilder {
        self.grad_dtype = Some(dtype);
        self
    }

    /// The C descriptor of these options: the header's initializer with the options set here
    /// written over it, each converted to its C type.
    fn desc(&self) -> Result<sys::sdm_p1_desc> {
        let mut desc = sys::desc_initializer();
        desc.N = to_int64("N", self.n)?;
        desc.C = to_int64("C", self.c)?;
        desc.W = to_int64("W", self.w)?;
        desc.R = to_int64("R", self.r)?;
        if let Some(v) = self.num_parallel {
            desc.num_parallel = to_int64("num_parallel", v)?;
        }
        if let Some(v) = self.stream_offset {
            desc.stream_offset = to_int64("stream_offset", v)?;
        }
        if let Some(v) = self.num_keys {
            desc.num_keys = to_int64("num_keys", v)?;
        }
        if let Some(v) = self.valid_last {
            desc.valid_last = to_int64("valid_last", v)?;
        }
        if let Some(d) = self.index_dtype {
            desc.index_dtype = d.dtype().code();
        }
        if let Some(d) = self.value_dtype {
            desc.value_dtype = d.dtype().code();
        }
        if let Some(v) = self.gate_width {
            desc.gate_width = to_int64("gate_width", v)?;
        }
        if let Some(v) = self.need_read_groups {
            desc.need_read_groups = i32::from(v);
        }
        if let Some(f) = self.det_fields {
            desc.det_fields = i64::from(f.bits());
        }
        if let Some(v) = self.rec_tile {
            desc.rec_tile = to_int64("rec_tile", v)?;
        }
        if let Some(b) = self.backend {
            desc.backend = b.code();
        }
        if let Some(v) = self.device {
            desc.device = to_int32("device", v)?;
        }
        if let Some(v) = self.num_threads {
            desc.num_threads = to_int32("num_threads", v)?;
        }
        if let Some(m) = self.output_mode {
            desc.output_mode = m.code();
        }
        if let Some(v) = self.backward {
            desc.backward = i32::from(v);
        }
        if let Some(d) = self.grad_dtype {
            desc.grad_dtype = d.dtype().code();
        }
        Ok(desc)
    }

    /// Creates the plan (`sdm_p1_plan_create`): validates every option, allocates the
    /// workspace and, in [`OutputMode::Plan`], the outputs.
    pub fn build(&self) -> Result<Plan> {
        let desc = self.desc()?;
        let mut raw = ptr::null_mut();
        // SAFETY: both pointers are valid for the call; desc is a complete descriptor made
        // from the header's initializer.
        check(unsafe { sys::sdm_p1_plan_create(&mut raw, &desc) })?;
        let raw =
            RawPlan(NonNull::new(raw).ok_or_else(|| {
                Error::new(Status::Internal, "sdm_p1_plan_create returned no plan")
            })?);
        Plan::describe(raw)
    }
}

/// `value` as the descriptor's `int64_t`, or an error naming the option.
fn to_int64<T: Copy + fmt::Display + TryInto<i64>>(option: &str, value: T) -> Result<i64> {
    value.try_into().map_err(|_| {
        Error::invalid_argument(format!(
            "PlanBuilder::build: {option} = {value} does not fit the descriptor's int64_t (at \
             most {})",
            i64::MAX
        ))
    })
}

/// `value` as the descriptor's `int32_t`, or an error naming the option.
fn to_int32<T: Copy + fmt::Display + TryInto<i32>>(option: &str, value: T) -> Result<i32> {
    value.try_into().map_err(|_| {
        Error::invalid_argument(format!(
            "PlanBuilder::build: {option} = {value} does not fit the descriptor's int32_t (at \
             most {})",
            i32::MAX
        ))
    })
}
