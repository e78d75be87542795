//! The forward's executes: on host slices into the plan's or the caller's buffers, on device
//! pointers, and the data check of the last execute.
use std::ffi::c_void;
use std::ptr;

use sdm_phase1_sys as sys;

use super::{DeviceInputs, DeviceStreamLengths, Inputs, OutputBuffers, Plan};
use crate::error::{check, Error, Result};
use crate::outputs::{Field, Outputs};
use crate::types::{Backend, Index, OutputMode, Value};

impl Plan {
    /// Runs the plan on host slices (CPU backend) and returns views of the plan's buffers.
    ///
    /// `lengths`: `None` applies the plan's `valid_last` rule. `Some(lengths)` (since 1.2;
    /// `sdm_p1_inputs.stream_lengths`) gives each of the `num_parallel` streams its own number
    /// of valid tokens, in `0..=steps * C` with `steps = N / num_parallel`: chunk `c` (stream
    /// `c % num_parallel`, step `c / num_parallel`) then has `clamp(len - step * C, 0, C)`
    /// valid tokens and `valid_last` is ignored, so one plan serves batches of one padded
    /// shape whatever their lengths. A slice of another length than `num_parallel` is refused
    /// ([`Status::InvalidArgument`](crate::Status::InvalidArgument)); a length out of range is bad data
    /// ([`Status::InvalidInput`](crate::Status::InvalidInput) naming the stream), reported before any output is written.
    ///
    /// Checks first that the plan runs on the CPU, keeps its own buffers
    /// ([`OutputMode::Plan`]), and that `I`, `V` and every slice length match the plan
    /// ([`Status::InvalidArgument`](crate::Status::InvalidArgument) naming the slice otherwise). Bad data (an id outside its
    /// stream's range, a bad gate) fail with the library's [`Status::InvalidInput`](crate::Status::InvalidInput) and its
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
    /// itself refuses ([`Status::InvalidArgument`](crate::Status::InvalidArgument) naming the field) pointers that are not
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
    /// every gate was finite and below 2^22, else [`Status::InvalidInput`](crate::Status::InvalidInput) with the message
    /// the CPU backend gives for the same inputs. CUDA backend: call it only after the stream
    /// of that execute has been synchronized (it copies 24 bytes from the device). CPU
    /// backend, or a plan never executed: always `Ok` (the CPU's execute reports bad data
    /// itself).
    pub fn execute_status(&mut self) -> Result<()> {
        // SAFETY: a live plan, not used concurrently (&mut self).
        check(unsafe { sys::sdm_p1_execute_status(self.raw.0.as_ptr()) })
    }
}
