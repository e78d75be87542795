#include "cpu_backend.h"

#include <atomic>
#include <cfenv>
#include <cstdlib>
#include <vector>

#include "../checked_size.h"
#include "../errors.h"
#include "chunk.h"
#include "chunk_backward.h"

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

// The first failure of a run over the chunks: its chunk (INT64_MAX: none) and what was found.
template <typename Failure>
struct FirstFailure {
    int64_t chunk = INT64_MAX;
    Failure failure{};
};

// A backward's compute pass, whose data were checked before: nothing can fail.
struct NoFailure {};
bool failed(const NoFailure&) { return false; }
bool failed(const InputError& e) { return e.found; }

// Runs visit(c, scratch, worker) -> Failure for every chunk, on the calling thread (worker 0)
// and the pool's workers, each with its own scratch of `scratch_bytes` in the workspace.
// Chunks at or after the lowest failing chunk are skipped; every earlier one still runs, so
// the failure returned is always the first in chunk order, whatever the threads do.
template <typename Failure, typename Visit>
FirstFailure<Failure> for_each_chunk(WorkerPool& pool, const Options& o, char* workspace, size_t scratch_bytes,
                                     Visit& visit) {
    struct Job {
        Job(const Options& opt, char* ws, size_t bytes, Visit& v)
            : o(&opt), workspace(ws), scratch_bytes(bytes), visit(&v), results(static_cast<size_t>(opt.num_threads)) {}

        const Options* o;
        char* workspace;
        size_t scratch_bytes;
        Visit* visit;
        std::atomic<int64_t> next_chunk{0};
        std::atomic<int64_t> first_failure{INT64_MAX};
        std::vector<FirstFailure<Failure>> results;   // by worker

        static void run(void* context, int w) {
            Job& j = *static_cast<Job*>(context);
            DefaultFloatEnv env;
            void* scratch = j.workspace + j.scratch_bytes * static_cast<size_t>(w);
            FirstFailure<Failure>& mine = j.results[static_cast<size_t>(w)];
            for (;;) {
                const int64_t c = j.next_chunk.fetch_add(1);
                if (c >= j.o->N || c >= j.first_failure.load()) return;
                const Failure f = (*j.visit)(c, scratch, w);
                if (!failed(f)) continue;
                if (c < mine.chunk) mine = FirstFailure<Failure>{c, f};
                int64_t seen = j.first_failure.load();
                while (c < seen && !j.first_failure.compare_exchange_weak(seen, c)) {}
            }
        }
    };
    Job job(o, workspace, scratch_bytes, visit);
    pool.run(&Job::run, &job);
    FirstFailure<Failure> first;
    for (const FirstFailure<Failure>& r : job.results) {
        if (r.chunk < first.chunk) first = r;
    }
    return first;
}

// Bad lengths are reported before any chunk runs (no output is written).
void check_lengths(const Options& o, const InputRecord& in, const char* who) {
    if (in.stream_lengths == nullptr) return;
    const int64_t bad = first_bad_length(o, in.stream_lengths, in.lengths64);
    if (bad >= 0) report_length_error(o, bad, load_id(in.stream_lengths, in.lengths64, bad), who);
}

}   // namespace

void Backend::prepare(const Options& o, size_t) {
    scratch_bytes_ = o.backward ? BackwardScratch::bytes(o) : ChunkScratch::bytes(o);
    if (!mul_within(static_cast<size_t>(o.num_threads), scratch_bytes_, &workspace_bytes_)) {
        too_large("the CPU workspace (", o.num_threads, " threads' scratch)");
    }
}

sdm_p1_allocator Backend::default_allocator() const { return sdm_p1_allocator{nullptr, host_alloc, host_free}; }

Block Backend::allocate(const sdm_p1_allocator& allocator, size_t bytes) const {
    return Block(allocator, bytes, alignment());
}

void Backend::execute(const Options& o, const InputRecord& in, void* workspace, void*) {
    check_lengths(o, in, "sdm_p1_execute");
    std::vector<int64_t> repeats(static_cast<size_t>(o.num_threads), 0);   // by worker
    auto chunk = [&](int64_t c, void* scratch, int w) {
        ChunkScratch s;
        s.bind(scratch, o);
        const ChunkResult r = compute_chunk(o, in, in.out, c, s);
        repeats[static_cast<size_t>(w)] += r.repeats;
        return r.error;
    };
    char* const ws = static_cast<char*>(workspace);
    const FirstFailure<InputError> bad = for_each_chunk<InputError>(pool_, o, ws, scratch_bytes_, chunk);
    if (bad.chunk != INT64_MAX) report_input_error(o, bad.chunk, bad.failure);
    int64_t total = 0;
    for (const int64_t r : repeats) total += r;
    in.out.repeats[0] = total;
}

void Backend::execute_backward(const Options& o, const BackwardRecord& b, void* workspace, void*) {
    const char* const who = "sdm_p1_execute_backward";
    char* const ws = static_cast<char*>(workspace);
    check_lengths(o, b.in, who);
    // Every chunk's data are checked before any gradient is written.
    auto check = [&](int64_t c, void* scratch, int) {
        BackwardScratch s;
        s.bind(scratch, o);
        return check_chunk_backward(o, b, c, s);
    };
    const FirstFailure<BackwardCheck> bad = for_each_chunk<BackwardCheck>(pool_, o, ws, scratch_bytes_, check);
    if (bad.failure.payload.found) report_payload_error(o, bad.chunk, bad.failure.payload);
    if (bad.failure.input.found) report_input_error(o, bad.chunk, bad.failure.input, who);
    const InputGradBuffers& g = b.grads;
    if (g.k_val == nullptr && g.q_val == nullptr && g.g == nullptr && g.beta == nullptr) return;
    auto compute = [&](int64_t c, void* scratch, int) {
        BackwardScratch s;
        s.bind(scratch, o);
        backward_chunk(o, b, c, s);
        return NoFailure{};
    };
    for_each_chunk<NoFailure>(pool_, o, ws, scratch_bytes_, compute);
}

}   // namespace cpu
}   // namespace sdm_p1
