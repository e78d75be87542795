//! `PlanBuilder`'s defaults are the header's: a plan given only its shapes and `num_keys`
//! resolves, option by option, as the plan the C API creates from `SDM_P1_DESC_INITIALIZER`
//! (`sys::desc_initializer`, itself checked against the C macro by sdm-phase1-sys) with the
//! same shapes, as `sdm_p1_plan_desc` reports it. And the builder's checked conversions
//! refuse, by name, values the descriptor's C types cannot hold.
use std::ptr;

use sdm_phase1::sys;
use sdm_phase1::{Backend, DetFields, IndexDtype, OutputMode, PlanBuilder, Status, ValueDtype};

/// The options the library resolved for a raw plan of the initializer with these shapes.
fn c_resolved(n: i64, c: i64, w: i64, r: i64, num_keys: i64) -> sys::sdm_p1_desc {
    let mut desc = sys::desc_initializer();
    (desc.N, desc.C, desc.W, desc.R, desc.num_keys) = (n, c, w, r, num_keys);
    let mut resolved = sys::desc_initializer();
    unsafe {
        let mut plan = ptr::null_mut();
        assert_eq!(
            sys::sdm_p1_plan_create(&mut plan, &desc),
            sys::SDM_P1_SUCCESS
        );
        assert_eq!(
            sys::sdm_p1_plan_desc(plan, &mut resolved),
            sys::SDM_P1_SUCCESS
        );
        assert_eq!(sys::sdm_p1_plan_destroy(plan), sys::SDM_P1_SUCCESS);
    }
    resolved
}

#[test]
fn builder_defaults_resolve_as_the_c_initializer() {
    let plan = PlanBuilder::new(6, 16, 4, 3).num_keys(40).build().unwrap();
    let c = c_resolved(6, 16, 4, 3, 40);
    let device = plan.device().map_or(sys::SDM_P1_UNSET, |d| d as i32);
    let rust = [
        ("N", plan.n() as i64),
        ("C", plan.c() as i64),
        ("W", plan.w() as i64),
        ("R", plan.r() as i64),
        ("num_parallel", plan.num_parallel() as i64),
        ("stream_offset", plan.stream_offset() as i64),
        ("num_keys", plan.num_keys() as i64),
        ("valid_last", plan.valid_last() as i64),
        ("index_dtype", plan.index_dtype().dtype().code().into()),
        ("value_dtype", plan.value_dtype().dtype().code().into()),
        ("gate_width", plan.gate_width() as i64),
        ("need_read_groups", plan.need_read_groups().into()),
        ("det_fields", plan.det_fields().bits().into()),
        ("rec_tile", plan.rec_tile() as i64),
        ("device", device.into()),
        ("num_threads", plan.num_threads() as i64),
        ("backward", plan.backward().into()),
        ("grad_dtype", plan.grad_dtype().dtype().code().into()),
    ];
    let from_c = [
        ("N", c.N),
        ("C", c.C),
        ("W", c.W),
        ("R", c.R),
        ("num_parallel", c.num_parallel),
        ("stream_offset", c.stream_offset),
        ("num_keys", c.num_keys),
        ("valid_last", c.valid_last),
        ("index_dtype", c.index_dtype.into()),
        ("value_dtype", c.value_dtype.into()),
        ("gate_width", c.gate_width),
        ("need_read_groups", c.need_read_groups.into()),
        ("det_fields", c.det_fields),
        ("rec_tile", c.rec_tile),
        ("device", c.device.into()),
        ("num_threads", c.num_threads.into()),
        ("backward", c.backward.into()),
        ("grad_dtype", c.grad_dtype.into()),
    ];
    assert_eq!(rust, from_c, "the Rust plan (left) against the C plan");
    // The enums: Auto resolves alike for both plans on one machine.
    let c_backend = match c.backend as u32 {
        sys::SDM_P1_BACKEND_CPU => Backend::Cpu,
        sys::SDM_P1_BACKEND_CUDA => Backend::Cuda,
        other => panic!("the C plan reports backend {other}"),
    };
    assert_eq!(plan.backend(), c_backend);
    assert_eq!(c.output_mode as u32, sys::SDM_P1_OUTPUTS_PLAN);
    assert_eq!(plan.output_mode(), OutputMode::Plan);

    // What those defaults are, as the builder's documentation states them.
    assert_eq!(plan.num_parallel(), 1);
    assert_eq!(plan.stream_offset(), 0);
    assert_eq!(plan.valid_last(), 16);
    assert_eq!(plan.index_dtype(), IndexDtype::I32);
    assert_eq!(plan.value_dtype(), ValueDtype::F32);
    assert_eq!(plan.gate_width(), 1);
    assert!(plan.need_read_groups());
    assert_eq!(plan.det_fields(), DetFields::SHIPPED);
    assert_eq!(plan.rec_tile(), 128);
    assert!(!plan.backward());
    assert_eq!(plan.grad_dtype(), ValueDtype::F32);
    if plan.backend() == Backend::Cpu {
        assert_eq!(
            plan.device(),
            None,
            "the CPU backend keeps the device unset"
        );
    }
}

#[test]
fn options_beyond_the_c_types_are_refused_by_name() {
    let base = || PlanBuilder::new(4, 8, 2, 2).num_keys(16);
    let cases = [
        (
            base().num_threads(usize::MAX),
            format!(
                "num_threads = {} does not fit the descriptor's int32_t",
                usize::MAX
            ),
        ),
        (
            base().device(u32::MAX),
            format!(
                "device = {} does not fit the descriptor's int32_t",
                u32::MAX
            ),
        ),
    ];
    for (builder, what) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert_eq!(
            err.message(),
            format!("PlanBuilder::build: {what} (at most 2147483647)")
        );
    }
}

/// usize values beyond int64_t exist on 64-bit targets only.
#[test]
#[cfg(target_pointer_width = "64")]
fn shapes_beyond_int64_are_refused_by_name() {
    let base = || PlanBuilder::new(4, 8, 2, 2).num_keys(16);
    let first_too_big = 1usize << 63;
    for (builder, option, value) in [
        (PlanBuilder::new(usize::MAX, 8, 2, 2), "N", usize::MAX),
        (PlanBuilder::new(4, 8, 2, first_too_big), "R", first_too_big),
        (
            base().num_parallel(first_too_big),
            "num_parallel",
            first_too_big,
        ),
        (
            base().stream_offset(usize::MAX),
            "stream_offset",
            usize::MAX,
        ),
        (base().num_keys(first_too_big), "num_keys", first_too_big),
        (base().valid_last(usize::MAX), "valid_last", usize::MAX),
        (base().gate_width(usize::MAX), "gate_width", usize::MAX),
        (base().rec_tile(usize::MAX), "rec_tile", usize::MAX),
    ] {
        let err = builder.build().unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert_eq!(
            err.message(),
            format!(
                "PlanBuilder::build: {option} = {value} does not fit the descriptor's int64_t \
                 (at most 9223372036854775807)"
            )
        );
    }
    // The largest value that fits reaches the library, which judges it itself.
    let err = base().num_keys(i64::MAX as usize).build().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().starts_with("sdm_p1_desc.num_keys"), "{err}");
}
