//! Finds libsdmp1 and tells rustc to link it, in this order:
//!   1. SDMP1_LIB_DIR, when set: the directory holding libsdmp1.a (and libsdmp1.so);
//!   2. `pkg-config sdmp1` (the program, so no crate is needed): its libdir;
//!   3. the source tree's build directory (../../../build, where `./run.sh build` puts it).
//!
//! By default it links libsdmp1.a and what the archive needs besides (the C++ runtime, and the
//! CUDA runtime where the CUDA backend is built), as `pkg-config --static --libs sdmp1-static`
//! names them (the build directory's uninstalled sdmp1-static.pc, or the installed one): a
//! program then runs wherever it is copied, with no library path set. (A dependency's build
//! script cannot give the final program an rpath: `cargo:rustc-link-arg` reaches only its own
//! package's targets, so a shared default would leave a user's program unable to start.)
//!
//! With the `shared` feature it links libsdmp1.so instead, with an rpath to its directory for
//! this crate's own targets; such a program finds the library through the system's loader
//! path, LD_LIBRARY_PATH, or an rpath its own build script sets from DEP_SDMP1_LIB_DIR. The
//! `static` feature asks for the default explicitly (it is refused together with `shared`).
//!
//! It prints which one it used, and passes the directory on to dependents as
//! DEP_SDMP1_LIB_DIR (the `links` metadata); when linking statically, also DEP_SDMP1_STATIC.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SDMP1_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    let shared = env::var_os("CARGO_FEATURE_SHARED").is_some();
    if shared && env::var_os("CARGO_FEATURE_STATIC").is_some() {
        panic!(
            "sdm-phase1-sys: the features `static` and `shared` are both enabled (by this crate's \
             dependents); libsdmp1 links one way: drop one (static is the default)"
        );
    }
    let linking_static = !shared;
    let file = if linking_static {
        "libsdmp1.a"
    } else {
        "libsdmp1.so"
    };
    let (dir, how) = find_library(file);
    println!(
        "cargo:warning=libsdmp1: linking {} ({how})",
        dir.join(file).display()
    );
    // A rebuilt library relinks the programs: an archive linked in would otherwise stay as it
    // was when they were built.
    println!("cargo:rerun-if-changed={}", dir.join(file).display());
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
    if linking_static {
        link_static(&dir);
        println!("cargo:static=1");
        return;
    }
    println!("cargo:rustc-link-lib=dylib=sdmp1");
    // This crate's own tests find the library without LD_LIBRARY_PATH; rustc-link-arg does not
    // reach dependents, which read DEP_SDMP1_LIB_DIR instead.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}

fn find_library(file: &str) -> (PathBuf, &'static str) {
    if let Some(dir) = env::var_os("SDMP1_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.join(file).exists() {
            panic!("SDMP1_LIB_DIR={} holds no {file}", dir.display());
        }
        return (dir, "from SDMP1_LIB_DIR");
    }
    if let Some(dir) = pkg_config(&["--variable=libdir", "sdmp1"], None) {
        let dir = PathBuf::from(dir.trim());
        if dir.join(file).exists() {
            return (dir, "from pkg-config sdmp1");
        }
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let tree = manifest.join("../../../build");
    if tree.join(file).exists() {
        let tree = tree.canonicalize().unwrap_or(tree);
        return (tree, "the source tree's build directory");
    }
    let other = if file == "libsdmp1.a" {
        "; or, to link libsdmp1.so instead, enable the `shared` feature"
    } else {
        ""
    };
    panic!(
        "{file} not found: set SDMP1_LIB_DIR to the directory of {file}, install libsdmp1 \
         (meson install, so that `pkg-config sdmp1` finds it) or build the source tree \
         (./run.sh build, which puts it in {}){other}",
        tree.display()
    );
}

/// libsdmp1.a and its dependencies, from sdmp1-static.pc: the build directory's uninstalled
/// one when `dir` is a Meson build directory, else the installed one.
fn link_static(dir: &Path) {
    let uninstalled = dir.join("meson-uninstalled");
    let libs = if uninstalled.join("sdmp1-static-uninstalled.pc").exists() {
        pkg_config(
            &["--static", "--libs", "sdmp1-static-uninstalled"],
            Some(&uninstalled),
        )
    } else {
        pkg_config(&["--static", "--libs", "sdmp1-static"], None)
    };
    // Without pkg-config: the archive of a build without CUDA needs only these.
    let libs = libs.unwrap_or_else(|| "-lsdmp1 -pthread -lstdc++ -lm".to_string());
    for word in libs.split_whitespace() {
        if let Some(search) = word.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={search}");
        } else if word == "-pthread" {
            println!("cargo:rustc-link-lib=dylib=pthread");
        } else if let Some(name) = word.strip_prefix("-l") {
            // The archives: libsdmp1.a itself and the CUDA runtime's (cudart_static).
            let kind = if name == "sdmp1" || name.ends_with("_static") {
                "static"
            } else {
                "dylib"
            };
            println!("cargo:rustc-link-lib={kind}={name}");
        } else if word.ends_with(".a") || word.contains(".so") {
            link_file(Path::new(word));
        }
    }
}

/// A library named by its path (/usr/lib/.../librt.so, libfoo.a).
fn link_file(path: &Path) {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name.trim_start_matches("lib");
    let (stem, kind) = match stem.find(".so") {
        Some(at) => (&stem[..at], "dylib"),
        None => (stem.trim_end_matches(".a"), "static"),
    };
    if let Some(parent) = path.parent() {
        println!("cargo:rustc-link-search=native={}", parent.display());
    }
    println!("cargo:rustc-link-lib={kind}={stem}");
}

/// pkg-config's output for `args` (with `path` first on PKG_CONFIG_PATH), when it succeeds.
fn pkg_config(args: &[&str], path: Option<&Path>) -> Option<String> {
    let mut command = Command::new("pkg-config");
    command.args(args);
    if let Some(path) = path {
        let mut paths = vec![path.to_path_buf()];
        if let Some(old) = env::var_os("PKG_CONFIG_PATH") {
            paths.extend(env::split_paths(&old));
        }
        command.env("PKG_CONFIG_PATH", env::join_paths(paths).ok()?);
    }
    let out = command.output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}
