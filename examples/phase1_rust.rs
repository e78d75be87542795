//! A small Phase-1 run through the Rust crate sdm-phase1 on the CPU backend: 2 streams of 4
//! chunks of 16 tokens, each token writing 4 and reading 4 slots of its stream's 64 slots, on
//! pseudo-random data. Prints the shapes and a summary of the outputs.
//! Run: cd bindings/rust && cargo run --offline --example phase1_rust
use sdm_phase1::{Backend, DetFields, Field, Inputs, PlanBuilder};

const N: usize = 8;
const C: usize = 16;
const W: usize = 4;
const R: usize = 4;
const P: usize = 2;
const KEYS: usize = 64;
const OFFSET: usize = 1000;

/// xorshift64: a fixed pseudo-random sequence, so every run prints the same numbers.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn main() -> Result<(), sdm_phase1::Error> {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let (mut k_idx, mut q_idx) = (Vec::new(), Vec::new());
    let (mut k_val, mut q_val, mut g, mut beta) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for chunk in 0..N {
        let base = ((chunk % P) * OFFSET) as i32; // stream chunk % P owns [base, base + KEYS)
        for _token in 0..C {
            for _ in 0..W {
                // Random slots: now and then a token writes a slot twice (counted in repeats).
                k_idx.push(base + rng.below(KEYS) as i32);
                k_val.push(rng.unit() - 0.5);
            }
            for _ in 0..R {
                q_idx.push(base + rng.below(KEYS) as i32);
                q_val.push(rng.unit());
            }
            g.push(-0.05 - 0.95 * rng.unit()); // log-gates in (-1, -0.05]
            beta.push(0.5);
        }
    }

    let mut plan = PlanBuilder::new(N, C, W, R)
        .num_parallel(P)
        .stream_offset(OFFSET)
        .num_keys(KEYS)
        .valid_last(12) // the streams' last chunks hold 12 tokens and 4 padding tokens
        .det_fields(DetFields::SHIPPED | DetFields::KREC | DetFields::KSPA | DetFields::TILES)
        .backend(Backend::Cpu)
        .build()?;
    let inputs = Inputs::new(&k_idx, &q_idx, &k_val, &q_val, &g).with_beta(&beta);
    let out = plan.execute(&inputs, None)?; // None: no per-stream lengths, the valid_last rule

    println!(
        "libsdmp1 {} through sdm-phase1, CPU backend: N={N} chunks of C={C} tokens, W={W}, R={R}, \
         {P} streams",
        sdm_phase1::version_string()
    );
    let computed: Vec<&str> = out.iter().map(|t| t.field().name()).collect();
    println!(
        "outputs computed: {} of {} fields",
        computed.len(),
        Field::COUNT
    );
    for field in [
        Field::A,
        Field::LogK,
        Field::Payload,
        Field::Krec,
        Field::TilesK,
    ] {
        let t = out.get(field).expect("computed");
        println!(
            "  {:<8} {:?} {:?}",
            field.name(),
            t.info().dtype(),
            t.shape()
        );
    }

    let a = out.slice::<f32>(Field::A)?;
    let qk = out.slice::<f32>(Field::Qk)?;
    let log_k = out.slice::<f32>(Field::LogK)?;
    let cpe = out.slice::<f32>(Field::Cpe)?;
    let kspa = out.slice::<f32>(Field::Kspa)?;
    let is_last = out.slice::<i8>(Field::IsLast)?;
    let is_only = out.slice::<i8>(Field::IsOnly)?;
    let a_abs: f64 = a.iter().map(|&x| f64::from(x).abs()).sum();
    let qk_abs: f64 = qk.iter().map(|&x| f64::from(x).abs()).sum();
    let kspa_sum: f64 = kspa.iter().map(|&x| f64::from(x)).sum();
    let nonzero_a = a.iter().filter(|&&x| x != 0.0).count();
    let min_log = log_k.iter().copied().fold(0.0f32, f32::min);
    let min_cpe = cpe.iter().copied().fold(1.0f32, f32::min);
    let lasts: i32 = is_last.iter().map(|&x| i32::from(x)).sum();
    let onlys: i32 = is_only.iter().map(|&x| i32::from(x)).sum();
    println!("a: {nonzero_a} non-zero cells, sum |a| = {a_abs:.6}; sum |qk| = {qk_abs:.6}");
    println!("sum kspa = {kspa_sum:.6}; valid last writes {lasts}, single writes {onlys}");
    println!(
        "smallest log_k = {min_log:.6}, smallest cpe = {min_cpe:.6}, repeats = {}",
        out.repeats()
    );
    println!("chunk 0, token 1: log_k = {:?}", &log_k[W..2 * W]);

    // Every execute overwrites the plan's buffers, so keep a copy; the views end here.
    let first: Vec<Vec<u8>> = out.iter().map(|t| t.as_bytes().to_vec()).collect();
    for _ in 0..3 {
        plan.execute(&inputs, None)?;
    }
    // A one-thread plan writing caller-owned buffers: the bits never depend on the threads.
    let mut single = PlanBuilder::new(N, C, W, R)
        .num_parallel(P)
        .stream_offset(OFFSET)
        .num_keys(KEYS)
        .valid_last(12)
        .det_fields(plan.det_fields())
        .backend(Backend::Cpu)
        .num_threads(1)
        .build()?;
    let mut buffers = single.output_buffers();
    let other = single.execute_into(&inputs, None, &mut buffers)?;
    let last = plan.outputs().expect("executed");
    let same = |o: &sdm_phase1::Outputs<'_>| {
        o.iter()
            .map(|t| t.as_bytes())
            .eq(first.iter().map(|b| &b[..]))
    };
    println!(
        "3 more executes on {} threads: {}; 1 thread: {}",
        plan.num_threads(),
        if same(&last) {
            "identical bits"
        } else {
            "DIFFERENT"
        },
        if same(&other) {
            "identical bits"
        } else {
            "DIFFERENT"
        }
    );
    Ok(())
}
