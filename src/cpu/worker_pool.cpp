#include "worker_pool.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "../errors.h"

namespace sdm_p1 {
namespace cpu {

struct WorkerPool::Crew {
    pid_t pid = 0;   // the process the threads run in
    std::mutex mutex;
    std::condition_variable wake;   // a job was posted, or stop
    std::condition_variable done;   // the last active worker finished
    uint64_t generation = 0;        // counts the jobs posted
    bool open = false;              // the posted job still takes workers
    bool stop = false;
    int active = 0;   // workers inside the posted job
    Task task = nullptr;
    void* context = nullptr;
    std::vector<std::thread> threads;

    void work(int w) {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
            wake.wait(lock, [&] { return stop || generation != seen; });
            if (stop) return;
            seen = generation;
            if (!open) continue;   // woke after the caller closed the job: nothing left
            ++active;
            const Task t = task;
            void* const c = context;
            lock.unlock();
            t(c, w);
            lock.lock();
            if (--active == 0) done.notify_one();
        }
    }

    void stop_and_join() {
        {
            const std::lock_guard<std::mutex> lock(mutex);
            stop = true;
        }
        wake.notify_all();
        for (std::thread& t : threads) t.join();
        threads.clear();
    }
};

WorkerPool::WorkerPool(int workers) : workers_(workers) {}

WorkerPool::~WorkerPool() {
    if (!crew_) return;
    if (crew_->pid != getpid()) {
        (void)crew_.release();   // forked child: the threads are not here to join
        return;
    }
    crew_->stop_and_join();
}

void WorkerPool::start() {
    if (crew_ && crew_->pid != getpid()) {
        // Forked since the threads started: the child has none of them, and their mutex may
        // have been held at the fork. Leave that copy untouched and start afresh.
        (void)crew_.release();
    }
    if (crew_) return;
    auto crew = std::make_unique<Crew>();
    crew->pid = getpid();
    crew->threads.reserve(static_cast<size_t>(workers_));
    for (int w = 1; w <= workers_; ++w) {
        try {
            crew->threads.emplace_back(&Crew::work, crew.get(), w);
        } catch (const std::system_error& e) {
            crew->stop_and_join();
            fail(SDM_P1_ERROR_OUT_OF_MEMORY, "sdm_p1_execute: could not start CPU worker thread ", w, " of ", workers_,
                 " (", e.what(),
                 "); a plan with fewer threads (sdm_p1_desc.num_threads) "
                 "needs fewer");
        }
    }
    crew_ = std::move(crew);
}

void WorkerPool::run(Task task, void* context) {
    if (workers_ == 0) {
        task(context, 0);
        return;
    }
    start();
    Crew& c = *crew_;
    {
        const std::lock_guard<std::mutex> lock(c.mutex);
        c.task = task;
        c.context = context;
        c.open = true;
        ++c.generation;
    }
    c.wake.notify_all();
    task(context, 0);
    std::unique_lock<std::mutex> lock(c.mutex);
    c.open = false;
    c.done.wait(lock, [&] { return c.active == 0; });
}

}   // namespace cpu
}   // namespace sdm_p1
