//! `Plan::execute_backward` (1.3): the input gradients equal, bit for bit, what
//! `sdm_p1_execute_backward` gives when called directly through sdm-phase1-sys with the same
//! inputs and upstream gradients; zero upstream gives +0.0; a payload or none give the same
//! bits; bfloat16 gradients are the float32 ones rounded; and the refusals (a plan without
//! backward, slices of the wrong length, bad data) carry the right status and message.
mod common;

use std::ptr;

use common::{aligned, id_bytes, ids_i32, last_error, random_data, value_bytes, Case, Data, Rng};
use sdm_phase1::sys;
use sdm_phase1::{
    Bf16, DetFields, Field, Index, InputGradients, Inputs, OutputGradients, OutputMode, Plan,
    Status, Value, ValueDtype,
};

/// The differentiable fields, in field order.
const DIFFERENTIABLE: [Field; 12] = [
    Field::A,
    Field::Qk,
    Field::LogK,
    Field::LogQ,
    Field::Rex,
    Field::Cpe,
    Field::KEff,
    Field::QW,
    Field::Krec,
    Field::Kspa,
    Field::Qrec,
    Field::Qrec8,
];

/// Whether the field's upstream gradient is in the value dtype (else f32).
fn value_typed(field: Field) -> bool {
    matches!(field, Field::Cpe | Field::KEff | Field::QW)
}

/// docs/backward.md's upstream shape of a field, written out independently of the crate.
fn upstream_shape(case: &Case, field: Field) -> Vec<usize> {
    let (n, c, w, r) = (case.n, case.c, case.w, case.r);
    match field {
        Field::A | Field::Qk => vec![n, c, c],
        Field::LogK | Field::Rex | Field::Cpe | Field::KEff => vec![n, c, w],
        Field::LogQ | Field::QW => vec![n, c, r],
        Field::Krec => vec![n, c * w, 2],
        Field::Kspa => vec![n, c * w],
        Field::Qrec | Field::Qrec8 => vec![n, c * r],
        other => panic!("{other:?} is not differentiable"),
    }
}

/// Random upstream gradients of `fields` (as f32; value-typed ones are rounded to the value
/// dtype where used). Cells of `a` at j >= i and of `qk` at j > i are NaN: never read.
fn random_upstream(case: &Case, fields: &[Field], seed: u64) -> Vec<(Field, Vec<f32>)> {
    let mut rng = Rng::new(seed);
    let c = case.c;
    fields
        .iter()
        .map(|&field| {
            let len: usize = upstream_shape(case, field).iter().product();
            let values = (0..len)
                .map(|k| {
                    let (i, j) = (k / c % c, k % c);
                    let unread = match field {
                        Field::A => j >= i,
                        Field::Qk => j > i,
                        _ => false,
                    };
                    if unread {
                        f32::NAN
                    } else {
                        rng.uniform(-1.0, 1.0)
                    }
                })
                .collect();
            (field, values)
        })
        .collect()
}

/// The input gradients as bytes, for bit-for-bit comparisons.
#[derive(Debug, PartialEq, Eq)]
struct Bits {
    k_val: Vec<u8>,
    q_val: Vec<u8>,
    g: Vec<u32>,
    beta: Vec<u32>,
}

/// A value type of the tests: made from an f32 and read back as bits.
trait TestValue: Value {
    fn from_f32(x: f32) -> Self;
    fn bytes(v: &[Self]) -> Vec<u8>;
}

impl TestValue for f32 {
    fn from_f32(x: f32) -> f32 {
        x
    }
    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }
}

impl TestValue for Bf16 {
    fn from_f32(x: f32) -> Bf16 {
        Bf16::from_f32(x)
    }
    fn bytes(v: &[Bf16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.0.to_ne_bytes()).collect()
    }
}

fn bits<G: TestValue>(d: &InputGradients<G>) -> Bits {
    Bits {
        k_val: G::bytes(&d.k_val),
        q_val: G::bytes(&d.q_val),
        g: d.g.iter().map(|x| x.to_bits()).collect(),
        beta: d.beta.iter().map(|x| x.to_bits()).collect(),
    }
}

/// One backward run: the case (its `bf16` flag is the value dtype), the gradients' dtype,
/// per-stream lengths, the forward's payload, the upstream gradients and whether `beta` is
/// given.
struct Run<'a> {
    case: &'a Case,
    data: &'a Data,
    grad_f32: bool,
    lengths: Option<&'a [usize]>,
    payload: Option<&'a [i32]>,
    upstream: &'a [(Field, Vec<f32>)],
    with_beta: bool,
}

