// The worker threads of one CPU plan, kept between executes: started by the first run in a
// process, parked on a condition variable between runs, joined when the pool is destroyed.
#ifndef SDM_P1_CPU_WORKER_POOL_H
#define SDM_P1_CPU_WORKER_POOL_H

#include <memory>

namespace sdm_p1 {
namespace cpu {

class WorkerPool {
public:
    // A job: called once on the calling thread as task(context, 0) and at most once on each
    // worker w (1..workers) as task(context, w). Must not throw.
    using Task = void (*)(void* context, int worker);

    explicit WorkerPool(int workers);
    // Stops and joins the workers (in the process that started them; after a fork they do
    // not exist in the child, whose copy of their bookkeeping is left unfreed).
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    // Runs task on the calling thread and offers it to the workers; returns once the caller's
    // part and every worker's part that started are done. A worker that wakes after the
    // caller's part has finished skips the job, so a job the caller finishes alone (a tiny
    // one) never waits for a worker to be scheduled. Not reentrant: one run at a time.
    // Throws Error (SDM_P1_ERROR_OUT_OF_MEMORY) when a worker thread cannot be started.
    void run(Task task, void* context);

private:
    struct Crew;   // the threads and what they share, of one process
    void start();

    int workers_;
    std::unique_ptr<Crew> crew_;
};

}   // namespace cpu
}   // namespace sdm_p1

#endif   // SDM_P1_CPU_WORKER_POOL_H
