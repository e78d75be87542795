//! Plans: the builder, host and device execution, caller-owned output buffers.
use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};

use sdm_phase1_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::gradients::{upstream_shape, InputGradients, OutputGradients};
use crate::outputs::{Field, FieldInfo, Outputs};
use crate::types::{Backend, DetFields, Index, IndexDtype, OutputMode, Value, ValueDtype};

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

/// Owns the library's plan object and destroys it on drop.
struct RawPlan(NonNull<sys::sdm_p1_plan>);

impl Drop for RawPlan {
    fn drop(&mut self) {
        // SAFETY: the pointer came from sdm_p1_plan_create and is destroyed once, here.
        // Destroying a valid plan cannot fail in a way the caller could act on.
        unsafe { sys::sdm_p1_plan_destroy(self.0.as_ptr()) };
    }
}

/// The host inputs of one execute, dense and row-major. `I` is `i32` or `i64`, `V` is `f32`
/// or [`Bf16`](crate::Bf16); both must be the plan's dtypes.
///
/// Made by [`Inputs::new`] (and [`Inputs::with_beta`]): the struct mirrors `sdm_p1_inputs`,
/// which grows with the library, so it is `#[non_exhaustive]`. The fields stay public to read
/// and to change one input of an existing value.
#[non_exhaustive]
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a, I: Index, V: Value> {
    /// `[N, C, W]` slot ids of the K entries.
    pub k_idx: &'a [I],
    /// `[N, C, R]` slot ids of the Q entries.
    pub q_idx: &'a [I],
    /// `[N, C, W]` write weights.
    pub k_val: &'a [V],
    /// `[N, C, R]` read weights.
    pub q_val: &'a [V],
    /// `[N, C, gate_width]` log-gates: finite, of magnitude below 2^22.
    pub g: &'a [f32],
    /// `[N, C]`, needed when the plan computes `kspa` ([`DetFields::KSPA`]); else ignored.
    pub beta: Option<&'a [f32]>,
}

impl<'a, I: Index, V: Value> Inputs<'a, I, V> {
    /// The inputs every plan needs, in the header's order; no `beta`.
    pub fn new(
        k_idx: &'a [I],
        q_idx: &'a [I],
        k_val: &'a [V],
        q_val: &'a [V],
        g: &'a [f32],
    ) -> Inputs<'a, I, V> {
        Inputs {
            k_idx,
            q_idx,
            k_val,
            q_val,
            g,
            beta: None,
        }
    }

    /// The same inputs with `beta` (`[N, C]`), which a plan computing `kspa` needs.
    pub fn with_beta(mut self, beta: &'a [f32]) -> Inputs<'a, I, V> {
        self.beta = Some(beta);
        self
    }
}

/// The device inputs of one [`Plan::execute_device`]: raw pointers to device memory of the
/// plan's device, each array as in [`Inputs`]. Null pointers are refused by the library,
/// except `beta` when the plan does not compute `kspa`.
///
/// Made by [`DeviceInputs::new`] (and [`DeviceInputs::with_beta`]) or `Default` (every
/// pointer null); `#[non_exhaustive]` as [`Inputs`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug)]
pub struct DeviceInputs {
    /// `[N, C, W]` slot ids, the plan's index dtype.
    pub k_idx: *const c_void,
    /// `[N, C, R]` slot ids, the plan's index dtype.
    pub q_idx: *const c_void,
    /// `[N, C, W]` write weights, the plan's value dtype.
    pub k_val: *const c_void,
    /// `[N, C, R]` read weights, the plan's value dtype.
    pub q_val: *const c_void,
    /// `[N, C, gate_width]` f32 log-gates.
    pub g: *const f32,
    /// `[N, C]` f32, needed when the plan computes `kspa`; may be null otherwise.
    pub beta: *const f32,
}

impl DeviceInputs {
    /// The device arrays every plan needs, in the header's order; `beta` null.
    pub fn new(
        k_idx: *const c_void,
        q_idx: *const c_void,
        k_val: *const c_void,
        q_val: *const c_void,
        g: *const f32,
    ) -> DeviceInputs {
        DeviceInputs {
            k_idx,
            q_idx,
            k_val,
            q_val,
            g,
            beta: ptr::null(),
        }
    }