impl Run<'_> {
    /// The plan's builder: the case's, with the backward and the grad dtype.
    fn plan(&self) -> Plan {
        let mut b = self.case.builder().backward(true);
        if self.grad_f32 {
            b = b.grad_dtype(ValueDtype::F32);
        }
        b.build().unwrap()
    }

    /// The gradients through the raw C API, or its status and message.
    fn c(&self) -> Result<Bits, (u32, String)> {
        let (case, data) = (self.case, self.data);
        let mut desc = case.desc(OutputMode::Plan);
        desc.backward = 1;
        if self.grad_f32 {
            desc.grad_dtype = sys::SDM_P1_DTYPE_FLOAT32 as i32;
        }
        let grad_size = if case.bf16 && !self.grad_f32 { 2 } else { 4 };
        let tokens = case.n * case.c;
        let k_idx = aligned(&id_bytes(case, &data.k_idx));
        let q_idx = aligned(&id_bytes(case, &data.q_idx));
        let k_val = aligned(&value_bytes(case, &data.k_val));
        let q_val = aligned(&value_bytes(case, &data.q_val));
        let lengths: Option<Vec<i64>> = self.lengths.map(|l| l.iter().map(|&x| x as i64).collect());
        let upstream: Vec<(Field, Vec<u64>)> = self
            .upstream
            .iter()
            .map(|(field, v)| {
                let bytes = if value_typed(*field) {
                    value_bytes(case, v)
                } else {
                    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
                };
                (*field, aligned(&bytes))
            })
            .collect();
        let mut grads = [ptr::null::<std::ffi::c_void>(); Field::COUNT];
        for (field, words) in &upstream {
            grads[field.index()] = words.as_ptr().cast();
        }
        let mut dk = vec![0u64; (tokens * case.w * grad_size).div_ceil(8)];
        let mut dq = vec![0u64; (tokens * case.r * grad_size).div_ceil(8)];
        let mut dg = vec![0f32; tokens * case.gate_width()];
        let mut dbeta = vec![0f32; tokens];
        unsafe {
            let mut plan = ptr::null_mut();
            let s = sys::sdm_p1_plan_create(&mut plan, &desc);
            if s != sys::SDM_P1_SUCCESS {
                return Err((s, last_error()));
            }
            let mut inputs = sys::inputs_initializer();
            inputs.k_idx = k_idx.as_ptr().cast();
            inputs.q_idx = q_idx.as_ptr().cast();
            inputs.k_val = k_val.as_ptr().cast();
            inputs.q_val = q_val.as_ptr().cast();
            inputs.g = data.g.as_ptr();
            if self.with_beta {
                inputs.beta = data.beta.as_ptr();
            }
            if let Some(l) = &lengths {
                inputs.stream_lengths = l.as_ptr().cast();
                inputs.stream_lengths_dtype = sys::SDM_P1_DTYPE_INT64 as i32;
            }
            let mut out = sys::input_grads_initializer();
            out.k_val = dk.as_mut_ptr().cast();
            out.q_val = dq.as_mut_ptr().cast();
            out.g = dg.as_mut_ptr();
            out.beta = dbeta.as_mut_ptr();
            let payload = self.payload.map_or(ptr::null(), <[i32]>::as_ptr);
            let s = sys::sdm_p1_execute_backward(
                plan,
                &inputs,
                payload,
                grads.as_ptr(),
                Field::COUNT as i32,
                &out,
                ptr::null_mut(),
            );
            let result = if s == sys::SDM_P1_SUCCESS {
                Ok(())
            } else {
                Err((s, last_error()))
            };
            assert_eq!(sys::sdm_p1_plan_destroy(plan), sys::SDM_P1_SUCCESS);
            result?;
        }
        let bytes = |words: &[u64], len: usize| -> Vec<u8> {
            words
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .take(len)
                .collect()
        };
        Ok(Bits {
            k_val: bytes(&dk, tokens * case.w * grad_size),
            q_val: bytes(&dq, tokens * case.r * grad_size),
            g: dg.iter().map(|x| x.to_bits()).collect(),
            beta: dbeta.iter().map(|x| x.to_bits()).collect(),
        })
    }

    /// The gradients through the safe API, on a plan built for the run.
    fn rust(&self) -> sdm_phase1::Result<Bits> {
        self.rust_on(&mut self.plan())
    }

    /// The gradients through the safe API on `plan`, in the case's dtypes.
    fn rust_on(&self, plan: &mut Plan) -> sdm_phase1::Result<Bits> {
        let d = self.data;
        let (k32, q32) = (ids_i32(&d.k_idx), ids_i32(&d.q_idx));
        match (self.case.ids64, self.case.bf16, self.grad_f32) {
            (false, false, _) => self.typed::<i32, f32, f32>(plan, &k32, &q32),
            (true, false, _) => self.typed::<i64, f32, f32>(plan, &d.k_idx, &d.q_idx),
            (false, true, false) => self.typed::<i32, Bf16, Bf16>(plan, &k32, &q32),
            (false, true, true) => self.typed::<i32, Bf16, f32>(plan, &k32, &q32),
            (true, true, false) => self.typed::<i64, Bf16, Bf16>(plan, &d.k_idx, &d.q_idx),
            (true, true, true) => self.typed::<i64, Bf16, f32>(plan, &d.k_idx, &d.q_idx),
        }
    }

    fn typed<I: Index, V: TestValue, G: TestValue>(
        &self,
        plan: &mut Plan,
        k_idx: &[I],
        q_idx: &[I],
    ) -> sdm_phase1::Result<Bits> {
        let d = self.data;
        let to_v = |v: &[f32]| v.iter().map(|&x| V::from_f32(x)).collect::<Vec<V>>();
        let (k_val, q_val) = (to_v(&d.k_val), to_v(&d.q_val));
        let mut inputs = Inputs::new(k_idx, q_idx, &k_val, &q_val, &d.g);
        if self.with_beta {
            inputs = inputs.with_beta(&d.beta);
        }
        let values: Vec<(Field, Vec<V>)> = self
            .upstream
            .iter()
            .filter(|(f, _)| value_typed(*f))
            .map(|(f, v)| (*f, to_v(v)))
            .collect();
        let mut up = OutputGradients::new();
        for (field, v) in self.upstream.iter().filter(|(f, _)| !value_typed(*f)) {
            up = match field {
                Field::A => up.a(v),
                Field::Qk => up.qk(v),
                Field::LogK => up.log_k(v),
                Field::LogQ => up.log_q(v),
                Field::Rex => up.rex(v),
                Field::Krec => up.krec(v),
                Field::Kspa => up.kspa(v),
                Field::Qrec => up.qrec(v),
                Field::Qrec8 => up.qrec8(v),
                other => panic!("{other:?}"),
            };
        }
        for (field, v) in &values {
            up = match field {
                Field::Cpe => up.cpe(v),
                Field::KEff => up.k_eff(v),
                Field::QW => up.q_w(v),
                other => panic!("{other:?}"),
            };
        }
        let grads: InputGradients<G> =
            plan.execute_backward(&inputs, self.lengths, self.payload, &up)?;
        Ok(bits(&grads))
    }
}

