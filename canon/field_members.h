// Which member of the output and upstream-gradient buffers holds each field, for loops over a
// set of fields (canon/field_sets.h) that reach the members themselves.
// Part of the canon, beside field_sets.h (the public header on the include path).
#ifndef SDM_P1_CANON_FIELD_MEMBERS_H
#define SDM_P1_CANON_FIELD_MEMBERS_H

#include <utility>

#include "backward_buffers.h"
#include "field_sets.h"
#include "host_device.h"
#include "output_buffers.h"

namespace sdm_p1 {

// Calls visit(f, p) for each member p of `b` (an OutputBuffers, const or not), f its field
// (every field but dc_rec, which no plan computes, has one).
template <class Buffers, class Visit>
SDM_HD void for_each_output(Buffers& b, Visit&& visit) {
    visit(SDM_P1_FIELD_A, b.a);
    visit(SDM_P1_FIELD_QK, b.qk);
    visit(SDM_P1_FIELD_LOG_K, b.log_k);
    visit(SDM_P1_FIELD_LOG_Q, b.log_q);
    visit(SDM_P1_FIELD_REX, b.rex);
    visit(SDM_P1_FIELD_CPE, b.cpe);
    visit(SDM_P1_FIELD_IS_LAST, b.is_last);
    visit(SDM_P1_FIELD_IS_ONLY, b.is_only);
    visit(SDM_P1_FIELD_K_EFF, b.k_eff);
    visit(SDM_P1_FIELD_Q_W, b.q_w);
    visit(SDM_P1_FIELD_PAYLOAD, b.payload);
    visit(SDM_P1_FIELD_POS_K, b.pos_k);
    visit(SDM_P1_FIELD_POS_Q, b.pos_q);
    visit(SDM_P1_FIELD_Q_LAST, b.q_last);
    visit(SDM_P1_FIELD_Q_ONLY, b.q_only);
    visit(SDM_P1_FIELD_SPAY_K, b.spay_k);
    visit(SDM_P1_FIELD_SPAY_Q, b.spay_q);
    visit(SDM_P1_FIELD_SPAY_RANK, b.spay_rank);
    visit(SDM_P1_FIELD_KREC, b.krec);
    visit(SDM_P1_FIELD_KSPA, b.kspa);
    visit(SDM_P1_FIELD_QREC, b.qrec);
    visit(SDM_P1_FIELD_TILES_K, b.tiles_k);
    visit(SDM_P1_FIELD_TILES_Q, b.tiles_q);
    visit(SDM_P1_FIELD_SEGB_K, b.segb_k);
    visit(SDM_P1_FIELD_DC_KPOS, b.dc_kpos);
    visit(SDM_P1_FIELD_DC_BPRE, b.dc_bpre);
    visit(SDM_P1_FIELD_QREC8, b.qrec8);
    visit(SDM_P1_FIELD_REPEATS, b.repeats);
}

// The member of `up` (an UpstreamGrads, const or not) that holds differentiable field F's
// upstream gradient.
template <int F, class Grads>
SDM_HD auto& upstream_pointer(Grads& up) {
    static_assert(is_differentiable(F), "a differentiable field");
    if constexpr (F == SDM_P1_FIELD_A) return up.a;
    else if constexpr (F == SDM_P1_FIELD_QK) return up.qk;
    else if constexpr (F == SDM_P1_FIELD_LOG_K) return up.log_k;
    else if constexpr (F == SDM_P1_FIELD_LOG_Q) return up.log_q;
    else if constexpr (F == SDM_P1_FIELD_REX) return up.rex;
    else if constexpr (F == SDM_P1_FIELD_CPE) return up.cpe;
    else if constexpr (F == SDM_P1_FIELD_K_EFF) return up.k_eff;
    else if constexpr (F == SDM_P1_FIELD_Q_W) return up.q_w;
    else if constexpr (F == SDM_P1_FIELD_KREC) return up.krec;
    else if constexpr (F == SDM_P1_FIELD_KSPA) return up.kspa;
    else if constexpr (F == SDM_P1_FIELD_QREC) return up.qrec;
    else if constexpr (F == SDM_P1_FIELD_QREC8) return up.qrec8;
}

template <class Grads, class Visit, size_t... I>
SDM_HD void for_each_upstream(Grads& up, Visit&& visit, std::index_sequence<I...>) {
    constexpr FieldList d = differentiable_fields();
    (visit(d.field[I], upstream_pointer<d.field[I]>(up)), ...);
}

// Calls visit(f, p) for each differentiable field f in ascending order, p its member of `up`.
template <class Grads, class Visit>
SDM_HD void for_each_upstream(Grads& up, Visit&& visit) {
    for_each_upstream(up, visit, std::make_index_sequence<differentiable_fields().count>());
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_FIELD_MEMBERS_H
