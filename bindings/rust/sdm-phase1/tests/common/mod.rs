//! Shared by the integration tests: random cases and the raw C path (sdm-phase1-sys called
//! directly), the independent reference the safe API's outputs are compared with.
#![allow(dead_code)] // each test file uses a different part

use std::ffi::CStr;
use std::ptr;

use sdm_phase1::sys;
use sdm_phase1::{
    Backend, Bf16, DetFields, Index, IndexDtype, Inputs, OutputMode, Outputs, Plan, PlanBuilder,
    Value, ValueDtype,
};

/// xorshift64*: a small fixed pseudo-random sequence.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Shapes and options of one test case.
#[derive(Clone, Debug)]
pub struct Case {
    pub n: usize,
    pub c: usize,
    pub w: usize,
    pub r: usize,
    pub p: usize,
    pub offset: usize,
    pub keys: usize,
    pub valid_last: Option<usize>,
    pub ids64: bool,
    pub bf16: bool,
    pub gate_per_write: bool,
    pub det: Option<DetFields>,
    pub read_groups: Option<bool>,
    pub rec_tile: Option<usize>,
    pub threads: Option<usize>,
    /// Slots distinct within a token (else repeats happen).
    pub distinct: bool,
    pub seed: u64,
}

impl Case {
    pub fn new(n: usize, c: usize, w: usize, r: usize) -> Case {
        Case {
            n,
            c,
            w,
            r,
            p: 1,
            offset: 0,
            keys: 64,
            valid_last: None,
            ids64: false,
            bf16: false,
            gate_per_write: false,
            det: None,
            read_groups: None,
            rec_tile: None,
            threads: None,
            distinct: true,
            seed: 1,
        }
    }

    pub fn gate_width(&self) -> usize {
        if self.gate_per_write {
            self.w
        } else {
            1
        }
    }

    pub fn builder(&self) -> PlanBuilder {
        let mut b = PlanBuilder::new(self.n, self.c, self.w, self.r)
            .num_parallel(self.p)
            .stream_offset(self.offset)
            .num_keys(self.keys)
            .gate_width(self.gate_width())
            .backend(Backend::Cpu);
        if let Some(v) = self.valid_last {
            b = b.valid_last(v);
        }
        if self.ids64 {
            b = b.index_dtype(IndexDtype::I64);
        }
        if self.bf16 {
            b = b.value_dtype(ValueDtype::Bf16);
        }
        if let Some(d) = self.det {
            b = b.det_fields(d);
        }
        if let Some(g) = self.read_groups {
            b = b.need_read_groups(g);
        }
        if let Some(t) = self.rec_tile {
            b = b.rec_tile(t);
        }
        if let Some(t) = self.threads {
            b = b.num_threads(t);
        }
        b
    }

    /// The same options as a C descriptor, written independently of the builder.
    pub fn desc(&self, output_mode: OutputMode) -> sys::sdm_p1_desc {
        let mut d = sys::desc_initializer();
        d.N = self.n as i64;
        d.C = self.c as i64;
        d.W = self.w as i64;
        d.R = self.r as i64;
        d.num_parallel = self.p as i64;
        d.stream_offset = self.offset as i64;
        d.num_keys = self.keys as i64;
        if let Some(v) = self.valid_last {
            d.valid_last = v as i64;
        }
        d.index_dtype = if self.ids64 {
            sys::SDM_P1_DTYPE_INT64
        } else {
            sys::SDM_P1_DTYPE_INT32
        } as i32;
        d.value_dtype = if self.bf16 {
            sys::SDM_P1_DTYPE_BFLOAT16
        } else {
            sys::SDM_P1_DTYPE_FLOAT32
        } as i32;
        d.gate_width = self.gate_width() as i64;
        if let Some(det) = self.det {
            d.det_fields = det.bits() as i64;
        }
        if let Some(g) = self.read_groups {
            d.need_read_groups = g as i32;
        }
        if let Some(t) = self.rec_tile {
            d.rec_tile = t as i64;
        }
        if let Some(t) = self.threads {
            d.num_threads = t as i32;
        }
        d.backend = sys::SDM_P1_BACKEND_CPU as i32;
        d.output_mode = if output_mode == OutputMode::Caller {
            sys::SDM_P1_OUTPUTS_CALLER
        } else {
            sys::SDM_P1_OUTPUTS_PLAN
        } as i32;
        d
    }
}

/// Random inputs of a case (ids as i64, values as f32; converted per dtype when used).
#[derive(Clone, Debug)]
pub struct Data {
    pub k_idx: Vec<i64>,
    pub q_idx: Vec<i64>,
    pub k_val: Vec<f32>,
    pub q_val: Vec<f32>,
    pub g: Vec<f32>,
    pub beta: Vec<f32>,
}

