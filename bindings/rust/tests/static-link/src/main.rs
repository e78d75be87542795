//! Runs one small plan on the CPU backend and prints what it computed: the program of
//! tests/static.rs, linked with libsdmp1.a.
use sdm_phase1::{Backend, Field, Inputs, PlanBuilder};

fn main() -> Result<(), sdm_phase1::Error> {
    let (n, c, w, r) = (2, 4, 2, 1);
    let mut plan = PlanBuilder::new(n, c, w, r)
        .num_keys(8)
        .backend(Backend::Cpu)
        .build()?;
    let tokens = n * c;
    // Token t writes slots t % 4 and 4 + t % 4 and reads slot t % 4, with gate -0.5.
    let k_idx: Vec<i32> = (0..tokens)
        .flat_map(|t| [(t % 4) as i32, 4 + (t % 4) as i32])
        .collect();
    let q_idx: Vec<i32> = (0..tokens).map(|t| (t % 4) as i32).collect();
    let (k_val, q_val, g) = (
        vec![1.0f32; tokens * 2],
        vec![1.0f32; tokens],
        vec![-0.5f32; tokens],
    );
    let out = plan.execute(&Inputs::new(&k_idx, &q_idx, &k_val, &q_val, &g), None)?;
    let log_k: &[f32] = out.slice(Field::LogK)?;
    println!(
        "libsdmp1 {} linked statically: log_k[0] = {}, log_k[last] = {}, repeats = {}",
        sdm_phase1::version_string(),
        log_k[0],
        log_k[log_k.len() - 1],
        out.repeats()
    );
    Ok(())
}