    /// The same pointers with `beta` (`[N, C]` f32), which a plan computing `kspa` needs.
    pub fn with_beta(mut self, beta: *const f32) -> DeviceInputs {
        self.beta = beta;
        self
    }
}

impl Default for DeviceInputs {
    fn default() -> DeviceInputs {
        DeviceInputs::new(
            ptr::null(),
            ptr::null(),
            ptr::null(),
            ptr::null(),
            ptr::null(),
        )
    }
}

/// Per-stream lengths in device memory, for [`Plan::execute_device`] (since 1.2;
/// `sdm_p1_inputs.stream_lengths` and its dtype): a pointer to `num_parallel` elements of
/// the named type, with the meaning of [`Plan::execute`]'s `lengths`. `#[non_exhaustive]`:
/// the C API may accept more element types.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceStreamLengths {
    /// `int32_t` lengths.
    I32(*const i32),
    /// `int64_t` lengths.
    I64(*const i64),
}

impl DeviceStreamLengths {
    // The C struct's pointer and dtype fields.
    fn raw(self) -> (*const c_void, i32) {
        match self {
            DeviceStreamLengths::I32(p) => (p.cast(), sys::SDM_P1_DTYPE_INT32 as i32),
            DeviceStreamLengths::I64(p) => (p.cast(), sys::SDM_P1_DTYPE_INT64 as i32),
        }
    }
}

/// Host buffers for every output a plan computes, owned by the caller: the target of
/// [`Plan::execute_into`], which is how a plan in [`OutputMode::Caller`] runs on the host.
/// Several of them let results of earlier executes outlive the next one.
#[derive(Clone, Debug)]
pub struct OutputBuffers {
    infos: Vec<FieldInfo>,
    // u64 words, so that every dtype is aligned; zeroed, so always initialized.
    words: Vec<Vec<u64>>,
}

impl OutputBuffers {
    /// Views of the buffers: what the last successful [`Plan::execute_into`] wrote (zeros
    /// before any; unspecified values after a failed one).
    pub fn outputs(&self) -> Outputs<'_> {
        let ptrs: Vec<*const u8> = self.words.iter().map(|w| w.as_ptr().cast()).collect();
        // SAFETY: each requested field's buffer holds at least its bytes, initialized and
        // 8-byte aligned, and is borrowed from self for the lifetime of the views.
        unsafe { Outputs::from_raw(&self.infos, &ptrs) }
    }

    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.infos
            .iter()
            .zip(&mut self.words)
            .map(|(info, w)| {
                if info.requested() {
                    w.as_mut_ptr().cast()
                } else {
                    ptr::null_mut()
                }
            })
            .collect()
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