/// The forward's payload for the case's inputs (through the raw C API).
fn forward_payload(case: &Case, data: &Data, lengths: Option<&[usize]>) -> Vec<i32> {
    let fields = common::run_c_lengths(case, data, true, lengths).unwrap();
    fields[Field::Payload.index()]
        .bytes
        .chunks_exact(4)
        .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
        .collect()
}

fn cases() -> Vec<(Case, Option<Vec<usize>>, bool)> {
    let mut cases = Vec::new();

    // The defaults: one stream, int32 ids, f32 values and gradients.
    cases.push((Case::new(4, 8, 2, 2), None, false));

    // Three streams with padding, a gate per write, int64 ids, repeated slots, bf16 values
    // and gradients.
    let mut c = Case::new(6, 16, 4, 3);
    c.p = 3;
    c.offset = 1000;
    c.keys = 40;
    c.valid_last = Some(5);
    c.gate_per_write = true;
    c.ids64 = true;
    c.bf16 = true;
    c.distinct = false;
    c.threads = Some(3);
    c.seed = 2;
    cases.push((c, None, false));

    // bf16 values with f32 gradients, W = 1, per-stream lengths.
    let mut c = Case::new(4, 32, 1, 5);
    c.p = 2;
    c.keys = 8;
    c.bf16 = true;
    c.det = Some(DetFields::ALL);
    c.seed = 3;
    cases.push((c, Some(vec![50, 17]), true));

    // Many collisions (16 slots for 64 tokens), repeats, per-write gates, lengths.
    let mut c = Case::new(8, 64, 4, 4);
    c.p = 2;
    c.offset = 16;
    c.keys = 16;
    c.distinct = false;
    c.gate_per_write = true;
    c.seed = 4;
    cases.push((c, Some(vec![256, 130]), false));

    cases
}

