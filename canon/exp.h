// exp of a fixed-point value: the canonical double exponential.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_EXP_H
#define SDM_P1_CANON_EXP_H

#include "fixed_point.h"

namespace sdm_p1 {

// exp

// exp(x) in double: x = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to degree
// 13 (truncation below 2^-60 relative), scaled by 2^k. Arguments below -700 give 0 and above
// 700 are clamped to 700 (every use multiplies by values whose product with exp(+-700)
// already under- or overflows float32). About 1 ulp of double; one fixed operation sequence.
SDM_HD double exp_double(double x) {
    if (!(x >= -700.0)) return 0.0;
    if (x > 700.0) x = 700.0;
    const double kLog2e = 1.4426950408889634;
    const double kLn2Hi = 0.69314718055994529;      // ln 2 rounded to double
    const double kLn2Lo = 2.3190468138462996e-17;   // ln 2 - kLn2Hi
    const double k = dfloor(dadd(dmul(x, kLog2e), 0.5));
    double r = dfma(-k, kLn2Hi, x);
    r = dfma(-k, kLn2Lo, r);
    // 1 / i! for i = 13 .. 0.
    const double c[14] = {1.6059043836821613e-10,
                          2.0876756987868099e-09,
                          2.505210838544172e-08,
                          2.7557319223985888e-07,
                          2.7557319223985893e-06,
                          2.4801587301587302e-05,
                          1.9841269841269841e-04,
                          1.3888888888888889e-03,
                          8.3333333333333332e-03,
                          4.1666666666666664e-02,
                          1.6666666666666666e-01,
                          0.5,
                          1.0,
                          1.0};
    double p = c[0];
    for (int i = 1; i < 14; ++i) p = dfma(p, r, c[i]);
    return dmul(p, pow2_double(static_cast<int>(k)));
}

// exp of a fixed-point log value (exp_double(0) is exactly 1: the shortcut changes no bit).
SDM_HD double exp_fix(Fix x) { return fix_is_zero(x) ? 1.0 : exp_double(fix_to_f64(x)); }

// The same three functions of a value in the kernels' compact form, v * 2^(s - 96) with v a
// signed 64-bit integer and 0 <= s < 128 (fix_shift_down): equal to fix_to_f64,
// fix_to_f32 and exp_fix of fix_shift_up(v, s), bit for bit, since each rounds the same exact
// value once to nearest even (the conversion of v rounds; the power-of-two scaling is exact
// as |value| >= 2^-96 and < 2^127). A few instructions instead of the 128-bit path.
SDM_HD double compact_to_f64(int64_t v, int s) { return dmul(i64_to_f64(v), pow2_double(s - 96)); }
SDM_HD float compact_to_f32(int64_t v, int s) {
    return to_f32(dmul(static_cast<double>(i64_to_f32(v)), pow2_double(s - 96)));
}
SDM_HD double exp_compact(int64_t v, int s) { return v == 0 ? 1.0 : exp_double(compact_to_f64(v, s)); }

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_EXP_H