/// What `sdm_p1_plan_desc` reports, in this crate's types (converted once, at build).
#[derive(Clone, Copy, Debug)]
struct Resolved {
    n: usize,
    c: usize,
    w: usize,
    r: usize,
    num_parallel: usize,
    stream_offset: usize,
    num_keys: usize,
    valid_last: usize,
    index_dtype: IndexDtype,
    value_dtype: ValueDtype,
    gate_width: usize,
    need_read_groups: bool,
    det_fields: DetFields,
    rec_tile: usize,
    backend: Backend,
    device: Option<u32>,
    num_threads: usize,
    output_mode: OutputMode,
    backward: bool,
    grad_dtype: ValueDtype,
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
    fn from_desc(desc: &sys::sdm_p1_desc) -> Result<Resolved> {
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

    /// Runs the plan on host slices (CPU backend) and returns views of the plan's buffers.
    ///
    /// `lengths`: `None` applies the plan's `valid_last` rule. `Some(lengths)` (since 1.2;
    /// `sdm_p1_inputs.stream_lengths`) gives each of the `num_parallel` streams its own number
    /// of valid tokens, in `0..=steps * C` with `steps = N / num_parallel`: chunk `c` (stream
    /// `c % num_parallel`, step `c / num_parallel`) then has `clamp(len - step * C, 0, C)`
    /// valid tokens and `valid_last` is ignored, so one plan serves batches of one padded
    /// shape whatever their lengths. A slice of another length than `num_parallel` is refused
    /// ([`Status::InvalidArgument`]); a length out of range is bad data
    /// ([`Status::InvalidInput`] naming the stream), reported before any output is written.
    ///
    /// Checks first that the plan runs on the CPU, keeps its own buffers
    /// ([`OutputMode::Plan`]), and that `I`, `V` and every slice length match the plan
    /// ([`Status::InvalidArgument`] naming the slice otherwise). Bad data (an id outside its
    /// stream's range, a bad gate) fail with the library's [`Status::InvalidInput`] and its
    /// message. The views borrow the plan mutably; [`Plan::outputs`] gives them again through
    /// a shared borrow.
    pub fn execute<I: Index, V: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
    ) -> Result<Outputs<'_>> {
        let who = "Plan::execute";
        let (raw_inputs, _lengths) = self.host_inputs(who, inputs, lengths)?;
        if self.options.output_mode == OutputMode::Caller {
            return Err(Error::invalid_argument(format!(
                "{who}: the plan is in OutputMode::Caller and has no output buffers; use \
                 execute_into with Plan::output_buffers"
            )));
        }
        self.executed = false;
        // SAFETY: the inputs point into slices of the checked lengths and types (and the
        // lengths into `_lengths`), alive for the call; null outputs with count 0 select the
        // plan's buffers.
        check(unsafe {
            sys::sdm_p1_execute(
                self.raw.0.as_ptr(),
                &raw_inputs,
                ptr::null(),
                0,
                ptr::null_mut(),
            )
        })?;
        self.executed = true;
        Ok(self.plan_outputs())
    }

    /// The outputs of the last successful [`Plan::execute`], through a shared borrow; `None`
    /// before one, after a failed one, and for plans that do not run on the CPU or do not own
    /// their buffers.
    pub fn outputs(&self) -> Option<Outputs<'_>> {
        self.executed.then(|| self.plan_outputs())
    }

    fn plan_outputs(&self) -> Outputs<'_> {
        let ptrs: Vec<*const u8> = self
            .buffers
            .iter()
            .map(|&p| p.cast_const().cast())
            .collect();
        // SAFETY: only called once a CPU execute has filled every requested buffer (host
        // memory of its view's bytes, 64-byte aligned); the views borrow self, so no execute
        // can overwrite them while they live.
        unsafe { Outputs::from_raw(&self.infos, &ptrs) }
    }

    /// Zeroed host buffers for every output this plan computes, for [`Plan::execute_into`].
    pub fn output_buffers(&self) -> OutputBuffers {
        OutputBuffers {
            infos: self.infos.clone(),
            words: self
                .infos
                .iter()
                .map(|info| vec![0u64; info.bytes().div_ceil(8)])
                .collect(),
        }
    }

    /// Runs the plan on host slices (CPU backend), writing into `buffers` (made by
    /// [`Plan::output_buffers`] of a plan with the same shapes), and returns views of them.
    ///
    /// Works in both output modes; the plan's own buffers are left as they were. `lengths`,
    /// checks and errors as [`Plan::execute`].
    pub fn execute_into<'b, I: Index, V: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
        buffers: &'b mut OutputBuffers,
    ) -> Result<Outputs<'b>> {
        let who = "Plan::execute_into";
        let (raw_inputs, _lengths) = self.host_inputs(who, inputs, lengths)?;
        if buffers.infos != self.infos {
            return Err(Error::invalid_argument(format!(
                "{who}: the buffers were made for a plan with other outputs (shapes, dtypes or \
                 det_fields); use this plan's output_buffers()"
            )));
        }
        let ptrs = buffers.pointers();
        // SAFETY: inputs checked as in execute; every requested field gets a host buffer of
        // at least its bytes, exclusively borrowed for the call.
        check(unsafe {
            sys::sdm_p1_execute(
                self.raw.0.as_ptr(),
                &raw_inputs,
                ptrs.as_ptr(),
                Field::COUNT as i32,
                ptr::null_mut(),
            )
        })?;
        Ok(buffers.outputs())
    }

    /// Enqueues the plan on a CUDA stream with inputs (and optionally outputs) in device
    /// memory (`sdm_p1_execute` on a plan of the CUDA backend).
    ///
    /// `lengths`: `None` applies the plan's `valid_last` rule; `Some` points to per-stream
    /// lengths in device memory, with the meaning of [`Plan::execute`]'s (a null pointer
    /// counts as `None`). The kernels read them, so the launch needs no host synchronization
    /// and a captured graph reads the buffer's lengths at each replay; a length outside
    /// `0..=steps * C` is reported by [`Plan::execute_status`].
    ///
    /// `outputs`: `None` writes the plan's own buffers ([`OutputMode::Plan`]; their device
    /// addresses are [`Plan::buffer_ptr`]). `Some(ptrs)` gives a device buffer per field,
    /// indexed by [`Field::index`] (at most [`Field::COUNT`] entries; missing entries count
    /// as null); a plan in [`OutputMode::Caller`] needs one for every computed field, and in
    /// [`OutputMode::Plan`] a null entry falls back to the plan's buffer.
    ///
    /// `stream`: the `cudaStream_t` to run on; null is the default stream.
    ///
    /// This only enqueues work: `Ok` means the launch succeeded, not that the outputs are
    /// ready. The kernels check the data (ids in range, gates finite and below 2^22) on the
    /// device; call [`Plan::execute_status`] after synchronizing `stream` to learn the result.
    /// Fails without calling the library when the plan's backend is not CUDA. The library
    /// itself refuses ([`Status::InvalidArgument`] naming the field) pointers that are not
    /// device memory of the plan's device.
    ///
    /// # Safety
    ///
    /// - Every non-null pointer in `inputs` points to device memory of the plan's device
    ///   holding a dense row-major array of the shape and element type documented on
    ///   [`DeviceInputs`] (the plan's index and value dtypes), naturally aligned. `beta` is
    ///   non-null when the plan computes `kspa`.
    /// - A non-null `lengths` pointer points to `num_parallel` naturally aligned elements of
    ///   its type in device memory of the plan's device.
    /// - Every non-null entry `ptrs[f]` for a field the plan computes points to device memory
    ///   of the plan's device of at least [`Plan::field_info`]`(f).bytes()` bytes, aligned
    ///   for its dtype, not overlapping the inputs or another output.
    /// - `stream` is null or a valid stream of the plan's device.
    /// - Until the enqueued work has completed on `stream`: the inputs and lengths stay
    ///   allocated and unchanged, the output buffers stay allocated and are not read or
    ///   written by other work, and the plan is not dropped (dropping frees its buffers and
    ///   workspace).
    /// - Executes of one plan are ordered on the device (the same stream, or synchronized
    ///   between): they share the plan's workspace and buffers.
    pub unsafe fn execute_device(
        &mut self,
        inputs: &DeviceInputs,
        lengths: Option<DeviceStreamLengths>,
        outputs: Option<&[*mut c_void]>,
        stream: *mut c_void,
    ) -> Result<()> {
        let who = "Plan::execute_device";
        if self.options.backend != Backend::Cuda {
            return Err(Error::invalid_argument(format!(
                "{who}: the plan runs on the {:?} backend, not Backend::Cuda (host slices go \
                 through execute)",
                self.options.backend
            )));
        }
        let (out_ptr, count) = match outputs {
            None => (ptr::null(), 0),
            Some(ptrs) if ptrs.len() <= Field::COUNT => (ptrs.as_ptr(), ptrs.len() as i32),
            Some(ptrs) => {
                return Err(Error::invalid_argument(format!(
                    "{who}: {} output pointers, at most Field::COUNT = {}",
                    ptrs.len(),
                    Field::COUNT
                )))
            }
        };
        let mut raw_inputs = sys::inputs_initializer();
        raw_inputs.k_idx = inputs.k_idx;
        raw_inputs.q_idx = inputs.q_idx;
        raw_inputs.k_val = inputs.k_val;
        raw_inputs.q_val = inputs.q_val;
        raw_inputs.g = inputs.g;
        raw_inputs.beta = inputs.beta;
        if let Some(l) = lengths {
            (raw_inputs.stream_lengths, raw_inputs.stream_lengths_dtype) = l.raw();
        }
        self.executed = false;
        // SAFETY: the caller guarantees the pointers and the stream (see # Safety).
        check(unsafe {
            sys::sdm_p1_execute(self.raw.0.as_ptr(), &raw_inputs, out_ptr, count, stream)
        })
    }

    /// The data check of the plan's last execute (`sdm_p1_execute_status`): `Ok` when every
    /// stream length lay in range, every valid token's ids lay in its stream's range and
    /// every gate was finite and below 2^22, else [`Status::InvalidInput`] with the message
    /// the CPU backend gives for the same inputs. CUDA backend: call it only after the stream
    /// of that execute has been synchronized (it copies 24 bytes from the device). CPU
    /// backend, or a plan never executed: always `Ok` (the CPU's execute reports bad data
    /// itself).
    pub fn execute_status(&mut self) -> Result<()> {
        // SAFETY: a live plan, not used concurrently (&mut self).
        check(unsafe { sys::sdm_p1_execute_status(self.raw.0.as_ptr()) })
    }

    /// The backward (vector-Jacobian product) of this plan's forward, on host slices (CPU
    /// backend; `sdm_p1_execute_backward`, since 1.3): the gradients of L = the sum over the
    /// fields f given in `grads` of <grads\[f\], output f> with respect to `k_val`, `q_val`,
    /// `g` and `beta`, for the outputs [`Plan::execute`] computes from the same `inputs` and
    /// `lengths`. `docs/backward.md` has the formulas and the fixed order of every sum: the
    /// bits never depend on the number of threads.
    ///
    /// - `inputs`, `lengths`: the forward's, checked as by [`Plan::execute`] (with this
    ///   method's name in the messages). `beta` is needed when a `kspa` gradient is given, and
    ///   not read otherwise.
    /// - `payload`: the forward's [`Field::Payload`] output for these inputs (`[N, row]` i32,
    ///   the sort), which spares sorting again, or `None`: the library sorts again from the
    ///   ids. Both give the same bits. The library checks it (a row that is not a permutation
    ///   of its chunk's entries is [`Status::InvalidInput`]); beyond that it is trusted:
    ///   another payload that passes gives unspecified gradients. The views of
    ///   [`Plan::execute`] borrow the plan, so copy the payload out of them first (or take it
    ///   from [`OutputBuffers`], which [`Plan::execute_into`] fills).
    /// - `grads`: the upstream gradients, each checked against
    ///   [`Plan::gradient_shape`]; those not given read as +0.0.
    ///
    /// `G` is the plan's [`grad_dtype`](Plan::grad_dtype) (say which in the result's type:
    /// `let d: InputGradients<f32> = plan.execute_backward(..)?`). A plan built without
    /// [`PlanBuilder::backward`]`(true)` is refused by the library
    /// ([`Status::InvalidArgument`] and its message). Nothing is written on any error, and
    /// the plan's outputs of its last execute are left as they were.
    pub fn execute_backward<I: Index, V: Value, G: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
        payload: Option<&[i32]>,
        grads: &OutputGradients<'_, V>,
    ) -> Result<InputGradients<G>> {
        let mut out = self.input_gradients();
        self.backward_into(
            "Plan::execute_backward",
            inputs,
            lengths,
            payload,
            grads,
            &mut out,
        )?;
        Ok(out)
    }

    /// [`Plan::execute_backward`] writing the caller's [`InputGradients`] (made by
    /// [`Plan::input_gradients`], or by an earlier backward of a plan with the same shapes)
    /// instead of allocating them: each vector is overwritten whole. A vector of another
    /// length than the plan's is refused ([`Status::InvalidArgument`] naming it).
    pub fn execute_backward_into<I: Index, V: Value, G: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
        payload: Option<&[i32]>,
        grads: &OutputGradients<'_, V>,
        out: &mut InputGradients<G>,
    ) -> Result<()> {
        self.backward_into(
            "Plan::execute_backward_into",
            inputs,
            lengths,
            payload,
            grads,
            out,
        )
    }

    /// Zeroed input gradients of this plan's shapes, for [`Plan::execute_backward_into`]; `G`
    /// as there, the plan's grad dtype.
    pub fn input_gradients<G: Value>(&self) -> InputGradients<G> {
        let o = &self.options;
        let tokens = o.n * o.c;
        InputGradients {
            k_val: vec![G::default(); tokens * o.w],
            q_val: vec![G::default(); tokens * o.r],
            g: vec![0.0; tokens * o.gate_width],
            beta: vec![0.0; tokens],
        }
    }

    /// The shape of the upstream gradient of `field` that [`Plan::execute_backward`] takes
    /// ([`OutputGradients`]), or `None` when the output is not differentiable. It is the
    /// output's shape, except for the records: `krec`'s is `[N, C * W, 2]` (its words 2 and
    /// 3), `qrec`'s and `qrec8`'s `[N, C * R]` (their scale).
    pub fn gradient_shape(&self, field: Field) -> Option<Vec<usize>> {
        let o = &self.options;
        upstream_shape(field, o.n, o.c, o.w, o.r)
    }

    /// Checks everything against the plan, then calls `sdm_p1_execute_backward`.
    fn backward_into<I: Index, V: Value, G: Value>(
        &mut self,
        who: &str,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
        payload: Option<&[i32]>,
        grads: &OutputGradients<'_, V>,
        out: &mut InputGradients<G>,
    ) -> Result<()> {
        let (raw_inputs, _lengths) = self.host_inputs(who, inputs, lengths)?;
        let o = self.options;
        if G::VALUE_DTYPE != o.grad_dtype {
            return Err(Error::invalid_argument(format!(
                "{who}: the k_val and q_val gradients are {:?} but the plan's grad dtype is {:?}",
                G::VALUE_DTYPE,
                o.grad_dtype
            )));
        }
        let payload = match payload {
            None => ptr::null(),
            Some(p) => {
                let want = self.infos[Field::Payload.index()].len();
                if p.len() != want {
                    return Err(Error::invalid_argument(format!(
                        "{who}: payload has {} elements; the plan needs N * row = {want} (row = \
                         C * (W + R) rounded up to a multiple of 16)",
                        p.len()
                    )));
                }
                p.as_ptr()
            }
        };
        let mut upstream = [ptr::null::<c_void>(); Field::COUNT];
        for (field, given) in grads.given() {
            let Some((pointer, len)) = given else {
                continue;
            };
            let shape = self
                .gradient_shape(field)
                .expect("OutputGradients holds differentiable fields only");
            let want: usize = shape.iter().product();
            if len != want {
                return Err(Error::invalid_argument(format!(
                    "{who}: the {} gradient has {len} elements; the plan needs {shape:?} = {want}",
                    field.name()
                )));
            }
            upstream[field.index()] = pointer;
        }
        let tokens = o.n * o.c;
        let checks = [
            ("k_val", out.k_val.len(), tokens * o.w, "N * C * W"),
            ("q_val", out.q_val.len(), tokens * o.r, "N * C * R"),
            (
                "g",
                out.g.len(),
                tokens * o.gate_width,
                "N * C * gate_width",
            ),
            ("beta", out.beta.len(), tokens, "N * C"),
        ];
        for (name, len, want, formula) in checks {
            if len != want {
                return Err(Error::invalid_argument(format!(
                    "{who}: out.{name} has {len} elements; the plan needs {formula} = {want}"
                )));
            }
        }
        let mut raw_out = sys::input_grads_initializer();
        raw_out.k_val = out.k_val.as_mut_ptr().cast();
        raw_out.q_val = out.q_val.as_mut_ptr().cast();
        raw_out.g = out.g.as_mut_ptr();
        raw_out.beta = out.beta.as_mut_ptr();
        // SAFETY: the inputs are checked as in execute; the payload and every upstream
        // gradient given point into slices of the lengths the plan reads, of their checked
        // element types (V for the value-typed ones), alive for the call; the four output
        // vectors have the plan's lengths in G (the plan's grad dtype) and f32, exclusively
        // borrowed. The CPU backend returns when the gradients are complete.
        check(unsafe {
            sys::sdm_p1_execute_backward(
                self.raw.0.as_ptr(),
                &raw_inputs,
                payload,
                upstream.as_ptr(),
                Field::COUNT as i32,
                &raw_out,
                ptr::null_mut(),
            )
        })
    }

    /// Whether the plan may run [`Plan::execute_backward`] ([`PlanBuilder::backward`]).
    pub fn backward(&self) -> bool {
        self.options.backward
    }

    /// Element type of the `k_val` / `q_val` gradients (resolved: the value dtype unless
    /// [`PlanBuilder::grad_dtype`] asked for `F32`).
    pub fn grad_dtype(&self) -> ValueDtype {
        self.options.grad_dtype
    }

    /// Checks host inputs (and per-stream lengths) against the plan and returns them as the C
    /// struct, with the lengths as the `int64_t` array it points to: keep that alive for the
    /// call (moving the Vec does not move its elements).
    fn host_inputs<I: Index, V: Value>(
        &self,
        who: &str,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<&[usize]>,
    ) -> Result<(sys::sdm_p1_inputs, Option<Vec<i64>>)> {
        let o = &self.options;
        if o.backend != Backend::Cpu {
            return Err(Error::invalid_argument(format!(
                "{who}: the plan runs on the {:?} backend; host slices need Backend::Cpu \
                 (device memory goes through execute_device)",
                o.backend
            )));
        }
        if I::INDEX_DTYPE != o.index_dtype {
            return Err(Error::invalid_argument(format!(
                "{who}: k_idx and q_idx are {:?} but the plan's index dtype is {:?}",
                I::INDEX_DTYPE,
                o.index_dtype
            )));
        }
        if V::VALUE_DTYPE != o.value_dtype {
            return Err(Error::invalid_argument(format!(
                "{who}: k_val and q_val are {:?} but the plan's value dtype is {:?}",
                V::VALUE_DTYPE,
                o.value_dtype
            )));
        }
        let tokens = o.n * o.c;
        let checks = [
            ("k_idx", inputs.k_idx.len(), tokens * o.w, "N * C * W"),
            ("q_idx", inputs.q_idx.len(), tokens * o.r, "N * C * R"),
            ("k_val", inputs.k_val.len(), tokens * o.w, "N * C * W"),
            ("q_val", inputs.q_val.len(), tokens * o.r, "N * C * R"),
            (
                "g",
                inputs.g.len(),
                tokens * o.gate_width,
                "N * C * gate_width",
            ),
            (
                "beta",
                inputs.beta.map_or(tokens, <[f32]>::len),
                tokens,
                "N * C",
            ),
        ];
        for (name, len, want, formula) in checks {
            if len != want {
                return Err(Error::invalid_argument(format!(
                    "{who}: {name} has {len} elements; the plan needs {formula} = {want}"
                )));
            }
        }
        let lengths = lengths.map(|l| self.stream_lengths(who, l)).transpose()?;
        let mut raw = sys::inputs_initializer();
        raw.k_idx = inputs.k_idx.as_ptr().cast();
        raw.q_idx = inputs.q_idx.as_ptr().cast();
        raw.k_val = inputs.k_val.as_ptr().cast();
        raw.q_val = inputs.q_val.as_ptr().cast();
        raw.g = inputs.g.as_ptr();
        raw.beta = inputs.beta.map_or(ptr::null(), <[f32]>::as_ptr);
        if let Some(l) = &lengths {
            raw.stream_lengths = l.as_ptr().cast();
            raw.stream_lengths_dtype = sys::SDM_P1_DTYPE_INT64 as i32;
        }
        Ok((raw, lengths))
    }

    /// Per-stream lengths as the C API's `int64_t`: one per stream, each representable
    /// (the library checks the range itself).
    fn stream_lengths(&self, who: &str, lengths: &[usize]) -> Result<Vec<i64>> {
        let streams = self.options.num_parallel;
        if lengths.len() != streams {
            return Err(Error::invalid_argument(format!(
                "{who}: stream_lengths has {} elements; the plan needs num_parallel = {streams}",
                lengths.len()
            )));
        }
        let most = self.options.n / streams * self.options.c;
        let mut converted = Vec::with_capacity(streams);
        for (stream, &length) in lengths.iter().enumerate() {
            // Out of range either way: the status the library gives a length out of range.
            let length = i64::try_from(length).map_err(|_| {
                Error::new(
                    Status::InvalidInput,
                    format!(
                        "{who}: stream_lengths[{stream}] = {length} does not fit the C API's \
                         int64_t: stream {stream}'s length must be in 0..={most}"
                    ),
                )
            })?;
            converted.push(length);
        }
        Ok(converted)
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
