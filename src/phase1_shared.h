// Definitions shared by the host (CPU backend, plan code) and device (CUDA kernels) code:
// the bit layouts of the packed outputs and the canonical arithmetic. Every output bit that
// both backends produce is defined by a function here, so the two cannot drift apart.
//
// Canonical arithmetic (see docs/design.md):
//  * Gates are rounded once to a signed 128-bit fixed-point number with 96 fraction bits
//    (Q31.96). Every float32 gate of magnitude 2^-73 .. 2^22 is held exactly; smaller ones are
//    rounded to a multiple of 2^-96 (an absolute error below 2^-97). Sums and differences of
//    these are exact, so every log-cumsum is the same in every summation order, and
//    log_k / log_q / rex are the float32 nearest to the exact sum of the gates they cover.
//  * exp is taken of the exact fixed-point value (converted to double with one rounding) by
//    exp_double below: a fixed sequence of IEEE double operations, each rounded to nearest.
//  * Scaled values (k_eff, q_w, records, kspa) are formed in double (the value times the
//    exponential; products of two floats are exact in double) and rounded once to float32;
//    bfloat16 outputs are that float32 rounded to nearest even bfloat16.
//  * Each cell of a / qk is a double sum, in the canonical order documented at pair_term_add,
//    of exact products times exp, each added by one fused multiply-add; rounded once to float.
// Host code is compiled with -ffp-contract=off; device code calls the _rn intrinsics, so no
// compiler may fuse or reorder these operations.
#ifndef SDM_P1_PHASE1_SHARED_H
#define SDM_P1_PHASE1_SHARED_H

#include <stdint.h>

#include <cmath>
#include <cstring>

#if defined(__CUDACC__)
#define SDM_HD __host__ __device__ __forceinline__
#else
#define SDM_HD inline
#endif

