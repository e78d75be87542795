// The canonical arithmetic of canon/phase1_shared.h against independent computations:
// 128-bit integer arithmetic of the compiler, exact rational checks of rounding, long double
// exp, and hand-picked bit patterns.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../../canon/phase1_shared.h"
#include "test_util.h"

using namespace sdm_p1;

namespace {

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

i128 to_i128(Fix f) { return static_cast<i128>((static_cast<u128>(f.hi) << 64) | f.lo); }
Fix from_i128(i128 v) {
    const auto u = static_cast<u128>(v);
    return Fix{static_cast<uint64_t>(u), static_cast<uint64_t>(u >> 64)};
}

// The exact fixed-point value (times 2^96) of a finite double whose magnitude is 2^-96 or
// more and below 2^31, as a 128-bit integer; false when it is not a whole number there.
bool exact_fixed(double d, i128* out) {
    int e = 0;
    const double m = std::frexp(d, &e);                          // d = m * 2^e, 0.5 <= |m| < 1
    const auto mant = static_cast<int64_t>(std::ldexp(m, 53));   // exact
    const int shift = e - 53 + 96;
    if (shift >= 0) {
        *out = static_cast<i128>(mant) * (static_cast<i128>(1) << shift);
        return true;
    }
    if (mant % (int64_t{1} << -shift) != 0) return false;
    *out = static_cast<i128>(mant) / (static_cast<i128>(1) << -shift);   // exact
    return true;
}

// `got` is the correctly rounded (ties to even) value of x with `bits` significant bits.
bool rounds_correctly(i128 x, double got, int bits) {
    i128 g;
    if (!exact_fixed(got, &g)) return false;
    if (x == 0) return got == 0.0;
    const i128 mag = x < 0 ? -x : x;
    int p = 127;
    while (!((mag >> p) & 1)) --p;
    // ulp of the result at x's magnitude (a result of the next binade up is checked by the
    // half-ulp bound too, as it can only arise from rounding up to a power of two).
    const int ulp_shift = p - (bits - 1);
    const i128 diff = (x - g) < 0 ? -(x - g) : (x - g);
    if (ulp_shift <= 0) return diff == 0;
    const i128 half = static_cast<i128>(1) << (ulp_shift - 1);
    if (diff > half) return false;
    if (diff == half) {   // a tie must go to the even mantissa
        const i128 gm = (g < 0 ? -g : g) >> ulp_shift;
        return (gm & 1) == 0;
    }
    return true;
}

float random_gate(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> ex(-73, 21);
    std::uniform_real_distribution<double> m(1.0, 2.0);
    const float g = static_cast<float>(std::ldexp(m(rng), ex(rng)));
    return (rng() & 1) ? -g : g;
}

void test_gate_round_trip() {
    std::mt19937_64 rng(1);
    int exact = 1;
    for (int i = 0; i < 200000; ++i) {
        const float g = random_gate(rng);
        Fix f = fix_zero();
        exact &= gate_to_fix(g, &f);
        exact &= f32_bits(fix_to_f32(f)) == f32_bits(g);
        exact &= fix_to_f64(f) == static_cast<double>(g);
        i128 want;
        exact &= exact_fixed(g, &want) && to_i128(f) == want;
    }
    CHECK(exact);
}

void test_gate_limits() {
    Fix f = fix_zero();
    CHECK(!gate_to_fix(NAN, &f) && !gate_to_fix(INFINITY, &f) && !gate_to_fix(-INFINITY, &f));
    CHECK(!gate_to_fix(4194304.0f, &f) && !gate_to_fix(-4194304.0f, &f));
    CHECK(gate_to_fix(-4194303.75f, &f) && fix_to_f32(f) == -4194303.75f);
    CHECK(gate_to_fix(0.0f, &f) && fix_is_zero(f));
    CHECK(gate_to_fix(-0.0f, &f) && fix_is_zero(f));
    // Below 2^-73 the value rounds to a multiple of 2^-96, ties to even.
    CHECK(gate_to_fix(std::ldexp(1.0f, -97), &f) && fix_is_zero(f));      // tie -> 0
    CHECK(gate_to_fix(std::ldexp(1.5f, -97), &f) && to_i128(f) == 1);     // 0.75 -> 1
    CHECK(gate_to_fix(std::ldexp(3.0f, -97), &f) && to_i128(f) == 2);     // 1.5 -> 2
    CHECK(gate_to_fix(-std::ldexp(5.0f, -97), &f) && to_i128(f) == -2);   // 2.5 -> 2
    CHECK(gate_to_fix(FLT_TRUE_MIN, &f) && fix_is_zero(f));
    CHECK(gate_to_fix(-1e-9f, &f) && fix_to_f32(f) == -1e-9f);
}

void test_fix_integer_ops() {
    std::mt19937_64 rng(2);
    int same = 1;
    for (int i = 0; i < 100000; ++i) {
        const i128 a = static_cast<i128>(static_cast<int64_t>(rng())) * (static_cast<i128>(1) << (rng() % 62));
        const i128 b = static_cast<i128>(static_cast<int64_t>(rng())) * static_cast<int64_t>(rng() >> 40);
        same &= to_i128(fix_add(from_i128(a), from_i128(b))) == a + b;
        same &= to_i128(fix_sub(from_i128(a), from_i128(b))) == a - b;
        same &= to_i128(fix_neg(from_i128(a))) == -a;
        same &= fix_is_negative(from_i128(a - b)) == (a - b < 0);
    }
    CHECK(same);
    // Sums of gates do not depend on the order.
    std::vector<float> g(256);
    for (float& x : g) x = random_gate(rng);
    Fix fwd = fix_zero(), rev = fix_zero(), f = fix_zero();
    for (size_t i = 0; i < g.size(); ++i) {
        gate_to_fix(g[i], &f);
        fwd = fix_add(fwd, f);
        gate_to_fix(g[g.size() - 1 - i], &f);
        rev = fix_add(rev, f);
    }
    CHECK(fwd.lo == rev.lo && fwd.hi == rev.hi);
}

// The compact log form: lowest bit, magnitude bits and the shifts against 128-bit integers.
void test_fix_compact() {
    std::mt19937_64 rng(7);
    int ok = 1;
    for (int i = 0; i < 200000; ++i) {
        const int s = static_cast<int>(rng() % 127);
        // A quotient of 1 to 63 bits (either sign) with x = q * 2^s within 128 signed bits.
        const int qbits = 1 + static_cast<int>(rng() % static_cast<uint64_t>(std::min(63, 127 - s)));
        int64_t q = static_cast<int64_t>(rng() >> (64 - qbits)) | 1;
        if (rng() & 1) q = -q;
        const i128 x = static_cast<i128>(static_cast<u128>(static_cast<i128>(q)) << s);
        const Fix f = from_i128(x);
        ok &= static_cast<int64_t>(fix_shift_down(f, s)) == q;
        ok &= to_i128(fix_shift_up(static_cast<uint64_t>(q), s)) == x;
        ok &= fix_lowest_bit(f) == s;
        u128 mag = static_cast<u128>(x < 0 ? -x : x);
        int bits = 0;
        while (mag != 0) {
            ++bits;
            mag >>= 1;
        }
        ok &= fix_magnitude_bits(f) == bits;
    }
    CHECK(ok);
    CHECK(fix_magnitude_bits(fix_zero()) == 0);
    CHECK(fix_magnitude_bits(from_i128(-1)) == 1);
    CHECK(fix_magnitude_bits(from_i128(static_cast<i128>(1) << 64)) == 65);
    CHECK(fix_lowest_bit(from_i128(-(static_cast<i128>(1) << 100))) == 100);
    CHECK(to_i128(fix_shift_up(~uint64_t{0}, 70)) == -(static_cast<i128>(1) << 70));
}

// The compact form's conversions round the exact value correctly and agree with the 128-bit
// path bit for bit, ties included.
void test_compact_conversions() {
    std::mt19937_64 rng(8);
    int rounds = 1, same = 1;
    for (int i = 0; i < 200000; ++i) {
        const int bits = 1 + static_cast<int>(rng() % 63);
        const int s = static_cast<int>(rng() % static_cast<uint64_t>(128 - bits));
        int64_t v = static_cast<int64_t>(rng() >> (64 - bits));
        if (i % 5 == 0 && bits > 30) v = (v >> (bits - 25)) << (bits - 25) | (int64_t{1} << (bits - 26));   // f32 tie
        if (i % 5 == 1 && bits > 58) v = (v >> (bits - 54)) << (bits - 54) | (int64_t{1} << (bits - 55));   // f64 tie
        if (rng() & 1) v = -v;
        const i128 x = static_cast<i128>(static_cast<u128>(static_cast<i128>(v)) << s);
        const Fix f = fix_shift_up(static_cast<uint64_t>(v), s);
        rounds &= rounds_correctly(x, compact_to_f32(v, s), 24) && rounds_correctly(x, compact_to_f64(v, s), 53);
        same &= f32_bits(compact_to_f32(v, s)) == f32_bits(fix_to_f32(f)) && compact_to_f64(v, s) == fix_to_f64(f) &&
                exp_compact(v, s) == exp_fix(f);
    }
    CHECK(rounds);
    CHECK(same);
    CHECK(f32_bits(compact_to_f32(0, 40)) == 0u && exp_compact(0, 7) == 1.0);
    CHECK(compact_to_f64(-3, 95) == -1.5);
}

// Divider against the hardware's division: every numerator below 2^18 for small divisors
// (the chunk's lanes, tokens and tiles), random ones up to 2^31 - 1 for any divisor.
void test_divider() {
    int ok = 1;
    for (uint32_t d = 1; d <= 300; ++d) {
        const Divider dv = make_divider(d);
        for (uint32_t x = 0; x < (1u << 18); ++x) ok &= dv.div(x) == x / d && dv.mod(x) == x % d;
    }
    std::mt19937_64 rng(9);
    for (int i = 0; i < 2000000; ++i) {
        const uint32_t d = 1u + static_cast<uint32_t>(rng() >> (33 + rng() % 31));
        const uint32_t x = i % 1000 == 0 ? 0x7FFFFFFFu : static_cast<uint32_t>(rng() >> 33);
        const Divider dv = make_divider(d);
        ok &= dv.div(x) == x / d && dv.mod(x) == x % d;
    }
    const Divider top = make_divider(0x7FFFFFFFu);
    ok &= top.div(0x7FFFFFFFu) == 1u && top.div(0x7FFFFFFEu) == 0u;
    CHECK(ok);
}

void test_fix_rounding() {
    std::mt19937_64 rng(3);
    int ok32 = 1, ok64 = 1;
    for (int i = 0; i < 200000; ++i) {
        // Values with every bit pattern length, including exact ties.
        const int bits = 1 + static_cast<int>(rng() % 125);
        i128 x = static_cast<i128>((static_cast<u128>(rng()) << 64 | rng()) >> (128 - bits));
        if (i % 7 == 0 && bits > 30)
            x = (x >> (bits - 24)) << (bits - 24) | (static_cast<i128>(1) << (bits - 25));   // a tie
        if (rng() & 1) x = -x;
        ok32 &= rounds_correctly(x, fix_to_f32(from_i128(x)), 24);
        ok64 &= rounds_correctly(x, fix_to_f64(from_i128(x)), 53);
    }
    CHECK(ok32);
    CHECK(ok64);
    CHECK(fix_to_f32(fix_zero()) == 0.0f && !std::signbit(fix_to_f32(fix_zero())));
}

void test_exp_double() {
    std::mt19937_64 rng(4);
    std::uniform_real_distribution<double> x(-700.0, 700.0), small(-1.0, 1.0);
    double worst = 0.0;
    for (int i = 0; i < 200000; ++i) {
        const double v = (i & 1) ? x(rng) : small(rng);
        const long double want = std::exp(static_cast<long double>(v));
        const double err = static_cast<double>(std::fabs((exp_double(v) - want) / want));
        if (err > worst) worst = err;
    }
    printf("    exp_double: largest relative error %.3g (2^%.1f)\n", worst, std::log2(worst));
    CHECK(worst < 0x1p-51);
    CHECK(exp_double(0.0) == 1.0);
    CHECK(exp_double(-700.5) == 0.0 && exp_double(-1e300) == 0.0);
    CHECK(exp_double(800.0) == exp_double(700.0) && std::isfinite(exp_double(800.0)));
    // exp of an exact fixed-point value, rounded to float: correctly rounded here.
    Fix f = fix_zero();
    gate_to_fix(-1.0f, &f);
    CHECK(to_f32(exp_fix(f)) == static_cast<float>(std::exp(-1.0L)));
}

// Every NaN an output gets is kCanonicalNaN (x86 gives 0 * inf a negative NaN, a GPU a
// positive one; a NaN input keeps its payload on x86): the backends' bits agree.
void test_nan_outputs() {
    const double inf = INFINITY;
    volatile double zero = 0.0;   // not folded at compile time: the processor's own NaN
    CHECK(f32_bits(to_f32(dmul(zero, inf))) == kCanonicalNaN);
    CHECK(f32_bits(to_f32(dadd(inf, -inf))) == kCanonicalNaN);
    CHECK(f32_bits(to_f32(-std::nan("0x123"))) == kCanonicalNaN);
    CHECK(f32_bits(scaled_f32(f32_from_bits(0xFFC01234u), 2.0)) == kCanonicalNaN);
    CHECK(f32_bits(to_f32(dfma(inf, zero, 1.0))) == kCanonicalNaN);
    CHECK(to_f32(inf) == INFINITY && to_f32(-inf) == -INFINITY && f32_bits(to_f32(-0.0)) == 0x80000000u);
    CHECK(bf16_from_f32(to_f32(dmul(zero, inf))) == 0x7FC0);
}

void test_bf16() {
    CHECK(bf16_from_f32(1.0f) == 0x3F80);
    CHECK(bf16_from_f32(f32_from_bits(0x3F808000u)) == 0x3F80);   // tie: to even
    CHECK(bf16_from_f32(f32_from_bits(0x3F818000u)) == 0x3F82);   // tie: to even
    CHECK(bf16_from_f32(f32_from_bits(0x3F808001u)) == 0x3F81);
    CHECK(bf16_from_f32(f32_from_bits(0x7F7FFFFFu)) == 0x7F80);   // rounds to infinity
    CHECK(bf16_from_f32(-INFINITY) == 0xFF80);
    CHECK((bf16_from_f32(NAN) & 0x7FC0) == 0x7FC0);
    CHECK(bf16_from_f32(f32_from_bits(0x00018000u)) == 0x0002);   // subnormal tie to even
    CHECK(bf16_to_f32(0xC040) == -3.0f);
}

void test_packing() {
    CHECK(pack_position(5, 0, 0, true) == (5 | 1 << 24));
    CHECK(pack_position(5, 2, 3, true) == (5 | 3 << 17 | 6 << 24));
    CHECK(pack_position(7, 100, 200, true) == (7 | 127 << 17 | 127 << 24));
    CHECK(pack_position(9, 0, 0, false) == 9);
    CHECK(static_cast<uint32_t>(sorted_element(0x20Au | kHead, 0, 0, true)) == (0x20Au | kHead | kLastK));
    CHECK(static_cast<uint32_t>(sorted_element(0x20Au, 5000, 1, true)) == (0x20Au | 4095u << 18));
    CHECK(static_cast<uint32_t>(sorted_element(0x20Au | kInvalid, 3, 3, false)) ==
          (0x20Au | kInvalid | kHead | kLastK));
    CHECK(payload_word(200, 255, true, false) == (200u << 9 | 0x100u | 255u | 0x20000u));
}

}   // namespace

int main() {
    RUN(test_gate_round_trip);
    RUN(test_gate_limits);
    RUN(test_fix_integer_ops);
    RUN(test_fix_compact);
    RUN(test_compact_conversions);
    RUN(test_divider);
    RUN(test_fix_rounding);
    RUN(test_exp_double);
    RUN(test_nan_outputs);
    RUN(test_bf16);
    RUN(test_packing);
    return test_summary();
}
