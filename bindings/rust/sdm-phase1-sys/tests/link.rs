//! The raw functions link and answer: the library's version matches the header's major; the
//! crate's version is the header's (generated from Meson's project version), so a release
//! that changes one without the other fails here.
use sdm_phase1_sys as sys;
use std::ffi::CStr;

#[test]
fn loaded_library_has_the_header_major_version() {
    let number = unsafe { sys::sdm_p1_version_number() };
    assert_eq!(number / 10000, sys::SDM_P1_VERSION_MAJOR);
    let text = unsafe { CStr::from_ptr(sys::sdm_p1_version_string()) };
    assert!(text.to_str().unwrap().starts_with("1."), "{text:?}");
}

#[test]
fn initializers_match_the_header_defaults() {
    let desc = sys::desc_initializer();
    assert_eq!(
        desc.struct_size as usize,
        std::mem::size_of::<sys::sdm_p1_desc>()
    );
    assert_eq!(desc.magic, 0x5344_5031);
    assert_eq!(desc.valid_last, -1);
    let inputs = sys::inputs_initializer();
    assert_eq!(
        inputs.struct_size as usize,
        std::mem::size_of::<sys::sdm_p1_inputs>()
    );
}

#[test]
fn crate_version_is_the_header_version() {
    let header = format!(
        "{}.{}.{}",
        sys::SDM_P1_VERSION_MAJOR,
        sys::SDM_P1_VERSION_MINOR,
        sys::SDM_P1_VERSION_PATCH
    );
    assert_eq!(
        env!("CARGO_PKG_VERSION"),
        header,
        "Cargo.toml against the header"
    );
    let loaded = unsafe { CStr::from_ptr(sys::sdm_p1_version_string()) };
    assert_eq!(
        loaded.to_str().unwrap(),
        header,
        "the loaded library against the header"
    );
    assert_eq!(
        sys::SDM_P1_VERSION_NUMBER,
        sys::SDM_P1_VERSION_MAJOR * 10000
            + sys::SDM_P1_VERSION_MINOR * 100
            + sys::SDM_P1_VERSION_PATCH
    );
}
