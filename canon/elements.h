// Loading inputs and storing value-typed outputs (int32 / int64 ids, float32 / bfloat16 values).
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_ELEMENTS_H
#define SDM_P1_CANON_ELEMENTS_H

#include "ieee.h"

namespace sdm_p1 {

// Element access (inputs and value-typed outputs)

SDM_HD int64_t load_id(const void* ids, bool idx64, int64_t i) {
    return idx64 ? static_cast<const int64_t*>(ids)[i] : static_cast<int64_t>(static_cast<const int32_t*>(ids)[i]);
}

// Valid tokens of the chunk at `step` of a stream of `length` tokens (per-stream lengths):
// clamp(length - step * C, 0, C). length is in 0..steps * C (checked), so this never overflows.
SDM_HD int chunk_valid_tokens(int64_t length, int64_t step, int C) {
    const int64_t v = length - step * C;
    return v <= 0 ? 0 : v >= C ? C : static_cast<int>(v);
}

SDM_HD float load_value(const void* vals, bool bf16, int64_t i) {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(vals)[i]) : static_cast<const float*>(vals)[i];
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
        *reinterpret_cast<int4*>(r) =
            make_int4(w0, w1, static_cast<int32_t>(f32_bits(w2)), static_cast<int32_t>(f32_bits(w3)));
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

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_ELEMENTS_H
