// Q31.96 fixed point: the exact form of gates and their sums, and its roundings to float.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_FIXED_POINT_H
#define SDM_P1_CANON_FIXED_POINT_H

#include "bit_layouts.h"
#include "ieee.h"

namespace sdm_p1 {

// Q31.96 fixed point: value = (hi:lo as a signed 128-bit integer) * 2^-96.

// 16-byte aligned, so the kernels move one in a single 128-bit access.
struct alignas(16) Fix {
    uint64_t lo;
    uint64_t hi;   // two's complement high word
};

SDM_HD Fix fix_zero() { return Fix{0u, 0u}; }
SDM_HD Fix fix_add(Fix a, Fix b) {
    const uint64_t lo = a.lo + b.lo;
    return Fix{lo, a.hi + b.hi + (lo < a.lo ? 1u : 0u)};
}
SDM_HD Fix fix_neg(Fix a) {
    const uint64_t lo = ~a.lo + 1u;
    return Fix{lo, ~a.hi + (lo == 0u ? 1u : 0u)};
}
SDM_HD Fix fix_sub(Fix a, Fix b) { return fix_add(a, fix_neg(b)); }
SDM_HD bool fix_is_negative(Fix a) { return (a.hi >> 63) != 0u; }
SDM_HD bool fix_is_zero(Fix a) { return (a.lo | a.hi) == 0u; }
SDM_HD bool fix_equal(Fix a, Fix b) { return a.lo == b.lo && a.hi == b.hi; }

// Index of the highest set bit of a non-zero 64-bit word.
SDM_HD int msb64(uint64_t v) {
#if defined(__CUDA_ARCH__)
    return 63 - __clzll(static_cast<long long>(v));
#else
    return 63 - __builtin_clzll(v);
#endif
}

// Index of the lowest set bit of a non-zero 64-bit word.
SDM_HD int lsb64(uint64_t v) {
#if defined(__CUDA_ARCH__)
    return __ffsll(static_cast<long long>(v)) - 1;
#else
    return __builtin_ctzll(v);
#endif
}

// Index of the lowest set bit of a non-zero fixed-point number (its two's complement word).
SDM_HD int fix_lowest_bit(Fix x) { return x.lo != 0u ? lsb64(x.lo) : 64 + lsb64(x.hi); }

// Significant bits of |x|: |x| < 2^bits (0 for 0). Gates (|x| < 2^119) never reach 2^127.
SDM_HD int fix_magnitude_bits(Fix x) {
    const Fix mag = fix_is_negative(x) ? fix_neg(x) : x;
    return mag.hi != 0u ? 65 + msb64(mag.hi) : mag.lo != 0u ? 1 + msb64(mag.lo) : 0;
}

// x >> s (0 <= s < 128) as one 64-bit two's complement word, and back: the kernels keep a
// chunk's log-cumsums in this compact form where every one is a multiple of 2^s whose
// quotient fits 64 signed bits (kernels/common/chunk_context.cuh, LogArray). Exact there.
SDM_HD uint64_t fix_shift_down(Fix x, int s) {
    if (s == 0) return x.lo;
    if (s < 64) return (x.lo >> s) | (x.hi << (64 - s));
    return static_cast<uint64_t>(static_cast<int64_t>(x.hi) >> (s - 64));   // arithmetic: keeps the sign
}
SDM_HD Fix fix_shift_up(uint64_t v, int s) {
    const uint64_t sign = (v >> 63) != 0u ? ~uint64_t{0} : 0u;
    if (s == 0) return Fix{v, sign};
    if (s < 64) return Fix{v << s, (v >> (64 - s)) | (sign << s)};
    return Fix{0u, v << (s - 64)};
}

// (hi:lo) >> s rounded to nearest even, for 0 < s < 128 and a result below 2^63.
SDM_HD uint64_t shift_round_even(uint64_t hi, uint64_t lo, int s) {
    // q = the bits above s (fits 64 bits by the callers' choice of s), rem = bits below.
    uint64_t q, rem_hi, rem_lo, half_hi, half_lo;
    if (s < 64) {
        q = (lo >> s) | (s ? hi << (64 - s) : 0u);
        rem_hi = 0u;
        rem_lo = lo & ((uint64_t{1} << s) - 1u);
        half_hi = 0u;
        half_lo = uint64_t{1} << (s - 1);
    } else {
        q = s == 64 ? hi : hi >> (s - 64);
        rem_hi = s == 64 ? 0u : hi & ((uint64_t{1} << (s - 64)) - 1u);
        rem_lo = lo;
        half_hi = s == 64 ? 0u : uint64_t{1} << (s - 65);
        half_lo = s == 64 ? uint64_t{1} << 63 : 0u;
    }
    const bool above = rem_hi > half_hi || (rem_hi == half_hi && rem_lo > half_lo);
    const bool tie = rem_hi == half_hi && rem_lo == half_lo;
    return q + ((above || (tie && (q & 1u))) ? 1u : 0u);
}

// A non-zero fixed-point magnitude as a 64-bit integer m and a scale: value = m * 2^(shift - 96),
// where m holds the 64 leading bits and, in its lowest bit, a sticky bit for any non-zero
// bit shifted out. Rounding m to 53 (or 24) bits then rounds the whole magnitude correctly:
// the sticky bit lies below the rounding position and only breaks ties.
SDM_HD uint64_t fix_sticky64(uint64_t hi, uint64_t lo, int* shift) {
    if (hi == 0u) {
        *shift = 0;
        return lo;
    }
    const int s = msb64(hi) + 1;   // 1..64: bits to drop so the magnitude fits 64 bits
    const uint64_t dropped = s == 64 ? lo : lo & ((uint64_t{1} << s) - 1u);
    const uint64_t m = s == 64 ? hi : (hi << (64 - s)) | (lo >> s);
    *shift = s;
    return m | (dropped != 0u ? 1u : 0u);
}

// 2^k as a double for -1022 <= k <= 1023.
SDM_HD double pow2_double(int k) { return f64_from_bits(static_cast<uint64_t>(k + 1023) << 52); }

#if defined(__CUDA_ARCH__)
SDM_HD double u64_to_f64(uint64_t m) { return __ull2double_rn(m); }
SDM_HD float u64_to_f32(uint64_t m) { return __ull2float_rn(m); }
SDM_HD double i64_to_f64(int64_t m) { return __ll2double_rn(m); }
SDM_HD float i64_to_f32(int64_t m) { return __ll2float_rn(m); }
#else
SDM_HD double u64_to_f64(uint64_t m) { return static_cast<double>(m); }   // round to nearest
SDM_HD float u64_to_f32(uint64_t m) { return static_cast<float>(m); }
SDM_HD double i64_to_f64(int64_t m) { return static_cast<double>(m); }
SDM_HD float i64_to_f32(int64_t m) { return static_cast<float>(m); }
#endif

// The double nearest to a fixed-point value (ties to even); 0 gives +0. The conversion of the
// 64-bit m rounds once; the scaling by a power of two is exact (|value| >= 2^-96).
SDM_HD double fix_to_f64(Fix x) {
    if (fix_is_zero(x)) return 0.0;
    const bool neg = fix_is_negative(x);
    const Fix mag = neg ? fix_neg(x) : x;
    int shift;
    const uint64_t m = fix_sticky64(mag.hi, mag.lo, &shift);
    const double v = dmul(u64_to_f64(m), pow2_double(shift - 96));
    return neg ? -v : v;
}

// The float32 nearest to a fixed-point value (ties to even); 0 gives +0. As fix_to_f64, with
// the scaling done in double (exact) and the float conversion exact too.
SDM_HD float fix_to_f32(Fix x) {
    if (fix_is_zero(x)) return 0.0f;
    const bool neg = fix_is_negative(x);
    const Fix mag = neg ? fix_neg(x) : x;
    int shift;
    const uint64_t m = fix_sticky64(mag.hi, mag.lo, &shift);
    const float v = to_f32(dmul(static_cast<double>(u64_to_f32(m)), pow2_double(shift - 96)));
    return neg ? -v : v;
}

// A float32 gate in fixed point. Returns false for a gate that is not finite or whose
// magnitude is 2^kGateMaxExp or more (*out is then 0). Magnitudes below 2^-73 are rounded to
// nearest even.
SDM_HD bool gate_to_fix(float g, Fix* out) {
    const uint32_t u = f32_bits(g);
    const uint32_t biased = (u >> 23) & 0xFFu;
    *out = fix_zero();
    if (biased >= 127u + kGateMaxExp) return false;   // also infinities and NaN (biased 255)
    uint64_t m = u & 0x7FFFFFu;
    int e2;   // g = m * 2^e2
    if (biased == 0u) {
        e2 = -149;
    } else {
        m |= 0x800000u;
        e2 = static_cast<int>(biased) - 150;
    }
    const int sh = e2 + 96;   // fixed = m * 2^sh, sh <= 94 by the bound above
    Fix mag;
    if (m == 0u) {
        mag = fix_zero();
    } else if (sh >= 64) {
        mag = Fix{0u, m << (sh - 64)};
    } else if (sh > 0) {
        mag = Fix{m << sh, m >> (64 - sh)};
    } else if (sh == 0) {
        mag = Fix{m, 0u};
    } else if (-sh >= 64) {
        mag = fix_zero();   // below half of 2^-96: m < 2^24 <= 2^(-sh-1)
    } else {
        mag = Fix{shift_round_even(0u, m, -sh), 0u};
    }
    *out = (u >> 31) ? fix_neg(mag) : mag;
    return true;
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_FIXED_POINT_H
