//! With the `shared` feature, sets an rpath to the directory sdm-phase1-sys linked libsdmp1.so
//! from (DEP_SDMP1_LIB_DIR, the `links` metadata), so this crate's tests, examples and doctests
//! run without LD_LIBRARY_PATH. By default libsdmp1.a is inside the program: no rpath.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SDMP1_LIB_DIR");
    println!("cargo:rerun-if-env-changed=DEP_SDMP1_STATIC");
    if std::env::var_os("DEP_SDMP1_STATIC").is_some() {
        return;
    }
    if let Ok(dir) = std::env::var("DEP_SDMP1_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
