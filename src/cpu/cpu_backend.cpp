#include "cpu_backend.h"

#include <atomic>
#include <cfenv>
#include <cstdlib>
#include <vector>

#include "../checked_size.h"
#include "../errors.h"
#include "chunk.h"

namespace sdm_p1 {
namespace cpu {

namespace {

constexpr size_t kHostAlign = 64;

int host_alloc(void*, void** ptr, size_t bytes, void*) {
    // aligned_alloc wants a multiple of the alignment; a size that cannot be rounded fails.
    size_t rounded = 0;
    if (!add_within(bytes, kHostAlign - 1, &rounded)) return 1;
    *ptr = std::aligned_alloc(kHostAlign, rounded / kHostAlign * kHostAlign);
    return *ptr == nullptr ? 1 : 0;
}

void host_free(void*, void* ptr, size_t, void*) { std::free(ptr); }

// The arithmetic assumes IEEE round-to-nearest without flush-to-zero; a caller's process may
// have changed that (e.g. code built with -ffast-math), so each worker sets the default
// floating-point environment and restores the caller's afterwards.
class DefaultFloatEnv {
public:
    DefaultFloatEnv() {
        std::fegetenv(&saved_);
        std::fesetenv(FE_DFL_ENV);
    }
    ~DefaultFloatEnv() { std::fesetenv(&saved_); }
    DefaultFloatEnv(const DefaultFloatEnv&) = delete;
    DefaultFloatEnv& operator=(const DefaultFloatEnv&) = delete;

private:
    std::fenv_t saved_;
};

struct SharedState {
    std::atomic<int64_t> next_chunk{0};
    // Chunks at or after the lowest failing chunk are skipped; every earlier one still runs,
    // so the error reported is always the first in chunk order.
    std::atomic<int64_t> first_error_chunk{INT64_MAX};
};

struct WorkerResult {
    int64_t repeats = 0;
    int64_t error_chunk = INT64_MAX;
    InputError error{};
};

void worker(const Options& o, const InputRecord& in, const OutputBuffers& out, void* scratch,
            SharedState& shared, WorkerResult& mine) {
    DefaultFloatEnv env;
    ChunkScratch s;
    s.bind(scratch, o);
    for (;;) {
        const int64_t c = shared.next_chunk.fetch_add(1);
        if (c >= o.N || c >= shared.first_error_chunk.load()) return;
        const ChunkResult r = compute_chunk(o, in, out, c, s);
        mine.repeats += r.repeats;
        if (r.error.found) {
            if (c < mine.error_chunk) {
                mine.error_chunk = c;
                mine.error = r.error;
            }
            int64_t seen = shared.first_error_chunk.load();
            while (c < seen && !shared.first_error_chunk.compare_exchange_weak(seen, c)) {
            }
        }
    }
}

// One execute's job, shared by the calling thread (worker 0) and the pool's workers.
struct Job {
    const Options* o;
    const InputRecord* in;
    const OutputBuffers* out;
    char* workspace;
    size_t scratch_bytes;   // per worker
    SharedState shared;
    std::vector<WorkerResult> results;

    static void run(void* context, int w) {
        Job& j = *static_cast<Job*>(context);
        worker(*j.o, *j.in, *j.out, j.workspace + j.scratch_bytes * static_cast<size_t>(w), j.shared,
               j.results[static_cast<size_t>(w)]);
    }
};

}  // namespace

void Backend::prepare(const Options& o, size_t) {
    if (!mul_within(static_cast<size_t>(o.num_threads), ChunkScratch::bytes(o), &workspace_bytes_)) {
        too_large("the CPU workspace (", o.num_threads, " threads' scratch)");
    }
}

sdm_p1_allocator Backend::default_allocator() const { return sdm_p1_allocator{nullptr, host_alloc, host_free}; }

Block Backend::allocate(const sdm_p1_allocator& allocator, size_t bytes) const {
    return Block(allocator, bytes, alignment());
}

void Backend::execute(const Options& o, const InputRecord& in, void* workspace, void*) {
    const OutputBuffers& out = in.out;
    // Bad lengths are reported before any chunk runs (no output is written).
    if (in.stream_lengths != nullptr) {
        const int64_t bad = first_bad_length(o, in.stream_lengths, in.lengths64);
        if (bad >= 0) report_length_error(o, bad, load_id(in.stream_lengths, in.lengths64, bad));
    }
    Job job{&o, &in, &out, static_cast<char*>(workspace), ChunkScratch::bytes(o), {},
            std::vector<WorkerResult>(static_cast<size_t>(o.num_threads))};
    pool_.run(&Job::run, &job);
    const std::vector<WorkerResult>& results = job.results;

    int64_t repeats = 0;
    const WorkerResult* failed = nullptr;
    for (const WorkerResult& r : results) {
        repeats += r.repeats;
        if (r.error_chunk != INT64_MAX && (failed == nullptr || r.error_chunk < failed->error_chunk)) {
            failed = &r;
        }
    }
    if (failed != nullptr) report_input_error(o, failed->error_chunk, failed->error);
    out.repeats[0] = repeats;
}

}  // namespace cpu
}  // namespace sdm_p1
