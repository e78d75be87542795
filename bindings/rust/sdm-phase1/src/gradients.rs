//! The backward (1.3): upstream gradients by output field and the input gradients
//! [`Plan::execute_backward`](crate::Plan::execute_backward) computes.
use std::ffi::c_void;
use std::fmt;

use crate::outputs::Field;
use crate::types::Value;

/// The upstream gradients dL/dX of one backward, by output field X: the `grads` array of
/// `sdm_p1_execute_backward`. Host slices, dense and row-major.
///
/// Only the differentiable outputs have a setter, so a gradient for an integer output cannot
/// be given. A field left unset is passed as NULL, which the library reads as +0.0
/// everywhere. `V` is the plan's value dtype (`f32` or [`Bf16`](crate::Bf16)), that of the
/// value-typed outputs `cpe`, `k_eff` and `q_w`; the other gradients are `f32`.
///
/// The slices are checked against the plan's shapes when the backward runs
/// ([`Plan::gradient_shape`](crate::Plan::gradient_shape) gives each one). Cells the backward
/// never reads (`a` at j >= i, `qk` at j > i, padding tokens' rows, columns and entries) may
/// hold anything, NaN included.
///
/// ```
/// # use sdm_phase1::OutputGradients;
/// let (da, dlog_k) = (vec![0.0f32; 64], vec![1.0f32; 16]);
/// let up: OutputGradients<'_, f32> = OutputGradients::new().a(&da).log_k(&dlog_k);
/// ```
#[derive(Clone, Copy)]
pub struct OutputGradients<'a, V: Value> {
    a: Option<&'a [f32]>,
    qk: Option<&'a [f32]>,
    log_k: Option<&'a [f32]>,
    log_q: Option<&'a [f32]>,
    rex: Option<&'a [f32]>,
    cpe: Option<&'a [V]>,
    k_eff: Option<&'a [V]>,
    q_w: Option<&'a [V]>,
    krec: Option<&'a [f32]>,
    kspa: Option<&'a [f32]>,
    qrec: Option<&'a [f32]>,
    qrec8: Option<&'a [f32]>,
}

impl<'a, V: Value> OutputGradients<'a, V> {
    /// No upstream gradient: every field reads as +0.0.
    pub fn new() -> OutputGradients<'a, V> {
        OutputGradients {
            a: None,
            qk: None,
            log_k: None,
            log_q: None,
            rex: None,
            cpe: None,
            k_eff: None,
            q_w: None,
            krec: None,
            kspa: None,
            qrec: None,
            qrec8: None,
        }
    }

    /// dL/d`a`: `[N, C, C]` f32; cells j >= i are never read.
    pub fn a(mut self, grad: &'a [f32]) -> Self {
        self.a = Some(grad);
        self
    }

    /// dL/d`qk`: `[N, C, C]` f32; cells j > i are never read.
    pub fn qk(mut self, grad: &'a [f32]) -> Self {
        self.qk = Some(grad);
        self
    }

    /// dL/d`log_k`: `[N, C, W]` f32.
    pub fn log_k(mut self, grad: &'a [f32]) -> Self {
        self.log_k = Some(grad);
        self
    }

    /// dL/d`log_q`: `[N, C, R]` f32.
    pub fn log_q(mut self, grad: &'a [f32]) -> Self {
        self.log_q = Some(grad);
        self
    }

    /// dL/d`rex`: `[N, C, W]` f32.
    pub fn rex(mut self, grad: &'a [f32]) -> Self {
        self.rex = Some(grad);
        self
    }

    /// dL/d`cpe`: `[N, C, W]` in the value dtype.
    pub fn cpe(mut self, grad: &'a [V]) -> Self {
        self.cpe = Some(grad);
        self
    }

    /// dL/d`k_eff`: `[N, C, W]` in the value dtype.
    pub fn k_eff(mut self, grad: &'a [V]) -> Self {
        self.k_eff = Some(grad);
        self
    }

    /// dL/d`q_w`: `[N, C, R]` in the value dtype.
    pub fn q_w(mut self, grad: &'a [V]) -> Self {
        self.q_w = Some(grad);
        self
    }

    /// dL/d`krec`: `[N, C * W, 2]` f32 by K-row index, the gradients of krec's words 2
    /// (`k_val * exp(rex)`) and 3 (`cpe`); its integer words 0 and 1 have none. May be given
    /// whether or not the plan computes `krec`.
    pub fn krec(mut self, grad: &'a [f32]) -> Self {
        self.krec = Some(grad);
        self
    }

    /// dL/d`kspa`: `[N, C * W]` f32 by K-row index. The only way `beta` enters Phase 1, so it
    /// needs `beta` in the inputs; without it dL/d`beta` is +0.0.
    pub fn kspa(mut self, grad: &'a [f32]) -> Self {
        self.kspa = Some(grad);
        self
    }

    /// dL/d`qrec`: `[N, C * R]` f32 by Q-row index, the gradient of its scale (`q_w`).
    pub fn qrec(mut self, grad: &'a [f32]) -> Self {
        self.qrec = Some(grad);
        self
    }

    /// dL/d`qrec8`: `[N, C * R]` f32 by Q-row index, as [`qrec`](Self::qrec); when both are
    /// given they add.
    pub fn qrec8(mut self, grad: &'a [f32]) -> Self {
        self.qrec8 = Some(grad);
        self
    }

    /// Each differentiable field with its gradient's address and length, when given.
    pub(crate) fn given(&self) -> [(Field, Option<(*const c_void, usize)>); 12] {
        fn raw<T>(s: Option<&[T]>) -> Option<(*const c_void, usize)> {
            s.map(|s| (s.as_ptr().cast(), s.len()))
        }
        [
            (Field::A, raw(self.a)),
            (Field::Qk, raw(self.qk)),
            (Field::LogK, raw(self.log_k)),
            (Field::LogQ, raw(self.log_q)),
            (Field::Rex, raw(self.rex)),
            (Field::Cpe, raw(self.cpe)),
            (Field::KEff, raw(self.k_eff)),
            (Field::QW, raw(self.q_w)),
            (Field::Krec, raw(self.krec)),
            (Field::Kspa, raw(self.kspa)),
            (Field::Qrec, raw(self.qrec)),
            (Field::Qrec8, raw(self.qrec8)),
        ]
    }
}

