//! Every output of the safe API equals, byte for byte, what the C API (called directly through
//! sdm-phase1-sys) gives for the same shapes, options and inputs on the CPU backend.
mod common;

use common::{assert_same, random_data, run_c, run_safe, Case};
use sdm_phase1::{DetFields, Field, OutputMode};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();

    // The defaults: one stream, int32 ids, f32 values, the shipped det_fields.
    cases.push(Case::new(4, 8, 2, 2));

    // Three streams with padding, every optional output, a gate per write, int64 ids.
    let mut c = Case::new(6, 16, 4, 3);
    c.p = 3;
    c.offset = 1000;
    c.keys = 40;
    c.valid_last = Some(5);
    c.det = Some(DetFields::ALL);
    c.gate_per_write = true;
    c.ids64 = true;
    c.threads = Some(3);
    c.seed = 2;
    cases.push(c);

    // bfloat16 values, repeated slots within tokens, an odd tile length.
    let mut c = Case::new(8, 32, 8, 8);
    c.bf16 = true;
    c.distinct = false;
    c.det = Some(DetFields::ALL);
    c.rec_tile = Some(7);
    c.seed = 3;
    cases.push(c);

    // No read groups, a few optional outputs, W = 1, streams sharing one id range.
    let mut c = Case::new(2, 64, 1, 5);
    c.p = 2;
    c.keys = 1000;
    c.read_groups = Some(false);
    c.det = Some(DetFields::SHIPPED | DetFields::TILES | DetFields::DC_GIDX);
    c.threads = Some(1);
    c.seed = 4;
    cases.push(c);

    // Larger: four streams of 65536 slots, bf16, int64 ids, everything, padding.
    let mut c = Case::new(16, 128, 16, 16);
    c.p = 4;
    c.offset = 65536;
    c.keys = 65536;
    c.bf16 = true;
    c.ids64 = true;
    c.det = Some(DetFields::ALL);
    c.valid_last = Some(100);
    c.seed = 5;
    cases.push(c);

    // The largest chunk: C = 256, no optional outputs.
    let mut c = Case::new(2, 256, 4, 4);
    c.keys = 512;
    c.det = Some(DetFields::NONE);
    c.seed = 6;
    cases.push(c);

    cases
}

#[test]
fn plan_outputs_equal_the_c_api() {
    for case in cases() {
        let data = random_data(&case);
        let with_beta = case.det.is_some_and(|d| d.contains(DetFields::KSPA));
        let want = run_c(&case, &data, with_beta).unwrap_or_else(|e| panic!("{case:?}: {e:?}"));
        let got = run_safe(&case, &data, with_beta, OutputMode::Plan).unwrap();
        assert_same(&case, &want, &got);
        // Not a vacuous comparison: a holds non-zero cells.
        assert!(
            want[Field::A.index()].bytes.iter().any(|&b| b != 0),
            "{case:?}"
        );
    }
}

#[test]
fn the_comparison_sees_a_changed_gate() {
    let case = Case::new(4, 8, 2, 2);
    let mut data = random_data(&case);
    let want = run_c(&case, &data, false).unwrap();
    data.g[3] *= 0.5;
    let got = run_safe(&case, &data, false, OutputMode::Plan).unwrap();
    assert!(
        common::first_difference(&want, &got).is_some(),
        "different gates gave the same outputs"
    );
}

#[test]
fn caller_buffers_equal_the_c_api() {
    for case in cases() {
        let data = random_data(&case);
        let with_beta = case.det.is_some_and(|d| d.contains(DetFields::KSPA));
        let want = run_c(&case, &data, with_beta).unwrap();
        let got = run_safe(&case, &data, with_beta, OutputMode::Caller).unwrap();
        assert_same(&case, &want, &got);
    }
}

#[test]
fn execute_into_on_a_plan_mode_plan_leaves_its_buffers() {
    let mut case = Case::new(4, 16, 4, 4);
    case.det = Some(DetFields::ALL);
    let first = random_data(&case);
    case.seed = 9;
    let second = random_data(&case);

    let mut plan = case.builder().build().unwrap();
    let want_first = run_c(&case, &first, true).unwrap();
    let want_second = run_c(&case, &second, true).unwrap();
    assert_same(
        &case,
        &want_first,
        &common::run_plan(&mut plan, &case, &first, true).unwrap(),
    );

    // A caller buffer gets the second run; the plan's own buffers keep the first.
    let mut buffers = plan.output_buffers();
    let (k_idx, q_idx) = (
        common::ids_i32(&second.k_idx),
        common::ids_i32(&second.q_idx),
    );
    let inputs = sdm_phase1::Inputs::new(&k_idx, &q_idx, &second.k_val, &second.q_val, &second.g)
        .with_beta(&second.beta);
    let out = plan.execute_into(&inputs, None, &mut buffers).unwrap();
    assert_same(&case, &want_second, &common::collect(&plan, &out));
    let own = plan.outputs().unwrap();
    assert_same(&case, &want_first, &common::collect(&plan, &own));
}

#[test]
fn repeated_executes_overwrite_and_views_are_typed() {
    let mut case = Case::new(4, 8, 4, 2);
    case.distinct = false;
    let data = random_data(&case);
    let want = run_c(&case, &data, false).unwrap();
    let mut plan = case.builder().build().unwrap();
    for _ in 0..3 {
        let got = common::run_plan(&mut plan, &case, &data, false).unwrap();
        assert_same(&case, &want, &got);
    }
    let out = plan.outputs().unwrap();
    let repeats = &want[Field::Repeats.index()].bytes;
    assert_eq!(
        out.repeats(),
        i64::from_ne_bytes(repeats[..8].try_into().unwrap())
    );
    assert!(out.repeats() > 0, "this case writes repeated slots");
    let a = out.slice::<f32>(Field::A).unwrap();
    assert_eq!(a.len(), 4 * 8 * 8);
    assert_eq!(out.get(Field::A).unwrap().shape(), &[4, 8, 8]);
    let flags = out.slice::<i8>(Field::IsLast).unwrap();
    assert!(flags.iter().all(|&f| f == 0 || f == 1));
    assert_eq!(
        out.iter().count(),
        plan.fields().iter().filter(|f| f.requested()).count()
    );
}