#[test]
fn backward_equals_the_c_api() {
    for (case, lengths, grad_f32) in cases() {
        let data = random_data(&case);
        let upstream = random_upstream(&case, &DIFFERENTIABLE, case.seed + 100);
        let payload = forward_payload(&case, &data, lengths.as_deref());
        for payload in [None, Some(&payload[..])] {
            let run = Run {
                case: &case,
                data: &data,
                grad_f32,
                lengths: lengths.as_deref(),
                payload,
                upstream: &upstream,
                with_beta: true,
            };
            let want = run.c().unwrap_or_else(|e| panic!("{case:?}: {e:?}"));
            let got = run.rust().unwrap();
            assert_eq!(want, got, "{case:?}, payload given: {}", payload.is_some());
            // Not a vacuous comparison: every gradient has non-zero elements.
            assert!(want.k_val.iter().any(|&b| b != 0), "{case:?}");
            assert!(want.q_val.iter().any(|&b| b != 0), "{case:?}");
            assert!(want.g.iter().any(|&b| b != 0), "{case:?}");
            assert!(want.beta.iter().any(|&b| b != 0), "{case:?}");
        }
    }
}

#[test]
fn the_comparison_sees_a_changed_upstream() {
    let case = Case::new(4, 8, 2, 2);
    let data = random_data(&case);
    let upstream = random_upstream(&case, &DIFFERENTIABLE, 7);
    let mut changed = random_upstream(&case, &DIFFERENTIABLE, 7);
    // log_k of chunk 0's first K entry: its gate's gradient takes it in.
    assert_eq!(changed[2].0, Field::LogK);
    changed[2].1[0] += 0.5;
    let run = |upstream| Run {
        case: &case,
        data: &data,
        grad_f32: false,
        lengths: None,
        payload: None,
        upstream,
        with_beta: true,
    };
    assert!(
        run(&upstream).c().unwrap() != run(&changed).rust().unwrap(),
        "different upstream gradients gave the same input gradients"
    );
}

#[test]
fn zero_upstream_gives_positive_zero() {
    for (case, lengths, grad_f32) in cases() {
        let data = random_data(&case);
        let mut zeros = random_upstream(&case, &DIFFERENTIABLE, 1);
        for (_, v) in &mut zeros {
            v.fill(0.0);
        }
        // No gradient given (every field NULL) and every one given as zeros.
        for upstream in [&[][..], &zeros[..]] {
            let run = Run {
                case: &case,
                data: &data,
                grad_f32,
                lengths: lengths.as_deref(),
                payload: None,
                upstream,
                with_beta: true,
            };
            let got = run.rust().unwrap();
            let positive_zero = Bits {
                k_val: vec![0; got.k_val.len()],
                q_val: vec![0; got.q_val.len()],
                g: vec![0; got.g.len()],
                beta: vec![0; got.beta.len()],
            };
            assert_eq!(got, positive_zero, "{case:?}, {} fields", upstream.len());
        }
    }
    // Into buffers holding NaN: every element is overwritten with +0.0.
    let case = Case::new(4, 8, 2, 2);
    let data = random_data(&case);
    let (k, q) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let inputs = Inputs::new(&k, &q, &data.k_val, &data.q_val, &data.g);
    let mut plan = case.builder().backward(true).build().unwrap();
    let mut out = plan.input_gradients::<f32>();
    for v in [&mut out.k_val, &mut out.q_val, &mut out.g, &mut out.beta] {
        v.fill(f32::NAN);
    }
    plan.execute_backward_into(&inputs, None, None, &OutputGradients::new(), &mut out)
        .unwrap();
    let all = [&out.k_val, &out.q_val, &out.g, &out.beta];
    assert!(all.iter().all(|v| v.iter().all(|x| x.to_bits() == 0)));
}

