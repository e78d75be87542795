/* Loading libsdmp1 at run time with dlopen, as a runtime that does not link against it would:
 * every entry point through dlsym, the version checked before use.
 *   phase1_dlopen [path/to/libsdmp1.so.1]     (default: the loader's search path) */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sdm/phase1.h"

typedef unsigned (*version_fn)(void);
typedef const char* (*last_error_fn)(void);
typedef sdm_p1_status (*create_fn)(sdm_p1_plan**, const sdm_p1_desc*);
typedef sdm_p1_status (*execute_fn)(sdm_p1_plan*, const sdm_p1_inputs*, void* const*, int32_t, void*);
typedef sdm_p1_status (*outputs_fn)(const sdm_p1_plan*, sdm_p1_tensor*, int32_t);
typedef sdm_p1_status (*destroy_fn)(sdm_p1_plan*);

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "libsdmp1.so.1";
    void* so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (so == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return 1;
    }
    /* POSIX guarantees function pointers round-trip through void*; copy them out bytewise. */
    version_fn version;
    last_error_fn last_error;
    create_fn create;
    execute_fn execute;
    outputs_fn outputs;
    destroy_fn destroy;
    void* sym;
#define LOAD(var, name)                                \
    if ((sym = dlsym(so, name)) == NULL) {             \
        fprintf(stderr, "%s has no %s\n", path, name); \
        return 1;                                      \
    }                                                  \
    memcpy(&var, &sym, sizeof var)
    LOAD(version, "sdm_p1_version_number");
    LOAD(last_error, "sdm_p1_last_error");
    LOAD(create, "sdm_p1_plan_create");
    LOAD(execute, "sdm_p1_execute");
    LOAD(outputs, "sdm_p1_outputs");
    LOAD(destroy, "sdm_p1_plan_destroy");
#undef LOAD
    if (version() / 10000 != SDM_P1_VERSION_MAJOR) {
        fprintf(stderr, "%s is version %u; this program needs major %d\n", path, version(), SDM_P1_VERSION_MAJOR);
        return 1;
    }

    /* One chunk of three tokens writing and reading slot 3: a[i, j] = exp(g sum between). */
    const int32_t k_idx[3] = {3, 3, 3}, q_idx[3] = {3, 3, 3};
    const float k_val[3] = {1.0f, 1.0f, 1.0f}, q_val[3] = {1.0f, 1.0f, 1.0f};
    const float g[3] = {-0.5f, -0.25f, -0.125f};
    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    desc.N = 1;
    desc.C = 3;
    desc.W = 1;
    desc.R = 1;
    desc.num_keys = 4;
    desc.backend = SDM_P1_BACKEND_CPU;
    sdm_p1_plan* plan = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = k_idx;
    in.q_idx = q_idx;
    in.k_val = k_val;
    in.q_val = q_val;
    in.g = g;
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    if (create(&plan, &desc) != SDM_P1_SUCCESS || execute(plan, &in, NULL, 0, NULL) != SDM_P1_SUCCESS ||
        outputs(plan, v, SDM_P1_FIELD_COUNT) != SDM_P1_SUCCESS) {
        fprintf(stderr, "libsdmp1: %s\n", last_error());
        return 1;
    }
    const float* a = (const float*)v[SDM_P1_FIELD_A].data;
    printf("loaded %s (version %u)\n", path, version());
    printf("a = [[%g %g %g] [%.7f %g %g] [%.7f %.7f %g]]\n", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
    printf(
        "expected a[1,0] = exp(-0.25) = 0.7788008, a[2,0] = exp(-0.375) = 0.6872893, "
        "a[2,1] = exp(-0.125) = 0.8824969\n");
    const int ok = fabs(a[3] - exp(-0.25)) < 1e-7 && fabs(a[6] - exp(-0.375)) < 1e-7 &&
                   fabs(a[7] - exp(-0.125)) < 1e-7 && a[0] == 0.0f && a[4] == 0.0f && a[8] == 0.0f;
    destroy(plan);
    dlclose(so);
    return ok ? 0 : 1;
}
