// The sets of output fields that more than one place needs, each defined here once from the
// public header's constants (include/sdm/phase1.h), for host and device code alike:
//   shipped         the spec's default det_fields, SDM_P1_DET_SHIPPED: a plan whose det_fields
//                   lie within it computes none of the records, kspa, the tiles or dc_gidx
//                   (det_bit_of says which bit asks for each field);
//   training        the det_fields the bindings add to the shipped ones when beta is given (a
//                   training step's Phase 2 reads them): krec, kspa, qrec and the tiles;
//   differentiable  the outputs sdm_p1_execute_backward takes an upstream gradient of (the
//                   header's "The backward"), with that gradient's element type and where its
//                   elements lie.
// Part of the canon (canon/phase1_shared.h says what it is), but not in phase1_shared.h: it
// includes the public header (include/ on the include path), whose constants it names.
// The bindings' copies (Python: DET_RECORDS, DIFFERENTIABLE and VALUE_TYPED; Rust:
// Plan::gradient_shape) are held to these by their tests, through the library's behaviour or
// this file's text (bindings/python/tests/test_field_sets.py, bindings/rust/sdm-phase1/tests/backward.rs).
#ifndef SDM_P1_CANON_FIELD_SETS_H
#define SDM_P1_CANON_FIELD_SETS_H

#include <stddef.h>

#include "host_device.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

// The SDM_P1_DET_* bit that asks for output field f; 0 for the fields every plan computes.
// dc_rec's bit (1024) is one the library refuses: no plan computes it.
SDM_HD constexpr int64_t det_bit_of(int f) {
    switch (f) {
        case SDM_P1_FIELD_IS_LAST:
        case SDM_P1_FIELD_IS_ONLY:
        case SDM_P1_FIELD_Q_LAST:
        case SDM_P1_FIELD_Q_ONLY:
            return SDM_P1_DET_FLAGS;
        case SDM_P1_FIELD_POS_K:
        case SDM_P1_FIELD_POS_Q:
            return SDM_P1_DET_POS;
        case SDM_P1_FIELD_SPAY_K:
            return SDM_P1_DET_SPAY_K;
        case SDM_P1_FIELD_SPAY_Q:
            return SDM_P1_DET_SPAY_Q;
        case SDM_P1_FIELD_SPAY_RANK:
            return SDM_P1_DET_SPAY_RANK;
        case SDM_P1_FIELD_KREC:
            return SDM_P1_DET_KREC;
        case SDM_P1_FIELD_KSPA:
            return SDM_P1_DET_KSPA;
        case SDM_P1_FIELD_QREC:
            return SDM_P1_DET_QREC;
        case SDM_P1_FIELD_TILES_K:
        case SDM_P1_FIELD_TILES_Q:
        case SDM_P1_FIELD_SEGB_K:
            return SDM_P1_DET_TILES;
        case SDM_P1_FIELD_DC_KPOS:
        case SDM_P1_FIELD_DC_BPRE:
            return SDM_P1_DET_DC_GIDX;
        case SDM_P1_FIELD_DC_REC:
            return int64_t{1} << 10;
        case SDM_P1_FIELD_QREC8:
            return SDM_P1_DET_QREC8;
        default:
            return 0;
    }
}

// Shipped: whether det_fields asks for nothing beyond SDM_P1_DET_SHIPPED.
SDM_HD constexpr bool within_shipped(int64_t det_fields) { return (det_fields & ~int64_t{SDM_P1_DET_SHIPPED}) == 0; }

// Whether a plan within the shipped set may compute field f (the kernels compiled for such
// plans carry no code for the others).
SDM_HD constexpr bool shipped_field(int f) { return within_shipped(det_bit_of(f)); }

// Training: added to SDM_P1_DET_SHIPPED when beta is given and det_fields is not.
constexpr int64_t kTrainingDetFields = SDM_P1_DET_KREC | SDM_P1_DET_KSPA | SDM_P1_DET_QREC | SDM_P1_DET_TILES;

// Differentiable: the element type of field f's upstream gradient, kNone for a field that is
// not differentiable. The record gradients (krec, kspa, qrec, qrec8) are float32 by K-row or
// Q-row index; cpe, k_eff and q_w are of the plan's value dtype.
enum class Upstream { kNone, kFloat32, kValueDtype };

// Where a chunk's elements of an upstream gradient lie: by cell of its C x C matrix, by write
// or read entry (C x W, C x R), or by K-row or Q-row of the records (C W or C R rows, read by
// sorted row).
enum class UpstreamIndex { kNone, kCells, kWrites, kReads, kWriteRows, kReadRows };

struct UpstreamGrad {
    Upstream type;
    UpstreamIndex index;
    int words;   // elements a cell, entry or row
};

// Field f's upstream gradient: {kNone, kNone, 0} where f is not differentiable.
SDM_HD constexpr UpstreamGrad upstream_grad(int f) {
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
            return {Upstream::kFloat32, UpstreamIndex::kCells, 1};
        case SDM_P1_FIELD_LOG_K:
        case SDM_P1_FIELD_REX:
            return {Upstream::kFloat32, UpstreamIndex::kWrites, 1};
        case SDM_P1_FIELD_LOG_Q:
            return {Upstream::kFloat32, UpstreamIndex::kReads, 1};
        case SDM_P1_FIELD_CPE:
        case SDM_P1_FIELD_K_EFF:
            return {Upstream::kValueDtype, UpstreamIndex::kWrites, 1};
        case SDM_P1_FIELD_Q_W:
            return {Upstream::kValueDtype, UpstreamIndex::kReads, 1};
        case SDM_P1_FIELD_KREC:   // words 2 (k_val * exp(rex)) and 3 (cpe) of each record
            return {Upstream::kFloat32, UpstreamIndex::kWriteRows, 2};
        case SDM_P1_FIELD_KSPA:
            return {Upstream::kFloat32, UpstreamIndex::kWriteRows, 1};
        case SDM_P1_FIELD_QREC:   // the scale (q_w)
        case SDM_P1_FIELD_QREC8:
            return {Upstream::kFloat32, UpstreamIndex::kReadRows, 1};
        default:
            return {Upstream::kNone, UpstreamIndex::kNone, 0};
    }
}

SDM_HD constexpr Upstream upstream_of(int f) { return upstream_grad(f).type; }

SDM_HD constexpr bool is_differentiable(int f) { return upstream_of(f) != Upstream::kNone; }

// The record gradients (krec, kspa, qrec, qrec8): read by K-row or Q-row, gathered in sorted
// order, not by entry.
SDM_HD constexpr bool is_record_gradient(int f) {
    return upstream_grad(f).index == UpstreamIndex::kWriteRows || upstream_grad(f).index == UpstreamIndex::kReadRows;
}

// A set of fields in ascending order, for loops over it (compile-time ones included).
struct FieldList {
    int field[SDM_P1_FIELD_COUNT];
    size_t count;
    SDM_HD constexpr const int* begin() const { return field; }
    SDM_HD constexpr const int* end() const { return field + count; }
};

SDM_HD constexpr FieldList differentiable_fields() {
    FieldList d{};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (is_differentiable(f)) d.field[d.count++] = f;
    }
    return d;
}

SDM_HD constexpr FieldList record_gradients() {
    FieldList d{};
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (is_record_gradient(f)) d.field[d.count++] = f;
    }
    return d;
}

// The number of differentiable fields (the members of UpstreamGrads, canon/backward_buffers.h).
SDM_HD constexpr int differentiable_count() { return static_cast<int>(differentiable_fields().count); }

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_FIELD_SETS_H
