// The structs of the C API that grow at their end (sdm_p1_desc, sdm_p1_inputs,
// sdm_p1_input_grads), read and written by the struct-size rule of include/sdm/phase1.h: a caller's
// struct of an older header (shorter) or a newer one (longer) becomes the library's own.
#ifndef SDM_P1_VERSIONED_STRUCT_H
#define SDM_P1_VERSIONED_STRUCT_H

#include <cstddef>

namespace sdm_p1 {

// One struct type of the API, for the rule and its messages.
struct StructLayout {
    const char* function;         // "sdm_p1_execute"
    const char* argument;         // "inputs"
    const char* initializer;      // "SDM_P1_INPUTS_INITIALIZER"
    size_t oldest_bytes;          // the oldest layout: the least struct_size accepted
    size_t known_bytes;           // sizeof the library's struct
    const char* oldest_version;   // the release of the oldest layout ("1.0")
};

// sdm_p1_desc (read by sdm_p1_plan_create, written by sdm_p1_plan_desc), sdm_p1_inputs
// (read by sdm_p1_execute and sdm_p1_execute_backward) and sdm_p1_input_grads (read by
// sdm_p1_execute_backward).
extern const StructLayout kDescLayout;
extern const StructLayout kInputsLayout;
extern const StructLayout kInputGradsLayout;

// Copies the caller's struct of `size` bytes (its struct_size) at `given` into `known`, which
// holds the library's defaults: the first min(size, known_bytes) bytes come from the caller
// and the fields past them keep their defaults. Throws INVALID_ARGUMENT when size is below
// oldest_bytes, or when a byte past known_bytes is set (a newer field this library lacks).
void read_struct(const void* given, size_t size, void* known, const StructLayout& layout);

// The number of bytes of the library's struct to write to a caller's struct with room for
// `room` bytes: min(room, known_bytes), the fields both headers have.
size_t bytes_to_write(size_t room, const StructLayout& layout);

// Writes the library's defaults (`defaults`, a struct of known_bytes) to a caller's struct
// of `size` bytes (sdm_p1_desc_init, sdm_p1_inputs_init, sdm_p1_input_grads_init): the fields both headers have, zero
// past them (a newer header's fields, whose defaults are zero), and struct_size (the first
// uint32 of every such struct) = size. Throws INVALID_ARGUMENT, writing nothing, for a NULL
// struct or a size below oldest_bytes or above UINT32_MAX, naming the C function `who`.
void init_struct(const char* who, void* out, size_t size, const void* defaults, const StructLayout& layout);

}   // namespace sdm_p1

#endif   // SDM_P1_VERSIONED_STRUCT_H
