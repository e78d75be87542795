//! Plans: the builder, host and device execution, caller-owned output buffers.
use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};

use sdm_phase1_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::outputs::{Field, FieldInfo, Outputs};
use crate::types::{Backend, DetFields, Index, IndexDtype, OutputMode, Value, ValueDtype};

/// The shapes and options of a plan (`sdm_p1_desc`); [`build`](PlanBuilder::build) creates it.
///
/// Every option left alone keeps the header's default; the library validates them all at
/// [`build`](PlanBuilder::build) and reports the first bad one by name. `num_keys` has no
/// usable default and must be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanBuilder {
    n: i64,
    c: i64,
    w: i64,
    r: i64,
    num_parallel: i64,
    stream_offset: i64,
    num_keys: i64,
    valid_last: Option<i64>,
    index_dtype: IndexDtype,
    value_dtype: ValueDtype,
    gate_width: i64,
    need_read_groups: Option<bool>,
    det_fields: Option<DetFields>,
    rec_tile: Option<i64>,
    backend: Backend,
    device: Option<i32>,
    num_threads: Option<i32>,
    output_mode: OutputMode,
}

impl PlanBuilder {
    /// A plan of `n` chunks of `c` tokens (1..=256), each writing `w` and reading `r` slots
    /// (1..=256 each, with `c * (w + r) <= 2^17`). Defaults: one stream at offset 0, i32 ids,
    /// f32 values, one gate per token, read groups on, the spec's default det_fields, the
    /// library's choice of backend, the plan's own output buffers.
    pub fn new(n: i64, c: i64, w: i64, r: i64) -> PlanBuilder {
        PlanBuilder {
            n,
            c,
            w,
            r,
            num_parallel: 1,
            stream_offset: 0,
            num_keys: 0,
            valid_last: None,
            index_dtype: IndexDtype::I32,
            value_dtype: ValueDtype::F32,
            gate_width: 1,
            need_read_groups: None,
            det_fields: None,
            rec_tile: None,
            backend: Backend::Auto,
            device: None,
            num_threads: None,
            output_mode: OutputMode::Plan,
        }
    }

    /// Number of streams: chunk `i` belongs to stream `i % num_parallel` (it must divide N).
    pub fn num_parallel(mut self, num_parallel: i64) -> PlanBuilder {
        self.num_parallel = num_parallel;
        self
    }

    /// Stream `s` owns the slot ids `[s * stream_offset, s * stream_offset + num_keys)`.
    pub fn stream_offset(mut self, stream_offset: i64) -> PlanBuilder {
        self.stream_offset = stream_offset;
        self
    }

    /// Slots per stream, 1..=2^32 (required).
    pub fn num_keys(mut self, num_keys: i64) -> PlanBuilder {
        self.num_keys = num_keys;
        self
    }

    /// Valid tokens in each stream's last chunk, 1..=C (default C); later tokens are padding.
    pub fn valid_last(mut self, valid_last: i64) -> PlanBuilder {
        self.valid_last = Some(valid_last);
        self
    }

    /// Element type of `k_idx` and `q_idx` (default `i32`).
    pub fn index_dtype(mut self, dtype: IndexDtype) -> PlanBuilder {
        self.index_dtype = dtype;
        self
    }

    /// Element type of `k_val`, `q_val`, `cpe`, `k_eff` and `q_w` (default `f32`).
    pub fn value_dtype(mut self, dtype: ValueDtype) -> PlanBuilder {
        self.value_dtype = dtype;
        self
    }

