//! Element types, backends, output modes and the det_fields flag set.
use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Sub};

use sdm_phase1_sys as sys;

/// A bfloat16 value: the upper 16 bits of a float32, stored as its bits.
///
/// Equality compares the bits (so a NaN equals itself and +0 differs from -0), which is what
/// bit-exact comparisons of outputs need.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// The bfloat16 nearest to `x`, ties to even; NaNs stay NaN (quiet, sign kept) and values
    /// beyond the bfloat16 range round to infinity (as the Python package's converter).
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16(((bits >> 16) | 0x0040) as u16);
        }
        let lsb = (bits >> 16) & 1;
        Bf16(((bits as u64 + 0x7fff + lsb as u64) >> 16) as u16)
    }

    /// The float32 with these upper 16 bits (exact).
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl fmt::Debug for Bf16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bf16({})", self.to_f32())
    }
}

impl From<Bf16> for f32 {
    fn from(x: Bf16) -> f32 {
        x.to_f32()
    }
}

/// The element type of an input or output array (`sdm_p1_dtype`).
///
/// Non-exhaustive: a minor release of the library may add element types.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `int8` (`i8`): the flag outputs.
    I8,
    /// `int32` (`i32`).
    I32,
    /// `int64` (`i64`).
    I64,
    /// `float32` (`f32`).
    F32,
    /// `bfloat16` ([`Bf16`]).
    Bf16,
}

impl Dtype {
    /// The C value (`SDM_P1_DTYPE_*`).
    pub fn code(self) -> i32 {
        (match self {
            Dtype::I8 => sys::SDM_P1_DTYPE_INT8,
            Dtype::I32 => sys::SDM_P1_DTYPE_INT32,
            Dtype::I64 => sys::SDM_P1_DTYPE_INT64,
            Dtype::F32 => sys::SDM_P1_DTYPE_FLOAT32,
            Dtype::Bf16 => sys::SDM_P1_DTYPE_BFLOAT16,
        }) as i32
    }

    /// The dtype of a C value, if it is one.
    pub fn from_code(code: i32) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.code() == code)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 => 1,
            Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::F32 => 4,
            Dtype::I64 => 8,
        }
    }

    const ALL: [Dtype; 5] = [Dtype::I8, Dtype::I32, Dtype::I64, Dtype::F32, Dtype::Bf16];
}

/// The element type of the slot ids `k_idx` and `q_idx`.
///
/// Non-exhaustive: a minor release of the library may add id types.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexDtype {
    /// `i32` ids (the default).
    I32,
    /// `i64` ids.
    I64,
}

impl IndexDtype {
    /// As a general [`Dtype`].
    pub fn dtype(self) -> Dtype {
        match self {
            IndexDtype::I32 => Dtype::I32,
            IndexDtype::I64 => Dtype::I64,
        }
    }
}

/// The element type of `k_val`, `q_val` and the outputs `cpe`, `k_eff` and `q_w`.
///
/// Non-exhaustive: a minor release of the library may add value types.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueDtype {
    /// `f32` values (the default).
    F32,
    /// bfloat16 values ([`Bf16`]).
    Bf16,
}

impl ValueDtype {
    /// As a general [`Dtype`].
    pub fn dtype(self) -> Dtype {
        match self {
            ValueDtype::F32 => Dtype::F32,
            ValueDtype::Bf16 => Dtype::Bf16,
        }
    }
}

/// Where a plan runs (`sdm_p1_backend`).
///
/// Non-exhaustive: a minor release of the library may add backends.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The library picks: CUDA when built in and a device is present, else the CPU. Host
    /// slices need the CPU, so [`Plan::execute`](crate::Plan::execute) callers should ask for
    /// [`Backend::Cpu`].
    Auto,
    /// Host memory, threads over chunks; the definition of every output bit.
    Cpu,
    /// Device memory of the plan's device, on the caller's stream.
    Cuda,
}

impl Backend {
    pub(crate) fn code(self) -> i32 {
        (match self {
            Backend::Auto => sys::SDM_P1_BACKEND_AUTO,
            Backend::Cpu => sys::SDM_P1_BACKEND_CPU,
            Backend::Cuda => sys::SDM_P1_BACKEND_CUDA,
        }) as i32
    }
}

