// The CPU backend: chunks spread over the plan's worker threads, each with its own scratch.
#ifndef SDM_P1_CPU_BACKEND_H
#define SDM_P1_CPU_BACKEND_H

#include <cstddef>

#include "../options.h"
#include "../outputs.h"
#include "sdm/phase1.h"
#include "worker_pool.h"

namespace sdm_p1 {
namespace cpu {

// Workspace bytes a plan needs: one chunk's scratch per worker thread.
size_t workspace_bytes(const Options& opt);

// Computes every chunk into `out` on the calling thread and the plan's pool (its
// opt.num_threads - 1 workers). Throws Error (SDM_P1_ERROR_INVALID_INPUT) for the first bad
// input in chunk order, SDM_P1_ERROR_OUT_OF_MEMORY when a worker cannot be started; the bits
// never depend on opt.num_threads.
void execute(const Options& opt, const sdm_p1_inputs& in, const OutputBuffers& out,
             void* workspace, WorkerPool& pool);

}  // namespace cpu
}  // namespace sdm_p1

#endif  // SDM_P1_CPU_BACKEND_H
