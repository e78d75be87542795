//! The inputs of one execute: host slices, device pointers, per-stream lengths, and their
//! checks against the plan.
use std::ffi::c_void;
use std::ptr;

use sdm_phase1_sys as sys;

use super::Plan;
use crate::error::{Error, Result, Status};
use crate::types::{Backend, Index, Value};

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
    /// `[N, C]`, needed when the plan computes `kspa` ([`DetFields::KSPA`](crate::DetFields::KSPA)); else ignored.
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
    pub(super) fn raw(self) -> (*const c_void, i32) {
        match self {
            DeviceStreamLengths::I32(p) => (p.cast(), sys::SDM_P1_DTYPE_INT32 as i32),
            DeviceStreamLengths::I64(p) => (p.cast(), sys::SDM_P1_DTYPE_INT64 as i32),
        }
    }
}

impl Plan {
    /// Checks host inputs (and per-stream lengths) against the plan and returns them as the C
    /// struct, with the lengths as the `int64_t` array it points to: keep that alive for the
    /// call (moving the Vec does not move its elements).
    pub(super) fn host_inputs<I: Index, V: Value>(
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
}
