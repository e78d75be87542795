// The spread path's plan-time facts: how many chunks may hand their pair sums to the spread
// kernel, and where a chunk's arrays lie in its slot. Plain C++ (no CUDA headers): the host
// side sizes the pool and the kernels read the same struct (kernels/spread/README.md says
// what the path is).
#ifndef SDM_P1_KERNELS_SPREAD_SPREAD_LAYOUT_H
#define SDM_P1_KERNELS_SPREAD_SPREAD_LAYOUT_H

#include <cstddef>
#include <cstdint>

namespace sdm_p1 {
namespace cuda {

// The spread kernel's block: 8 warps, each with a unit's double row in shared memory.
constexpr int kSpreadThreads = 256;

// A chunk's pair terms from which the main kernel hands its units to the spread kernel (by
// default; SDMP1_SPREAD_TERMS overrides it at plan creation, src/cuda/cuda_backend.cpp).
constexpr uint64_t kSpreadMinTerms = 65536;

// The slots may take this many bytes of workspace even where the outputs are fewer (one
// chunk at C = W = R = 256 needs 4.7 MB, its default outputs 3.6 MB); else twice the outputs.
constexpr size_t kSpreadSlotsFloor = size_t{64} << 20;

// A slot holds one chunk's arrays as the main kernel left them after listing its write row
// (stage "pair sums"), byte for byte, so the spread kernel's warps read them as the main
// kernel's would. Whole chunks take slots from the pool's start, split ones from its end
// (DeviceStatus::spread_taken), so that each spread kernel finds its own slots without
// reading theirs. Offsets are from the slot's start; capacity == 0: the plan has no spread
// path.
struct SpreadLayout {
    int64_t capacity;     // slots (chunks that may be handed over in one execute)
    size_t slot_bytes;    // a multiple of 256
    uint64_t min_terms;   // a chunk's pair terms from which it is handed over
    // A 16-byte header (SpreadHeader), then the arrays of ArrayLayout under the same names:
    // payload, log_low (compact form), writes and before interleaved with the plan's stride;
    // the write row; position and value by entry; the runs (where writes repeat slots).
    // Then `facts`: each write's cell, value and log by write-row index (SpreadWrite), which
    // a run-term reads in one load where the arrays take three in a row.
    size_t payload, log_low, writes, before, write_row, position, value, runs, facts;
    size_t payload_bytes, log_bytes, count_bytes, write_row_bytes, position_bytes, value_bytes, runs_bytes, facts_bytes;
    int grid;            // spread kernel blocks (each loops over the units)
    size_t smem_bytes;   // its dynamic shared memory: a double row of C cells a warp
};

// A write's facts in a slot (WriteFacts, kernels/common/pair_common.cuh): its compact log, value and
// cell (token).
struct alignas(16) SpreadWrite {
    uint64_t log;
    float value;
    int32_t cell;
};

// A chunk whose pair terms reach this many a cell of a and qk (C * C cells: the worst chunks,
// whose units reach every cell) has each unit split into parts of kSpreadPartCells cells, a
// warp a part, so its longest rows are no longer one warp's work (every id on one slot at
// C = 256: a row's 65,536 terms a cell). S8's chunks have 11.5 a cell, 26 at Zipf 1.5: they
// stay whole, as the windows path of a part reads every run-term of its unit.
constexpr uint64_t kSpreadSplitTermsPerCell = 64;
constexpr int kSpreadPartCells = 32;   // a part: the cells of one dense pass (pair_dense.cuh)

// What a slot's first 16 bytes say about its chunk.
struct SpreadHeader {
    int64_t chunk;
    int32_t shift;   // the compact log-cumsums' shift (LogArray::shift)
    uint32_t runs;   // 1: the runs were listed (writes repeat slots of their tokens)
};

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_SPREAD_SPREAD_LAYOUT_H
