//! Error paths: slices of the wrong length or type, bad data (the library's INVALID_INPUT and
//! its message, as the C API gives it), invalid descriptors, and misuse of the plan kinds.
mod common;

use common::{ids_i32, random_data, run_c, Case};
use sdm_phase1::{
    Backend, Bf16, DetFields, DeviceInputs, Error, Field, Inputs, OutputMode, PlanBuilder, Status,
};

fn small() -> Case {
    let mut case = Case::new(4, 8, 2, 2);
    case.p = 2;
    case.offset = 100;
    case.keys = 16;
    case
}

#[test]
fn wrong_lengths_name_the_slice() {
    let case = small();
    let d = random_data(&case);
    let (k, q) = (ids_i32(&d.k_idx), ids_i32(&d.q_idx));
    let mut plan = case.builder().build().unwrap();
    let good = Inputs::new(&k, &q, &d.k_val, &d.q_val, &d.g);
    assert!(plan.execute(&good, None).is_ok());

    let mut short = good;
    short.k_idx = &k[..k.len() - 1];
    let err = plan.execute(&short, None).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(
        err.message(),
        "Plan::execute: k_idx has 63 elements; the plan needs N * C * W = 64"
    );
    assert!(
        plan.outputs().is_some(),
        "a refused call leaves the last outputs"
    );

    let mut short = good;
    short.q_val = &d.k_val[..10];
    let err = plan.execute(&short, None).unwrap_err();
    assert!(err.message().contains("q_val has 10 elements"), "{err}");
    let long_g = [d.g.clone(), d.g.clone()].concat();
    let mut long = good;
    long.g = &long_g;
    let err = plan.execute(&long, None).unwrap_err();
    assert!(
        err.message()
            .contains("g has 64 elements; the plan needs N * C * gate_width = 32"),
        "{err}"
    );
    let err = plan
        .execute(&good.with_beta(&d.beta[1..]), None)
        .unwrap_err();
    assert!(err.message().contains("beta has 31 elements"), "{err}");
}

#[test]
fn wrong_element_types_are_refused() {
    let case = small();
    let d = random_data(&case);
    let mut plan = case.builder().build().unwrap();
    let k16 = common::vals_bf16(&d.k_val);
    let q16 = common::vals_bf16(&d.q_val);
    let err = plan
        .execute(
            &Inputs::new(&d.k_idx, &d.q_idx, &d.k_val, &d.q_val, &d.g),
            None,
        )
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message()
            .contains("k_idx and q_idx are I64 but the plan's index dtype is I32"),
        "{err}"
    );
    let (k, q) = (ids_i32(&d.k_idx), ids_i32(&d.q_idx));
    let err = plan
        .execute(&Inputs::new(&k, &q, &k16, &q16, &d.g), None)
        .unwrap_err();
    assert!(
        err.message()
            .contains("k_val and q_val are Bf16 but the plan's value dtype is F32"),
        "{err}"
    );
}

/// The safe API's error for bad data is the library's, exactly as the C API reports it.
fn assert_same_data_error(case: &Case, d: &common::Data, status: Status) -> Error {
    let (code, c_message) = run_c(case, d, false).unwrap_err();
    assert_eq!(code, status.code());
    let mut plan = case.builder().build().unwrap();
    let err = common::run_plan(&mut plan, case, d, false).unwrap_err();
    assert_eq!(err.status(), status);
    assert_eq!(err.message(), c_message);
    assert!(
        plan.outputs().is_none(),
        "no outputs after a failed execute"
    );
    assert!(
        plan.execute_status().is_ok(),
        "the CPU backend reports data errors from execute"
    );
    err
}

#[test]
fn bad_ids_give_the_library_invalid_input() {
    let case = small();
    let mut d = random_data(&case);
    // Chunk 1 belongs to stream 1, which owns [100, 116): 5 is outside.
    let entry = (8 + 3) * 2 + 1;
    d.k_idx[entry] = 5;
    let err = assert_same_data_error(&case, &d, Status::InvalidInput);
    assert!(err.message().contains("k_idx[1, 3, 1] = 5"), "{err}");
    assert!(
        err.to_string().starts_with("SDM_P1_ERROR_INVALID_INPUT: "),
        "{err}"
    );

    // The same for a read id, with int64 ids.
    let mut case64 = small();
    case64.ids64 = true;
    let mut d = random_data(&case64);
    d.q_idx[5] = 1 << 40;
    assert_same_data_error(&case64, &d, Status::InvalidInput);
}

#[test]
fn bad_gates_give_the_library_invalid_input() {
    let case = small();
    for bad in [f32::NAN, f32::INFINITY, -4194304.0] {
        let mut d = random_data(&case);
        d.g[9] = bad;
        assert_same_data_error(&case, &d, Status::InvalidInput);
    }
}

