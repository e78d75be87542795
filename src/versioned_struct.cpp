#include "versioned_struct.h"

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>

#include "errors.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

// The 1.0 layouts (1.1 has the same) end with the allocator and with beta.
const StructLayout kDescLayout = {
    "sdm_p1_plan_create",      "desc",
    "SDM_P1_DESC_INITIALIZER", offsetof(sdm_p1_desc, allocator) + sizeof(sdm_p1_allocator),
    sizeof(sdm_p1_desc),       "1.0"};
const StructLayout kInputsLayout = {
    "sdm_p1_execute",      "inputs", "SDM_P1_INPUTS_INITIALIZER", offsetof(sdm_p1_inputs, beta) + sizeof(const float*),
    sizeof(sdm_p1_inputs), "1.0"};
// New in 1.3: its 1.3 layout is the oldest.
const StructLayout kInputGradsLayout = {
    "sdm_p1_execute_backward",        "out",
    "SDM_P1_INPUT_GRADS_INITIALIZER", offsetof(sdm_p1_input_grads, beta) + sizeof(float*),
    sizeof(sdm_p1_input_grads),       "1.3"};

void read_struct(const void* given, size_t size, void* known, const StructLayout& s) {
    if (size < s.oldest_bytes) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, s.function, ": ", s.argument, "->struct_size = ", size, " is below the ",
             s.oldest_bytes, " bytes of the oldest layout (", s.oldest_version, "); fill the struct from ",
             s.initializer);
    }
    const auto* bytes = static_cast<const unsigned char*>(given);
    // Fields appended by later headers default to zero, so a newer caller that leaves them
    // unset passes zero bytes there; a set one asks for something this library cannot do.
    for (size_t i = s.known_bytes; i < size; ++i) {
        if (bytes[i] != 0) {
            fail(SDM_P1_ERROR_INVALID_ARGUMENT, s.function, ": ", s.argument, "->struct_size = ", size, " and byte ", i,
                 " is set (", static_cast<unsigned>(bytes[i]), "): it lies past the ", s.known_bytes,
                 " bytes this libsdmp1 (", SDM_P1_VERSION_MAJOR, ".", SDM_P1_VERSION_MINOR,
                 ") knows, in a field of a newer header that this library does not support; leave it "
                 "at its default (zero) or use a newer libsdmp1");
        }
    }
    std::memcpy(known, given, std::min(size, s.known_bytes));
}

size_t bytes_to_write(size_t room, const StructLayout& s) { return std::min(room, s.known_bytes); }

void init_struct(const char* who, void* out, size_t size, const void* defaults, const StructLayout& s) {
    if (out == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", s.argument, " is NULL");
    if (size < s.oldest_bytes || size > UINT32_MAX) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": struct_size = ", size, " must be the caller's sizeof, from the ",
             s.oldest_bytes, " bytes of the oldest layout (", s.oldest_version, ") to UINT32_MAX");
    }
    auto* bytes = static_cast<unsigned char*>(out);
    const size_t known = std::min(size, s.known_bytes);
    std::memcpy(bytes, defaults, known);
    std::memset(bytes + known, 0, size - known);
    const uint32_t struct_size = static_cast<uint32_t>(size);
    std::memcpy(bytes, &struct_size, sizeof struct_size);
}

}   // namespace sdm_p1
