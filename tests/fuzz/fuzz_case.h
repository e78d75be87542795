// One fuzz case: a descriptor, input arrays and a call sequence decoded from the fuzzer's
// bytes. Shared by the libFuzzer harness (fuzz_api.cpp) and the CUDA replay (replay_cuda.cpp),
// so a corpus means the same to both. Every byte string is a case (bytes past the end read as
// zero), and the same bytes always give the same case.
#ifndef SDM_P1_FUZZ_CASE_H
#define SDM_P1_FUZZ_CASE_H

#include <cstddef>
#include <cstdint>
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
};

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

// `desc` / `in` with struct_size and the newer bytes set by `form`.
DescBuffer sized_desc(const sdm_p1_desc& desc, StructForm form);
InputsBuffer sized_inputs(const sdm_p1_inputs& in, StructForm form);

}   // namespace fuzz

#endif   // SDM_P1_FUZZ_CASE_H
