//! Plans created, executed and dropped from many threads; a plan moved between threads (Send)
//! and read from several at once (Sync); per-thread error messages.
mod common;

use std::sync::Arc;
use std::thread;

use common::{random_data, run_c, run_plan, Case};
use sdm_phase1::{DetFields, Error, Field, OutputBuffers, Outputs, Plan, PlanBuilder, Status};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn the_types_are_send_and_sync() {
    assert_send_sync::<Plan>();
    assert_send_sync::<PlanBuilder>();
    assert_send_sync::<OutputBuffers>();
    assert_send_sync::<Outputs<'static>>();
    assert_send_sync::<Error>();
}

/// A few shapes, each with the C API's outputs computed once on this thread.
fn cases_with_reference() -> Vec<(Case, common::Data, Vec<common::RawField>)> {
    (0..4)
        .map(|i| {
            let mut case = Case::new(2 + 2 * i, 8 << (i % 3), 1 + i, 3);
            case.p = 2;
            case.offset = 500;
            case.keys = 100;
            case.ids64 = i % 2 == 1;
            case.bf16 = i >= 2;
            case.det = Some(DetFields::ALL);
            case.threads = Some(1 + i % 2);
            case.seed = 100 + i as u64;
            let data = random_data(&case);
            let want = run_c(&case, &data, true).unwrap();
            (case, data, want)
        })
        .collect()
}

#[test]
fn many_threads_create_execute_and_drop_plans() {
    let cases = Arc::new(cases_with_reference());
    let workers: Vec<_> = (0..16)
        .map(|t| {
            let cases = Arc::clone(&cases);
            thread::spawn(move || {
                for round in 0..6 {
                    let (case, data, want) = &cases[(t + round) % cases.len()];
                    let mut plan = case.builder().build().unwrap();
                    for _ in 0..2 {
                        let got = run_plan(&mut plan, case, data, true).unwrap();
                        common::assert_same(case, want, &got);
                    }
                    drop(plan);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}

#[test]
fn a_plan_moves_between_threads_and_is_read_from_many() {
    let cases = cases_with_reference();
    let (case, data, want) = &cases[1];
    let plan = case.builder().build().unwrap();

    // Executed on another thread, then handed back (Send).
    let (case2, data2) = (case.clone(), data.clone());
    let mut plan = thread::spawn(move || {
        let mut plan = plan;
        run_plan(&mut plan, &case2, &data2, true).unwrap();
        plan
    })
    .join()
    .unwrap();

    // Read from several threads at once through &Plan (Sync).
    let plan_ref: &Plan = &plan;
    thread::scope(|s| {
        for field in [Field::A, Field::Qk, Field::LogK, Field::Krec] {
            s.spawn(move || {
                let out = plan_ref.outputs().unwrap();
                let bytes = out.get(field).unwrap().as_bytes();
                assert_eq!(bytes, &want[field.index()].bytes[..], "{}", field.name());
            });
        }
    });

    // Dropped on yet another thread.
    run_plan(&mut plan, case, data, true).unwrap();
    thread::spawn(move || drop(plan)).join().unwrap();
}

#[test]
fn each_thread_gets_its_own_error_message() {
    // The library's last-error message is per thread: concurrent failures must not mix.
    let workers: Vec<_> = (0..8)
        .map(|t| {
            thread::spawn(move || {
                for _ in 0..20 {
                    let err = PlanBuilder::new(4, 8, 2, 2)
                        .num_keys(16)
                        .num_parallel(101 + 2 * t)
                        .build()
                        .unwrap_err();
                    assert_eq!(err.status(), Status::InvalidArgument);
                    assert!(err.message().contains(&format!("{}", 101 + 2 * t)), "{err}");

                    let mut case = Case::new(4, 8, 2, 2);
                    case.keys = 16;
                    let mut data = random_data(&case);
                    data.k_idx[t] = 1000 + t as i64;
                    let mut plan = case.builder().build().unwrap();
                    let err = run_plan(&mut plan, &case, &data, false).unwrap_err();
                    assert_eq!(err.status(), Status::InvalidInput);
                    assert!(err.message().contains(&format!("= {}", 1000 + t)), "{err}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}