#[test]
fn invalid_descriptors_give_the_library_message() {
    let mut bad = Vec::new();
    let mut c = small();
    c.keys = 0;
    bad.push(c);
    let mut c = small();
    c.p = 3; // does not divide N = 4
    bad.push(c);
    let mut c = small();
    c.valid_last = Some(9); // > C
    bad.push(c);
    let mut c = small();
    c.c = 300; // C > 256
    bad.push(c);
    let mut c = small();
    c.rec_tile = Some(1 << 21); // checked when tiles are computed
    c.det = Some(DetFields::TILES);
    bad.push(c);
    let mut c = small();
    c.keys = (1 << 32) + 1; // above 2^32
    bad.push(c);
    for case in bad {
        let d = random_data(&small());
        let Err((code, c_message)) = run_c(&case, &d, false) else {
            panic!("the C API accepted {case:?}");
        };
        let err = case.builder().build().unwrap_err();
        assert_eq!(err.status().code(), code, "{case:?}");
        assert_eq!(err.message(), c_message, "{case:?}");
        assert!(!err.message().is_empty());
    }
    let err = PlanBuilder::new(4, 8, 2, 2)
        .num_keys(16)
        .gate_width(3)
        .build()
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("gate_width"), "{err}");
}

#[test]
fn kspa_without_beta_is_the_library_error() {
    let mut case = small();
    case.det = Some(DetFields::SHIPPED | DetFields::KSPA);
    let d = random_data(&case);
    let (code, c_message) = run_c(&case, &d, false).unwrap_err();
    assert_eq!(code, Status::InvalidArgument.code());
    let mut plan = case.builder().build().unwrap();
    let err = common::run_plan(&mut plan, &case, &d, false).unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (Status::InvalidArgument, c_message.as_str())
    );
    assert!(common::run_plan(&mut plan, &case, &d, true).is_ok());
}

#[test]
fn plan_kinds_are_checked() {
    let case = small();
    let d = random_data(&case);
    let (k, q) = (ids_i32(&d.k_idx), ids_i32(&d.q_idx));
    let inputs = Inputs::new(&k, &q, &d.k_val, &d.q_val, &d.g);

    // A caller-mode plan has no buffers of its own.
    let mut caller = case
        .builder()
        .output_mode(OutputMode::Caller)
        .build()
        .unwrap();
    assert!(caller.buffer_ptr(Field::A).is_null());
    let err = caller.execute(&inputs, None).unwrap_err();
    assert!(err.message().contains("OutputMode::Caller"), "{err}");
    assert!(caller.outputs().is_none());

    // Buffers of a plan with other outputs are refused.
    let other = case.builder().det_fields(DetFields::ALL).build().unwrap();
    let mut wrong = other.output_buffers();
    let err = caller.execute_into(&inputs, None, &mut wrong).unwrap_err();
    assert!(
        err.message().contains("use this plan's output_buffers()"),
        "{err}"
    );
    let mut right = caller.output_buffers();
    assert!(caller.execute_into(&inputs, None, &mut right).is_ok());

    // Device execution needs a CUDA plan; the check comes before any pointer is used.
    let mut cpu = case.builder().build().unwrap();
    let err =
        unsafe { cpu.execute_device(&DeviceInputs::default(), None, None, std::ptr::null_mut()) }
            .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("not Backend::Cuda"), "{err}");
    assert!(cpu.execute_status().is_ok(), "never executed: success");
}

#[test]
fn device_inputs_keep_the_header_order() {
    // Addresses only compared, never read.
    let at = |address: usize| std::ptr::without_provenance::<std::ffi::c_void>(address);
    let d =
        DeviceInputs::new(at(8), at(16), at(24), at(32), at(40).cast()).with_beta(at(48).cast());
    assert_eq!(
        [
            d.k_idx,
            d.q_idx,
            d.k_val,
            d.q_val,
            d.g.cast(),
            d.beta.cast()
        ],
        [at(8), at(16), at(24), at(32), at(40), at(48)]
    );
    assert!(
        DeviceInputs::new(at(8), at(16), at(24), at(32), at(40).cast())
            .beta
            .is_null()
    );
}

#[test]
fn cuda_architectures_agree_with_the_backend() {
    match (
        sdm_phase1::cuda_device_count(),
        sdm_phase1::cuda_architectures(),
    ) {
        (Err(count), Err(archs)) => {
            assert_eq!(count.status(), Status::BackendUnavailable, "{count}");
            assert_eq!(archs.status(), Status::BackendUnavailable, "{archs}");
        }
        (Ok(_), Ok(archs)) => {
            assert!(!archs.is_empty());
            for name in archs.split(' ') {
                let digits = name
                    .strip_prefix("sm_")
                    .or_else(|| name.strip_prefix("compute_"));
                assert!(
                    digits.is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit())),
                    "{archs:?}"
                );
            }
        }
        (count, archs) => panic!("device count {count:?} but architectures {archs:?}"),
    }
}

