// The CPU backend's computation of one chunk: every output of the chunk, with the canonical
// arithmetic of phase1_shared.h.
#ifndef SDM_P1_CPU_CHUNK_H
#define SDM_P1_CPU_CHUNK_H

#include <cstddef>
#include <cstdint>

#include "../input_error.h"
#include "../input_record.h"
#include "../options.h"
#include "../outputs.h"
#include "../phase1_shared.h"
#include "sdm/phase1.h"

namespace sdm_p1 {
namespace cpu {

// One worker's scratch arrays (n = C * (W + R) entries each), carved from the plan's workspace.
struct ChunkScratch {
    uint64_t* sort_keys;       // key << 17 | entry, then sorted
    uint32_t* payload;         // sorted payload words
    Fix* log;                  // inclusive log-cumsum of the group at each sorted position
    Fix* rex;                  // sum of the gates after each sorted position in its group
    uint32_t* writes_before;   // write entries (valid or padding) before it in the sorted row
    uint32_t* own_writes;      // K entries: earlier K entries of its token in its group (repeats)
    uint32_t* write_row;       // the sorted positions of the write entries, in order (C * W used)
    uint32_t* before;          // peers (valid entries of its own kind) before it in its group
    uint32_t* after;           // peers after it in its group
    int32_t* head;             // sorted position of its group's first entry
    int32_t* position;         // by entry: its sorted position
    float* value;              // its k_val / q_val as float (0 for padding)
    Fix* gate;                 // C * gate_width: the chunk's gates in fixed point (valid tokens)
    double* row_sums;          // 2 * C: one row of a, then of qk

    static size_t bytes(const Options& opt);
    // Lays the arrays out from `base` (16-byte aligned, bytes(opt) long).
    void bind(void* base, const Options& opt);
};

struct ChunkResult {
    int64_t repeats;
    InputError error;   // when found, the chunk's outputs are unspecified
};

ChunkResult compute_chunk(const Options& opt, const InputRecord& in, const OutputBuffers& out, int64_t chunk,
                          const ChunkScratch& s);

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_CHUNK_H
