#include "plan_cache.h"

#include <array>
#include <map>
#include <memory>

#include "handlers.h"

namespace sdmp1_jax {

namespace {

// Every descriptor field a plan depends on, and the stream.
using Key = std::array<int64_t, 21>;

Key key_of(const sdm_p1_desc& d, void* stream) {
    return {d.N,
            d.C,
            d.W,
            d.R,
            d.num_parallel,
            d.stream_offset,
            d.num_keys,
            d.valid_last,
            d.index_dtype,
            d.value_dtype,
            d.gate_width,
            d.need_read_groups,
            d.det_fields,
            d.rec_tile,
            d.backend,
            d.device,
            d.num_threads,
            d.output_mode,
            d.backward,
            d.grad_dtype,
            static_cast<int64_t>(reinterpret_cast<intptr_t>(stream))};
}

struct Cache {
    std::mutex mutex;
    std::map<Key, std::unique_ptr<CachedPlan>> plans;
    int64_t created = 0;
};

// Allocated once and never destroyed: destroying the plans at exit would join worker threads
// and free device memory after the CUDA runtime or XLA may already have been torn down.
Cache& cache() {
    static Cache* c = new Cache;
    return *c;
}

}   // namespace

CachedPlan* get_plan(const sdm_p1_desc& desc, void* stream, sdm_p1_status* status) {
    Cache& c = cache();
    const Key key = key_of(desc, stream);
    // Created under the lock: creation is rare, and two threads must not both create one.
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.plans.find(key);
    if (found != c.plans.end()) {
        *status = SDM_P1_SUCCESS;
        return found->second.get();
    }
    auto entry = std::make_unique<CachedPlan>();
    *status = sdm_p1_plan_create(&entry->plan, &desc);
    if (*status != SDM_P1_SUCCESS) return nullptr;
    *status = sdm_p1_outputs(entry->plan, entry->views, SDM_P1_FIELD_COUNT);
    if (*status != SDM_P1_SUCCESS) {
        sdm_p1_plan_destroy(entry->plan);   // the message of the failed call stays the last error
        return nullptr;
    }
    c.created += 1;
    CachedPlan* plan = entry.get();
    c.plans.emplace(key, std::move(entry));
    return plan;
}

int64_t plans_created() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    return c.created;
}

}   // namespace sdmp1_jax

int64_t sdmp1_jax_plans_created(void) { return sdmp1_jax::plans_created(); }
