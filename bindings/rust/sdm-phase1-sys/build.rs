//! Finds libsdmp1 and tells rustc to link it, in this order:
//!   1. SDMP1_LIB_DIR, when set: the directory holding libsdmp1.so;
//!   2. `pkg-config sdmp1` (the program, so no crate is needed): its libdir;
//!   3. the source tree's build directory (../../../build, where `./run.sh build` puts it).
//!
//! It prints which one it used, and passes the directory on to dependents as
//! DEP_SDMP1_LIB_DIR (the `links` metadata) so that they can set an rpath too.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SDMP1_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    let (dir, how) = find_library();
    println!("cargo:warning=libsdmp1: linking {} ({how})", dir.display());
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=sdmp1");
    // This crate's own tests find the library without LD_LIBRARY_PATH; rustc-link-arg does not
    // reach dependents, which read DEP_SDMP1_LIB_DIR instead.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}

fn find_library() -> (PathBuf, &'static str) {
    if let Some(dir) = env::var_os("SDMP1_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !has_library(&dir) {
            panic!("SDMP1_LIB_DIR={} holds no libsdmp1.so", dir.display());
        }
        return (dir, "from SDMP1_LIB_DIR");
    }
    if let Some(dir) = pkg_config_libdir() {
        return (dir, "from pkg-config sdmp1");
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let tree = manifest.join("../../../build");
    if has_library(&tree) {
        let tree = tree.canonicalize().unwrap_or(tree);
        return (tree, "the source tree's build directory");
    }
    panic!(
        "libsdmp1 not found: set SDMP1_LIB_DIR to the directory of libsdmp1.so, install it \
         (meson install, so that `pkg-config sdmp1` finds it) or build the source tree \
         (./run.sh build, which puts it in {})",
        tree.display()
    );
}

/// The libdir that `pkg-config sdmp1` reports, when pkg-config runs and knows sdmp1.
fn pkg_config_libdir() -> Option<PathBuf> {
    let out = Command::new("pkg-config")
        .args(["--variable=libdir", "sdmp1"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    let dir = PathBuf::from(dir.trim());
    has_library(&dir).then_some(dir)
}

fn has_library(dir: &Path) -> bool {
    dir.join("libsdmp1.so").exists()
}