impl<V: Value> Default for OutputGradients<'_, V> {
    fn default() -> Self {
        OutputGradients::new()
    }
}

impl<V: Value> fmt::Debug for OutputGradients<'_, V> {
    /// The fields given and their lengths (the elements would be too many to print).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_map();
        for (field, given) in self.given() {
            if let Some((_, len)) = given {
                list.entry(&field.name(), &len);
            }
        }
        list.finish()
    }
}

/// The shape of the upstream gradient of `field` for a plan of these shapes, or `None` when
/// the output is not differentiable (the library's differentiable set, canon/field_sets.h; the
/// tests of tests/backward.rs hold the two together).
pub(crate) fn upstream_shape(
    field: Field,
    n: usize,
    c: usize,
    w: usize,
    r: usize,
) -> Option<Vec<usize>> {
    Some(match field {
        Field::A | Field::Qk => vec![n, c, c],
        Field::LogK | Field::Rex | Field::Cpe | Field::KEff => vec![n, c, w],
        Field::LogQ | Field::QW => vec![n, c, r],
        Field::Krec => vec![n, c * w, 2],
        Field::Kspa => vec![n, c * w],
        Field::Qrec | Field::Qrec8 => vec![n, c * r],
        _ => return None,
    })
}

/// The input gradients of one backward (`sdm_p1_input_grads`), owned: dL/d`k_val` and
/// dL/d`q_val` in the plan's grad dtype `G` (`f32`, or [`Bf16`](crate::Bf16) when the values
/// are bfloat16 and the plan keeps the default), dL/d`g` and dL/d`beta` in `f32`.
///
/// Padding tokens get +0.0 everywhere, and so do the per-write gates of repeat lanes. Made by
/// [`Plan::execute_backward`](crate::Plan::execute_backward) or, as buffers to reuse with
/// [`Plan::execute_backward_into`](crate::Plan::execute_backward_into), by
/// [`Plan::input_gradients`](crate::Plan::input_gradients). `#[non_exhaustive]`: the C
/// struct grows with the library.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct InputGradients<G: Value> {
    /// `[N, C, W]` dL/d`k_val`.
    pub k_val: Vec<G>,
    /// `[N, C, R]` dL/d`q_val`.
    pub q_val: Vec<G>,
    /// `[N, C, gate_width]` dL/d`g`.
    pub g: Vec<f32>,
    /// `[N, C]` dL/d`beta` (+0.0 without a `kspa` gradient).
    pub beta: Vec<f32>,
}