pub fn random_data(case: &Case) -> Data {
    let mut rng = Rng::new(case.seed);
    let (n, c, w, r) = (case.n, case.c, case.w, case.r);
    let valid_last = case.valid_last.unwrap_or(c);
    let mut d = Data {
        k_idx: Vec::new(),
        q_idx: Vec::new(),
        k_val: Vec::new(),
        q_val: Vec::new(),
        g: Vec::new(),
        beta: Vec::new(),
    };
    for chunk in 0..n {
        let base = (chunk % case.p * case.offset) as u64;
        let last = chunk >= n - case.p;
        for t in 0..c {
            let padding = last && t >= valid_last;
            // Distinct slots: W consecutive slots from a random start (wrapping in the range).
            let start = rng.below(case.keys as u64);
            for lane in 0..w as u64 {
                let slot = if case.distinct {
                    (start + lane) % case.keys as u64
                } else {
                    rng.below(case.keys.min(4) as u64)
                };
                // Padding is never read: give it ids out of range to prove it.
                d.k_idx
                    .push(if padding { -7 } else { (base + slot) as i64 });
                d.k_val.push(rng.uniform(-1.0, 1.0));
            }
            for _ in 0..r {
                let slot = rng.below(case.keys as u64);
                d.q_idx.push(if padding {
                    i32::MAX as i64
                } else {
                    (base + slot) as i64
                });
                d.q_val.push(rng.uniform(-1.0, 1.0));
            }
            for _ in 0..case.gate_width() {
                d.g.push(if padding {
                    f32::NAN
                } else {
                    rng.uniform(-1.0, 0.0)
                });
            }
            d.beta.push(rng.uniform(0.0, 1.0));
        }
    }
    d
}

/// One output as the C API gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawField {
    pub name: String,
    pub dtype: i32,
    pub requested: bool,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

pub fn ids_i32(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| x as i32).collect()
}

pub fn vals_bf16(v: &[f32]) -> Vec<Bf16> {
    v.iter().map(|&x| Bf16::from_f32(x)).collect()
}

/// Bytes of the value arrays in the case's dtype, for the C path.
pub fn value_bytes(case: &Case, v: &[f32]) -> Vec<u8> {
    if case.bf16 {
        v.iter()
            .flat_map(|&x| Bf16::from_f32(x).0.to_ne_bytes())
            .collect()
    } else {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }
}

pub fn id_bytes(case: &Case, v: &[i64]) -> Vec<u8> {
    if case.ids64 {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    } else {
        v.iter().flat_map(|&x| (x as i32).to_ne_bytes()).collect()
    }
}

/// Copies bytes into u64 words, so the C library gets naturally aligned arrays.
pub fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: words has at least bytes.len() bytes.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len()) };
    words
}