    /// Gates per token: 1 (`g` is `[N, C, 1]`, the default) or W (`g` is `[N, C, W]`).
    pub fn gate_width(mut self, gate_width: i64) -> PlanBuilder {
        self.gate_width = gate_width;
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

    /// Tile length L of `tiles_k`, `tiles_q` and `segb_k`, 1..=2^20 (default 128).
    pub fn rec_tile(mut self, rec_tile: i64) -> PlanBuilder {
        self.rec_tile = Some(rec_tile);
        self
    }

    /// Where the plan runs (default [`Backend::Auto`]; host slices need [`Backend::Cpu`]).
    pub fn backend(mut self, backend: Backend) -> PlanBuilder {
        self.backend = backend;
        self
    }

    /// CUDA device ordinal (default: the current device); ignored by the CPU backend.
    pub fn device(mut self, device: i32) -> PlanBuilder {
        self.device = Some(device);
        self
    }

    /// CPU worker threads, >= 1 (default, or 0: the hardware's thread count). The output bits
    /// never depend on it.
    pub fn num_threads(mut self, num_threads: i32) -> PlanBuilder {
        self.num_threads = Some(num_threads);
        self
    }

    /// Who provides the output buffers (default [`OutputMode::Plan`]).
    pub fn output_mode(mut self, mode: OutputMode) -> PlanBuilder {
        self.output_mode = mode;
        self
    }

    /// The C descriptor of these options.
    fn desc(&self) -> sys::sdm_p1_desc {
        let unset = sys::SDM_P1_UNSET;
        let mut desc = sys::desc_initializer();
        desc.N = self.n;
        desc.C = self.c;
        desc.W = self.w;
        desc.R = self.r;
        desc.num_parallel = self.num_parallel;
        desc.stream_offset = self.stream_offset;
        desc.num_keys = self.num_keys;
        desc.valid_last = self.valid_last.unwrap_or(unset as i64);
        desc.index_dtype = self.index_dtype.dtype().code();
        desc.value_dtype = self.value_dtype.dtype().code();
        desc.gate_width = self.gate_width;
        desc.need_read_groups = self.need_read_groups.map_or(unset, i32::from);
        desc.det_fields = self.det_fields.map_or(unset as i64, |f| f.bits() as i64);
        desc.rec_tile = self.rec_tile.unwrap_or(unset as i64);
        desc.backend = self.backend.code();
        desc.device = self.device.unwrap_or(unset);
        desc.num_threads = self.num_threads.unwrap_or(unset);
        desc.output_mode = self.output_mode.code();
        desc
    }

    /// Creates the plan (`sdm_p1_plan_create`): validates every option, allocates the
    /// workspace and, in [`OutputMode::Plan`], the outputs.
    pub fn build(&self) -> Result<Plan> {
        let desc = self.desc();
        let mut raw = ptr::null_mut();
        // SAFETY: both pointers are valid for the call; desc is a complete 1.1 descriptor.
        check(unsafe { sys::sdm_p1_plan_create(&mut raw, &desc) })?;
        let raw =
            RawPlan(NonNull::new(raw).ok_or_else(|| {
                Error::new(Status::Internal, "sdm_p1_plan_create returned no plan")
            })?);
        Plan::describe(raw)
    }
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

/// Per-stream lengths of one execute (since 1.2; `sdm_p1_inputs.stream_lengths`):
/// `num_parallel` valid-token counts, each in `0..=steps * C` with `steps = N / num_parallel`.
/// Chunk `c` (stream `c % P`, step `c / P`) then has `clamp(len - step * C, 0, C)` valid
/// tokens, and the plan's `valid_last` is ignored. A length out of range is bad data
/// ([`Status::InvalidInput`](crate::Status::InvalidInput) naming the stream).
#[derive(Clone, Copy, Debug)]
pub enum StreamLengths<'a> {
    /// `i32` lengths.
    I32(&'a [i32]),
    /// `i64` lengths.
    I64(&'a [i64]),
}

impl<'a> From<&'a [i32]> for StreamLengths<'a> {
    fn from(v: &'a [i32]) -> StreamLengths<'a> {
        StreamLengths::I32(v)
    }
}

impl<'a> From<&'a [i64]> for StreamLengths<'a> {
    fn from(v: &'a [i64]) -> StreamLengths<'a> {
        StreamLengths::I64(v)
    }
}

impl StreamLengths<'_> {
    fn len(&self) -> usize {
        match self {
            StreamLengths::I32(v) => v.len(),
            StreamLengths::I64(v) => v.len(),
        }
    }

    // The C struct's pointer and dtype fields.
    fn raw(&self) -> (*const c_void, i32) {
        match self {
            StreamLengths::I32(v) => (v.as_ptr().cast(), sys::SDM_P1_DTYPE_INT32 as i32),
            StreamLengths::I64(v) => (v.as_ptr().cast(), sys::SDM_P1_DTYPE_INT64 as i32),
        }
    }
}

/// The device inputs of one [`Plan::execute_device`]: raw pointers to device memory of the
/// plan's device, each array as in [`Inputs`]. Null pointers are refused by the library,
/// except `beta` when the plan does not compute `kspa`.
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

impl Default for DeviceInputs {
    fn default() -> DeviceInputs {
        DeviceInputs {
            k_idx: ptr::null(),
            q_idx: ptr::null(),
            k_val: ptr::null(),
            q_val: ptr::null(),
            g: ptr::null(),
            beta: ptr::null(),
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
    desc: sys::sdm_p1_desc,
    index_dtype: IndexDtype,
    value_dtype: ValueDtype,
    backend: Backend,
    output_mode: OutputMode,
    det_fields: DetFields,
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
// execute_into, execute_device, execute_status) or that lets it write its buffers takes
// `&mut self`, so the header's rule "not executed concurrently with itself" is enforced by
// the borrow checker. Methods on `&self` call no library function: they read what `build`
// cached (resolved options, field shapes, buffer addresses) and the host output buffers,
// which nothing writes while a shared borrow exists. Sharing `&Plan` between threads is
// therefore only concurrent reading.
unsafe impl Sync for Plan {}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("n", &self.desc.N)
            .field("c", &self.desc.C)
            .field("w", &self.desc.W)
            .field("r", &self.desc.R)
            .field("backend", &self.backend)
            .field("index_dtype", &self.index_dtype)
            .field("value_dtype", &self.value_dtype)
            .field("det_fields", &self.det_fields)
            .field("output_mode", &self.output_mode)
            .finish_non_exhaustive()
    }
}

fn internal(what: &str, value: i64) -> Error {
    Error::new(
        Status::Internal,
        format!("the plan reports an unknown {what} {value}"),
    )
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
        let index_dtype = match desc.index_dtype as u32 {
            sys::SDM_P1_DTYPE_INT32 => IndexDtype::I32,
            sys::SDM_P1_DTYPE_INT64 => IndexDtype::I64,
            _ => return Err(internal("index dtype", desc.index_dtype.into())),
        };
        let value_dtype = match desc.value_dtype as u32 {
            sys::SDM_P1_DTYPE_FLOAT32 => ValueDtype::F32,
            sys::SDM_P1_DTYPE_BFLOAT16 => ValueDtype::Bf16,
            _ => return Err(internal("value dtype", desc.value_dtype.into())),
        };
        let backend = match desc.backend as u32 {
            sys::SDM_P1_BACKEND_CPU => Backend::Cpu,
            sys::SDM_P1_BACKEND_CUDA => Backend::Cuda,
            _ => return Err(internal("backend", desc.backend.into())),
        };
        let output_mode = match desc.output_mode as u32 {
            sys::SDM_P1_OUTPUTS_PLAN => OutputMode::Plan,
            sys::SDM_P1_OUTPUTS_CALLER => OutputMode::Caller,
            _ => return Err(internal("output mode", desc.output_mode.into())),
        };
        let det_fields = u32::try_from(desc.det_fields)
            .ok()
            .and_then(DetFields::from_bits)
            .ok_or_else(|| internal("det_fields", desc.det_fields))?;
        Ok(Plan {
            raw,
            desc,
            index_dtype,
            value_dtype,
            backend,
            output_mode,
            det_fields,
            infos,
            buffers: views.iter().map(|v| v.data).collect(),
            workspace_size,
            executed: false,
        })
    }

    /// Runs the plan on host slices (CPU backend) and returns views of the plan's buffers.
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
    ) -> Result<Outputs<'_>> {
        self.run_host("Plan::execute", inputs, None)
    }