namespace sdm_p1 {

// ---------------------------------------------------------------------------------------
// Bit layouts

// Sorted payload word of an entry (spec: p1_keys_zw_kernel / p1_scan_kernel).
constexpr uint32_t kLaneMask = 0xFFu;         // bits 0-7: lane (write or read column)
constexpr uint32_t kIsQ = 1u << 8;            // bit 8: a read (Q) entry
constexpr int kTokenShift = 9;                // bits 9-16: token in the chunk
constexpr uint32_t kTokenMask = 0xFFu;
constexpr uint32_t kInvalid = 1u << 17;       // bit 17: padding entry
constexpr uint32_t kLastK = 1u << 30;         // bit 30: last valid write of its group
constexpr uint32_t kHead = 1u << 31;          // bit 31: first entry of its group
// Sorted rows are padded to a multiple of this many entries; the padding holds kTailPayload.
constexpr int kRowAlign = 16;
constexpr uint32_t kTailPayload = kInvalid | kHead;

// Packed positions (pos_k / pos_q).
constexpr int kPosBits = 17;
constexpr uint32_t kPosMask = (1u << kPosBits) - 1u;
constexpr int kPosAfterShift = kPosBits;
constexpr int kPosSizeShift = kPosBits + 7;
constexpr uint32_t kPosCountMax = 127u;

// Elements of the sorted write / read rows (spay_k / spay_q, records' first word).
constexpr uint32_t kSortedEntryMask = 0x3FFFFu;
constexpr int kSortedDistShift = 18;
constexpr uint32_t kSortedDistMax = 4095u;
constexpr uint32_t kSortedLast = kLastK;
constexpr uint32_t kSortedFirst = kHead;

// Limits.
constexpr int kMaxC = 256;
constexpr int kMaxLanes = 256;
constexpr int kMaxRowEntries = 1 << 17;   // C * (W + R)
constexpr int kMaxRecTile = 1 << 20;
// Gates must be finite with |g| < 2^kGateMaxExp: 256 of them then sum below 2^30 and every
// difference of two sums fits the 31 integer bits of the fixed-point format.
constexpr int kGateMaxExp = 22;

SDM_HD uint32_t payload_word(int token, int lane, bool is_q, bool valid) {
    return static_cast<uint32_t>(token) << kTokenShift | (is_q ? kIsQ : 0u) |
           static_cast<uint32_t>(lane) | (valid ? 0u : kInvalid);
}

// The token of a payload word.
SDM_HD int payload_token(uint32_t p) { return static_cast<int>((p >> kTokenShift) & kTokenMask); }

SDM_HD int32_t pack_position(uint32_t pos, uint32_t before, uint32_t after, bool valid) {
    if (!valid) return static_cast<int32_t>(pos);
    const uint32_t after_sat = after < kPosCountMax ? after : kPosCountMax;
    const uint32_t size = before + 1u + after;
    const uint32_t size_sat = size < kPosCountMax ? size : kPosCountMax;
    return static_cast<int32_t>(pos | after_sat << kPosAfterShift | size_sat << kPosSizeShift);
}

// The element of an entry in its kind's sorted row; before / after count the entry's peers.
SDM_HD int32_t sorted_element(uint32_t payload, uint32_t before, uint32_t after, bool valid) {
    uint32_t e = payload & kSortedEntryMask;
    if (!valid) return static_cast<int32_t>(e | kSortedFirst | kSortedLast);
    e |= (before < kSortedDistMax ? before : kSortedDistMax) << kSortedDistShift;
    if (before == 0u) e |= kSortedFirst;
    if (after == 0u) e |= kSortedLast;
    return static_cast<int32_t>(e);
}

// ---------------------------------------------------------------------------------------
// Division by a run-time constant

// x / d and x % d for 0 <= x < 2^31 and 1 <= d < 2^31 by a multiply-high, an add and a shift
// (a hardware integer division is a sequence of about 20 instructions on a GPU). With
// shift = ceil(log2(d)) and magic = floor(2^32 (2^shift - d) / d) + 1, the quotient is
// (mulhi(x, magic) + x) >> shift (Granlund and Montgomery's round-up method); the sum fits
// 32 bits because mulhi(x, magic) <= x < 2^31.
struct Divider {
    uint32_t d;
    uint32_t magic;
    uint32_t shift;

    SDM_HD uint32_t div(uint32_t x) const {
#if defined(__CUDA_ARCH__)
        const uint32_t hi = __umulhi(x, magic);
#else
        const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(x) * magic) >> 32);
#endif
        return (hi + x) >> shift;
    }
    SDM_HD uint32_t mod(uint32_t x) const { return x - div(x) * d; }
};