pub fn last_error() -> String {
    unsafe { CStr::from_ptr(sys::sdm_p1_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Runs the case through the raw C API (plan-owned outputs): every field's view and bytes, or
/// the failing status and message.
pub fn run_c(case: &Case, data: &Data, with_beta: bool) -> Result<Vec<RawField>, (u32, String)> {
    run_c_lengths(case, data, with_beta, None)
}

/// run_c with per-stream lengths (as int64) in sdm_p1_inputs.stream_lengths.
pub fn run_c_lengths(
    case: &Case,
    data: &Data,
    with_beta: bool,
    lengths: Option<&[usize]>,
) -> Result<Vec<RawField>, (u32, String)> {
    let desc = case.desc(OutputMode::Plan);
    let lengths: Option<Vec<i64>> = lengths.map(|l| l.iter().map(|&x| x as i64).collect());
    let k_idx = aligned(&id_bytes(case, &data.k_idx));
    let q_idx = aligned(&id_bytes(case, &data.q_idx));
    let k_val = aligned(&value_bytes(case, &data.k_val));
    let q_val = aligned(&value_bytes(case, &data.q_val));
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
        if with_beta {
            inputs.beta = data.beta.as_ptr();
        }
        if let Some(l) = &lengths {
            inputs.stream_lengths = l.as_ptr().cast();
            inputs.stream_lengths_dtype = sys::SDM_P1_DTYPE_INT64 as i32;
        }
        let s = sys::sdm_p1_execute(plan, &inputs, ptr::null(), 0, ptr::null_mut());
        if s != sys::SDM_P1_SUCCESS {
            let err = (s, last_error());
            sys::sdm_p1_plan_destroy(plan);
            return Err(err);
        }
        let count = sys::SDM_P1_FIELD_COUNT as usize;
        let mut views = Vec::with_capacity(count);
        views.resize_with(count, || sys::sdm_p1_tensor {
            name: ptr::null(),
            dtype: 0,
            requested: 0,
            ndim: 0,
            shape: [0; 3],
            bytes: 0,
            data: ptr::null_mut(),
        });
        assert_eq!(
            sys::sdm_p1_outputs(plan, views.as_mut_ptr(), count as i32),
            0
        );
        let fields = views
            .iter()
            .map(|v| RawField {
                name: CStr::from_ptr(v.name).to_str().unwrap().to_string(),
                dtype: v.dtype,
                requested: v.requested != 0,
                shape: v.shape[..v.ndim as usize]
                    .iter()
                    .map(|&d| d as usize)
                    .collect(),
                bytes: if v.requested != 0 {
                    std::slice::from_raw_parts(v.data.cast::<u8>(), v.bytes).to_vec()
                } else {
                    Vec::new()
                },
            })
            .collect();
        assert_eq!(sys::sdm_p1_plan_destroy(plan), 0);
        Ok(fields)
    }
}

/// The safe API's outputs in the same form as run_c's.
pub fn collect(plan: &Plan, out: &Outputs<'_>) -> Vec<RawField> {
    plan.fields()
        .iter()
        .map(|info| {
            let tensor = out.get(info.field());
            assert_eq!(tensor.is_some(), info.requested(), "{}", info.name());
            RawField {
                name: info.name().to_string(),
                dtype: info.dtype().code(),
                requested: info.requested(),
                shape: info.shape().to_vec(),
                bytes: tensor.map(|t| t.as_bytes().to_vec()).unwrap_or_default(),
            }
        })
        .collect()
}

/// Executes `plan` on the case's inputs in its dtypes (execute, or execute_into in caller
/// mode); the outputs as run_c gives them.
pub fn run_plan(
    plan: &mut Plan,
    case: &Case,
    data: &Data,
    with_beta: bool,
) -> sdm_phase1::Result<Vec<RawField>> {
    let (k32, q32) = (ids_i32(&data.k_idx), ids_i32(&data.q_idx));
    let (kb, qb) = (vals_bf16(&data.k_val), vals_bf16(&data.q_val));
    let beta = with_beta.then_some(&data.beta[..]);
    match (case.ids64, case.bf16) {
        (false, false) => run_typed(plan, &k32, &q32, &data.k_val, &data.q_val, &data.g, beta),
        (false, true) => run_typed(plan, &k32, &q32, &kb, &qb, &data.g, beta),
        (true, false) => run_typed(
            plan,
            &data.k_idx,
            &data.q_idx,
            &data.k_val,
            &data.q_val,
            &data.g,
            beta,
        ),
        (true, true) => run_typed(plan, &data.k_idx, &data.q_idx, &kb, &qb, &data.g, beta),
    }
}

fn run_typed<I: Index, V: Value>(
    plan: &mut Plan,
    k_idx: &[I],
    q_idx: &[I],
    k_val: &[V],
    q_val: &[V],
    g: &[f32],
    beta: Option<&[f32]>,
) -> sdm_phase1::Result<Vec<RawField>> {
    let mut inputs = Inputs::new(k_idx, q_idx, k_val, q_val, g);
    if let Some(beta) = beta {
        inputs = inputs.with_beta(beta);
    }
    if plan.output_mode() == OutputMode::Caller {
        let mut buffers = plan.output_buffers();
        let out = plan.execute_into(&inputs, None, &mut buffers)?;
        Ok(collect(plan, &out))
    } else {
        plan.execute(&inputs, None)?;
        let out = plan.outputs().expect("outputs after a successful execute");
        Ok(collect(plan, &out))
    }
}

/// Builds the case's plan with the safe API and runs it; the outputs as run_c gives them.
pub fn run_safe(
    case: &Case,
    data: &Data,
    with_beta: bool,
    mode: OutputMode,
) -> sdm_phase1::Result<Vec<RawField>> {
    let mut plan = case.builder().output_mode(mode).build()?;
    run_plan(&mut plan, case, data, with_beta)
}

/// The first difference between two runs (field view or bytes), if any.
pub fn first_difference(want: &[RawField], got: &[RawField]) -> Option<String> {
    if want.len() != got.len() {
        return Some(format!("{} fields against {}", want.len(), got.len()));
    }
    for (w, g) in want.iter().zip(got) {
        if (&w.name, w.dtype, w.requested, &w.shape) != (&g.name, g.dtype, g.requested, &g.shape) {
            return Some(format!("field views differ: {w:?} against {g:?}"));
        }
        if w.bytes != g.bytes {
            let at = w.bytes.iter().zip(&g.bytes).position(|(a, b)| a != b);
            return Some(format!("field {} differs (first at byte {at:?})", w.name));
        }
    }
    None
}

/// Asserts two runs are equal field by field, naming the first difference.
pub fn assert_same(case: &Case, want: &[RawField], got: &[RawField]) {
    if let Some(diff) = first_difference(want, got) {
        panic!("{diff} for {case:?}");
    }
}
