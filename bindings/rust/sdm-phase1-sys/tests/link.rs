//! The raw functions link and answer: the library's version matches the header's major.
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
