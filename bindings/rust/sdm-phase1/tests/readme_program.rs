//! The repository README's Rust program runs as written in a user's own crate: its
//! `Cargo.toml` and `src/main.rs`, taken from README.md (the fenced blocks after
//! `<!-- runs: cargo (Cargo.toml) -->` and `<!-- runs: rust (src/main.rs) -->`, so the page
//! and this test cannot drift apart), become a crate in a temporary folder outside the
//! workspace, with the one placeholder `<libsdmp1>` replaced by this checkout's path. It must
//! build offline (path dependencies only, as the crates depend on `std` alone) and its
//! program must run with LD_LIBRARY_PATH removed, as a user starts it.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fenced block that follows the line `marker` in `text`, without its fences.
fn block_after(text: &str, marker: &str) -> String {
    let mut lines = text.lines().skip_while(|l| *l != marker);
    assert_eq!(lines.next(), Some(marker), "README.md has no line {marker}");
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a fenced block"
    );
    let body: Vec<&str> = lines.take_while(|l| *l != "```").collect();
    body.join("\n") + "\n"
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .expect("the checkout's root")
}

#[test]
fn readme_program_runs_in_a_crate_of_its_own() {
    let root = checkout();
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    let manifest = block_after(&readme, "<!-- runs: cargo (Cargo.toml) -->");
    let program = block_after(&readme, "<!-- runs: rust (src/main.rs) -->");
    assert_eq!(manifest.matches("<libsdmp1>").count(), 1, "{manifest}");
    let manifest = manifest.replace("<libsdmp1>", root.to_str().expect("a UTF-8 path"));

    let dir = std::env::temp_dir().join(format!("sdm-phase1-readme-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    fs::write(dir.join("src/main.rs"), program).unwrap();
    assert!(
        !dir.starts_with(&root),
        "the crate must lie outside the workspace"
    );

    // A target folder of its own: this test's cargo holds the workspace's while tests run.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let built = Command::new(cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .expect("running cargo");
    assert!(
        built.status.success(),
        "cargo build of the README's crate failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let ran = Command::new(dir.join("target/debug/phase1-app"))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("running the README's program");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "the README's program failed ({}):\n{stdout}{}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(stdout.starts_with("a: 32768 values, sum "), "{stdout}");
    print!("README's program: {stdout}");
    fs::remove_dir_all(&dir).unwrap();
}