/// Who provides the output buffers of an execute (`sdm_p1_output_mode`).
///
/// Non-exhaustive: a minor release of the library may add modes.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// The plan allocates every requested output once; each execute overwrites them.
    Plan,
    /// The caller hands buffers to every execute
    /// ([`Plan::execute_into`](crate::Plan::execute_into)); the plan allocates no outputs.
    Caller,
}

impl OutputMode {
    pub(crate) fn code(self) -> i32 {
        (match self {
            OutputMode::Plan => sys::SDM_P1_OUTPUTS_PLAN,
            OutputMode::Caller => sys::SDM_P1_OUTPUTS_CALLER,
        }) as i32
    }
}

/// The optional outputs a plan computes (the `SDM_P1_DET_*` bits), as a set of flags.
///
/// Combine with `|`: `DetFields::SHIPPED | DetFields::KREC`. Only the bits the library accepts
/// can be represented (the spec's `dc_rec` bit, 1024, is refused by the library and so is not
/// here).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DetFields(u32);

impl DetFields {
    /// No optional output.
    pub const NONE: DetFields = DetFields(0);
    /// `pos_k`, `pos_q`.
    pub const POS: DetFields = DetFields(sys::SDM_P1_DET_POS);
    /// `spay_rank`.
    pub const SPAY_RANK: DetFields = DetFields(sys::SDM_P1_DET_SPAY_RANK);
    /// `is_last`, `is_only`; `q_last`, `q_only` (with read groups).
    pub const FLAGS: DetFields = DetFields(sys::SDM_P1_DET_FLAGS);
    /// `spay_k`.
    pub const SPAY_K: DetFields = DetFields(sys::SDM_P1_DET_SPAY_K);
    /// `spay_q` (with read groups).
    pub const SPAY_Q: DetFields = DetFields(sys::SDM_P1_DET_SPAY_Q);
    /// `krec`.
    pub const KREC: DetFields = DetFields(sys::SDM_P1_DET_KREC);
    /// `kspa` (needs `beta` at execute).
    pub const KSPA: DetFields = DetFields(sys::SDM_P1_DET_KSPA);
    /// `qrec` (with read groups).
    pub const QREC: DetFields = DetFields(sys::SDM_P1_DET_QREC);
    /// `tiles_k`, `segb_k`; `tiles_q` (with read groups).
    pub const TILES: DetFields = DetFields(sys::SDM_P1_DET_TILES);
    /// `dc_kpos`, `dc_bpre`.
    pub const DC_GIDX: DetFields = DetFields(sys::SDM_P1_DET_DC_GIDX);
    /// `qrec8` (with read groups).
    pub const QREC8: DetFields = DetFields(sys::SDM_P1_DET_QREC8);
    /// The spec's default set: `POS | SPAY_RANK | FLAGS | SPAY_K | SPAY_Q`.
    pub const SHIPPED: DetFields = DetFields(sys::SDM_P1_DET_SHIPPED);
    /// Every bit the library accepts.
    pub const ALL: DetFields = DetFields(sys::SDM_P1_DET_ALL);