#[test]
fn payload_or_none_give_the_same_bits() {
    let mut case = Case::new(6, 32, 4, 4);
    case.p = 3;
    case.keys = 12;
    case.valid_last = Some(20);
    case.distinct = false;
    case.det = Some(DetFields::SHIPPED | DetFields::KSPA);
    let data = random_data(&case);
    let upstream = random_upstream(&case, &DIFFERENTIABLE, 5);
    let (k, q) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let inputs = Inputs::new(&k, &q, &data.k_val, &data.q_val, &data.g).with_beta(&data.beta);
    let mut plan = case.builder().backward(true).build().unwrap();
    // The payload of caller buffers, borrowed from them while the plan runs its backward.
    let mut buffers = plan.output_buffers();
    plan.execute_into(&inputs, None, &mut buffers).unwrap();
    let out = buffers.outputs();
    let payload: &[i32] = out.slice(Field::Payload).unwrap();
    let run = Run {
        case: &case,
        data: &data,
        grad_f32: false,
        lengths: None,
        payload: Some(payload),
        upstream: &upstream,
        with_beta: true,
    };
    let with_payload = run.rust_on(&mut plan).unwrap();
    let without = Run {
        payload: None,
        ..run
    }
    .rust_on(&mut plan)
    .unwrap();
    assert_eq!(with_payload, without);
    assert!(with_payload.g.iter().any(|&b| b != 0));
}

#[test]
fn bf16_gradients_are_the_f32_gradients_rounded() {
    for (mut case, lengths, _) in cases() {
        case.bf16 = true;
        let data = random_data(&case);
        let upstream = random_upstream(&case, &DIFFERENTIABLE, case.seed + 200);
        let run = |grad_f32| Run {
            case: &case,
            data: &data,
            grad_f32,
            lengths: lengths.as_deref(),
            payload: None,
            upstream: &upstream,
            with_beta: true,
        };
        let wide = run(true).rust().unwrap();
        let narrow = run(false).rust().unwrap();
        let round = |bytes: &[u8]| -> Vec<u8> {
            bytes
                .chunks_exact(4)
                .flat_map(|b| {
                    let x = f32::from_ne_bytes(b.try_into().unwrap());
                    Bf16::from_f32(x).0.to_ne_bytes()
                })
                .collect()
        };
        assert_eq!(narrow.k_val, round(&wide.k_val), "{case:?}");
        assert_eq!(narrow.q_val, round(&wide.q_val), "{case:?}");
        assert_eq!((&narrow.g, &narrow.beta), (&wide.g, &wide.beta), "{case:?}");
        // Not vacuous: the f32 gradients are not all bfloat16 values already.
        let low_bits = |b: &[u8]| u32::from_ne_bytes(b.try_into().unwrap()) & 0xffff;
        assert!(
            wide.k_val.chunks_exact(4).any(|b| low_bits(b) != 0),
            "{case:?}"
        );
    }
}

#[test]
fn a_plan_without_backward_is_refused_with_the_library_message() {
    let case = Case::new(4, 8, 2, 2);
    let data = random_data(&case);
    let (k, q) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let inputs = Inputs::new(&k, &q, &data.k_val, &data.q_val, &data.g);
    let up = random_upstream(&case, &[Field::A], 1);
    let grads = OutputGradients::new().a(&up[0].1);

    // The raw C API's message for a plan created without desc.backward.
    let desc = case.desc(OutputMode::Plan);
    let c_message = unsafe {
        let mut plan = ptr::null_mut();
        assert_eq!(
            sys::sdm_p1_plan_create(&mut plan, &desc),
            sys::SDM_P1_SUCCESS
        );
        let out = sys::input_grads_initializer();
        let s = sys::sdm_p1_execute_backward(
            plan,
            &sys::inputs_initializer(),
            ptr::null(),
            ptr::null(),
            0,
            &out,
            ptr::null_mut(),
        );
        assert_eq!(s, sys::SDM_P1_ERROR_INVALID_ARGUMENT);
        let message = last_error();
        sys::sdm_p1_plan_destroy(plan);
        message
    };

    for mut plan in [
        case.builder().build().unwrap(),
        case.builder().backward(false).build().unwrap(),
    ] {
        assert!(!plan.backward());
        plan.execute(&inputs, None).unwrap();
        let err = plan
            .execute_backward::<_, _, f32>(&inputs, None, None, &grads)
            .unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert_eq!(err.message(), c_message);
        assert!(
            err.message().contains("without sdm_p1_desc.backward = 1"),
            "{err}"
        );
        assert!(plan.outputs().is_some(), "the forward's outputs stay");
    }
}

