// The struct-size rule of phase1.h from the library's side (src/versioned_struct.cpp), with
// the library's struct one field longer than the caller's: what a caller of today's header
// (sdm_p1_desc, sdm_p1_inputs) gets from a library whose structs have grown, as they will;
// and a 1.1 caller's sdm_p1_inputs (before 1.2 appended stream_lengths) read by today's
// library. The public API's side, a caller's struct longer than the library's, is in
// test_api.c.
#include <cstddef>
#include <cstring>
#include <string>

#include "errors.h"
#include "sdm/phase1.h"
#include "test_util.h"
#include "versioned_struct.h"

namespace {

// The structs of a later header: today's fields, then one more.
struct NextDesc {
    sdm_p1_desc desc;
    int64_t appended;
};

struct NextInputs {
    sdm_p1_inputs in;
    const int64_t* appended;
};

// sdm_p1_inputs as the 1.0 and 1.1 headers declare it.
struct Inputs11 {
    uint32_t struct_size;
    const void* k_idx;
    const void* q_idx;
    const void* k_val;
    const void* q_val;
    const float* g;
    const float* beta;
};

// The library's layout of today's struct, grown to `Next`.
template <typename Next>
sdm_p1::StructLayout grown(const sdm_p1::StructLayout& today) {
    sdm_p1::StructLayout s = today;
    s.known_bytes = sizeof(Next);
    return s;
}

// read_struct's refusal: "" when it accepts, else "INVALID_ARGUMENT: " (the one status it
// gives) and the message.
std::string read_error(const void* given, size_t size, void* known, const sdm_p1::StructLayout& s) {
    try {
        sdm_p1::read_struct(given, size, known, s);
        return "";
    } catch (const sdm_p1::Error& e) {
        return (e.status() == SDM_P1_ERROR_INVALID_ARGUMENT ? "INVALID_ARGUMENT: " : "other status: ") +
               std::string(e.what());
    }
}

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

void test_oldest_layouts() {
    // 1.0 and 1.1 share their layouts; 1.2 appends stream_lengths (and its dtype, and the
    // named padding) to sdm_p1_inputs, whole 8-byte words past the 1.1 layout; 1.3 appends
    // backward and grad_dtype to sdm_p1_desc, one 8-byte unit, and adds sdm_p1_input_grads.
    CHECK(sdm_p1::kDescLayout.oldest_bytes == offsetof(sdm_p1_desc, backward));
    CHECK(sizeof(sdm_p1_desc) == offsetof(sdm_p1_desc, backward) + 8);
    CHECK(offsetof(sdm_p1_desc, grad_dtype) == offsetof(sdm_p1_desc, backward) + 4);
    CHECK(sdm_p1::kInputGradsLayout.oldest_bytes == sizeof(sdm_p1_input_grads));
    CHECK(sdm_p1::kInputGradsLayout.known_bytes == sizeof(sdm_p1_input_grads));
    CHECK(sdm_p1::kInputsLayout.oldest_bytes == sizeof(Inputs11));
    CHECK(offsetof(sdm_p1_inputs, stream_lengths) == sizeof(Inputs11));
    CHECK(sizeof(sdm_p1_inputs) == sizeof(Inputs11) + sizeof(void*) + 8);
    CHECK(sdm_p1::kDescLayout.known_bytes == sizeof(sdm_p1_desc));
    CHECK(sdm_p1::kInputsLayout.known_bytes == sizeof(sdm_p1_inputs));
}

void test_inputs_11_and_12() {
    // A 1.1 caller's struct: its fields, then the 1.2 fields at their defaults (the valid_last
    // rule), whatever the library's struct held before.
    const float g = 0.5f, beta = 2.0f;
    const int32_t lengths[2] = {3, 4};
    Inputs11 old_in{sizeof(Inputs11), &g, &g, &g, &g, &g, &beta};
    sdm_p1_inputs known = SDM_P1_INPUTS_INITIALIZER;
    CHECK(known.stream_lengths == nullptr && known.stream_lengths_dtype == 0 && known.reserved == 0);
    CHECK(read_error(&old_in, old_in.struct_size, &known, sdm_p1::kInputsLayout).empty());
    CHECK(known.struct_size == sizeof(Inputs11) && known.k_idx == &g && known.g == &g);
    CHECK(known.beta == &beta && known.stream_lengths == nullptr && known.stream_lengths_dtype == 0);

    // A 1.2 caller's struct is read whole.
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.g = &g;
    in.stream_lengths = lengths;
    in.stream_lengths_dtype = SDM_P1_DTYPE_INT32;
    in.reserved = 5;   // read as given (execute refuses it)
    sdm_p1_inputs read = SDM_P1_INPUTS_INITIALIZER;
    CHECK(read_error(&in, in.struct_size, &read, sdm_p1::kInputsLayout).empty());
    CHECK(std::memcmp(&read, &in, sizeof in) == 0);
}

void test_older_caller_inputs() {
    const sdm_p1::StructLayout s = grown<NextInputs>(sdm_p1::kInputsLayout);
    const float g = 0.5f;
    sdm_p1_inputs old_in = SDM_P1_INPUTS_INITIALIZER;   // today's caller: no appended field
    old_in.g = &g;
    NextInputs known{};
    known.in.k_idx = &g;   // library defaults the caller's bytes replace
    const int64_t lengths[2] = {3, 4};
    known.appended = lengths;   // the newer field's default stays
    CHECK(read_error(&old_in, old_in.struct_size, &known, s).empty());
    CHECK(std::memcmp(&known.in, &old_in, sizeof old_in) == 0);
    CHECK(known.appended == lengths);

    // A caller of the library's own header: every field comes from it.
    NextInputs same{};
    same.in = old_in;
    same.in.struct_size = sizeof same;
    same.appended = lengths + 1;
    known = NextInputs{};
    CHECK(read_error(&same, sizeof same, &known, s).empty());
    CHECK(known.appended == lengths + 1 && known.in.g == &g);

    // Below the 1.0 layout: refused, the struct left as it was.
    known = NextInputs{};
    const std::string e = read_error(&old_in, sizeof(Inputs11) - 8, &known, s);
    CHECK(contains(e, "INVALID_ARGUMENT: sdm_p1_execute: inputs->struct_size = 48"));
    CHECK(contains(e, "SDM_P1_INPUTS_INITIALIZER") && known.in.g == nullptr);
}

void test_older_caller_desc() {
    const sdm_p1::StructLayout s = grown<NextDesc>(sdm_p1::kDescLayout);
    sdm_p1_desc old_desc = SDM_P1_DESC_INITIALIZER;
    old_desc.N = 12;
    old_desc.num_threads = 3;
    NextDesc known{};
    known.appended = SDM_P1_UNSET;
    CHECK(read_error(&old_desc, old_desc.struct_size, &known, s).empty());
    CHECK(known.desc.N == 12 && known.desc.num_threads == 3 && known.appended == SDM_P1_UNSET);

    // What sdm_p1_plan_desc writes back: the older caller's fields only.
    CHECK(sdm_p1::bytes_to_write(old_desc.struct_size, s) == sizeof(sdm_p1_desc));
    CHECK(sdm_p1::bytes_to_write(sizeof(NextDesc) + 8, s) == sizeof(NextDesc));
}

void test_newer_caller() {
    // Today's library, a caller of the later header: accepted while the appended field is zero.
    const sdm_p1_desc initialized = SDM_P1_DESC_INITIALIZER;
    NextDesc newer{};
    newer.desc = initialized;
    newer.desc.struct_size = sizeof newer;
    newer.desc.C = 7;
    sdm_p1_desc known = SDM_P1_DESC_INITIALIZER;
    CHECK(read_error(&newer, sizeof newer, &known, sdm_p1::kDescLayout).empty());
    CHECK(known.C == 7);
    newer.appended = int64_t{1} << 40;   // byte 5 of the field is set
    const std::string e = read_error(&newer, sizeof newer, &known, sdm_p1::kDescLayout);
    const std::string byte = "byte " + std::to_string(offsetof(NextDesc, appended) + 5) + " is set";
    CHECK(contains(e, "INVALID_ARGUMENT: sdm_p1_plan_create: desc->struct_size"));
    CHECK(contains(e, byte.c_str()));
}

}   // namespace

int main() {
    RUN(test_oldest_layouts);
    RUN(test_inputs_11_and_12);
    RUN(test_older_caller_inputs);
    RUN(test_older_caller_desc);
    RUN(test_newer_caller);
    return test_summary();
}
