#include "chunk.h"

#include "chunk_stages.h"

namespace sdm_p1 {
namespace cpu {

namespace {

// Bytes of the walker masks of a chunk.
size_t walk_mask_bytes(const Options& o) {
    return static_cast<size_t>(o.C) * static_cast<size_t>(mask_words(o.W) + mask_words(o.R)) * sizeof(uint32_t);
}

}   // namespace

size_t ChunkScratch::bytes(const Options& o) {
    const size_t n = static_cast<size_t>(o.n()), C = static_cast<size_t>(o.C);
    return align64(n * sizeof(uint64_t)) + align64(n * sizeof(float)) +
           align64(C * static_cast<size_t>(o.gate_width) * sizeof(Fix)) +
           (o.gate_width == 1 ? align64(C * sizeof(double)) : 0) + align64(walk_mask_bytes(o)) +
           3 * align64(n * sizeof(uint32_t)) + align64(n * sizeof(Fix)) + 4 * align64(n * sizeof(uint32_t)) +
           align64(C * static_cast<size_t>(o.W) * sizeof(uint32_t)) + align64(2 * C * sizeof(double)) +
           align64(C * static_cast<size_t>(o.W) * sizeof(double)) +
           align64(C * static_cast<size_t>(o.W) * sizeof(int32_t)) + align64(C * sizeof(Fix)) +
           align64(C * sizeof(double)) + align64(C * sizeof(int32_t));
}

void ChunkScratch::bind(void* base, const Options& o) {
    const size_t n = static_cast<size_t>(o.n()), C = static_cast<size_t>(o.C);
    char* p = static_cast<char*>(base);
    keys = take<uint64_t>(p, n);
    value = take<float>(p, n);
    gate = take<Fix>(p, C * static_cast<size_t>(o.gate_width));
    gate_exp = o.gate_width == 1 ? take<double>(p, C) : nullptr;
    walk_mask = take<uint32_t>(p, walk_mask_bytes(o) / sizeof(uint32_t));
    payload = take<uint32_t>(p, n);
    position = take<uint32_t>(p, n);
    slot = take<uint32_t>(p, n);
    log = take<Fix>(p, n);
    before = take<uint32_t>(p, n);
    writes = take<uint32_t>(p, n);
    end = take<uint32_t>(p, n);
    firsts = take<uint32_t>(p, n);
    write_row = take<uint32_t>(p, C * static_cast<size_t>(o.W));
    row_sums = take<double>(p, 2 * C);
    run_exp = take<double>(p, C * static_cast<size_t>(o.W));
    run_row = take<int32_t>(p, C * static_cast<size_t>(o.W));
    token_arg = take<Fix>(p, C);
    token_exp = take<double>(p, C);
    token_row = take<int32_t>(p, C);
}

// The stages in order, as the general kernel runs them (phase1_kernel in
// kernels/general/phase1_kernel.cuh, a thread block a chunk), under the same names.
__attribute__((flatten SDM_P1_FMA_CLONE)) ChunkResult compute_chunk(const Options& o, const InputRecord& in,
                                                                    const OutputBuffers& out, int64_t c,
                                                                    const ChunkScratch& s) {
    const Chunk k = chunk_of(o, in, c);
    ChunkResult result{};
    result.error = load_and_check(k, in, s);
    if (result.error.found) return result;
    sort_entries(k, s);
    decode(k, s);
    ChunkCounts counts{};
    scan_forward(k, s, counts);
    scan_backward(k, s, counts);
    write_records(k, in, out, s, counts);
    pair_sums(k, out, s);
    result.repeats = counts.repeats;
    return result;
}

}   // namespace cpu
}   // namespace sdm_p1
