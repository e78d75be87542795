// The CPU backend's backward of one chunk (docs/backward.md): its data check, then its input
// gradients, with the canonical arithmetic of canon/backward_terms.h.
#ifndef SDM_P1_CPU_CHUNK_BACKWARD_H
#define SDM_P1_CPU_CHUNK_BACKWARD_H

#include <cstddef>
#include <cstdint>

#include "../backward_record.h"
#include "../input_error.h"
#include "../options.h"
#include "../payload_error.h"
#include "chunk.h"

namespace sdm_p1 {
namespace cpu {

// One worker's scratch for the backward: the forward's arrays (the sort and the group scans
// are the forward's own stages), then the backward's, carved from the plan's workspace.
struct BackwardScratch {
    ChunkScratch fwd;
    double* e_log;         // n: exp(log-cumsum) at each sorted position
    double* gbar;          // n: the adjoint of each entry's log-cumsum
    double* rbar_before;   // n, K entries: the sum of rbar over its group's earlier K entries
    double* xbar;          // C * W: each non-repeat K entry's gate adjoint, by token and lane
    uint64_t* seen;        // ceil(n / 64): the entries the payload check has seen

    static size_t bytes(const Options& opt);
    // Lays the arrays out from `base` (16-byte aligned, bytes(opt) long).
    void bind(void* base, const Options& opt);
};

// What the data check of a chunk found first: a bad payload word, else a bad id or gate.
struct BackwardCheck {
    PayloadError payload;
    InputError input;
};

inline bool failed(const BackwardCheck& r) { return r.payload.found || r.input.found; }

// The data check of chunk c: its payload row (when given) and gates, or its ids and gates
// (as the forward checks them). Writes no gradient.
BackwardCheck check_chunk_backward(const Options& opt, const BackwardRecord& b, int64_t chunk,
                                   const BackwardScratch& s);

// Every requested input gradient of chunk c, whose data check passed.
void backward_chunk(const Options& opt, const BackwardRecord& b, int64_t chunk, const BackwardScratch& s);

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_CHUNK_BACKWARD_H