    /// [`Plan::execute`] with per-stream lengths (`num_parallel` of them, see
    /// [`StreamLengths`]) in place of the plan's `valid_last` rule: one plan serves batches
    /// of one padded shape whatever their lengths. A slice of another length is refused
    /// ([`Status::InvalidArgument`]); a length outside `0..=steps * C` is the library's
    /// [`Status::InvalidInput`], reported before any output is written.
    pub fn execute_with_lengths<'l, I: Index, V: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: impl Into<StreamLengths<'l>>,
    ) -> Result<Outputs<'_>> {
        self.run_host("Plan::execute_with_lengths", inputs, Some(lengths.into()))
    }

    fn run_host<I: Index, V: Value>(
        &mut self,
        who: &str,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<StreamLengths<'_>>,
    ) -> Result<Outputs<'_>> {
        let raw_inputs = self.host_inputs(who, inputs, lengths)?;
        if self.output_mode == OutputMode::Caller {
            return Err(Error::invalid_argument(format!(
                "{who}: the plan is in OutputMode::Caller and has no output buffers; use \
                 execute_into with Plan::output_buffers"
            )));
        }
        self.executed = false;
        // SAFETY: the inputs point into slices of the checked lengths and types, alive for
        // the call; null outputs with count 0 select the plan's buffers.
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
    /// Works in both output modes; the plan's own buffers are left as they were. Checks and
    /// errors as [`Plan::execute`].
    pub fn execute_into<'b, I: Index, V: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        buffers: &'b mut OutputBuffers,
    ) -> Result<Outputs<'b>> {
        self.run_into("Plan::execute_into", inputs, None, buffers)
    }

    /// [`Plan::execute_into`] with per-stream lengths, as [`Plan::execute_with_lengths`].
    pub fn execute_into_with_lengths<'b, 'l, I: Index, V: Value>(
        &mut self,
        inputs: &Inputs<'_, I, V>,
        lengths: impl Into<StreamLengths<'l>>,
        buffers: &'b mut OutputBuffers,
    ) -> Result<Outputs<'b>> {
        self.run_into(
            "Plan::execute_into_with_lengths",
            inputs,
            Some(lengths.into()),
            buffers,
        )
    }

    fn run_into<'b, I: Index, V: Value>(
        &mut self,
        who: &str,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<StreamLengths<'_>>,
        buffers: &'b mut OutputBuffers,
    ) -> Result<Outputs<'b>> {
        let raw_inputs = self.host_inputs(who, inputs, lengths)?;
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
    /// - Every non-null entry `ptrs[f]` for a field the plan computes points to device memory
    ///   of the plan's device of at least [`Plan::field_info`]`(f).bytes()` bytes, aligned
    ///   for its dtype, not overlapping the inputs or another output.
    /// - `stream` is null or a valid stream of the plan's device.
    /// - Until the enqueued work has completed on `stream`: the inputs stay allocated and
    ///   unchanged, the output buffers stay allocated and are not read or written by other
    ///   work, and the plan is not dropped (dropping frees its buffers and workspace).
    /// - Executes of one plan are ordered on the device (the same stream, or synchronized
    ///   between): they share the plan's workspace and buffers.
    pub unsafe fn execute_device(
        &mut self,
        inputs: &DeviceInputs,
        outputs: Option<&[*mut c_void]>,
        stream: *mut c_void,
    ) -> Result<()> {
        // SAFETY: as the caller guarantees; no lengths.
        unsafe {
            self.execute_device_with_lengths(inputs, ptr::null(), IndexDtype::I32, outputs, stream)
        }
    }

    /// [`Plan::execute_device`] with per-stream lengths in device memory (see
    /// [`StreamLengths`]): `lengths` points to `num_parallel` elements of `dtype` (`i32` or
    /// `i64`), or is null (the plan's `valid_last` rule). The kernels read them, so the
    /// launch needs no host synchronization and a captured graph reads the buffer's lengths
    /// at each replay; a length outside `0..=steps * C` is reported by
    /// [`Plan::execute_status`].
    ///
    /// # Safety
    ///
    /// As [`Plan::execute_device`], and `lengths` is null or points to `num_parallel`
    /// naturally aligned elements of `dtype` in device memory of the plan's device, allocated
    /// and unchanged until the enqueued work has completed.
    pub unsafe fn execute_device_with_lengths(
        &mut self,
        inputs: &DeviceInputs,
        lengths: *const c_void,
        dtype: IndexDtype,
        outputs: Option<&[*mut c_void]>,
        stream: *mut c_void,
    ) -> Result<()> {
        if self.backend != Backend::Cuda {
            return Err(Error::invalid_argument(format!(
                "Plan::execute_device: the plan runs on the {:?} backend, not Backend::Cuda \
                 (host slices go through execute)",
                self.backend
            )));
        }
        let (out_ptr, count) = match outputs {
            None => (ptr::null(), 0),
            Some(ptrs) if ptrs.len() <= Field::COUNT => (ptrs.as_ptr(), ptrs.len() as i32),
            Some(ptrs) => {
                return Err(Error::invalid_argument(format!(
                    "Plan::execute_device: {} output pointers, at most Field::COUNT = {}",
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
        raw_inputs.stream_lengths = lengths;
        raw_inputs.stream_lengths_dtype = match dtype {
            IndexDtype::I32 => sys::SDM_P1_DTYPE_INT32,
            IndexDtype::I64 => sys::SDM_P1_DTYPE_INT64,
        } as i32;
        self.executed = false;
        // SAFETY: the caller guarantees the pointers and the stream (see # Safety).
        check(unsafe {
            sys::sdm_p1_execute(self.raw.0.as_ptr(), &raw_inputs, out_ptr, count, stream)
        })
    }

    /// The data check of the plan's last execute (`sdm_p1_execute_status`): `Ok` when every
    /// valid token's ids lay in its stream's range and every gate was finite and below 2^22,
    /// else [`Status::InvalidInput`] with the message the CPU backend gives for the same
    /// inputs. CUDA backend: call it only after the stream of that execute has been
    /// synchronized (it copies 24 bytes from the device). CPU backend, or a plan never
    /// executed: always `Ok` (the CPU's execute reports bad data itself).
    pub fn execute_status(&mut self) -> Result<()> {
        // SAFETY: a live plan, not used concurrently (&mut self).
        check(unsafe { sys::sdm_p1_execute_status(self.raw.0.as_ptr()) })
    }

    /// Checks host inputs against the plan and returns them as the C struct.
    fn host_inputs<I: Index, V: Value>(
        &self,
        who: &str,
        inputs: &Inputs<'_, I, V>,
        lengths: Option<StreamLengths<'_>>,
    ) -> Result<sys::sdm_p1_inputs> {
        if self.backend != Backend::Cpu {
            return Err(Error::invalid_argument(format!(
                "{who}: the plan runs on the {:?} backend; host slices need Backend::Cpu \
                 (device memory goes through execute_device)",
                self.backend
            )));
        }
        if I::INDEX_DTYPE != self.index_dtype {
            return Err(Error::invalid_argument(format!(
                "{who}: k_idx and q_idx are {:?} but the plan's index dtype is {:?}",
                I::INDEX_DTYPE,
                self.index_dtype
            )));
        }
        if V::VALUE_DTYPE != self.value_dtype {
            return Err(Error::invalid_argument(format!(
                "{who}: k_val and q_val are {:?} but the plan's value dtype is {:?}",
                V::VALUE_DTYPE,
                self.value_dtype
            )));
        }
        let tokens = self.n() * self.c();
        let checks = [
            ("k_idx", inputs.k_idx.len(), tokens * self.w(), "N * C * W"),
            ("q_idx", inputs.q_idx.len(), tokens * self.r(), "N * C * R"),
            ("k_val", inputs.k_val.len(), tokens * self.w(), "N * C * W"),
            ("q_val", inputs.q_val.len(), tokens * self.r(), "N * C * R"),
            (
                "g",
                inputs.g.len(),
                tokens * self.gate_width(),
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
        let mut raw = sys::inputs_initializer();
        raw.k_idx = inputs.k_idx.as_ptr().cast();
        raw.q_idx = inputs.q_idx.as_ptr().cast();
        raw.k_val = inputs.k_val.as_ptr().cast();
        raw.q_val = inputs.q_val.as_ptr().cast();
        raw.g = inputs.g.as_ptr();
        raw.beta = inputs.beta.map_or(ptr::null(), <[f32]>::as_ptr);
        if let Some(l) = lengths {
            let streams = self.num_parallel();
            if l.len() != streams {
                return Err(Error::invalid_argument(format!(
                    "{who}: stream_lengths has {} elements; the plan needs num_parallel = {streams}",
                    l.len()
                )));
            }
            (raw.stream_lengths, raw.stream_lengths_dtype) = l.raw();
        }
        Ok(raw)
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
        self.desc.N as usize
    }

    /// C: tokens per chunk.
    pub fn c(&self) -> usize {
        self.desc.C as usize
    }

    /// W: write slots per token.
    pub fn w(&self) -> usize {
        self.desc.W as usize
    }

    /// R: read slots per token.
    pub fn r(&self) -> usize {
        self.desc.R as usize
    }

    /// Number of streams.
    pub fn num_parallel(&self) -> usize {
        self.desc.num_parallel as usize
    }

    /// Slot-id offset between streams.
    pub fn stream_offset(&self) -> i64 {
        self.desc.stream_offset
    }

    /// Slots per stream.
    pub fn num_keys(&self) -> i64 {
        self.desc.num_keys
    }

    /// Valid tokens in each stream's last chunk (resolved: C when unset).
    pub fn valid_last(&self) -> usize {
        self.desc.valid_last as usize
    }

    /// Gates per token (1 or W).
    pub fn gate_width(&self) -> usize {
        self.desc.gate_width as usize
    }

    /// Element type of the slot ids.
    pub fn index_dtype(&self) -> IndexDtype {
        self.index_dtype
    }

    /// Element type of the values.
    pub fn value_dtype(&self) -> ValueDtype {
        self.value_dtype
    }

    /// Whether the read-side groups are computed.
    pub fn need_read_groups(&self) -> bool {
        self.desc.need_read_groups != 0
    }

    /// The optional outputs computed (resolved: [`DetFields::SHIPPED`] when unset).
    pub fn det_fields(&self) -> DetFields {
        self.det_fields
    }

    /// Tile length L (resolved: 128 when unset).
    pub fn rec_tile(&self) -> usize {
        self.desc.rec_tile as usize
    }

    /// The backend the plan runs on ([`Backend::Auto`] resolved to CPU or CUDA).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The CUDA device ordinal as resolved by the library (meaningless for the CPU backend).
    pub fn device(&self) -> i32 {
        self.desc.device
    }

    /// CPU worker threads (resolved: the hardware's thread count when unset).
    pub fn num_threads(&self) -> usize {
        self.desc.num_threads as usize
    }

    /// Who provides the output buffers.
    pub fn output_mode(&self) -> OutputMode {
        self.output_mode
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