#[test]
fn slices_of_the_wrong_length_are_refused() {
    let case = Case::new(4, 8, 2, 3);
    let data = random_data(&case);
    let (k, q) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let inputs = Inputs::new(&k, &q, &data.k_val, &data.q_val, &data.g).with_beta(&data.beta);
    let mut plan = case.builder().backward(true).build().unwrap();
    // Every upstream gradient one element too long.
    let long = random_upstream(&case, &DIFFERENTIABLE, 3);
    let long: Vec<(Field, Vec<f32>)> = long
        .into_iter()
        .map(|(f, mut v)| {
            v.push(0.0);
            (f, v)
        })
        .collect();
    for (field, v) in &long {
        let up = OutputGradients::new();
        let up = match field {
            Field::A => up.a(v),
            Field::Qk => up.qk(v),
            Field::LogK => up.log_k(v),
            Field::LogQ => up.log_q(v),
            Field::Rex => up.rex(v),
            Field::Cpe => up.cpe(v),
            Field::KEff => up.k_eff(v),
            Field::QW => up.q_w(v),
            Field::Krec => up.krec(v),
            Field::Kspa => up.kspa(v),
            Field::Qrec => up.qrec(v),
            Field::Qrec8 => up.qrec8(v),
            other => panic!("{other:?}"),
        };
        let err = plan
            .execute_backward::<_, _, f32>(&inputs, None, None, &up)
            .unwrap_err();
        let shape = upstream_shape(&case, *field);
        assert_eq!(err.status(), Status::InvalidArgument);
        assert_eq!(
            err.message(),
            format!(
                "Plan::execute_backward: the {} gradient has {} elements; the plan needs \
                 {shape:?} = {}",
                field.name(),
                v.len(),
                v.len() - 1
            )
        );
    }
    let krec = vec![0.0f32; 4 * 16 * 4]; // krec's output shape, [N, C * W, 4]: not its gradient's
    let err = plan
        .execute_backward::<_, _, f32>(&inputs, None, None, &OutputGradients::new().krec(&krec))
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Plan::execute_backward: the krec gradient has 256 elements; the plan needs [4, 16, 2] \
         = 128"
    );

    let none = OutputGradients::new();
    let payload = vec![0i32; 4 * 48 - 1];
    let err = plan
        .execute_backward::<_, _, f32>(&inputs, None, Some(&payload), &none)
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Plan::execute_backward: payload has 191 elements; the plan needs N * row = 192 (row = C \
         * (W + R) rounded up to a multiple of 16)"
    );
    let mut short = inputs;
    short.g = &data.g[1..];
    let err = plan
        .execute_backward::<_, _, f32>(&short, None, None, &none)
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Plan::execute_backward: g has 31 elements; the plan needs N * C * gate_width = 32"
    );
    let mut out = plan.input_gradients::<f32>();
    out.q_val.pop();
    let err = plan
        .execute_backward_into(&inputs, None, None, &none, &mut out)
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Plan::execute_backward_into: out.q_val has 95 elements; the plan needs N * C * R = 96"
    );
    let err = plan
        .execute_backward::<_, _, Bf16>(&inputs, None, None, &none)
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(
        err.message(),
        "Plan::execute_backward: the k_val and q_val gradients are Bf16 but the plan's grad \
         dtype is F32"
    );
}

#[test]
fn bad_data_and_payloads_give_the_library_message() {
    let case = Case::new(4, 8, 2, 2);
    let good = random_data(&case);
    let upstream = random_upstream(&case, &[Field::A, Field::LogK], 9);
    let payload = forward_payload(&case, &good, None);
    let mut bad_gate = random_data(&case);
    bad_gate.g[10] = f32::INFINITY;
    let mut bad_payload = payload.clone();
    bad_payload[1] = bad_payload[0]; // chunk 0's row names its first entry twice

    // Other ids (another seed's data) with this payload: not their sort.
    let other = random_data(&Case {
        seed: case.seed + 1,
        ..case.clone()
    });
    for (data, payload, what) in [
        (&bad_gate, None, "g[1, 2"),
        (&good, Some(&bad_payload[..]), "payload"),
        (&other, Some(&payload[..]), "these ids"),
    ] {
        let run = Run {
            case: &case,
            data,
            grad_f32: false,
            lengths: None,
            payload,
            upstream: &upstream,
            with_beta: false,
        };
        let (code, c_message) = run.c().unwrap_err();
        assert_eq!(code, Status::InvalidInput.code());
        let err = run.rust().unwrap_err();
        assert_eq!(
            (err.status(), err.message()),
            (Status::InvalidInput, &c_message[..])
        );
        assert!(
            err.message().starts_with("sdm_p1_execute_backward"),
            "{err}"
        );
        assert!(err.message().contains(what), "{err}");
    }
    // A kspa gradient without beta: the library's refusal.
    let kspa = random_upstream(&case, &[Field::Kspa], 2);
    let run = Run {
        case: &case,
        data: &good,
        grad_f32: false,
        lengths: None,
        payload: None,
        upstream: &kspa,
        with_beta: false,
    };
    let (code, c_message) = run.c().unwrap_err();
    let err = run.rust().unwrap_err();
    assert_eq!((err.status().code(), err.message()), (code, &c_message[..]));
    assert!(err.message().contains("kspa"), "{err}");
}

