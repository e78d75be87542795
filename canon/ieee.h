// Correctly rounded IEEE operations and bit conversions (float32, float64, bfloat16).
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_IEEE_H
#define SDM_P1_CANON_IEEE_H

#include <cmath>
#include <cstring>

#include "host_device.h"

namespace sdm_p1 {

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

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_IEEE_H
