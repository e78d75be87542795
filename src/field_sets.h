// The sets of output fields that more than one place needs, each defined here once from the
// public header's constants (include/sdm/phase1.h):
//   shipped         the spec's default det_fields, SDM_P1_DET_SHIPPED: a plan whose det_fields
//                   lie within it computes none of the records, kspa, the tiles or dc_gidx;
//   training        the det_fields the bindings add to the shipped ones when beta is given (a
//                   training step's Phase 2 reads them): krec, kspa, qrec and the tiles;
//   differentiable  the outputs sdm_p1_execute_backward takes an upstream gradient of (the
//                   header's "The backward"), with that gradient's element type.
// Header-only and free of the library's internals, so that any part of the project may read it.
// The bindings' copies (Python: DET_RECORDS, DIFFERENTIABLE and VALUE_TYPED; Rust:
// Plan::gradient_shape) are held to these by their tests, through the library's behaviour or
// this file's text (bindings/python/tests/test_field_sets.py, bindings/rust/sdm-phase1/tests/backward.rs).
#ifndef SDM_P1_FIELD_SETS_H
#define SDM_P1_FIELD_SETS_H

#include <cstdint>

#include "sdm/phase1.h"

namespace sdm_p1 {

// Shipped: whether det_fields asks for nothing beyond SDM_P1_DET_SHIPPED.
constexpr bool within_shipped(int64_t det_fields) { return (det_fields & ~int64_t{SDM_P1_DET_SHIPPED}) == 0; }

// Training: added to SDM_P1_DET_SHIPPED when beta is given and det_fields is not.
constexpr int64_t kTrainingDetFields = SDM_P1_DET_KREC | SDM_P1_DET_KSPA | SDM_P1_DET_QREC | SDM_P1_DET_TILES;

// Differentiable: the element type of field f's upstream gradient, kNone for a field that is
// not differentiable. The record gradients (krec, kspa, qrec, qrec8) are float32 by K-row or
// Q-row index; cpe, k_eff and q_w are of the plan's value dtype.
enum class Upstream { kNone, kFloat32, kValueDtype };

constexpr Upstream upstream_of(int f) {
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
        case SDM_P1_FIELD_LOG_K:
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_REX:
        case SDM_P1_FIELD_KREC:
        case SDM_P1_FIELD_KSPA:
        case SDM_P1_FIELD_QREC:
        case SDM_P1_FIELD_QREC8:
            return Upstream::kFloat32;
        case SDM_P1_FIELD_CPE:
        case SDM_P1_FIELD_K_EFF:
        case SDM_P1_FIELD_Q_W:
            return Upstream::kValueDtype;
        default:
            return Upstream::kNone;
    }
}

constexpr bool is_differentiable(int f) { return upstream_of(f) != Upstream::kNone; }

// The number of differentiable fields (the members of UpstreamGrads, canon/backward_buffers.h).
constexpr int differentiable_count() {
    int n = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) n += is_differentiable(f) ? 1 : 0;
    return n;
}

}   // namespace sdm_p1

#endif   // SDM_P1_FIELD_SETS_H
