//! `desc_initializer()`, `inputs_initializer()` and `input_grads_initializer()` equal the
//! header's `SDM_P1_DESC_INITIALIZER`, `SDM_P1_INPUTS_INITIALIZER` and
//! `SDM_P1_INPUT_GRADS_INITIALIZER` field by field: a C program built from the header prints
//! each field of the macros' structs and the test compares the numbers. Skips (saying so)
//! where no C compiler runs (`cc`, or `$CC`).
use std::path::PathBuf;
use std::process::Command;

use sdm_phase1_sys as sys;

/// Every field of the three initializers as (C expression, the Rust initializer's value). The
/// exhaustive destructuring makes a field added to a struct a compile error here until it
/// is listed.
fn fields() -> Vec<(&'static str, i64)> {
    let sys::sdm_p1_desc {
        struct_size,
        magic,
        version,
        N,
        C,
        W,
        R,
        num_parallel,
        stream_offset,
        num_keys,
        valid_last,
        index_dtype,
        value_dtype,
        gate_width,
        need_read_groups,
        det_fields,
        rec_tile,
        backend,
        device,
        num_threads,
        output_mode,
        allocator: sys::sdm_p1_allocator { ctx, alloc, free },
        backward,
        grad_dtype,
    } = sys::desc_initializer();
    let desc = [
        ("d.struct_size", i64::from(struct_size)),
        ("d.magic", i64::from(magic)),
        ("d.version", i64::from(version)),
        ("d.N", N),
        ("d.C", C),
        ("d.W", W),
        ("d.R", R),
        ("d.num_parallel", num_parallel),
        ("d.stream_offset", stream_offset),
        ("d.num_keys", num_keys),
        ("d.valid_last", valid_last),
        ("d.index_dtype", i64::from(index_dtype)),
        ("d.value_dtype", i64::from(value_dtype)),
        ("d.gate_width", gate_width),
        ("d.need_read_groups", i64::from(need_read_groups)),
        ("d.det_fields", det_fields),
        ("d.rec_tile", rec_tile),
        ("d.backend", i64::from(backend)),
        ("d.device", i64::from(device)),
        ("d.num_threads", i64::from(num_threads)),
        ("d.output_mode", i64::from(output_mode)),
        ("d.allocator.ctx != NULL", i64::from(!ctx.is_null())),
        ("d.allocator.alloc != NULL", i64::from(alloc.is_some())),
        ("d.allocator.free != NULL", i64::from(free.is_some())),
        ("d.backward", i64::from(backward)),
        ("d.grad_dtype", i64::from(grad_dtype)),
    ];
    let sys::sdm_p1_inputs {
        struct_size,
        k_idx,
        q_idx,
        k_val,
        q_val,
        g,
        beta,
        stream_lengths,
        stream_lengths_dtype,
        reserved,
    } = sys::inputs_initializer();
    let inputs = [
        ("in.struct_size", i64::from(struct_size)),
        ("in.k_idx != NULL", i64::from(!k_idx.is_null())),
        ("in.q_idx != NULL", i64::from(!q_idx.is_null())),
        ("in.k_val != NULL", i64::from(!k_val.is_null())),
        ("in.q_val != NULL", i64::from(!q_val.is_null())),
        ("in.g != NULL", i64::from(!g.is_null())),
        ("in.beta != NULL", i64::from(!beta.is_null())),
        (
            "in.stream_lengths != NULL",
            i64::from(!stream_lengths.is_null()),
        ),
        ("in.stream_lengths_dtype", i64::from(stream_lengths_dtype)),
        ("in.reserved", i64::from(reserved)),
    ];
    let sys::sdm_p1_input_grads {
        struct_size,
        reserved,
        k_val,
        q_val,
        g,
        beta,
    } = sys::input_grads_initializer();
    let input_grads = [
        ("og.struct_size", i64::from(struct_size)),
        ("og.reserved", i64::from(reserved)),
        ("og.k_val != NULL", i64::from(!k_val.is_null())),
        ("og.q_val != NULL", i64::from(!q_val.is_null())),
        ("og.g != NULL", i64::from(!g.is_null())),
        ("og.beta != NULL", i64::from(!beta.is_null())),
    ];
    desc.into_iter().chain(inputs).chain(input_grads).collect()
}

/// A C program printing "EXPRESSION VALUE" for each expression, on structs the macros fill.
fn c_program(fields: &[(&str, i64)]) -> String {
    let mut text = String::from(
        "#include <stdio.h>\n#include \"sdm/phase1.h\"\nint main(void) {\n    \
         sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;\n    \
         sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;\n    \
         sdm_p1_input_grads og = SDM_P1_INPUT_GRADS_INITIALIZER;\n",
    );
    for (expression, _) in fields {
        text +=
            &format!("    printf(\"%s %lld\\n\", \"{expression}\", (long long)({expression}));\n");
    }
    text + "    return 0;\n}\n"
}

#[test]
fn initializers_equal_the_c_macros() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    if !Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        eprintln!("SKIPPED initializers_equal_the_c_macros: no C compiler ({cc}) runs here");
        return;
    }
    let fields = fields();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let source = dir.join("initializers.c");
    let program = dir.join("initializers");
    std::fs::write(&source, c_program(&fields)).unwrap();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../include");
    let compiled = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Werror", "-I", include, "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("running the C compiler");
    assert!(
        compiled.status.success(),
        "{cc} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let out = Command::new(&program)
        .output()
        .expect("running the program");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();

    let want: Vec<String> = fields.iter().map(|(e, v)| format!("{e} {v}")).collect();
    let got: Vec<&str> = printed.lines().collect();
    assert_eq!(got.len(), want.len(), "{printed}");
    for (c, rust) in got.iter().zip(&want) {
        assert_eq!(
            *c, rust,
            "the C macro's field (left) against the Rust initializer's"
        );
    }
}