    const NAMED: [(DetFields, &'static str); 11] = [
        (DetFields::POS, "POS"),
        (DetFields::SPAY_RANK, "SPAY_RANK"),
        (DetFields::FLAGS, "FLAGS"),
        (DetFields::SPAY_K, "SPAY_K"),
        (DetFields::SPAY_Q, "SPAY_Q"),
        (DetFields::KREC, "KREC"),
        (DetFields::KSPA, "KSPA"),
        (DetFields::QREC, "QREC"),
        (DetFields::TILES, "TILES"),
        (DetFields::DC_GIDX, "DC_GIDX"),
        (DetFields::QREC8, "QREC8"),
    ];

    /// The bits, as `desc.det_fields` holds them.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The set with these bits; `None` if a bit is not one of the constants above.
    pub const fn from_bits(bits: u32) -> Option<DetFields> {
        if bits & !sys::SDM_P1_DET_ALL == 0 {
            Some(DetFields(bits))
        } else {
            None
        }
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: DetFields) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for DetFields {
    type Output = DetFields;
    fn bitor(self, rhs: DetFields) -> DetFields {
        DetFields(self.0 | rhs.0)
    }
}

impl BitOrAssign for DetFields {
    fn bitor_assign(&mut self, rhs: DetFields) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for DetFields {
    type Output = DetFields;
    fn bitand(self, rhs: DetFields) -> DetFields {
        DetFields(self.0 & rhs.0)
    }
}

impl Sub for DetFields {
    type Output = DetFields;
    /// The flags of `self` that are not in `rhs`.
    fn sub(self, rhs: DetFields) -> DetFields {
        DetFields(self.0 & !rhs.0)
    }
}

impl fmt::Debug for DetFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = DetFields::NAMED
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            f.write_str("DetFields(NONE)")
        } else {
            write!(f, "DetFields({})", names.join(" | "))
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for f32 {}
    impl Sealed for super::Bf16 {}
}

/// An element type of libsdmp1's arrays: `i8`, `i32`, `i64`, `f32` or [`Bf16`] (sealed).
pub trait Element: sealed::Sealed + Copy + fmt::Debug + Send + Sync + 'static {
    /// The matching [`Dtype`].
    const DTYPE: Dtype;
    /// The slice `data` holds, when it holds this type.
    fn from_data(data: Data<'_>) -> Option<&'_ [Self]>;
}

/// A slot-id type: `i32` or `i64`.
pub trait Index: Element {
    /// The matching [`IndexDtype`].
    const INDEX_DTYPE: IndexDtype;
}

/// A value type: `f32` or [`Bf16`]. `Default` is its zero (+0.0).
pub trait Value: Element + Default {
    /// The matching [`ValueDtype`].
    const VALUE_DTYPE: ValueDtype;
}

macro_rules! element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            fn from_data(data: Data<'_>) -> Option<&'_ [Self]> {
                match data {
                    Data::$dtype(slice) => Some(slice),
                    _ => None,
                }
            }
        }
    };
}
element!(i8, I8);
element!(i32, I32);
element!(i64, I64);
element!(f32, F32);
element!(Bf16, Bf16);

impl Index for i32 {
    const INDEX_DTYPE: IndexDtype = IndexDtype::I32;
}
impl Index for i64 {
    const INDEX_DTYPE: IndexDtype = IndexDtype::I64;
}
impl Value for f32 {
    const VALUE_DTYPE: ValueDtype = ValueDtype::F32;
}
impl Value for Bf16 {
    const VALUE_DTYPE: ValueDtype = ValueDtype::Bf16;
}

/// The elements of one output array, typed by its [`Dtype`] (row-major, flattened).
///
/// Non-exhaustive: a minor release of the library may add element types (one variant each).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Data<'a> {
    /// An `int8` array.
    I8(&'a [i8]),
    /// An `int32` array.
    I32(&'a [i32]),
    /// An `int64` array.
    I64(&'a [i64]),
    /// A `float32` array.
    F32(&'a [f32]),
    /// A bfloat16 array.
    Bf16(&'a [Bf16]),
}

impl<'a> Data<'a> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> Dtype {
        match self {
            Data::I8(_) => Dtype::I8,
            Data::I32(_) => Dtype::I32,
            Data::I64(_) => Dtype::I64,
            Data::F32(_) => Dtype::F32,
            Data::Bf16(_) => Dtype::Bf16,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::I8(s) => s.len(),
            Data::I32(s) => s.len(),
            Data::I64(s) => s.len(),
            Data::F32(s) => s.len(),
            Data::Bf16(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same memory as bytes (native byte order), e.g. for bit-exact comparisons.
    pub fn as_bytes(&self) -> &'a [u8] {
        let (ptr, bytes) = match *self {
            Data::I8(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
            Data::I32(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
            Data::I64(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
            Data::F32(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
            Data::Bf16(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        };
        // SAFETY: the same initialized memory, borrowed for the same lifetime; these element
        // types have no padding bytes and u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(ptr, bytes) }
    }
}
