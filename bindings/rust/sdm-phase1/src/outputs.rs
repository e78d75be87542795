//! Output fields, their shapes, and typed views of an execute's outputs.
use sdm_phase1_sys as sys;

use crate::error::{Error, Result};
use crate::types::{Bf16, Data, Dtype, Element};

/// One output of Phase 1 (`sdm_p1_field`), in the order of the spec's Phase1 tuple, then
/// `repeats`. Shapes are per plan; `include/sdm/phase1.h` documents each field's meaning.
///
/// Non-exhaustive: a minor release of the library may add fields (and [`Field::COUNT`]
/// grows with them).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `a`: `[N, C, C]` f32, the intra-chunk write-write matrix.
    A = 0,
    /// `qk`: `[N, C, C]` f32, the intra-chunk read-write matrix.
    Qk,
    /// `log_k`: `[N, C, W]` f32, the slot's log-cumsum of gates through this K entry.
    LogK,
    /// `log_q`: `[N, C, R]` f32, the slot's log-cumsum through this token's writes.
    LogQ,
    /// `rex`: `[N, C, W]` f32, the sum of the gates of the slot's later K entries.
    Rex,
    /// `cpe`: `[N, C, W]` value dtype, exp(total gate of the slot in the chunk).
    Cpe,
    /// `is_last`: `[N, C, W]` i8 (`DetFields::FLAGS`).
    IsLast,
    /// `is_only`: `[N, C, W]` i8 (`DetFields::FLAGS`).
    IsOnly,
    /// `k_eff`: `[N, C, W]` value dtype, k_val * exp(log_k).
    KEff,
    /// `q_w`: `[N, C, R]` value dtype, q_val * exp(log_q).
    QW,
    /// `payload`: `[N, row]` i32, the sorted payloads (row = C * (W + R) rounded up to 16).
    Payload,
    /// `pos_k`: `[N, C, W]` i32 (`DetFields::POS`).
    PosK,
    /// `pos_q`: `[N, C, R]` i32 (`DetFields::POS`).
    PosQ,
    /// `q_last`: `[N, C, R]` i8 (`DetFields::FLAGS`, read groups).
    QLast,
    /// `q_only`: `[N, C, R]` i8 (`DetFields::FLAGS`, read groups).
    QOnly,
    /// `spay_k`: `[N, C * W]` i32 (`DetFields::SPAY_K`).
    SpayK,
    /// `spay_q`: `[N, C * R]` i32 (`DetFields::SPAY_Q`, read groups).
    SpayQ,
    /// `spay_rank`: `[N, ceil(C * (W + R) / 32), 2]` i32 (`DetFields::SPAY_RANK`).
    SpayRank,
    /// `krec`: `[N, C * W, 4]` i32 (`DetFields::KREC`).
    Krec,
    /// `kspa`: `[N, C * W]` f32 (`DetFields::KSPA`, needs `beta`).
    Kspa,
    /// `qrec`: `[N, C * R, 4]` i32 (`DetFields::QREC`, read groups).
    Qrec,
    /// `tiles_k`: `[N, ceil(C * W / L) + 1]` i32 (`DetFields::TILES`).
    TilesK,
    /// `tiles_q`: `[N, ceil(C * R / L) + 1]` i32 (`DetFields::TILES`, read groups).
    TilesQ,
    /// `segb_k`: `[N, ceil(C * W / L) + 1]` i32 (`DetFields::TILES`).
    SegbK,
    /// `dc_kpos`: `[N, C, W]` i32 (`DetFields::DC_GIDX`).
    DcKpos,
    /// `dc_bpre`: `[N, ceil(C * W / 32) + 1]` i32 (`DetFields::DC_GIDX`).
    DcBpre,
    /// `dc_rec`: the spec's field no caller may request; never computed.
    DcRec,
    /// `qrec8`: `[N, C * R, 2]` i32 (`DetFields::QREC8`, read groups).
    Qrec8,
    /// `repeats`: `[1]` i64, the K entries that repeat a slot already written by their token.
    Repeats,
}

impl Field {
    /// The number of fields (`SDM_P1_FIELD_COUNT`).
    pub const COUNT: usize = sys::SDM_P1_FIELD_COUNT as usize;

    /// Every field, in index order.
    pub const ALL: [Field; Field::COUNT] = [
        Field::A,
        Field::Qk,
        Field::LogK,
        Field::LogQ,
        Field::Rex,
        Field::Cpe,
        Field::IsLast,
        Field::IsOnly,
        Field::KEff,
        Field::QW,
        Field::Payload,
        Field::PosK,
        Field::PosQ,
        Field::QLast,
        Field::QOnly,
        Field::SpayK,
        Field::SpayQ,
        Field::SpayRank,
        Field::Krec,
        Field::Kspa,
        Field::Qrec,
        Field::TilesK,
        Field::TilesQ,
        Field::SegbK,
        Field::DcKpos,
        Field::DcBpre,
        Field::DcRec,
        Field::Qrec8,
        Field::Repeats,
    ];

    const NAMES: [&'static str; Field::COUNT] = [
        "a",
        "qk",
        "log_k",
        "log_q",
        "rex",
        "cpe",
        "is_last",
        "is_only",
        "k_eff",
        "q_w",
        "payload",
        "pos_k",
        "pos_q",
        "q_last",
        "q_only",
        "spay_k",
        "spay_q",
        "spay_rank",
        "krec",
        "kspa",
        "qrec",
        "tiles_k",
        "tiles_q",
        "segb_k",
        "dc_kpos",
        "dc_bpre",
        "dc_rec",
        "qrec8",
        "repeats",
    ];

