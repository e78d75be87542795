// Scaled output values and the terms of the a / qk cells, with their canonical summing order.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_PAIR_TERMS_H
#define SDM_P1_CANON_PAIR_TERMS_H

#include "exp.h"

namespace sdm_p1 {

// Output values

// v * e with e = exp_fix(log), rounded once to float32 (k_eff, q_w and the records' scaled
// values).
SDM_HD float scaled_f32(float v, double e) { return to_f32(dmul(static_cast<double>(v), e)); }

// -beta * v * e (kspa, e = exp_fix(log_k)): -beta * v is exact in double; one rounding.
SDM_HD float neg_beta_scaled_f32(float beta, float v, double e) {
    return to_f32(dmul(dmul(-static_cast<double>(beta), static_cast<double>(v)), e));
}

// One term of a cell of a or qk: v_i * v_j (exact in double) and exp(log_i - log_j).
struct PairTerm {
    double prod;
    double e;
};

// e = exp(log_i - log_j), by exp_fix of the exact difference (or exp_compact).
SDM_HD PairTerm pair_term(float v_i, float v_j, double e) {
    return PairTerm{dmul(static_cast<double>(v_i), static_cast<double>(v_j)), e};
}
SDM_HD PairTerm pair_term(float v_i, float v_j, Fix log_i, Fix log_j) {
    return pair_term(v_i, v_j, exp_fix(fix_sub(log_i, log_j)));
}

// A term added to its cell's running double sum by one fused multiply-add. Canonical order
// of the terms of cell (i, j): the entries of token i in lane order; for each, the earlier
// entries of token j in its slot group, nearest first (descending sorted position). The sum
// starts at +0.0 and is rounded once to float32.
SDM_HD double pair_term_add(double sum, PairTerm t) { return dfma(t.prod, t.e, sum); }

SDM_HD double pair_term_add(double sum, float v_i, float v_j, Fix log_i, Fix log_j) {
    return pair_term_add(sum, pair_term(v_i, v_j, log_i, log_j));
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_PAIR_TERMS_H
