/* The CPU backend's worker threads, kept by each plan between executes: many executes and
 * executes from other threads give the bits of a one-thread plan; a child forked after the
 * workers started can execute the parent's plans and new ones (and destroy them); a worker
 * that cannot be started gives SDM_P1_ERROR_OUT_OF_MEMORY and leaves the plan usable. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sdm/phase1.h"
#include "test_util.h"

enum { PN = 8, PC = 16, PW = 4, PR = 3, PP = 2, PKEYS = 64, POFF = 100 };

typedef struct Problem {
    int32_t k_idx[PN * PC * PW], q_idx[PN * PC * PR];
    float k_val[PN * PC * PW], q_val[PN * PC * PR], g[PN * PC], beta[PN * PC];
} Problem;

static void fill(Problem* p, int shift) {
    for (int e = 0; e < PN * PC * PW; ++e) { /* a token's ids 16 apart modulo 64: distinct */
        const int c = e / (PC * PW), t = e / PW % PC, w = e % PW;
        p->k_idx[e] = (c % PP) * POFF + (t * 5 + w * 16 + c + shift) % PKEYS;
        p->k_val[e] = 0.5f - 0.125f * (float)((t + w + shift) % 7);
    }
    for (int e = 0; e < PN * PC * PR; ++e) {
        const int c = e / (PC * PR), t = e / PR % PC, r = e % PR;
        p->q_idx[e] = (c % PP) * POFF + (t * 7 + r * 13 + c * 3 + shift * 5) % PKEYS;
        p->q_val[e] = 1.0f + 0.25f * (float)r;
    }
    for (int tok = 0; tok < PN * PC; ++tok) {
        p->g[tok] = -0.0625f * (float)(1 + (tok + shift) % 9);
        p->beta[tok] = 0.5f;
    }
}

static sdm_p1_plan* make_plan(int threads) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = PN;
    d.C = PC;
    d.W = PW;
    d.R = PR;
    d.num_parallel = PP;
    d.stream_offset = POFF;
    d.num_keys = PKEYS;
    d.det_fields = SDM_P1_DET_ALL;
    d.backend = SDM_P1_BACKEND_CPU;
    d.num_threads = threads;
    sdm_p1_plan* plan = NULL;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) printf("  plan: %s\n", sdm_p1_last_error());
    return plan;
}

#if !defined(__SANITIZE_ADDRESS__) /* used only by test_worker_that_cannot_start */
static int plan_threads(const sdm_p1_plan* plan) {
    sdm_p1_desc r;
    return sdm_p1_plan_desc(plan, &r) == SDM_P1_SUCCESS ? r.num_threads : 0;
}
#endif

/* Every output byte of the plan's buffers after one execute, in one malloc'd block. */
typedef struct Bytes {
    char* data;
    size_t size;
} Bytes;

static sdm_p1_status execute(sdm_p1_plan* plan, const Problem* p) {
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = p->k_idx;
    in.q_idx = p->q_idx;
    in.k_val = p->k_val;
    in.q_val = p->q_val;
    in.g = p->g;
    in.beta = p->beta;
    return sdm_p1_execute(plan, &in, NULL, 0, NULL);
}

static Bytes outputs(const sdm_p1_plan* plan) {
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    Bytes b = {NULL, 0};
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) b.size += v[f].bytes;
    b.data = malloc(b.size);
    size_t at = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (v[f].bytes) memcpy(b.data + at, v[f].data, v[f].bytes);
        at += v[f].bytes;
    }
    return b;
}

/* Executes and compares with `want`; 1 when the bits are equal. */
static int same_after_execute(sdm_p1_plan* plan, const Problem* p, Bytes want) {
    if (execute(plan, p) != SDM_P1_SUCCESS) {
        printf("  execute: %s\n", sdm_p1_last_error());
        return 0;
    }
    Bytes got = outputs(plan);
    const int same = got.size == want.size && memcmp(got.data, want.data, want.size) == 0;
    free(got.data);
    return same;
}

static Problem g_a, g_b;
static Bytes g_want_a, g_want_b; /* one-thread results */

static void setup(void) {
    fill(&g_a, 3);
    fill(&g_b, 11);
    sdm_p1_plan* one = make_plan(1);
    CHECK(one != NULL && execute(one, &g_a) == SDM_P1_SUCCESS);
    g_want_a = outputs(one);
    CHECK(execute(one, &g_b) == SDM_P1_SUCCESS);
    g_want_b = outputs(one);
    sdm_p1_plan_destroy(one);
    CHECK(g_want_a.size == g_want_b.size && memcmp(g_want_a.data, g_want_b.data, g_want_a.size) != 0);
}