    /// The index of the field (its `sdm_p1_field` value).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The spec's name of the field (`"a"`, `"log_k"`, ..., `"repeats"`).
    pub fn name(self) -> &'static str {
        Field::NAMES[self.index()]
    }

    /// The field with this spec name.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What a plan says about one output: dtype, whether it is computed, shape and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    field: Field,
    dtype: Dtype,
    requested: bool,
    shape: Vec<usize>,
    bytes: usize,
}

impl FieldInfo {
    pub(crate) fn from_view(field: Field, view: &sys::sdm_p1_tensor) -> Result<FieldInfo> {
        let dtype = Dtype::from_code(view.dtype).ok_or_else(|| {
            Error::new(
                crate::Status::Internal,
                format!("field {} has an unknown dtype {}", field.name(), view.dtype),
            )
        })?;
        let ndim = view.ndim.clamp(0, 3) as usize;
        let shape = view.shape[..ndim]
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| {
                    Error::new(
                        crate::Status::Internal,
                        format!("field {} has a dimension of {d}", field.name()),
                    )
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        Ok(FieldInfo {
            field,
            dtype,
            requested: view.requested != 0,
            shape,
            bytes: view.bytes,
        })
    }

    /// The field.
    pub fn field(&self) -> Field {
        self.field
    }

    /// The spec's name of the field.
    pub fn name(&self) -> &'static str {
        self.field.name()
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Whether the plan computes this field (det_fields, need_read_groups).
    pub fn requested(&self) -> bool {
        self.requested
    }

    /// The dimensions (1 to 3 of them; empty when not requested).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements (0 when not requested).
    pub fn len(&self) -> usize {
        if self.requested {
            self.bytes / self.dtype.size()
        } else {
            0
        }
    }

    /// Whether the field has no elements (it is not requested).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size of the whole array in bytes (0 when not requested).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One computed output: its [`FieldInfo`] and its elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<'a> {
    info: FieldInfo,
    data: Data<'a>,
}

impl<'a> Tensor<'a> {
    /// Dtype, shape and size.
    pub fn info(&self) -> &FieldInfo {
        &self.info
    }

    /// The field.
    pub fn field(&self) -> Field {
        self.info.field
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.info.shape
    }

    /// The elements, typed by the field's dtype.
    pub fn data(&self) -> Data<'a> {
        self.data
    }

    /// The elements as `&[T]`, when `T` is the field's element type.
    pub fn as_slice<T: Element>(&self) -> Option<&'a [T]> {
        T::from_data(self.data)
    }

    /// The elements' bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.data.as_bytes()
    }
}

/// The outputs of one execute, borrowed from where they were written (the plan's buffers or
/// an [`OutputBuffers`](crate::OutputBuffers)).
#[derive(Clone, Debug)]
pub struct Outputs<'a> {
    tensors: Vec<Option<Tensor<'a>>>,
}

impl<'a> Outputs<'a> {
    /// Views `bytes`-sized host arrays at `ptrs[f]` for each requested field.
    ///
    /// # Safety
    /// Each requested field's pointer must be valid host memory of `info.bytes()` bytes,
    /// aligned for its dtype and initialized, and stay unchanged for `'a`.
    pub(crate) unsafe fn from_raw(infos: &[FieldInfo], ptrs: &[*const u8]) -> Outputs<'a> {
        let tensors = infos
            .iter()
            .zip(ptrs)
            .map(|(info, &ptr)| {
                if !info.requested || ptr.is_null() {
                    return None;
                }
                let n = info.len();
                let data = match info.dtype {
                    Dtype::I8 => Data::I8(std::slice::from_raw_parts(ptr.cast(), n)),
                    Dtype::I32 => Data::I32(std::slice::from_raw_parts(ptr.cast(), n)),
                    Dtype::I64 => Data::I64(std::slice::from_raw_parts(ptr.cast(), n)),
                    Dtype::F32 => Data::F32(std::slice::from_raw_parts(ptr.cast(), n)),
                    Dtype::Bf16 => Data::Bf16(std::slice::from_raw_parts(ptr.cast::<Bf16>(), n)),
                };
                Some(Tensor {
                    info: info.clone(),
                    data,
                })
            })
            .collect();
        Outputs { tensors }
    }

    /// The output of `field`; `None` when the plan does not compute it.
    pub fn get(&self, field: Field) -> Option<&Tensor<'a>> {
        self.tensors[field.index()].as_ref()
    }

    /// The elements of `field` as `&[T]`.
    ///
    /// Fails with [`Status::InvalidArgument`](crate::Status::InvalidArgument) when the plan
    /// does not compute the field or `T` is not its element type.
    pub fn slice<T: Element>(&self, field: Field) -> Result<&'a [T]> {
        let tensor = self.get(field).ok_or_else(|| {
            Error::invalid_argument(format!(
                "Outputs::slice: the plan does not compute {} (see its det_fields and \
                 need_read_groups)",
                field.name()
            ))
        })?;
        tensor.as_slice().ok_or_else(|| {
            Error::invalid_argument(format!(
                "Outputs::slice: {} holds {:?} elements, not {:?}",
                field.name(),
                tensor.info.dtype,
                T::DTYPE
            ))
        })
    }

    /// The `repeats` output: K entries that repeat a slot already written by their token. An
    /// `i64`, the element the library wrote: outputs keep their C element types (they are
    /// the library's data, compared bit for bit with the C API), unlike the shapes and counts
    /// the crate's methods take and give.
    pub fn repeats(&self) -> i64 {
        self.slice::<i64>(Field::Repeats).map_or(0, |r| r[0])
    }

    /// The computed outputs, in field order.
    pub fn iter(&self) -> impl Iterator<Item = &Tensor<'a>> {
        self.tensors.iter().flatten()
    }
}