#[test]
fn execute_backward_into_overwrites_and_leaves_the_forward_outputs() {
    let mut case = Case::new(4, 16, 4, 2);
    case.det = Some(DetFields::ALL);
    let data = random_data(&case);
    let (k, q) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let inputs = Inputs::new(&k, &q, &data.k_val, &data.q_val, &data.g).with_beta(&data.beta);
    let mut plan = case.builder().backward(true).build().unwrap();
    plan.execute(&inputs, None).unwrap();
    let forward = common::collect(&plan, &plan.outputs().unwrap());

    let first = random_upstream(&case, &DIFFERENTIABLE, 11);
    let second = random_upstream(&case, &[Field::Qk, Field::Kspa], 12);
    let run = |upstream| Run {
        case: &case,
        data: &data,
        grad_f32: false,
        lengths: None,
        payload: None,
        upstream,
        with_beta: true,
    };
    let (want_first, want_second) = (run(&first).c().unwrap(), run(&second).c().unwrap());
    assert!(want_first != want_second);

    let mut out = plan.input_gradients::<f32>();
    let up_first = OutputGradients::new()
        .a(&first[0].1)
        .qk(&first[1].1)
        .log_k(&first[2].1)
        .log_q(&first[3].1)
        .rex(&first[4].1)
        .cpe(&first[5].1)
        .k_eff(&first[6].1)
        .q_w(&first[7].1)
        .krec(&first[8].1)
        .kspa(&first[9].1)
        .qrec(&first[10].1)
        .qrec8(&first[11].1);
    plan.execute_backward_into(&inputs, None, None, &up_first, &mut out)
        .unwrap();
    assert_eq!(bits(&out), want_first);
    // The same buffers again, with other upstream gradients: overwritten whole.
    let up_second = OutputGradients::new().qk(&second[0].1).kspa(&second[1].1);
    plan.execute_backward_into(&inputs, None, None, &up_second, &mut out)
        .unwrap();
    assert_eq!(bits(&out), want_second);
    // The forward's outputs in the plan's buffers are untouched.
    let after = common::collect(&plan, &plan.outputs().unwrap());
    assert_eq!(common::first_difference(&forward, &after), None);
}

#[test]
fn grad_dtypes_and_shapes_resolve() {
    let base = || Case::new(4, 8, 2, 3).builder();
    let plan = base().build().unwrap();
    assert!(!plan.backward());
    assert_eq!(plan.grad_dtype(), ValueDtype::F32);
    let plan = base().backward(true).build().unwrap();
    assert!(plan.backward());
    assert_eq!(plan.grad_dtype(), ValueDtype::F32);
    let bf16 = || base().value_dtype(ValueDtype::Bf16).backward(true);
    assert_eq!(bf16().build().unwrap().grad_dtype(), ValueDtype::Bf16);
    let plan = bf16().grad_dtype(ValueDtype::F32).build().unwrap();
    assert_eq!(plan.grad_dtype(), ValueDtype::F32);
    let zeros = plan.input_gradients::<f32>();
    assert_eq!(
        [
            zeros.k_val.len(),
            zeros.q_val.len(),
            zeros.g.len(),
            zeros.beta.len()
        ],
        [64, 96, 32, 32]
    );

    // bf16 gradients of f32 values: the library's refusal, as the C API gives it.
    let case = Case::new(4, 8, 2, 3);
    let mut desc = case.desc(OutputMode::Plan);
    desc.backward = 1;
    desc.grad_dtype = sys::SDM_P1_DTYPE_BFLOAT16 as i32;
    let c_message = unsafe {
        let mut raw = ptr::null_mut();
        let s = sys::sdm_p1_plan_create(&mut raw, &desc);
        assert_eq!(s, sys::SDM_P1_ERROR_INVALID_ARGUMENT);
        last_error()
    };
    let err = case
        .builder()
        .backward(true)
        .grad_dtype(ValueDtype::Bf16)
        .build()
        .unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (Status::InvalidArgument, &c_message[..])
    );
    assert!(err.message().contains("grad_dtype"), "{err}");

    // Upstream shapes: docs/backward.md's for the differentiable fields, none for the rest.
    for field in Field::ALL {
        let want = DIFFERENTIABLE
            .contains(&field)
            .then(|| upstream_shape(&case, field));
        assert_eq!(plan.gradient_shape(field), want, "{field:?}");
    }
}