SDM_HD Divider make_divider(uint32_t d) {
    uint32_t shift = 0;
    while ((uint64_t{1} << shift) < d) ++shift;
    const uint64_t magic = (uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1u;
    return Divider{d, static_cast<uint32_t>(magic), shift};
}

// ---------------------------------------------------------------------------------------
// Correctly rounded IEEE operations (no contraction on either side).

// Every float output that arithmetic produces goes through to_f32, which gives a NaN as the
// one quiet NaN kCanonicalNaN: x86 and NVIDIA GPUs give the NaNs of the same operations
// different signs and payloads (values may be NaN or infinite: 0 * inf, inf - inf).
constexpr uint32_t kCanonicalNaN = 0x7FC00000u;

#if defined(__CUDA_ARCH__)
SDM_HD double dmul(double a, double b) { return __dmul_rn(a, b); }
SDM_HD double dadd(double a, double b) { return __dadd_rn(a, b); }
SDM_HD double dfma(double a, double b, double c) { return __fma_rn(a, b, c); }
SDM_HD float to_f32(double d) {
    return d != d ? __int_as_float(static_cast<int>(kCanonicalNaN)) : __double2float_rn(d);
}
SDM_HD double dfloor(double d) { return floor(d); }
#else
SDM_HD double dmul(double a, double b) { return a * b; }
SDM_HD double dadd(double a, double b) { return a + b; }
SDM_HD double dfma(double a, double b, double c) { return std::fma(a, b, c); }
SDM_HD float to_f32(double d) {
    if (d == d) return static_cast<float>(d);
    float nan;
    memcpy(&nan, &kCanonicalNaN, sizeof nan);
    return nan;
}
SDM_HD double dfloor(double d) { return std::floor(d); }
#endif

SDM_HD uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
SDM_HD float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
SDM_HD double f64_from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

// bfloat16 as its 16 bits: round to nearest even from float32 (NaN stays a quiet NaN).
SDM_HD uint16_t bf16_from_f32(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
SDM_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

// ---------------------------------------------------------------------------------------
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
// quotient fits 64 signed bits (kernels/chunk_context.cuh, LogArray). Exact there.
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
SDM_HD double pow2_double(int k) {
    return f64_from_bits(static_cast<uint64_t>(k + 1023) << 52);
}

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

// ---------------------------------------------------------------------------------------
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
    const double c[14] = {1.6059043836821613e-10, 2.0876756987868099e-09, 2.505210838544172e-08,
                          2.7557319223985888e-07, 2.7557319223985893e-06, 2.4801587301587302e-05,
                          1.9841269841269841e-04, 1.3888888888888889e-03, 8.3333333333333332e-03,
                          4.1666666666666664e-02, 1.6666666666666666e-01, 0.5, 1.0, 1.0};
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

// ---------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------
// Element access (inputs and value-typed outputs)

SDM_HD int64_t load_id(const void* ids, bool idx64, int64_t i) {
    return idx64 ? static_cast<const int64_t*>(ids)[i]
                 : static_cast<int64_t>(static_cast<const int32_t*>(ids)[i]);
}

// Valid tokens of the chunk at `step` of a stream of `length` tokens (per-stream lengths):
// clamp(length - step * C, 0, C). length is in 0..steps * C (checked), so this never overflows.
SDM_HD int chunk_valid_tokens(int64_t length, int64_t step, int C) {
    const int64_t v = length - step * C;
    return v <= 0 ? 0 : v >= C ? C : static_cast<int>(v);
}

SDM_HD float load_value(const void* vals, bool bf16, int64_t i) {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(vals)[i])
                : static_cast<const float*>(vals)[i];
}

// A float32 result as the value dtype holds it, widened back to float (store_value's result).
SDM_HD float value_rounded(bool bf16, float v) { return bf16 ? bf16_to_f32(bf16_from_f32(v)) : v; }

// Stores a float32 result in the value dtype; returns the stored value widened to float.
SDM_HD float store_value(void* vals, bool bf16, int64_t i, float v) {
    if (bf16) {
        const uint16_t b = bf16_from_f32(v);
        static_cast<uint16_t*>(vals)[i] = b;
        return bf16_to_f32(b);
    }
    static_cast<float*>(vals)[i] = v;
    return v;
}

// A 4-word record (krec, qrec): two int32 words, then two floats' bits.
SDM_HD void put_record4(int32_t* rec, int64_t j, int32_t w0, int32_t w1, float w2, float w3) {
    int32_t* r = rec + 4 * j;
#if defined(__CUDA_ARCH__)
    // Records land at scattered row indices: one 16-byte store is one memory transaction
    // where four word stores would be four.
    if ((reinterpret_cast<uintptr_t>(r) & 15u) == 0u) {
        *reinterpret_cast<int4*>(r) = make_int4(w0, w1, static_cast<int32_t>(f32_bits(w2)),
                                                static_cast<int32_t>(f32_bits(w3)));
        return;
    }
#endif
    r[0] = w0;
    r[1] = w1;
    r[2] = static_cast<int32_t>(f32_bits(w2));
    r[3] = static_cast<int32_t>(f32_bits(w3));
}

// A 2-word record (qrec8): an int32 word, then a float's bits.
SDM_HD void put_record2(int32_t* rec, int64_t j, int32_t w0, float w1) {
    int32_t* r = rec + 2 * j;
#if defined(__CUDA_ARCH__)
    if ((reinterpret_cast<uintptr_t>(r) & 7u) == 0u) {   // one 8-byte store (put_record4)
        *reinterpret_cast<int2*>(r) = make_int2(w0, static_cast<int32_t>(f32_bits(w1)));
        return;
    }
#endif
    r[0] = w0;
    r[1] = static_cast<int32_t>(f32_bits(w1));
}

// ---------------------------------------------------------------------------------------
// Output pointers of one execute (host memory for the CPU backend, device memory for CUDA),
// one per output field of the public header (sdm_p1_field); null: not requested. Value-typed
// fields (cpe, k_eff, q_w) hold float or bfloat16 bits as the plan's value dtype says.

struct OutputBuffers {
    float* a;
    float* qk;
    float* log_k;
    float* log_q;
    float* rex;
    void* cpe;
    int8_t* is_last;
    int8_t* is_only;
    void* k_eff;
    void* q_w;
    int32_t* payload;
    int32_t* pos_k;
    int32_t* pos_q;
    int8_t* q_last;
    int8_t* q_only;
    int32_t* spay_k;
    int32_t* spay_q;
    int32_t* spay_rank;
    int32_t* krec;
    float* kspa;
    int32_t* qrec;
    int32_t* tiles_k;
    int32_t* tiles_q;
    int32_t* segb_k;
    int32_t* dc_kpos;
    int32_t* dc_bpre;
    int32_t* qrec8;
    int64_t* repeats;   // [1]
};

// ---------------------------------------------------------------------------------------
// Per-entry outputs. Both backends find, for every sorted entry of a chunk, the facts below
// (by a sequential walk on the CPU, by block-wide scans on the GPU) and hand them to
// write_entry_outputs, which alone decides every bit of the per-entry fields, the sorted
// rows, the records and the tile indices.

// Constants of one chunk.
struct ChunkFacts {
    int64_t c;            // chunk index
    int C, W, R;
    int L;                // rec_tile
    int64_t id_base;      // first slot id of the chunk's stream
    bool bf16;            // value dtype
    const float* beta;    // [N, C] (kspa), or null when not requested
    Divider tile;         // make_divider(L)
};

// One entry at sorted position r.
struct EntryFacts {
    uint32_t r;
    uint32_t payload;        // its payload word, head bit set, LastK bit not
    uint32_t before, after;  // peers (valid entries of its kind) before / after it in its group
    // Of the group's inclusive log-cumsum at r (log) and the sum of its gates after r (rex),
    // each exact in fixed point: log and rex rounded to float32 (fix_to_f32), exp_fix(log),
    // exp_fix(log + rex) (write entries), exp_fix(rex) (write entries when krec is
    // requested; else unused).
    float log_f32, rex_f32;
    double exp_log, exp_total, exp_rex;
    float value;             // k_val / q_val (0 for padding)
    int64_t slot_key;        // slot id - id_base (valid entries)
    uint32_t row_index;      // its index in the write (K) or read (Q) row
    int32_t groups_before;   // K entries: valid groups started before it (see below)
};

// groups_before of a K entry: the valid slot groups whose first K entry lies before it in the
// sorted row (for a valid K entry that is not its group's first, its own group counts).

// Which of an entry's outputs write_entry_outputs writes: all, or one of the two kinds
// (a backend may write the kinds in different orders).
//   entry fields, indexed by entry (token and lane): cpe, log_k, rex, k_eff, the flags,
//     pos_k, dc_kpos; log_q, q_w, pos_q, the read flags. They read r, payload, before,
//     after, the log facts but exp_rex, value and groups_before.
//   row fields, indexed by the entry's place in the sorted write (K) or read (Q) row,
//     e.row_index: spay_k, krec, kspa, the K tile indices, dc_bpre; spay_q, qrec, qrec8,
//     the Q tile indices. They read r, payload, before, after, row_index, slot_key,
//     groups_before and, where the records or kspa are requested, the log facts and value.
enum class EntryOutputs { kAll, kEntryFields, kRowFields };

SDM_HD void write_entry_outputs(const OutputBuffers& out, const ChunkFacts& f, const EntryFacts& e,
                                EntryOutputs which = EntryOutputs::kAll) {
    const bool entry = which != EntryOutputs::kRowFields, row = which != EntryOutputs::kEntryFields;
    const uint32_t p = e.payload;
    const bool valid = !(p & kInvalid);
    const bool is_q = (p & kIsQ) != 0u;
    const int t = payload_token(p);
    const int lane = static_cast<int>(p & kLaneMask);
    const int32_t packed = pack_position(e.r, e.before, e.after, valid);
    const int32_t elem = sorted_element(p, e.before, e.after, valid);
    const bool first = (static_cast<uint32_t>(elem) & kSortedFirst) != 0u;
    const int32_t slot = valid ? static_cast<int32_t>(e.slot_key + f.id_base) : 0;
    const int64_t j = e.row_index;
    const double e_log = e.exp_log;
    if (!is_q) {
        const int nk = f.C * f.W, nwk = (nk + 31) / 32;
        const int64_t cw = f.c * nk;
        const int64_t o = cw + t * f.W + lane;
        float cpe_stored = 0.0f;   // cpe as stored (krec repeats it)
        if (entry) cpe_stored = store_value(out.cpe, f.bf16, o, to_f32(e.exp_total));
        const bool last = valid && e.after == 0u;
        if (entry) {
            out.log_k[o] = e.log_f32;
            out.rex[o] = e.rex_f32;
            store_value(out.k_eff, f.bf16, o, scaled_f32(e.value, e_log));
            if (out.is_last) {
                out.is_last[o] = last ? 1 : 0;
                out.is_only[o] = (last && e.before == 0u) ? 1 : 0;
            }
            if (out.pos_k) out.pos_k[o] = packed;
        }
        if (row && out.spay_k) out.spay_k[cw + j] = elem;
        if (row && out.krec) {
            if (!entry) cpe_stored = value_rounded(f.bf16, to_f32(e.exp_total));
            put_record4(out.krec, cw + j, elem, slot, scaled_f32(e.value, e.exp_rex), cpe_stored);
        }
        if (row && out.kspa) {
            out.kspa[cw + j] = valid ? neg_beta_scaled_f32(f.beta[f.c * f.C + t], e.value, e_log) : 0.0f;
        }
        if (row && (out.tiles_k || out.segb_k) && f.tile.mod(e.row_index) == 0u) {
            const int ntk = (nk + f.L - 1) / f.L;
            const int64_t tile = f.c * (ntk + 1) + static_cast<int64_t>(f.tile.div(e.row_index));
            if (out.tiles_k) {
                const int64_t next = j + e.after + 1u;
                out.tiles_k[tile] = first ? static_cast<int32_t>(j) : static_cast<int32_t>(next < nk ? next : nk);
            }
            if (out.segb_k) out.segb_k[tile] = e.groups_before;
        }
        if (entry && out.dc_kpos) out.dc_kpos[o] = (valid && e.before == 0u) ? e.groups_before : -1;
        if (row && out.dc_bpre && j % 32u == 0u) out.dc_bpre[f.c * (nwk + 1) + j / 32u] = e.groups_before;
    } else {
        const int nq = f.C * f.R;
        const int64_t cr = f.c * nq;
        const int64_t o = cr + t * f.R + lane;
        if (entry) out.log_q[o] = e.log_f32;
        const float qw = scaled_f32(e.value, e_log);
        if (entry) {
            store_value(out.q_w, f.bf16, o, qw);
            if (out.pos_q) out.pos_q[o] = packed;
            if (out.q_last) {
                const bool last = valid && e.after == 0u;
                out.q_last[o] = last ? 1 : 0;
                out.q_only[o] = (last && e.before == 0u) ? 1 : 0;
            }
        }
        if (row && out.spay_q) out.spay_q[cr + j] = elem;
        if (row && out.qrec) put_record4(out.qrec, cr + j, elem, slot, qw, 0.0f);
        if (row && out.qrec8) put_record2(out.qrec8, cr + j, slot, qw);
        if (row && out.tiles_q && f.tile.mod(e.row_index) == 0u) {
            const int ntq = (nq + f.L - 1) / f.L;
            const int64_t next = j + e.after + 1u;
            out.tiles_q[f.c * (ntq + 1) + static_cast<int64_t>(f.tile.div(e.row_index))] =
                first ? static_cast<int32_t>(j) : static_cast<int32_t>(next < nq ? next : nq);
        }
    }
}

// The log facts of entry e (EntryFacts) from its exact log and rex; e.exp_log is taken as
// given where exp_log_known (a backend may know it: a write with no earlier write in its
// group has its own gate as log). exp_rex only with_exp_rex (krec requested).
SDM_HD void set_log_facts(EntryFacts& e, Fix log, Fix rex, bool is_write, bool with_exp_rex, bool exp_log_known) {
    e.log_f32 = fix_to_f32(log);
    if (!exp_log_known) e.exp_log = exp_fix(log);
    if (!is_write) return;
    // cpe = exp(log + rex): the same argument as exp_log when rex is 0.
    e.rex_f32 = fix_to_f32(rex);
    e.exp_total = fix_is_zero(rex) ? e.exp_log : exp_fix(fix_add(log, rex));
    if (with_exp_rex) e.exp_rex = exp_fix(rex);
}

// The same from log and rex in the kernels' compact form with shift s (compact_to_f64): the
// same bits.
SDM_HD void set_log_facts_compact(EntryFacts& e, int64_t log, int64_t rex, int s, bool is_write, bool with_exp_rex,
                                  bool exp_log_known) {
    e.log_f32 = compact_to_f32(log, s);
    if (!exp_log_known) e.exp_log = exp_compact(log, s);
    if (!is_write) return;
    e.rex_f32 = compact_to_f32(rex, s);
    e.exp_total = rex == 0 ? e.exp_log : exp_compact(log + rex, s);
    if (with_exp_rex) e.exp_rex = exp_compact(rex, s);
}

// The last element of each tile index of a chunk, once its valid groups are counted.
SDM_HD void write_chunk_tails(const OutputBuffers& out, const ChunkFacts& f, int32_t valid_groups) {
    const int nk = f.C * f.W, nq = f.C * f.R;
    const int ntk = (nk + f.L - 1) / f.L, ntq = (nq + f.L - 1) / f.L, nwk = (nk + 31) / 32;
    if (out.tiles_k) out.tiles_k[f.c * (ntk + 1) + ntk] = nk;
    if (out.segb_k) out.segb_k[f.c * (ntk + 1) + ntk] = valid_groups;
    if (out.tiles_q) out.tiles_q[f.c * (ntq + 1) + ntq] = nq;
    if (out.dc_bpre) out.dc_bpre[f.c * (nwk + 1) + nwk] = valid_groups;
}

// One element of spay_rank: the write entries before 32-position block b of chunk c's sorted
// row, and the bit mask of the write entries in it.
SDM_HD void write_rank(const OutputBuffers& out, int64_t c, int blocks, int b, int32_t writes_before, uint32_t mask) {
    int32_t* w = out.spay_rank + 2 * (c * blocks + b);
    w[0] = writes_before;
    w[1] = static_cast<int32_t>(mask);
}

}  // namespace sdm_p1

#endif  // SDM_P1_PHASE1_SHARED_H
