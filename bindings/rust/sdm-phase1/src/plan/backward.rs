//! The backward's executes (`sdm_p1_execute_backward`) and the shapes of its gradients.
use std::ffi::c_void;
use std::ptr;

use sdm_phase1_sys as sys;

use super::{Inputs, Plan};
use crate::error::{check, Error, Result};
use crate::gradients::{upstream_shape, InputGradients, OutputGradients};
use crate::outputs::Field;
use crate::types::{Index, Value};

impl Plan {
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
    ///   ids. Both give the same bits. The library checks it against the ids (a row that is
    ///   not a permutation of its chunk's entries, or not the sort of these ids, as a payload
    ///   from a forward on other ids, is [`Status::InvalidInput`](crate::Status::InvalidInput)). The views of
    ///   [`Plan::execute`] borrow the plan, so copy the payload out of them first (or take it
    ///   from [`OutputBuffers`](crate::OutputBuffers), which [`Plan::execute_into`] fills).
    /// - `grads`: the upstream gradients, each checked against
    ///   [`Plan::gradient_shape`]; those not given read as +0.0.
    ///
    /// `G` is the plan's [`grad_dtype`](Plan::grad_dtype) (say which in the result's type:
    /// `let d: InputGradients<f32> = plan.execute_backward(..)?`). A plan built without
    /// [`PlanBuilder::backward`](crate::PlanBuilder::backward)`(true)` is refused by the library
    /// ([`Status::InvalidArgument`](crate::Status::InvalidArgument) and its message). Nothing is written on any error, and
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
    /// length than the plan's is refused ([`Status::InvalidArgument`](crate::Status::InvalidArgument) naming it).
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
}
