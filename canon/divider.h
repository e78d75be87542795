// Division by a run-time constant as a multiply and a shift, the same on host and device.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_DIVIDER_H
#define SDM_P1_CANON_DIVIDER_H

#include "host_device.h"

namespace sdm_p1 {

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

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_DIVIDER_H
