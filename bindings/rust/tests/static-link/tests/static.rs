//! The program linked with `static` runs with LD_LIBRARY_PATH removed and names no libsdmp1
//! shared object among the libraries it needs (readelf -d), so nothing loads libsdmp1.so.
use std::process::Command;

#[test]
fn runs_without_a_library_path() {
    let program = env!("CARGO_BIN_EXE_sdm-phase1-static-link");
    let out = Command::new(program)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("running the program");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each slot is written once per chunk: log_k is the token's own gate.
    assert!(
        text.contains("linked statically: log_k[0] = -0.5, log_k[last] = -0.5, repeats = 0"),
        "{text}"
    );
    print!("{text}");
}

#[test]
fn needs_no_libsdmp1_shared_object() {
    let program = env!("CARGO_BIN_EXE_sdm-phase1-static-link");
    let out = match Command::new("readelf").args(["-d", program]).output() {
        Ok(out) if out.status.success() => out,
        _ => {
            eprintln!("SKIPPED needs_no_libsdmp1_shared_object: readelf (binutils) not found");
            return;
        }
    };
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(dynamic.contains("(NEEDED)"), "{dynamic}");
    assert!(!dynamic.contains("libsdmp1"), "{dynamic}");
}
