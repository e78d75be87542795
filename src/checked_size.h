// Byte and element counts of a plan, computed with overflow checks. Every array a plan
// describes, reads or allocates must be addressable: at most PTRDIFF_MAX bytes (which size_t
// also holds), so that no size, offset or pointer difference wraps. A plan past that is
// refused with SDM_P1_ERROR_UNSUPPORTED naming the array.
#ifndef SDM_P1_CHECKED_SIZE_H
#define SDM_P1_CHECKED_SIZE_H

#include <cstddef>
#include <cstdint>

#include "errors.h"

namespace sdm_p1 {

// The largest array: what both size_t and ptrdiff_t hold.
constexpr size_t kMaxBytes =
    static_cast<uintmax_t>(PTRDIFF_MAX) < SIZE_MAX ? static_cast<size_t>(PTRDIFF_MAX) : SIZE_MAX;

// *out = a * b when that is at most kMaxBytes; false (*out untouched) otherwise.
inline bool mul_within(size_t a, size_t b, size_t* out) {
    if (b != 0 && a > kMaxBytes / b) return false;
    *out = a * b;
    return true;
}

// *out = a + b when that is at most kMaxBytes; false (*out untouched) otherwise.
inline bool add_within(size_t a, size_t b, size_t* out) {
    if (a > kMaxBytes || b > kMaxBytes - a) return false;
    *out = a + b;
    return true;
}

// Refuses a plan whose array `what` (streamable parts) would exceed kMaxBytes.
template <typename... What>
[[noreturn]] void too_large(const What&... what) {
    fail(SDM_P1_ERROR_UNSUPPORTED, "sdm_p1_plan_create: ", what..., " would take more than PTRDIFF_MAX = ", PTRDIFF_MAX,
         " bytes, more than sizes and offsets can hold: the plan is too large");
}

// a * b, a + b, and `bytes` rounded up to a multiple of `align`; each refuses the plan
// (too_large(what...)) past kMaxBytes.
template <typename... What>
size_t checked_mul(size_t a, size_t b, const What&... what) {
    size_t r = 0;
    if (!mul_within(a, b, &r)) too_large(what...);
    return r;
}

template <typename... What>
size_t checked_add(size_t a, size_t b, const What&... what) {
    size_t r = 0;
    if (!add_within(a, b, &r)) too_large(what...);
    return r;
}

template <typename... What>
size_t checked_align_up(size_t bytes, size_t align, const What&... what) {
    return checked_add(bytes, align - 1, what...) / align * align;
}

}   // namespace sdm_p1

#endif   // SDM_P1_CHECKED_SIZE_H
