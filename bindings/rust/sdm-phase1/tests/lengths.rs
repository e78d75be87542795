//! Per-stream lengths (`Plan::execute_with_lengths`, `execute_into_with_lengths`): the bytes of
//! the C API given the same lengths, those of the valid_last rule for lengths that say the
//! same, and the errors for a wrong count and lengths out of range.
mod common;

use common::{assert_same, collect, random_data, run_c, run_c_lengths, Case, Data};
use sdm_phase1::{DetFields, Inputs, Status, StreamLengths};

// Three streams of four chunks of 16 tokens, every field; ids and gates valid everywhere
// (no valid_last), so any lengths may be given.
fn case() -> Case {
    let mut c = Case::new(12, 16, 4, 3);
    c.p = 3;
    c.offset = 1000;
    c.keys = 40;
    c.det = Some(DetFields::ALL);
    c.gate_per_write = true;
    c.ids64 = true;
    c.seed = 11;
    c
}

fn inputs(d: &Data) -> Inputs<'_, i64, f32> {
    Inputs {
        k_idx: &d.k_idx,
        q_idx: &d.q_idx,
        k_val: &d.k_val,
        q_val: &d.q_val,
        g: &d.g,
        beta: Some(&d.beta),
    }
}

#[test]
fn lengths_equal_the_c_api() {
    let case = case();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    let inputs = inputs(&d);
    for lengths in [[64i64, 0, 33], [1, 16, 48], [0, 0, 0]] {
        let want = run_c_lengths(&case, &d, true, Some(&lengths)).unwrap();
        plan.execute_with_lengths(&inputs, &lengths[..]).unwrap();
        assert_same(&case, &want, &collect(&plan, &plan.outputs().unwrap()));
        let as_i32: Vec<i32> = lengths.iter().map(|&x| x as i32).collect();
        let mut buffers = plan.output_buffers();
        let into = plan
            .execute_into_with_lengths(&inputs, StreamLengths::I32(&as_i32), &mut buffers)
            .unwrap();
        assert_same(&case, &want, &collect(&plan, &into));
    }
    // Lengths that say what valid_last = 5 says: the valid_last rule's bytes.
    let mut rule = case.clone();
    rule.valid_last = Some(5);
    let want = run_c(&rule, &d, true).unwrap();
    plan.execute_with_lengths(&inputs, &[53i64, 53, 53][..])
        .unwrap();
    assert_same(&rule, &want, &collect(&plan, &plan.outputs().unwrap()));
}

#[test]
fn bad_lengths_are_refused() {
    let case = case();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    let inputs = inputs(&d);
    let e = plan
        .execute_with_lengths(&inputs, &[1i32, 2][..])
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(
        e.message()
            .contains("stream_lengths has 2 elements; the plan needs num_parallel = 3"),
        "{e}"
    );
    let e = plan
        .execute_with_lengths(&inputs, &[1i64, 65, -1][..])
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidInput);
    assert!(
        e.message()
            .contains("stream_lengths[1] = 65: stream 1's length must be in 0..64"),
        "{e}"
    );
    // The plan still runs afterwards.
    plan.execute_with_lengths(&inputs, &[64i32, 64, 64][..])
        .unwrap();
}
