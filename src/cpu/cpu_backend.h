// The CPU backend: chunks spread over worker threads, each with its own scratch.
#ifndef SDM_P1_CPU_BACKEND_H
#define SDM_P1_CPU_BACKEND_H

#include <cstddef>

#include "../options.h"
#include "../outputs.h"
#include "sdm/phase1.h"

namespace sdm_p1 {
namespace cpu {

// Workspace bytes a plan needs: one chunk's scratch per worker thread.
size_t workspace_bytes(const Options& opt);

// Computes every chunk into `out`. Throws Error (SDM_P1_ERROR_INVALID_INPUT) for the first bad
// input in chunk order; the bits never depend on opt.num_threads.
void execute(const Options& opt, const sdm_p1_inputs& in, const OutputBuffers& out,
             void* workspace);

}  // namespace cpu
}  // namespace sdm_p1

#endif  // SDM_P1_CPU_BACKEND_H
