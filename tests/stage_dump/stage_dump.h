// The stage dump of one chunk: every array each stage writes, as the stage leaves it
// (docs/design.md, "The stages"), widened to 64-bit words, and the chunk kinds both halves of
// the stage test run: tests/stage_dump/test_stage_dump.cpp (the CPU stages against an independent
// computation of each stage's contract) and tests/stage_dump/test_stage_dump_cuda.cu (the general
// kernel's stages against the CPU's, stage by stage). Host C++; device code reads only
// DumpArray and DumpLayout.
#ifndef SDM_P1_TESTS_STAGE_DUMP_H
#define SDM_P1_TESTS_STAGE_DUMP_H

#include <cstdint>
#include <string>
#include <vector>

#include "../../src/input_error.h"
#include "../../src/input_record.h"
#include "../../src/options.h"
#include "../../src/outputs.h"

namespace stage_dump {

// The dumped arrays in stage order; a stage's counts are the kernel's ChunkShared words.
enum DumpArray : int {
    kLoadKeys,          // load and check: keys by entry
    kLoadValue,         //   value by entry (float bits)
    kLoadGate,          //   gate by t * gate_width + lane (Fix: low word, high word)
    kLoadGateExp,       //   gate_exp by token (double bits; per-token gates only)
    kLoadWalkMask,      //   walk_mask (cleared)
    kSortKeys,          // sort: keys by sorted position
    kDecodePayload,     // decode: payload by sorted position
    kDecodePosition,    //   position by entry
    kDecodeSlot,        //   slot by sorted position
    kForwardLog,        // scans, forward: log by sorted position (Fix)
    kForwardBefore,     //   before
    kForwardWrites,     //   writes
    kForwardCounts,     //   repeats, walkers
    kBackwardEnd,       // scans, backward: end by sorted position
    kBackwardFirsts,    //   firsts
    kBackwardPayload,   //   payload (kLastK set)
    kBackwardCounts,    //   valid_groups
    kRecordsWalkMask,   // records: walk_mask
    kPairsWriteRow,     // pair sums: write_row by write-row index
    kDumpArrays
};

// The stage, name, element type and index of each array (by DumpArray).
struct ArraySpec {
    const char* stage;
    const char* name;
    const char* type;
    const char* index;
};
extern const ArraySpec kSpecs[kDumpArrays];

// Where each array lies in a chunk's dump (a vector of 64-bit words).
struct DumpLayout {
    uint64_t count[kDumpArrays];    // elements
    uint64_t words[kDumpArrays];    // words an element (2 for Fix, else 1)
    uint64_t offset[kDumpArrays];   // its first word
    uint64_t total;
};
DumpLayout dump_layout(const sdm_p1::Options& o);

// One chunk kind: a plan's descriptor (the CPU backend, every field) and its inputs.
struct Case {
    std::string name;
    sdm_p1::Options options;
    std::vector<unsigned char> k_idx, q_idx, k_val, q_val;   // the descriptor's dtypes
    std::vector<float> g, beta;
};

// Uniform ids, hot slots, repeats within a token, padding tokens, one slot, a chunk long
// enough for merge rounds in the kernel's sort, and gates that need the wide log form.
std::vector<Case> make_cases();

// The id (slot id, before the stream's offset is taken off) and the value of lane `lane` of
// token tok (global) of a case.
int64_t input_id(const Case& c, bool is_q, int64_t tok, int lane);
float input_value(const Case& c, bool is_q, int64_t tok, int lane);

// Host buffers for every field a case's plan computes (each filled with `fill` bytes).
struct HostOutputs {
    std::vector<std::vector<unsigned char>> fields;   // by sdm_p1_field
    sdm_p1::OutputBuffers buffers;
};
HostOutputs host_outputs(const sdm_p1::Options& o, unsigned char fill);

sdm_p1::InputRecord input_record(const Case& c, const sdm_p1::OutputBuffers& out);

// Runs the CPU stages of chunk `chunk` one by one into `out`, recording each stage's arrays in
// `dump` (dump_layout's words). Returns the load stage's error (found: it stopped there).
sdm_p1::InputError run_cpu_stages(const Case& c, const sdm_p1::OutputBuffers& out, int64_t chunk,
                                  std::vector<uint64_t>* dump);

// The library's own computation of chunk `chunk` (compute_chunk) into `out`.
void compute_chunk_whole(const Case& c, const sdm_p1::OutputBuffers& out, int64_t chunk);

// Compares the dump `got` (named got_name in the messages) with `want` stage by stage: a line
// per stage ("  sort: keys 512/512 equal"); at the first difference, its stage, array and
// index, and no further. True where every array is equal.
bool compare_dumps(const DumpLayout& l, const std::vector<uint64_t>& want, const std::vector<uint64_t>& got,
                   const char* want_name, const char* got_name);

}   // namespace stage_dump

#endif   // SDM_P1_TESTS_STAGE_DUMP_H
