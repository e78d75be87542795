// The CPU backend: chunks spread over the plan's worker threads, each with its own scratch.
#ifndef SDM_P1_CPU_BACKEND_H
#define SDM_P1_CPU_BACKEND_H

#include <cstddef>

#include "../backend.h"
#include "worker_pool.h"

namespace sdm_p1 {
namespace cpu {

class Backend final : public sdm_p1::Backend {
public:
    // A pool of num_threads - 1 workers beside the calling thread.
    explicit Backend(int num_threads) : pool_(num_threads - 1) {}

    // The workspace: one chunk's scratch per thread (the forward's, or the backward's, which
    // holds it, for a plan with backward).
    void prepare(const Options& o, size_t output_bytes) override;
    size_t workspace_bytes() const override { return workspace_bytes_; }
    size_t alignment() const override { return 16; }
    // Host memory aligned to 64 bytes.
    sdm_p1_allocator default_allocator() const override;
    Block allocate(const sdm_p1_allocator& allocator, size_t bytes) const override;
    void release(Block& block) const noexcept override { block = Block(); }

    // Computes every chunk on the calling thread and the pool. Throws Error
    // (SDM_P1_ERROR_INVALID_INPUT) for the first bad input in chunk order,
    // SDM_P1_ERROR_OUT_OF_MEMORY when a worker cannot be started; the bits never depend on
    // the number of threads. `stream` is unused.
    void execute(const Options& o, const InputRecord& in, void* workspace, void* stream) override;

    // The backward of every chunk on the calling thread and the pool: a first pass checks
    // every chunk's data (lengths, payload, ids, gates), throwing Error (INVALID_INPUT) for
    // the first bad one in chunk order before any gradient is written; a second computes the
    // gradients. The bits never depend on the number of threads. `stream` is unused.
    void execute_backward(const Options& o, const BackwardRecord& b, void* workspace, void* stream) override;

    // The CPU reports bad data in execute: nothing is left to check.
    void check_status(const Options&, void*) const override {}

private:
    size_t scratch_bytes_ = 0;   // per thread: a chunk's scratch (the backward's with backward)
    size_t workspace_bytes_ = 0;
    WorkerPool pool_;
};

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_BACKEND_H
