// One fuzz case: a descriptor, input arrays, a call sequence and the backward calls (1.3)
// decoded from the fuzzer's bytes. Shared by the libFuzzer harness (fuzz_api.cpp) and the
// CUDA replay (replay_cuda.cpp), so a corpus means the same to both. Every byte string is a
// case (bytes past the end read as zero), and the same bytes always give the same case.
//
// Byte layout, front to back: the descriptor's fields, the allocator and struct forms, the
// seed, the data knobs (runnable cases), the steps, the per-stream lengths (runnable cases,
// a byte of 192 or more), then the backward section (decode_backward in fuzz_case.cpp): a
// byte of 64 or more makes the plans backward plans, then grad_dtype and 1 to 3 backward
// calls. An older input that ends before it (bytes read as zero) keeps its meaning: no
// backward. tests/fuzz/make_backward_seeds.py writes seeds that reach it.
#ifndef SDM_P1_FUZZ_CASE_H
#define SDM_P1_FUZZ_CASE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sdm/phase1.h"

namespace fuzz {

// Reads the fuzzer's bytes front to back; past the end every read is zero.
class Bytes {
public:
    Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
    uint32_t u32();
    uint64_t u64();
    // True with probability in_256 / 256.
    bool chance(int in_256) { return u8() < in_256; }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

// How the caller's struct is sized, by the header's struct-size rule.
enum class StructForm {
    Plain,      // struct_size = sizeof
    Newer,      // a newer header's longer struct, its unknown bytes zero (accepted)
    NewerSet,   // the same with one unknown byte set (refused)
    TooShort,   // below the 1.0 layout (refused)
};

// The calls after the plans are created, each with an argument from the bytes.
enum class Op : uint8_t {
    Execute,         // both plans, the same inputs; compared
    Poke,            // one input element set to an edge value
    Recreate,        // the n-thread plan destroyed and created again
    Misuse,          // one call with a NULL or out-of-range argument
    DescRoundTrip,   // a plan from sdm_p1_plan_desc's descriptor: the same views
    DropBuffer,      // an execute with one output buffer NULL or misaligned
    Count
};

struct Step {
    Op op;
    uint32_t arg;
};

// Which allocator the plans get.
enum class AllocatorKind {
    Default,      // the library's (only for runnable shapes)
    Capped,       // the harness's: refuses blocks over a cap, or its k-th allocation
    Misaligned,   // the harness's, its blocks 8 bytes off the alignment a plan needs (refused)
    HalfSet,      // alloc without free (refused)
};

// The input arrays in the order of sdm_p1_inputs; then, past them, the per-stream lengths
// (1.2), which the NULL, misaligned and poke choices leave alone.
enum Input { kIdx, qIdx, kVal, qVal, gGate, bBeta, kInputs };
constexpr int kLengths = kInputs;
constexpr int kArrays = kInputs + 1;

// The backward calls (sdm_p1_execute_backward) a case makes after each forward execute.
// Which payload the call gets.
enum class PayloadMode : uint8_t {
    Forward,   // the forward's PAYLOAD output (that execute's, on the same inputs)
    Null,      // NULL: the library sorts again
    Corrupt,   // the forward's, with one change (Corruption)
    Stale,     // the last successful forward's (inputs may have been poked since)
};

// The change a Corrupt payload gets, in one chunk (kept where it passes the check: the
// payload is then trusted, the gradients unspecified, never an access out of bounds).
enum class Corruption : uint8_t {
    Swap,         // two words swapped (passes unless it moves padding or the head)
    Duplicate,    // a word copied over another (refused)
    OutOfRange,   // a word's lane or token past the chunk's (refused)
    PaddingBit,   // bit 17 flipped (refused)
    HeadBit,      // bit 31 flipped (refused on a chunk's first word when it has valid tokens)
    Unread,       // bits 18-30 and the words past C * (W + R) changed: the same gradients
    Misaligned,   // the pointer one byte off (INVALID_ARGUMENT)
    Count
};

// One bad argument (at most one a call, so that the expected message is known).
enum class BackwardMisuse : uint8_t {
    None,
    NullPlan,             // plan NULL
    NullInputs,           // inputs NULL
    NullOut,              // out NULL
    BadCount,             // count -1 or SDM_P1_FIELD_COUNT + 1
    NullGrads,            // grads NULL with count > 0
    MisalignedUpstream,   // one given upstream gradient one byte off
    OutReserved,          // out->reserved set
    DropBeta,             // inputs->beta NULL (refused when a kspa gradient is given)
    InputsReserved,       // inputs->reserved set
    Count
};

// The input gradients, in the order of sdm_p1_input_grads.
enum InputGrad { gK, gQ, gG, gBeta, kInputGrads };

struct BackwardCall {
    PayloadMode payload;
    Corruption corruption;
    uint32_t corrupt_arg;   // chunk and positions of the corruption
    BackwardMisuse misuse;
    int32_t count;           // grads' count: SDM_P1_FIELD_COUNT, or less (later fields ignored)
    int32_t nondiff_field;   // a non-differentiable field given a gradient (refused), or -1
    uint32_t requested;      // bit per InputGrad: a buffer given
    uint32_t misaligned;     // bit per InputGrad: its buffer one byte off (refused)
    StructForm out_form;     // out's struct_size by the struct-size rule
    bool check_unread;       // run again with the never-read upstream cells zeroed: same bits
    bool twice;              // run again on the same plan: same bits
    // Upstream gradients by field, in the field's dtype (empty: NULL); the never-read cells
    // (docs/backward.md) sometimes hold NaN or garbage.
    std::vector<uint8_t> up[SDM_P1_FIELD_COUNT];
};

struct Case {
    sdm_p1_desc desc;   // as the caller filled it (num_threads: see below)
    StructForm desc_form, inputs_form;
    AllocatorKind allocator;
    uint32_t fail_allocation;               // Capped: the k-th allocation fails (0: none)
    int32_t threads;                        // num_threads of the second plan (the first has 1)
    bool runnable;                          // small enough to execute; arrays filled
    uint32_t null_inputs;                   // bit per Input: passed as NULL
    uint32_t misaligned_inputs;             // bit per Input: passed one byte past its array
    std::vector<uint8_t> arrays[kArrays];   // raw bytes in the descriptor's dtypes; the
                                            // lengths' in lengths_dtype (empty: none given)
    int32_t lengths_dtype;                  // stream_lengths_dtype, sometimes not a valid one
    std::vector<Step> steps;
    uint64_t seed;   // for the pokes' values
    // The backward calls (desc.backward and desc.grad_dtype are set with them); empty: none.
    // The k-th Execute step runs backward call k % size after its forward.
    std::vector<BackwardCall> backward;
};

// Whether field f is differentiable (has an upstream gradient), and its upstream gradient's
// element count and element bytes for desc d.
bool differentiable(int f);
size_t upstream_elements(const sdm_p1_desc& d, int f);
size_t upstream_element_bytes(const sdm_p1_desc& d, int f);

// The valid tokens of chunk c: by the stream lengths the case gives (a valid dtype, in range),
// else by valid_last. -1 when the lengths are out of range or of a refused dtype, or
// valid_last or num_parallel is one the plan refuses.
int64_t valid_tokens(const Case& c, int64_t chunk);

// Whether element i of field f's upstream gradient is one the backward never reads (cells of
// a at j >= i and of qk at j > i, rows and columns of padding tokens, padding entries and
// record rows). The lengths must be valid.
bool unread_upstream(const Case& c, int f, size_t i);

// The payload after call's corruption (not Misaligned, which is a pointer's), for the plan's
// payload row of `row` words.
void corrupt_payload(const Case& c, const BackwardCall& call, int64_t row, std::vector<int32_t>& payload);

// The header's payload rule, checked independently of the library: the first word (in chunk
// order, then position) that breaks it, as "payload[chunk, position]", or "" when none does.
// ids: the ids are given with it (the case's, which the forward passed), so it must be their
// sort too.
std::string payload_violation(const Case& c, const int32_t* payload, int64_t row, bool ids);

// Whether the case's inputs give k_idx or q_idx (a pointer that is not NULL).
bool ids_given(const Case& c);

// Decodes a case. Shapes are mostly small (and then runnable: each execute takes well under
// a millisecond), sometimes edge values in and out of the limits (created, never executed).
Case decode_case(const uint8_t* data, size_t size);

// Sets one element of one input array (chosen by arg) to an edge value: an id in or out of its
// stream's range, a NaN, infinite, huge or subnormal gate or value.
void poke(Case& c, uint32_t arg);

// The case's input pointers into copies of its arrays at `bases` (kArrays of them, indexed by
// Input and kLengths; host or device memory), NULL and misaligned as it says; host_inputs:
// into `c.arrays` themselves.
sdm_p1_inputs inputs_at(const Case& c, const uint8_t* const* bases);
sdm_p1_inputs host_inputs(const Case& c);

// A descriptor or inputs struct with room for a newer header's fields after it.
struct DescBuffer {
    sdm_p1_desc desc;
    uint64_t newer[2];
};
struct InputsBuffer {
    sdm_p1_inputs in;
    uint64_t newer[2];
};

struct InputGradsBuffer {
    sdm_p1_input_grads out;
    uint64_t newer[2];
};

// `desc` / `in` / `out` with struct_size and the newer bytes set by `form`.
DescBuffer sized_desc(const sdm_p1_desc& desc, StructForm form);
InputsBuffer sized_inputs(const sdm_p1_inputs& in, StructForm form);
InputGradsBuffer sized_input_grads(const sdm_p1_input_grads& out, StructForm form);

}   // namespace fuzz

#endif   // SDM_P1_FUZZ_CASE_H