#[test]
fn cuda_without_a_device_is_backend_unavailable() {
    let devices = sdm_phase1::cuda_device_count();
    match devices {
        Ok(n) if n > 0 => {
            eprintln!("SKIPPED: this machine has {n} CUDA device(s)");
            return;
        }
        Ok(_) => {}
        Err(e) => assert_eq!(e.status(), Status::BackendUnavailable, "{e}"),
    }
    let err = PlanBuilder::new(4, 8, 2, 2)
        .num_keys(16)
        .backend(Backend::Cuda)
        .build()
        .unwrap_err();
    assert_eq!(err.status(), Status::BackendUnavailable, "{err}");
    // Auto falls back to the CPU.
    let plan = PlanBuilder::new(4, 8, 2, 2).num_keys(16).build().unwrap();
    assert_eq!(plan.backend(), Backend::Cpu);
}

#[test]
fn output_views_check_field_and_type() {
    let case = small();
    let d = random_data(&case);
    let mut plan = case
        .builder()
        .det_fields(DetFields::POS)
        .need_read_groups(false)
        .build()
        .unwrap();
    assert!(plan.outputs().is_none(), "no outputs before an execute");
    let (k, q) = (ids_i32(&d.k_idx), ids_i32(&d.q_idx));
    let out = plan
        .execute(&Inputs::new(&k, &q, &d.k_val, &d.q_val, &d.g), None)
        .unwrap();
    assert!(out.get(Field::IsLast).is_none());
    let err = out.slice::<i8>(Field::IsLast).unwrap_err();
    assert!(err.message().contains("does not compute is_last"), "{err}");
    let err = out.slice::<i64>(Field::PosK).unwrap_err();
    assert!(
        err.message().contains("pos_k holds I32 elements, not I64"),
        "{err}"
    );
    assert_eq!(out.slice::<i32>(Field::PosK).unwrap().len(), 4 * 8 * 2);
    assert!(out.get(Field::DcRec).is_none());
}

#[test]
fn errors_are_std_errors() {
    let err: Box<dyn std::error::Error + Send + Sync> = Box::new(
        PlanBuilder::new(0, 8, 2, 2)
            .num_keys(16)
            .build()
            .unwrap_err(),
    );
    let text = err.to_string();
    assert!(
        text.starts_with("SDM_P1_ERROR_INVALID_ARGUMENT: "),
        "{text}"
    );
    assert_eq!(Status::InvalidInput.name(), "SDM_P1_ERROR_INVALID_INPUT");
    assert_eq!(Status::from_code(0), None);
    assert_eq!(Status::from_code(42), Some(Status::Unknown(42)));
    assert_eq!(Status::Unknown(42).name(), "SDM_P1_UNKNOWN_STATUS");
}

#[test]
fn field_names_and_flags_match_the_library() {
    let case = small();
    let plan = case.builder().det_fields(DetFields::ALL).build().unwrap();
    let d = random_data(&case);
    let raw = run_c(
        &Case {
            det: Some(DetFields::ALL),
            ..case
        },
        &d,
        true,
    )
    .unwrap();
    for (field, raw) in Field::ALL.iter().zip(&raw) {
        assert_eq!(field.name(), raw.name);
        assert_eq!(Field::from_name(&raw.name), Some(*field));
        assert_eq!(
            plan.field_info(*field).requested(),
            raw.requested,
            "{}",
            raw.name
        );
    }
    assert_eq!(Field::COUNT, 29);
    assert_eq!(DetFields::from_bits(1024), None, "dc_rec is refused");
    assert_eq!(DetFields::from_bits(3071), Some(DetFields::ALL));
    assert_eq!(
        format!("{:?}", DetFields::POS | DetFields::KREC),
        "DetFields(POS | KREC)"
    );
    assert_eq!(
        DetFields::SHIPPED - DetFields::POS,
        DetFields::from_bits(30).unwrap()
    );
    assert!(DetFields::ALL.contains(DetFields::SHIPPED));
    assert_eq!(plan.det_fields(), DetFields::ALL);
}

#[test]
fn resolved_options_and_bf16() {
    let plan = PlanBuilder::new(4, 8, 2, 2)
        .num_keys(16)
        .backend(Backend::Cpu)
        .build()
        .unwrap();
    assert_eq!((plan.n(), plan.c(), plan.w(), plan.r()), (4, 8, 2, 2));
    assert_eq!(plan.valid_last(), 8);
    assert_eq!(plan.rec_tile(), 128);
    assert_eq!(plan.det_fields(), DetFields::SHIPPED);
    assert!(plan.need_read_groups());
    assert!(plan.num_threads() >= 1);
    assert!(plan.workspace_size() > 0);
    assert_eq!(
        sdm_phase1::version_number() / 10000,
        sdm_phase1::HEADER_VERSION / 10000
    );
    assert!(sdm_phase1::version_string().starts_with("1."));

    assert_eq!(Bf16::from_f32(1.0).0, 0x3f80);
    assert_eq!(
        Bf16::from_f32(1.0 + 1.0 / 256.0).0,
        0x3f80,
        "a tie rounds to even"
    );
    assert_eq!(
        Bf16::from_f32(1.0 + 3.0 / 256.0).0,
        0x3f82,
        "a tie rounds to even"
    );
    assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
    assert_eq!(Bf16::from_f32(f32::MAX).to_f32(), f32::INFINITY);
    assert_eq!(Bf16::from_f32(-2.5).to_f32(), -2.5);
}
