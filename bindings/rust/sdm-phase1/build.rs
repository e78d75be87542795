//! Sets an rpath to the directory sdm-phase1-sys linked libsdmp1 from (DEP_SDMP1_LIB_DIR, the
//! `links` metadata), so this crate's tests, examples and doctests run without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SDMP1_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_SDMP1_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
