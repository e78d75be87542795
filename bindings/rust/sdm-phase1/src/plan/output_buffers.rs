//! Caller-owned host buffers for every output a plan computes.
use std::ffi::c_void;
use std::ptr;

use crate::outputs::{FieldInfo, Outputs};

/// Host buffers for every output a plan computes, owned by the caller: the target of
/// [`Plan::execute_into`](crate::Plan::execute_into), which is how a plan in [`OutputMode::Caller`](crate::OutputMode::Caller) runs on the host.
/// Several of them let results of earlier executes outlive the next one.
#[derive(Clone, Debug)]
pub struct OutputBuffers {
    pub(super) infos: Vec<FieldInfo>,
    // u64 words, so that every dtype is aligned; zeroed, so always initialized.
    pub(super) words: Vec<Vec<u64>>,
}

impl OutputBuffers {
    /// Views of the buffers: what the last successful [`Plan::execute_into`](crate::Plan::execute_into) wrote (zeros
    /// before any; unspecified values after a failed one).
    pub fn outputs(&self) -> Outputs<'_> {
        let ptrs: Vec<*const u8> = self.words.iter().map(|w| w.as_ptr().cast()).collect();
        // SAFETY: each requested field's buffer holds at least its bytes, initialized and
        // 8-byte aligned, and is borrowed from self for the lifetime of the views.
        unsafe { Outputs::from_raw(&self.infos, &ptrs) }
    }

    pub(super) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.infos
            .iter()
            .zip(&mut self.words)
            .map(|(info, w)| {
                if info.requested() {
                    w.as_mut_ptr().cast()
                } else {
                    ptr::null_mut()
                }
            })
            .collect()
    }
}