static void test_many_executes(void) {
    sdm_p1_plan* plan = make_plan(0); /* the hardware's threads */
    CHECK(plan != NULL);
    if (plan == NULL) return;
    int same = 1;
    for (int i = 0; i < 300; ++i) same &= same_after_execute(plan, i % 2 ? &g_b : &g_a, i % 2 ? g_want_b : g_want_a);
    CHECK(same);
    /* An error in one execute leaves the workers ready for the next. */
    Problem bad = g_a;
    bad.k_idx[5 * PC * PW + 2] = POFF + PKEYS; /* chunk 5 is stream 1: ids [100, 164) */
    CHECK(execute(plan, &bad) == SDM_P1_ERROR_INVALID_INPUT);
    CHECK(strstr(sdm_p1_last_error(), "k_idx[5, 0, 2] = 164") != NULL);
    CHECK(same_after_execute(plan, &g_a, g_want_a));
    CHECK(sdm_p1_plan_destroy(plan) == SDM_P1_SUCCESS);
    /* Plans created and destroyed, executed or not. */
    for (int i = 0; i < 20; ++i) {
        sdm_p1_plan* p = make_plan(2);
        if (i % 2) CHECK(same_after_execute(p, &g_b, g_want_b));
        CHECK(sdm_p1_plan_destroy(p) == SDM_P1_SUCCESS);
    }
}

typedef struct ThreadArg {
    sdm_p1_plan* plan;
    int same;
} ThreadArg;

static void* execute_on_thread(void* arg) {
    ThreadArg* t = arg;
    t->same = same_after_execute(t->plan, &g_b, g_want_b);
    return NULL;
}

/* One thread at a time, but not always the same one. */
static void test_plan_used_from_other_threads(void) {
    sdm_p1_plan* plan = make_plan(0);
    CHECK(same_after_execute(plan, &g_a, g_want_a));
    for (int i = 0; i < 3; ++i) {
        ThreadArg arg = {plan, 0};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, execute_on_thread, &arg) == 0);
        pthread_join(t, NULL);
        CHECK(arg.same);
    }
    CHECK(same_after_execute(plan, &g_a, g_want_a));
    sdm_p1_plan_destroy(plan);
}

/* Runs body in a forked child; 1 when it exited with status 0. */
static int in_child(int (*body)(sdm_p1_plan*), sdm_p1_plan* plan) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        const int ok = body(plan);
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int child_executes(sdm_p1_plan* plan) {
    int ok = same_after_execute(plan, &g_b, g_want_b) && same_after_execute(plan, &g_a, g_want_a);
    sdm_p1_plan* fresh = make_plan(0);
    ok = ok && fresh != NULL && same_after_execute(fresh, &g_b, g_want_b);
    ok = ok && sdm_p1_plan_destroy(fresh) == SDM_P1_SUCCESS;
    return ok && sdm_p1_plan_destroy(plan) == SDM_P1_SUCCESS;
}

static int child_destroys(sdm_p1_plan* plan) { return sdm_p1_plan_destroy(plan) == SDM_P1_SUCCESS; }

static void test_fork(void) {
    sdm_p1_plan* plan = make_plan(0);
    CHECK(same_after_execute(plan, &g_a, g_want_a)); /* the workers run */
    CHECK(in_child(child_executes, plan));
    CHECK(in_child(child_destroys, plan));
    CHECK(same_after_execute(plan, &g_b, g_want_b)); /* the parent's are untouched */
    /* A plan whose workers never started, executed first in the child. */
    sdm_p1_plan* idle = make_plan(0);
    CHECK(in_child(child_executes, idle));
    CHECK(same_after_execute(idle, &g_a, g_want_a));
    sdm_p1_plan_destroy(idle);
    sdm_p1_plan_destroy(plan);
}

#if !defined(__SANITIZE_ADDRESS__) /* used only by test_worker_that_cannot_start */
/* Address space for the program as it is and little more: a worker's stack cannot be mapped. */
static int child_without_memory_for_threads(sdm_p1_plan* plan) {
    FILE* f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f == NULL || fscanf(f, "%lu", &pages) != 1) return 0;
    fclose(f);
    struct rlimit old, tight;
    getrlimit(RLIMIT_AS, &old);
    tight = old;
    tight.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (rlim_t)(1u << 20);
    if (setrlimit(RLIMIT_AS, &tight) != 0) return 0;
    const sdm_p1_status st = execute(plan, &g_a);
    const int refused = st == SDM_P1_ERROR_OUT_OF_MEMORY && strstr(sdm_p1_last_error(), "worker thread") != NULL;
    if (!refused) printf("  got %s: %s\n", sdm_p1_status_string(st), sdm_p1_last_error());
    setrlimit(RLIMIT_AS, &old);
    return refused && same_after_execute(plan, &g_a, g_want_a); /* usable once threads can start */
}
#endif

static void test_worker_that_cannot_start(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("  skipped: AddressSanitizer's own mappings need the address space this test withholds\n");
#else
    sdm_p1_plan* plan = make_plan(2);
    if (plan_threads(plan) < 2) {
        printf("  skipped: one processor, so no worker threads\n");
    } else {
        CHECK(in_child(child_without_memory_for_threads, plan));
    }
    sdm_p1_plan_destroy(plan);
#endif
}

int main(void) {
    setup();
    /* First: glibc keeps the stacks of joined threads for new ones, and this test needs a
     * process that has none to reuse. */
    RUN(test_worker_that_cannot_start);
    RUN(test_many_executes);
    RUN(test_plan_used_from_other_threads);
    RUN(test_fork);
    free(g_want_a.data);
    free(g_want_b.data);
    return test_summary();
}
