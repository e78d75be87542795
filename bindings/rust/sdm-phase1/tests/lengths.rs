//! Per-stream lengths (`Some(lengths)` to `Plan::execute` and `Plan::execute_into`): the bytes
//! of the C API given the same lengths, those of the valid_last rule for lengths that say the
//! same, and the errors for a wrong count and lengths out of range.
mod common;

use common::{assert_same, collect, random_data, run_c, run_c_lengths, Case, Data};
use sdm_phase1::{DetFields, Inputs, Status};

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
    Inputs::new(&d.k_idx, &d.q_idx, &d.k_val, &d.q_val, &d.g).with_beta(&d.beta)
}

#[test]
fn lengths_equal_the_c_api() {
    let case = case();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    let inputs = inputs(&d);
    for lengths in [[64, 0, 33], [1, 16, 48], [0, 0, 0]] {
        let want = run_c_lengths(&case, &d, true, Some(&lengths)).unwrap();
        plan.execute(&inputs, Some(&lengths)).unwrap();
        assert_same(&case, &want, &collect(&plan, &plan.outputs().unwrap()));
        let mut buffers = plan.output_buffers();
        let into = plan
            .execute_into(&inputs, Some(&lengths), &mut buffers)
            .unwrap();
        assert_same(&case, &want, &collect(&plan, &into));
    }
    // Lengths that say what valid_last = 5 says: the valid_last rule's bytes.
    let mut rule = case.clone();
    rule.valid_last = Some(5);
    let want = run_c(&rule, &d, true).unwrap();
    plan.execute(&inputs, Some(&[53, 53, 53])).unwrap();
    assert_same(&rule, &want, &collect(&plan, &plan.outputs().unwrap()));
    // Not a vacuous comparison: other lengths give other bytes.
    let full = run_c(&case, &d, true).unwrap();
    assert!(common::first_difference(&full, &want).is_some());
}

#[test]
fn bad_lengths_are_refused() {
    let case = case();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    let inputs = inputs(&d);
    let e = plan.execute(&inputs, Some(&[1, 2])).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(
        e.message(),
        "Plan::execute: stream_lengths has 2 elements; the plan needs num_parallel = 3"
    );
    let mut buffers = plan.output_buffers();
    let e = plan
        .execute_into(&inputs, Some(&[1, 2, 3, 4]), &mut buffers)
        .unwrap_err();
    assert_eq!(
        e.message(),
        "Plan::execute_into: stream_lengths has 4 elements; the plan needs num_parallel = 3"
    );
    // Out of range: the library's message, as the C API gives it.
    let (code, c_message) = run_c_lengths(&case, &d, true, Some(&[1, 65, 2])).unwrap_err();
    assert_eq!(code, Status::InvalidInput.code());
    let e = plan.execute(&inputs, Some(&[1, 65, 2])).unwrap_err();
    assert_eq!(
        (e.status(), e.message()),
        (Status::InvalidInput, &c_message[..])
    );
    assert!(
        e.message()
            .contains("stream_lengths[1] = 65: stream 1's length must be in 0..64"),
        "{e}"
    );
    // The plan still runs afterwards.
    plan.execute(&inputs, Some(&[64, 64, 64])).unwrap();
}

#[test]
#[cfg(target_pointer_width = "64")]
fn lengths_beyond_int64_are_invalid_input() {
    let case = case();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    // usize::MAX has no int64_t value: the crate refuses it with the status the library
    // gives any length out of range.
    let e = plan
        .execute(&inputs(&d), Some(&[0, 0, usize::MAX]))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidInput);
    assert_eq!(
        e.message(),
        "Plan::execute: stream_lengths[2] = 18446744073709551615 does not fit the C API's \
         int64_t: stream 2's length must be in 0..=64"
    );
}