/// `DIFFERENTIABLE` and `value_typed` above are the library's sets (canon/field_sets.h, their one
/// definition): an upstream gradient of each field alone is refused as not differentiable
/// exactly where `DIFFERENTIABLE` leaves it out, and, in a bfloat16 plan, one only 2-byte
/// aligned is refused as misaligned exactly where it is f32. (`Plan::gradient_shape` is held
/// to `DIFFERENTIABLE` by grad_dtypes_and_shapes_resolve.)
#[test]
fn the_differentiable_set_is_the_library_s() {
    let mut case = Case::new(2, 4, 2, 2);
    case.bf16 = true;
    let data = random_data(&case);
    let mut desc = case.desc(OutputMode::Plan);
    desc.backward = 1;
    let k_idx = aligned(&id_bytes(&case, &data.k_idx));
    let q_idx = aligned(&id_bytes(&case, &data.q_idx));
    let k_val = aligned(&value_bytes(&case, &data.k_val));
    let q_val = aligned(&value_bytes(&case, &data.q_val));
    // Zeros with room for any field's gradient (a and qk: N * C * C floats).
    let upstream = vec![0u64; case.n * case.c * case.c.max(4 * (case.w + case.r)) + 8];
    let mut dk = vec![0u64; (case.n * case.c * case.w * 2).div_ceil(8)];
    let mut backward = |field: Field, offset: usize| -> Result<(), (u32, String)> {
        let mut grads = [ptr::null::<std::ffi::c_void>(); Field::COUNT];
        grads[field.index()] = upstream.as_ptr().cast::<u8>().wrapping_add(offset).cast();
        // SAFETY: every pointer names a live buffer of its array's size; the plan is
        // destroyed before the buffers.
        unsafe {
            let mut plan = ptr::null_mut();
            assert_eq!(
                sys::sdm_p1_plan_create(&mut plan, &desc),
                sys::SDM_P1_SUCCESS,
                "{}",
                last_error()
            );
            let mut inputs = sys::inputs_initializer();
            inputs.k_idx = k_idx.as_ptr().cast();
            inputs.q_idx = q_idx.as_ptr().cast();
            inputs.k_val = k_val.as_ptr().cast();
            inputs.q_val = q_val.as_ptr().cast();
            inputs.g = data.g.as_ptr();
            inputs.beta = data.beta.as_ptr();
            let mut out = sys::input_grads_initializer();
            out.k_val = dk.as_mut_ptr().cast();
            let s = sys::sdm_p1_execute_backward(
                plan,
                &inputs,
                ptr::null(),
                grads.as_ptr(),
                Field::COUNT as i32,
                &out,
                ptr::null_mut(),
            );
            let result = if s == sys::SDM_P1_SUCCESS {
                Ok(())
            } else {
                Err((s, last_error()))
            };
            assert_eq!(sys::sdm_p1_plan_destroy(plan), sys::SDM_P1_SUCCESS);
            result
        }
    };
    for field in Field::ALL {
        let result = backward(field, 0);
        if !DIFFERENTIABLE.contains(&field) {
            let (status, message) = result.expect_err("a gradient of a non-differentiable field");
            assert_eq!(
                status,
                sys::SDM_P1_ERROR_INVALID_ARGUMENT,
                "{field:?}: {message}"
            );
            assert!(
                message.contains("the output is not differentiable"),
                "{message}"
            );
            continue;
        }
        result.unwrap_or_else(|(_, message)| panic!("{field:?}: {message}"));
        match (value_typed(field), backward(field, 2)) {
            (true, Ok(())) => {}
            (false, Err((status, message))) => {
                assert_eq!(status, sys::SDM_P1_ERROR_INVALID_ARGUMENT, "{message}");
                assert!(message.contains("not aligned"), "{field:?}: {message}");
            }
            (typed, other) => panic!("{field:?} (value-typed: {typed}): {other:?}"),
        }
    }
}
