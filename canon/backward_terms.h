// The arithmetic of the backward (docs/backward.md, "The canonical arithmetic"): the walk
// terms of the pair sums, the per-entry combine, the group and token sums. Every operation is
// one IEEE double operation rounded to nearest (products of two floats are exact), in the
// sequence the specification fixes, so every backend that calls these gets the same bits.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_BACKWARD_TERMS_H
#define SDM_P1_CANON_BACKWARD_TERMS_H

#include "backward_buffers.h"
#include "elements.h"
#include "ieee.h"

namespace sdm_p1 {

// An upstream gradient's element; a null gradient reads as +0.0.
SDM_HD float upstream_f32(const float* grad, int64_t i) { return grad != nullptr ? grad[i] : 0.0f; }
SDM_HD float upstream_value(const void* grad, bool bf16, int64_t i) {
    return grad != nullptr ? load_value(grad, bf16, i) : 0.0f;
}

// One term of a walk sum (rho: the entry's earlier K peers; gamma: a K entry's later peers):
// acc + delta * v * E, with delta * v exact in double and one fused multiply-add. Each sum
// starts at +0.0 and takes its terms nearest first.
SDM_HD double walk_term_add(double acc, float delta, float v, double e) {
    return dfma(dmul(static_cast<double>(delta), static_cast<double>(v)), e, acc);
}

// The upstream gradients gathered to one K entry (records by its K-row index).
struct KEntryUpstream {
    float k_eff, log_k, rex, cpe;
    float krec_post;   // krec word 2: k_val * exp(rex)
    float krec_cpe;    // krec word 3: cpe
};

// What the combine of a K entry gives: its value's gradient dv, the adjoint of its
// log-cumsum (gbar), of its rex (rbar), and its cpe gradient (cbar, scaled by exp(total) in
// the group sum).
struct KEntryAdjoints {
    double dv, gbar, rbar, cbar;
};

// b = -beta * dkspa, exact in double; callers without a kspa gradient pass beta = dkspa = 0.
SDM_HD double kspa_coefficient(float beta, float dkspa) {
    return dmul(-static_cast<double>(beta), static_cast<double>(dkspa));
}

// The combine of a K entry of value v with exp(log) e_log and exp(rex) e_rex.
SDM_HD KEntryAdjoints k_entry_adjoints(double rho, double gamma, float v, double e_log, double e_rex, double b,
                                       const KEntryUpstream& u) {
    const double vd = static_cast<double>(v);
    KEntryAdjoints r;
    const double keff_term = dfma(static_cast<double>(u.k_eff), e_log, dadd(rho, gamma));
    r.dv = dfma(b, e_log, dfma(static_cast<double>(u.krec_post), e_rex, keff_term));
    r.gbar =
        dadd(dfma(dmul(b, vd), e_log, dfma(dmul(static_cast<double>(u.k_eff), vd), e_log, dmul(vd, dadd(rho, -gamma)))),
             static_cast<double>(u.log_k));
    r.rbar = dfma(dmul(static_cast<double>(u.krec_post), vd), e_rex, static_cast<double>(u.rex));
    r.cbar = dadd(static_cast<double>(u.cpe), static_cast<double>(u.krec_cpe));
    return r;
}

// The upstream gradients gathered to the K entry of element i (of k_val's [N, C, W]) and
// K-row index k_row (the chunk's write entries before it in its sorted row, plus the chunk's
// first K row).
SDM_HD KEntryUpstream k_entry_upstream(const UpstreamGrads& up, bool bf16, int64_t i, int64_t k_row) {
    return KEntryUpstream{upstream_value(up.k_eff, bf16, i), upstream_f32(up.log_k, i),
                          upstream_f32(up.rex, i),           upstream_value(up.cpe, bf16, i),
                          upstream_f32(up.krec, 2 * k_row),  upstream_f32(up.krec, 2 * k_row + 1)};
}

// The kspa coefficient of the K entry of token `token` (global) and K-row index k_row: beta
// is read only with a kspa gradient (docs/backward.md).
SDM_HD double k_entry_coefficient(const UpstreamGrads& up, const float* beta, int64_t token, int64_t k_row) {
    return up.kspa != nullptr ? kspa_coefficient(beta[token], up.kspa[k_row]) : kspa_coefficient(0.0f, 0.0f);
}

// The upstream gradients gathered to one Q entry: q_w's, the two record scales' (by its
// Q-row index), log_q's.
struct QEntryUpstream {
    float q_w, qrec, qrec8, log_q;
};

// The upstream gradients gathered to the Q entry of element i (of q_val's [N, C, R]) and
// Q-row index q_row.
SDM_HD QEntryUpstream q_entry_upstream(const UpstreamGrads& up, bool bf16, int64_t i, int64_t q_row) {
    return QEntryUpstream{upstream_value(up.q_w, bf16, i), upstream_f32(up.qrec, q_row), upstream_f32(up.qrec8, q_row),
                          upstream_f32(up.log_q, i)};
}

struct QEntryAdjoints {
    double dv, gbar;
};

SDM_HD QEntryAdjoints q_entry_adjoints(double rho, float v, double e_log, const QEntryUpstream& u) {
    const double vd = static_cast<double>(v);
    const double w = dadd(dadd(static_cast<double>(u.q_w), static_cast<double>(u.qrec)), static_cast<double>(u.qrec8));
    QEntryAdjoints r;
    r.dv = dfma(w, e_log, rho);
    r.gbar = dadd(dfma(dmul(w, vd), e_log, dmul(vd, rho)), static_cast<double>(u.log_q));
    return r;
}

// One K entry's term of its group's total adjoint: acc + cbar * exp(total).
SDM_HD double total_term_add(double acc, double cbar, double e_total) { return dfma(cbar, e_total, acc); }

// The adjoint of a non-repeat K entry's gate: (S + P) + total adjoint, S the suffix sum of
// gbar from the group's last entry down to it, P the sum of rbar over the group's K entries
// before it.
SDM_HD double gate_adjoint(double suffix, double prefix, double total_adjoint) {
    return dadd(dadd(suffix, prefix), total_adjoint);
}

// A K entry alone in its slot group: group_adjoints' sequence for a group of one, whose sums
// are +0.0, whose rex is 0 (exp 1) and whose total is its own log (e_total = e_log). Its
// value's gradient and its gate's adjoint.
struct LoneKAdjoints {
    double dv, xbar;
};

SDM_HD LoneKAdjoints lone_k_entry_adjoints(float v, double e_log, double coefficient, const KEntryUpstream& u) {
    const KEntryAdjoints a = k_entry_adjoints(0.0, 0.0, v, e_log, 1.0, coefficient, u);
    const double total_adjoint = total_term_add(0.0, a.cbar, e_log);
    return LoneKAdjoints{a.dv, gate_adjoint(dadd(0.0, a.gbar), 0.0, total_adjoint)};
}

// A Q entry alone in its slot group: its sum is +0.0 and its log 0 (exp 1). Its value's
// gradient.
SDM_HD double lone_q_entry_grad(float v, const QEntryUpstream& u) { return q_entry_adjoints(0.0, v, 1.0, u).dv; }

// One K entry's term of its token's beta gradient: acc - dkspa * v * exp(log), the exact
// factor -dkspa * v times e_log by one fused multiply-add.
SDM_HD double beta_term_factor(float dkspa, float v) {
    return dmul(-static_cast<double>(dkspa), static_cast<double>(v));
}
SDM_HD double beta_term_add(double acc, double factor, double e_log) { return dfma(factor, e_log, acc); }
SDM_HD double beta_term_add(double acc, float dkspa, float v, double e_log) {
    return beta_term_add(acc, beta_term_factor(dkspa, v), e_log);
}

// Stores a gradient, rounded once to float32 (then to bfloat16 where bf16).
SDM_HD void store_grad(void* out, bool bf16, int64_t i, double d) { store_value(out, bf16, i, to_f32(d)); }

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_BACKWARD_TERMS_H
