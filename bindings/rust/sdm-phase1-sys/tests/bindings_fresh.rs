//! The committed src/bindings.rs is what generate.sh makes from include/sdm/phase1.h today.
//! Skips (with a message) where the bindgen CLI is absent; `./run.sh test` installs it.
use std::path::PathBuf;
use std::process::Command;

#[test]
fn committed_bindings_match_the_header() {
    let version = match Command::new("bindgen").arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => {
            eprintln!(
                "SKIPPED committed_bindings_match_the_header: the bindgen CLI is not on PATH \
                 (Debian: apt-get install bindgen)"
            );
            return;
        }
    };
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fresh = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bindings.fresh.rs");
    let status = Command::new("bash")
        .arg(crate_dir.join("generate.sh"))
        .arg(&fresh)
        .status()
        .expect("running generate.sh");
    assert!(status.success(), "generate.sh failed ({version})");

    let committed = std::fs::read_to_string(crate_dir.join("src/bindings.rs")).unwrap();
    let fresh_text = std::fs::read_to_string(&fresh).unwrap();
    if committed != fresh_text {
        let line = committed
            .lines()
            .zip(fresh_text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(fresh_text.lines().count()));
        panic!(
            "src/bindings.rs is stale: regenerating it with {version} differs from line {}\n  \
             committed: {:?}\n  generated: {:?}\nRun bindings/rust/sdm-phase1-sys/generate.sh \
             and commit the result (the fresh file is {}).",
            line + 1,
            committed.lines().nth(line).unwrap_or("<end of file>"),
            fresh_text.lines().nth(line).unwrap_or("<end of file>"),
            fresh.display()
        );
    }
}
