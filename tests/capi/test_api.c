/* The C API as a C99 caller sees it: versions, statuses, every descriptor and execute error,
 * allocators, output modes and views, structs of other header versions (the struct-size
 * rule), sizes at the limits of size_t and ptrdiff_t, and a hand-worked chunk. */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdm/phase1.h"
#include "test_util.h"

/* ---- a small valid problem, filled deterministically ---------------------------------- */

enum { TN = 4, TC = 8, TW = 3, TR = 2, TP = 2, TKEYS = 16, TOFF = 100 };

typedef struct Problem {
    int32_t k_idx[TN * TC * TW], q_idx[TN * TC * TR];
    float k_val[TN * TC * TW], q_val[TN * TC * TR], g[TN * TC * TW], beta[TN * TC];
} Problem;

static void fill_problem(Problem* p) {
    uint32_t s = 7u;
    for (int c = 0; c < TN; ++c) {
        for (int t = 0; t < TC; ++t) {
            const int tok = c * TC + t, base = (c % TP) * TOFF;
            for (int w = 0; w < TW; ++w) {
                p->k_idx[tok * TW + w] = base + (int32_t)((t + 5 * w + c) % TKEYS);
                p->k_val[tok * TW + w] = 0.25f * (float)(w + 1) - 0.1f * (float)(t % 3);
                p->g[tok * TW + w] = -0.125f * (float)(1 + (t + w) % 5);
            }
            for (int r = 0; r < TR; ++r) {
                s = s * 1103515245u + 12345u;
                p->q_idx[tok * TR + r] = base + (int32_t)((s >> 16) % TKEYS);
                p->q_val[tok * TR + r] = 1.0f + 0.5f * (float)r;
            }
            p->beta[tok] = 0.75f;
        }
    }
}

static sdm_p1_desc problem_desc(void) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = TN;
    d.C = TC;
    d.W = TW;
    d.R = TR;
    d.num_parallel = TP;
    d.stream_offset = TOFF;
    d.num_keys = TKEYS;
    d.valid_last = 6;
    d.backend = SDM_P1_BACKEND_CPU;
    return d;
}

static sdm_p1_inputs problem_inputs(const Problem* p) {
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = p->k_idx;
    in.q_idx = p->q_idx;
    in.k_val = p->k_val;
    in.q_val = p->q_val;
    in.g = p->g;
    in.beta = p->beta;
    return in;
}

/* Creating a plan from *d fails with `want` and a message containing `needle`. */
static void expect_create_fails_at(const sdm_p1_desc* d, sdm_p1_status want, const char* needle, const char* what) {
    sdm_p1_plan* plan = (sdm_p1_plan*)&plan; /* any non-NULL value: must be reset to NULL */
    const sdm_p1_status s = sdm_p1_plan_create(&plan, d);
    CHECK_MSG(s == want, what);
    CHECK_MSG(plan == NULL, what);
    CHECK_MSG(strstr(sdm_p1_last_error(), needle) != NULL, what);
    if (s != want || strstr(sdm_p1_last_error(), needle) == NULL) {
        printf("    %s: got %s: %s\n", what, sdm_p1_status_string(s), sdm_p1_last_error());
    }
    if (s == SDM_P1_SUCCESS) sdm_p1_plan_destroy(plan);
}

static void expect_create_fails(sdm_p1_desc d, sdm_p1_status want, const char* needle, const char* what) {
    expect_create_fails_at(&d, want, needle, what);
}

/* A counting allocator: every block it gives out must come back. */
typedef struct Counter {
    int live;
    int calls;
    size_t bytes;
    int fail;
    int misalign;   /* hand out blocks 8 bytes past malloc's */
    size_t limit;   /* refuse blocks larger than this (0: no limit) */
    size_t largest; /* the largest block asked for */
} Counter;

static int counting_alloc(void* ctx, void** ptr, size_t bytes, void* stream) {
    Counter* c = (Counter*)ctx;
    (void)stream;
    if (bytes > c->largest) c->largest = bytes;
    if (c->fail || (c->limit != 0 && bytes > c->limit)) return 1;
    char* p = (char*)malloc(bytes + 8);
    if (p == NULL) return 1;
    *ptr = p + (c->misalign ? 8 : 0);
    ++c->live;
    ++c->calls;
    c->bytes += bytes;
    return 0;
}

static void counting_free(void* ctx, void* ptr, size_t bytes, void* stream) {
    Counter* c = (Counter*)ctx;
    (void)bytes;
    (void)stream;
    --c->live;
    free((char*)ptr - (c->misalign ? 8 : 0));
}

static void test_versions_and_statuses(void) {
    CHECK(sdm_p1_version_number() == SDM_P1_VERSION_NUMBER);
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", SDM_P1_VERSION_MAJOR, SDM_P1_VERSION_MINOR, SDM_P1_VERSION_PATCH);
    CHECK(strcmp(sdm_p1_version_string(), version) == 0);
    CHECK(SDM_P1_VERSION_NUMBER >= 10200);
    CHECK(strcmp(sdm_p1_status_string(SDM_P1_SUCCESS), "SDM_P1_SUCCESS") == 0);
    CHECK(strcmp(sdm_p1_status_string(SDM_P1_ERROR_INVALID_INPUT), "SDM_P1_ERROR_INVALID_INPUT") == 0);
    CHECK(strcmp(sdm_p1_status_string((sdm_p1_status)99), "SDM_P1_UNKNOWN_STATUS") == 0);
    CHECK(sdm_p1_last_error() != NULL);
}

/* The architectures are the library's, reported with or without a device; none without CUDA. */
static void test_cuda_architectures(void) {
    const char* list = NULL;
    int32_t count = -1;
    const int with_cuda = sdm_p1_cuda_device_count(&count) != SDM_P1_ERROR_BACKEND_UNAVAILABLE;
    CHECK(sdm_p1_cuda_architectures(NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    const sdm_p1_status st = sdm_p1_cuda_architectures(&list);
    CHECK(list != NULL);
    if (list == NULL) return;
    if (!with_cuda) {
        CHECK(st == SDM_P1_ERROR_BACKEND_UNAVAILABLE && strcmp(list, "") == 0);
        CHECK(strstr(sdm_p1_last_error(), "without the CUDA backend") != NULL);
        return;
    }
    CHECK(st == SDM_P1_SUCCESS && list[0] != '\0');
    /* Every name is sm_<digits> or compute_<digits>, separated by single spaces. */
    for (const char* p = list; *p != '\0';) {
        const size_t prefix = strncmp(p, "sm_", 3) == 0 ? 3 : strncmp(p, "compute_", 8) == 0 ? 8 : 0;
        CHECK_MSG(prefix != 0, list);
        if (prefix == 0) return;
        p += prefix;
        CHECK_MSG(*p >= '0' && *p <= '9', list);
        while (*p != '\0' && *p != ' ') ++p;
        if (*p == ' ') ++p;
    }
}

/* num_threads is capped at the processors online and at N. */
static void test_thread_count_cap(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int32_t asks[] = {1, 2, 3, 1000, 0, SDM_P1_UNSET};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; ++i) {
        sdm_p1_desc d = problem_desc();
        d.num_threads = asks[i];
        sdm_p1_plan* plan = NULL;
        sdm_p1_desc r;
        CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
        CHECK(sdm_p1_plan_desc(plan, &r) == SDM_P1_SUCCESS);
        long want = asks[i] <= 0 ? online : asks[i];
        if (want > online) want = online;
        if (want > TN) want = TN;
        CHECK_MSG(r.num_threads == want, "num_threads");
        sdm_p1_plan_destroy(plan);
    }
}

static void test_descriptor_errors(void) {
    const sdm_p1_desc ok = problem_desc();
    sdm_p1_desc d;
    sdm_p1_plan* plan = NULL;

    CHECK(sdm_p1_plan_create(NULL, &ok) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(sdm_p1_plan_create(&plan, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT && plan == NULL);
    CHECK(strstr(sdm_p1_last_error(), "desc is NULL") != NULL);

#define BAD(field, value, status, needle) \
    d = ok;                               \
    d.field = value;                      \
    expect_create_fails(d, status, needle, #field " = " #value)
    BAD(magic, 0u, SDM_P1_ERROR_INVALID_ARGUMENT, "SDM_P1_DESC_INITIALIZER");
    BAD(struct_size, 8u, SDM_P1_ERROR_INVALID_ARGUMENT, "SDM_P1_DESC_INITIALIZER");
    BAD(version, 20000u, SDM_P1_ERROR_INVALID_ARGUMENT, "version");
    BAD(N, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "N = 0");
    BAD(C, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "C = 0");
    BAD(C, 257, SDM_P1_ERROR_UNSUPPORTED, "C = 257");
    BAD(W, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "W = 0");
    BAD(W, 257, SDM_P1_ERROR_UNSUPPORTED, "W = 257");
    BAD(R, -1, SDM_P1_ERROR_INVALID_ARGUMENT, "R = -1");
    BAD(R, 300, SDM_P1_ERROR_UNSUPPORTED, "R = 300");
    BAD(num_parallel, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "num_parallel = 0");
    BAD(num_parallel, 3, SDM_P1_ERROR_INVALID_ARGUMENT, "does not divide N");
    BAD(num_keys, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "num_keys = 0");
    BAD(num_keys, ((int64_t)1 << 32) + 1, SDM_P1_ERROR_INVALID_ARGUMENT, "num_keys");
    BAD(stream_offset, -5, SDM_P1_ERROR_INVALID_ARGUMENT, "stream_offset = -5");
    BAD(stream_offset, INT64_MAX, SDM_P1_ERROR_INVALID_ARGUMENT, "overflow");
    BAD(valid_last, 0, SDM_P1_ERROR_INVALID_ARGUMENT, "valid_last = 0");
    BAD(valid_last, TC + 1, SDM_P1_ERROR_INVALID_ARGUMENT, "valid_last = 9");
    BAD(index_dtype, SDM_P1_DTYPE_FLOAT32, SDM_P1_ERROR_INVALID_ARGUMENT, "index_dtype");
    BAD(value_dtype, SDM_P1_DTYPE_INT32, SDM_P1_ERROR_INVALID_ARGUMENT, "value_dtype");
    BAD(gate_width, 2, SDM_P1_ERROR_INVALID_ARGUMENT, "gate_width = 2");
    BAD(need_read_groups, 2, SDM_P1_ERROR_INVALID_ARGUMENT, "need_read_groups");
    BAD(det_fields, 1024, SDM_P1_ERROR_INVALID_ARGUMENT, "dc_rec");
    BAD(det_fields, 4096 | 1, SDM_P1_ERROR_INVALID_ARGUMENT, "unknown bits 4096");
    BAD(det_fields, -2, SDM_P1_ERROR_INVALID_ARGUMENT, "det_fields");
    {
        /* The CUDA backend is unavailable when not built in, or built in with no device. */
        int32_t devices = -1;
        const sdm_p1_status built = sdm_p1_cuda_device_count(&devices);
        CHECK(devices == 0 || built == SDM_P1_SUCCESS);
        if (built == SDM_P1_ERROR_BACKEND_UNAVAILABLE) {
            BAD(backend, SDM_P1_BACKEND_CUDA, SDM_P1_ERROR_BACKEND_UNAVAILABLE, "without the CUDA backend");
        } else if (devices == 0) {
            BAD(backend, SDM_P1_BACKEND_CUDA, SDM_P1_ERROR_BACKEND_UNAVAILABLE, "no device");
        } else {
            d = ok;
            d.backend = SDM_P1_BACKEND_CUDA;
            d.device = devices;
            expect_create_fails(d, SDM_P1_ERROR_INVALID_ARGUMENT, "CUDA device(s)", "device = count");
        }
    }
    BAD(backend, 9, SDM_P1_ERROR_INVALID_ARGUMENT, "backend = 9");
    BAD(num_threads, -3, SDM_P1_ERROR_INVALID_ARGUMENT, "num_threads");
    BAD(output_mode, 4, SDM_P1_ERROR_INVALID_ARGUMENT, "output_mode");
#undef BAD
    d = ok;
    d.det_fields = SDM_P1_DET_TILES;
    d.rec_tile = (1 << 20) + 1;
    expect_create_fails(d, SDM_P1_ERROR_INVALID_ARGUMENT, "rec_tile", "rec_tile too long");
    d = ok;
    d.det_fields = SDM_P1_DET_KREC;
    d.num_keys = (int64_t)1 << 32;
    d.num_parallel = 1;
    expect_create_fails(d, SDM_P1_ERROR_UNSUPPORTED, "32 bits", "krec with 2^32 slots");
    d = ok;
    d.allocator.alloc = NULL;
    d.allocator.free = counting_free;
    expect_create_fails(d, SDM_P1_ERROR_INVALID_ARGUMENT, "allocator", "allocator without alloc");
}

static void test_resolved_desc_and_views(void) {
    sdm_p1_desc d = problem_desc();
    d.need_read_groups = 0;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    sdm_p1_desc r;
    CHECK(sdm_p1_plan_desc(plan, &r) == SDM_P1_SUCCESS);
    CHECK(r.det_fields == SDM_P1_DET_SHIPPED && r.rec_tile == 128 && r.valid_last == 6);
    CHECK(r.backend == SDM_P1_BACKEND_CPU && r.num_threads >= 1 && r.num_threads <= TN);
    CHECK(r.need_read_groups == 0);
    CHECK(r.allocator.ctx == NULL && r.allocator.alloc == NULL && r.allocator.free == NULL); /* as given */
    size_t ws = 0;
    CHECK(sdm_p1_workspace_size(plan, &ws) == SDM_P1_SUCCESS && ws > 0);

    sdm_p1_tensor v[SDM_P1_FIELD_COUNT + 1];
    memset(v, 0, sizeof v);
    CHECK(sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT + 1) == SDM_P1_SUCCESS);
    CHECK(v[SDM_P1_FIELD_COUNT].name == NULL); /* past the fields: untouched */
    CHECK(strcmp(v[SDM_P1_FIELD_A].name, "a") == 0 && v[SDM_P1_FIELD_A].ndim == 3);
    CHECK(v[SDM_P1_FIELD_A].shape[1] == TC && v[SDM_P1_FIELD_A].shape[2] == TC);
    CHECK(v[SDM_P1_FIELD_A].bytes == (size_t)TN * TC * TC * 4 && v[SDM_P1_FIELD_A].data != NULL);
    /* row = C * (W + R) = 40 rounded up to 48 */
    CHECK(v[SDM_P1_FIELD_PAYLOAD].shape[0] == TN && v[SDM_P1_FIELD_PAYLOAD].shape[1] == 48);
    CHECK(v[SDM_P1_FIELD_SPAY_RANK].shape[1] == 2 && v[SDM_P1_FIELD_SPAY_RANK].shape[2] == 2);
    CHECK(v[SDM_P1_FIELD_IS_LAST].requested && v[SDM_P1_FIELD_POS_Q].requested);
    CHECK(!v[SDM_P1_FIELD_Q_LAST].requested && !v[SDM_P1_FIELD_SPAY_Q].requested);
    CHECK(!v[SDM_P1_FIELD_Q_LAST].data && v[SDM_P1_FIELD_Q_LAST].bytes == 0);
    CHECK(!v[SDM_P1_FIELD_KREC].requested && !v[SDM_P1_FIELD_DC_REC].requested);
    CHECK(strcmp(v[SDM_P1_FIELD_QREC8].name, "qrec8") == 0);
    CHECK(v[SDM_P1_FIELD_REPEATS].dtype == SDM_P1_DTYPE_INT64 && v[SDM_P1_FIELD_REPEATS].requested);
    CHECK(v[SDM_P1_FIELD_CPE].dtype == SDM_P1_DTYPE_FLOAT32);
    CHECK(sdm_p1_plan_destroy(plan) == SDM_P1_SUCCESS);
    CHECK(sdm_p1_plan_destroy(NULL) == SDM_P1_SUCCESS);

    d = problem_desc();
    d.det_fields = SDM_P1_DET_ALL;
    d.rec_tile = 5;
    d.value_dtype = SDM_P1_DTYPE_BFLOAT16;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    CHECK(sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS);
    CHECK(v[SDM_P1_FIELD_TILES_K].shape[1] == (TC * TW + 4) / 5 + 1);
    CHECK(v[SDM_P1_FIELD_TILES_Q].shape[1] == (TC * TR + 4) / 5 + 1);
    CHECK(v[SDM_P1_FIELD_DC_BPRE].shape[1] == (TC * TW + 31) / 32 + 1);
    CHECK(v[SDM_P1_FIELD_QREC8].shape[2] == 2 && v[SDM_P1_FIELD_KREC].shape[2] == 4);
    CHECK(v[SDM_P1_FIELD_K_EFF].dtype == SDM_P1_DTYPE_BFLOAT16 &&
          v[SDM_P1_FIELD_K_EFF].bytes == (size_t)TN * TC * TW * 2);
    CHECK(!v[SDM_P1_FIELD_DC_REC].requested);
    sdm_p1_plan_destroy(plan);
}

static void test_execute_errors(void) {
    static Problem p;
    fill_problem(&p);
    sdm_p1_desc d = problem_desc();
    d.det_fields = SDM_P1_DET_SHIPPED | SDM_P1_DET_KSPA;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    sdm_p1_inputs in = problem_inputs(&p);
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);

    CHECK(sdm_p1_execute(NULL, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(sdm_p1_execute(plan, NULL, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    sdm_p1_inputs bad = in;
    bad.struct_size = 4;
    CHECK(sdm_p1_execute(plan, &bad, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    bad = in;
    bad.q_val = NULL;
    CHECK(sdm_p1_execute(plan, &bad, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "q_val is NULL") != NULL);
    bad = in;
    bad.g = (const float*)((const char*)p.g + 1);
    CHECK(sdm_p1_execute(plan, &bad, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "aligned") != NULL);
    bad = in;
    bad.beta = NULL;
    CHECK(sdm_p1_execute(plan, &bad, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "beta") != NULL);
    CHECK(sdm_p1_execute(plan, &in, NULL, 3, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    void* too_many[SDM_P1_FIELD_COUNT + 1] = {0};
    CHECK(sdm_p1_execute(plan, &in, too_many, SDM_P1_FIELD_COUNT + 1, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);

    /* Data errors: the first bad entry in chunk order, named. */
    const int32_t keep_k = p.k_idx[(1 * TC + 2) * TW + 1];
    p.k_idx[(1 * TC + 2) * TW + 1] = 0; /* chunk 1 is stream 1: [100, 116) */
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_INPUT);
    CHECK(strstr(sdm_p1_last_error(), "k_idx[1, 2, 1] = 0") != NULL);
    CHECK(strstr(sdm_p1_last_error(), "[100, 116)") != NULL);
    p.k_idx[(1 * TC + 2) * TW + 1] = keep_k;
    const int32_t keep_q = p.q_idx[(2 * TC + 5) * TR + 1];
    p.q_idx[(2 * TC + 5) * TR + 1] = TKEYS; /* one past stream 0's range (token 5 < valid_last) */
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_INPUT);
    CHECK(strstr(sdm_p1_last_error(), "q_idx[2, 5, 1] = 16") != NULL);
    p.q_idx[(2 * TC + 5) * TR + 1] = keep_q;
    /* gates per token: g[c, t, 0] is p.g[c * TC + t]; chunk 3 token 0 is valid */
    p.g[3 * TC] = INFINITY;
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_INPUT);
    CHECK(strstr(sdm_p1_last_error(), "g[3, 0, 0] = inf") != NULL);
    p.g[3 * TC] = -4194304.0f; /* -2^22 */
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_INPUT);
    p.g[3 * TC] = -4194303.5f; /* the largest magnitude below 2^22 representable here */
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    p.g[3 * TC] = NAN;
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_INPUT);
    CHECK(strstr(sdm_p1_last_error(), "g[3, 0, 0] = nan") != NULL);
    p.g[3 * TC] = -0.5f;

    /* Padding tokens (t >= valid_last = 6 in the last TP chunks) are never read. */
    for (int c = TN - TP; c < TN; ++c) {
        for (int t = 6; t < TC; ++t) {
            const int tok = c * TC + t;
            for (int w = 0; w < TW; ++w) {
                p.k_idx[tok * TW + w] = INT32_MIN;
                p.k_val[tok * TW + w] = NAN;
            }
            for (int r = 0; r < TR; ++r) {
                p.q_idx[tok * TR + r] = INT32_MAX;
                p.q_val[tok * TR + r] = -INFINITY;
            }
            p.g[tok] = NAN;
            p.beta[tok] = NAN;
        }
    }
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    const float* k_eff = (const float*)v[SDM_P1_FIELD_K_EFF].data;
    const float* kspa = (const float*)v[SDM_P1_FIELD_KSPA].data;
    int finite = 1;
    for (int i = 0; i < TN * TC * TW; ++i) finite &= isfinite(k_eff[i]) && isfinite(kspa[i]);
    CHECK(finite);
    sdm_p1_plan_destroy(plan);
}

static void test_allocator_and_output_modes(void) {
    static Problem p;
    fill_problem(&p);
    const sdm_p1_inputs in = problem_inputs(&p);
    Counter counter = {0, 0, 0, 0, 0, 0, 0};
    sdm_p1_desc d = problem_desc();
    d.det_fields = SDM_P1_DET_ALL;
    d.allocator.ctx = &counter;
    d.allocator.alloc = counting_alloc;
    d.allocator.free = counting_free;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    CHECK(counter.live == 2 && counter.calls == 2); /* outputs and workspace */
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    CHECK(counter.calls == 2); /* execute allocates nothing */
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);

    /* The same plan in caller mode: the caller's buffers get the same bits. */
    sdm_p1_desc dc = d;
    dc.output_mode = SDM_P1_OUTPUTS_CALLER;
    sdm_p1_plan* caller = NULL;
    CHECK(sdm_p1_plan_create(&caller, &dc) == SDM_P1_SUCCESS);
    CHECK(counter.live == 3); /* workspace only */
    sdm_p1_tensor vc[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(caller, vc, SDM_P1_FIELD_COUNT);
    void* bufs[SDM_P1_FIELD_COUNT] = {0};
    CHECK(sdm_p1_execute(caller, &in, bufs, SDM_P1_FIELD_COUNT, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "no buffer for output 'a'") != NULL);
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        CHECK(vc[f].data == NULL && vc[f].bytes == v[f].bytes && vc[f].requested == v[f].requested);
        if (vc[f].requested) bufs[f] = malloc(vc[f].bytes);
    }
    CHECK(sdm_p1_execute(caller, &in, bufs, SDM_P1_FIELD_COUNT, NULL) == SDM_P1_SUCCESS);
    int same = 1;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (v[f].requested) same &= memcmp(bufs[f], v[f].data, v[f].bytes) == 0;
        free(bufs[f]);
    }
    CHECK(same);
    sdm_p1_plan_destroy(caller);
    sdm_p1_plan_destroy(plan);
    CHECK(counter.live == 0);

    counter.misalign = 1;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_ERROR_INVALID_ARGUMENT && plan == NULL);
    CHECK(strstr(sdm_p1_last_error(), "not aligned to 16 bytes") != NULL);
    CHECK(counter.live == 0);
    counter.misalign = 0;
    counter.fail = 1;
    plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_ERROR_OUT_OF_MEMORY && plan == NULL);
    CHECK(strstr(sdm_p1_last_error(), "allocator") != NULL);
    CHECK(counter.live == 0);
}

/* ---- the struct-size rule: structs of a newer header (longer) ------------------------- */

/* What a caller compiled against a newer header passes: the struct of this header followed
 * by fields this library does not know, zero while the caller leaves them at their defaults. */
typedef struct NewerDesc {
    sdm_p1_desc desc;
    int64_t newer[2];
} NewerDesc;

typedef struct NewerInputs {
    sdm_p1_inputs in;
    const void* newer[2];
} NewerInputs;

/* Every requested output of two plans, byte for byte. */
static int same_outputs(const sdm_p1_plan* x, const sdm_p1_plan* y) {
    sdm_p1_tensor vx[SDM_P1_FIELD_COUNT], vy[SDM_P1_FIELD_COUNT];
    int same = sdm_p1_outputs(x, vx, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS &&
               sdm_p1_outputs(y, vy, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS;
    for (int f = 0; same && f < SDM_P1_FIELD_COUNT; ++f) {
        same = vx[f].requested == vy[f].requested && vx[f].bytes == vy[f].bytes &&
               (!vx[f].requested || memcmp(vx[f].data, vy[f].data, vx[f].bytes) == 0);
    }
    return same;
}

/* The offset of the first non-zero byte in the representation of a non-NULL pointer. */
static size_t first_set_byte(const void* const* p) {
    const unsigned char* b = (const unsigned char*)p;
    size_t i = 0;
    while (i < sizeof *p && b[i] == 0) ++i;
    return i;
}

/* "byte <offset> is set", as the library names the first unknown byte a caller set. */
static int names_byte(size_t offset) {
    char needle[64];
    snprintf(needle, sizeof needle, "byte %u is set", (unsigned)offset);
    return strstr(sdm_p1_last_error(), needle) != NULL;
}

static void test_struct_sizes(void) {
    static Problem p;
    fill_problem(&p);
    const size_t desc_10 = offsetof(sdm_p1_desc, allocator) + sizeof(sdm_p1_allocator);
    const size_t inputs_10 = offsetof(sdm_p1_inputs, beta) + sizeof(const float*);
    sdm_p1_plan *plain = NULL, *newer = NULL;
    const sdm_p1_desc d = problem_desc();
    const sdm_p1_inputs in = problem_inputs(&p);
    CHECK(sdm_p1_plan_create(&plain, &d) == SDM_P1_SUCCESS);
    CHECK(sdm_p1_execute(plain, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);

    /* A newer caller's longer descriptor: its unknown bytes zero, the same plan. */
    NewerDesc nd;
    memset(&nd, 0, sizeof nd);
    nd.desc = d;
    nd.desc.struct_size = (uint32_t)sizeof nd;
    CHECK(sdm_p1_plan_create(&newer, &nd.desc) == SDM_P1_SUCCESS);
    CHECK(sdm_p1_execute(newer, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    CHECK(same_outputs(plain, newer));
    sdm_p1_plan_destroy(newer);
    /* ... and refused, naming the byte, once it sets a field this library lacks. */
    ((unsigned char*)&nd.newer[1])[2] = 1;
    expect_create_fails_at(&nd.desc, SDM_P1_ERROR_INVALID_ARGUMENT, "past the", "newer desc, set");
    CHECK(names_byte(sizeof(sdm_p1_desc) + 8 + 2));
    /* Shorter than the 1.0 layout: no header ever had it. */
    nd.desc.struct_size = (uint32_t)desc_10 - 8;
    expect_create_fails_at(&nd.desc, SDM_P1_ERROR_INVALID_ARGUMENT, "oldest layout", "desc below 1.0");

    /* The same for the inputs of an execute. */
    NewerInputs ni;
    memset(&ni, 0, sizeof ni);
    ni.in = in;
    ni.in.struct_size = (uint32_t)sizeof ni;
    CHECK(sdm_p1_plan_create(&newer, &d) == SDM_P1_SUCCESS);
    CHECK(sdm_p1_execute(newer, &ni.in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    CHECK(same_outputs(plain, newer));
    ni.newer[0] = &ni;
    CHECK(sdm_p1_execute(newer, &ni.in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "inputs->struct_size") != NULL);
    CHECK(names_byte(sizeof(sdm_p1_inputs) + first_set_byte(&ni.newer[0])));
    ni.newer[0] = NULL;
    ni.in.struct_size = (uint32_t)inputs_10 - 8;
    CHECK(sdm_p1_execute(newer, &ni.in, NULL, 0, NULL) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "oldest layout") != NULL);

    /* sdm_p1_plan_desc writes the fields this library knows, never past them, and says how
     * many bytes it wrote; a descriptor not filled from the initializer gets the 1.0 layout. */
    memset(&nd, 0xAB, sizeof nd);
    nd.desc.magic = SDM_P1_DESC_MAGIC;
    nd.desc.struct_size = (uint32_t)sizeof nd;
    CHECK(sdm_p1_plan_desc(newer, &nd.desc) == SDM_P1_SUCCESS);
    CHECK(nd.desc.struct_size == sizeof(sdm_p1_desc) && nd.desc.N == TN && nd.desc.valid_last == 6);
    CHECK(nd.newer[0] == (int64_t)0xABABABABABABABABull && nd.newer[1] == nd.newer[0]);
    memset(&nd, 0xAB, sizeof nd);
    CHECK(sdm_p1_plan_desc(newer, &nd.desc) == SDM_P1_SUCCESS);
    CHECK(nd.desc.struct_size == desc_10 && nd.desc.N == TN && nd.desc.magic == SDM_P1_DESC_MAGIC);
    CHECK(nd.newer[0] == (int64_t)0xABABABABABABABABull);
    sdm_p1_plan_destroy(newer);
    sdm_p1_plan_destroy(plain);
}

/* ---- sizes at the limits of size_t and ptrdiff_t -------------------------------------- */

/* N chunks of C tokens writing and reading one slot each, one worker thread. */
static sdm_p1_desc limit_desc(int64_t N, int64_t C, int32_t output_mode) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = N;
    d.C = C;
    d.W = 1;
    d.R = 1;
    d.num_keys = 16;
    d.backend = SDM_P1_BACKEND_CPU;
    d.num_threads = 1;
    d.output_mode = output_mode;
    return d;
}

static size_t element_bytes(int32_t dtype) {
    return dtype == SDM_P1_DTYPE_INT8 ? 1 : dtype == SDM_P1_DTYPE_BFLOAT16 ? 2 : dtype == SDM_P1_DTYPE_INT64 ? 8 : 4;
}

static void test_size_limits(void) {
    const int64_t two62 = (int64_t)1 << 62, two40 = (int64_t)1 << 40;
    /* Blocks up to 1 MiB (the workspace) are served, larger ones (the outputs) refused. */
    Counter refuser = {0, 0, 0, 0, 0, (size_t)1 << 20, 0};
    sdm_p1_desc d;

    /* N = 2^62, C = 2: a is 2^66 bytes. Refused before anything is allocated. */
    d = limit_desc(two62, 2, SDM_P1_OUTPUTS_PLAN);
    d.allocator.ctx = &refuser;
    d.allocator.alloc = counting_alloc;
    d.allocator.free = counting_free;
    expect_create_fails(d, SDM_P1_ERROR_UNSUPPORTED, "output 'a' of shape [4611686018427387904, 2, 2]",
                        "N = 2^62, plan mode");
    CHECK(strstr(sdm_p1_last_error(), "PTRDIFF_MAX") != NULL);
    CHECK(refuser.largest == 0);
    d.output_mode = SDM_P1_OUTPUTS_CALLER;
    expect_create_fails(d, SDM_P1_ERROR_UNSUPPORTED, "output 'a'", "N = 2^62, caller mode");
    /* N = INT64_MAX: no view may report a wrapped size, so there is no plan. */
    d = limit_desc(INT64_MAX, 1, SDM_P1_OUTPUTS_CALLER);
    expect_create_fails(d, SDM_P1_ERROR_UNSUPPORTED, "output 'a'", "N = INT64_MAX, caller mode");
    /* Every field fits (the largest, payload, is 64 N = 3 * 2^61 bytes) but not all of them
     * together (124 N bytes). */
    d = limit_desc(3 * ((int64_t)1 << 55), 1, SDM_P1_OUTPUTS_CALLER);
    expect_create_fails(d, SDM_P1_ERROR_UNSUPPORTED, "the outputs together", "fields fit, total not");

    /* N = 2^40 fits: every view reports its exact size, and the plan's one block (each field
     * at a multiple of 256 bytes) is what the allocator is asked for. */
    d = limit_desc(two40, 2, SDM_P1_OUTPUTS_CALLER);
    d.det_fields = SDM_P1_DET_ALL;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    CHECK(plan != NULL && sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS);
    uint64_t block = 0;
    int exact = 1;
    for (int f = 0; plan != NULL && f < SDM_P1_FIELD_COUNT; ++f) {
        if (!v[f].requested) continue;
        uint64_t elements = 1;
        for (int i = 0; i < v[f].ndim; ++i) elements *= (uint64_t)v[f].shape[i];
        exact &= v[f].bytes == elements * element_bytes(v[f].dtype);
        exact &= f == SDM_P1_FIELD_REPEATS || v[f].shape[0] == two40;
        block += (v[f].bytes + 255) / 256 * 256;
    }
    CHECK(exact);
    CHECK(v[SDM_P1_FIELD_A].bytes == ((size_t)1 << 44)); /* 2^40 * 2 * 2 * 4 */
    sdm_p1_plan_destroy(plan);
    d.output_mode = SDM_P1_OUTPUTS_PLAN;
    d.allocator.ctx = &refuser;
    d.allocator.alloc = counting_alloc;
    d.allocator.free = counting_free;
    expect_create_fails(d, SDM_P1_ERROR_OUT_OF_MEMORY, "allocator", "N = 2^40, plan mode");
    CHECK(refuser.largest == block && refuser.live == 0);
}

/* Two tokens, one write and one read each. Token 0 writes slot 5 (value 1, gate -1) and reads
 * slot 5 (value 1); token 1 writes slot 5 (value 2, gate -2) and reads slot 7 (value 3). */
static void test_hand_worked_chunk(void) {
    const int32_t k_idx[2] = {5, 5}, q_idx[2] = {5, 7};
    const float k_val[2] = {1.0f, 2.0f}, q_val[2] = {1.0f, 3.0f}, g[2] = {-1.0f, -2.0f};
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = 1;
    d.C = 2;
    d.W = 1;
    d.R = 1;
    d.num_keys = 8;
    d.backend = SDM_P1_BACKEND_CPU;
    d.det_fields = SDM_P1_DET_ALL;
    d.rec_tile = 1;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    const float beta[2] = {0.5f, 0.25f};
    in.k_idx = k_idx;
    in.q_idx = q_idx;
    in.k_val = k_val;
    in.q_val = q_val;
    in.g = g;
    in.beta = beta;
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
#define F(field) ((const float*)v[SDM_P1_FIELD_##field].data)
#define I(field) ((const int32_t*)v[SDM_P1_FIELD_##field].data)
#define B(field) ((const int8_t*)v[SDM_P1_FIELD_##field].data)
    /* sorted row: (t0 write) (t0 read) (t1 write) in slot 5, then (t1 read) in slot 7 */
    CHECK(F(LOG_K)[0] == -1.0f && F(LOG_K)[1] == -3.0f);
    CHECK(F(REX)[0] == -2.0f && F(REX)[1] == 0.0f);
    CHECK(F(LOG_Q)[0] == -1.0f && F(LOG_Q)[1] == 0.0f);
    CHECK(near_ulps(F(CPE)[0], exp(-3.0), 1) && near_ulps(F(CPE)[1], exp(-3.0), 1));
    CHECK(near_ulps(F(K_EFF)[0], exp(-1.0), 1) && near_ulps(F(K_EFF)[1], 2.0 * exp(-3.0), 1));
    CHECK(near_ulps(F(Q_W)[0], exp(-1.0), 1) && F(Q_W)[1] == 3.0f);
    CHECK(F(A)[0] == 0.0f && near_ulps(F(A)[2], 2.0 * exp(-2.0), 1) && F(A)[1] == 0.0f && F(A)[3] == 0.0f);
    CHECK(F(QK)[0] == 1.0f && F(QK)[1] == 0.0f && F(QK)[2] == 0.0f && F(QK)[3] == 0.0f);
    CHECK(B(IS_LAST)[0] == 0 && B(IS_LAST)[1] == 1 && B(IS_ONLY)[0] == 0 && B(IS_ONLY)[1] == 0);
    CHECK(B(Q_LAST)[0] == 1 && B(Q_ONLY)[0] == 1 && B(Q_LAST)[1] == 1 && B(Q_ONLY)[1] == 1);
    CHECK(I(POS_K)[0] == (0 | 1 << 17 | 2 << 24) && I(POS_K)[1] == (2 | 2 << 24));
    CHECK(I(POS_Q)[0] == (1 | 1 << 24) && I(POS_Q)[1] == (3 | 1 << 24));
    CHECK((uint32_t)I(PAYLOAD)[0] == 0x80000000u && (uint32_t)I(PAYLOAD)[1] == 0x100u);
    CHECK((uint32_t)I(PAYLOAD)[2] == 0x40000200u && (uint32_t)I(PAYLOAD)[3] == 0x80000300u);
    CHECK((uint32_t)I(PAYLOAD)[4] == 0x80020000u && (uint32_t)I(PAYLOAD)[15] == 0x80020000u);
    /* write row: t0 (FIRST, distance 0), t1 (LAST, distance 1); read row: both FIRST | LAST */
    CHECK((uint32_t)I(SPAY_K)[0] == 0x80000000u && (uint32_t)I(SPAY_K)[1] == (0x200u | 1u << 18 | 1u << 30));
    CHECK((uint32_t)I(SPAY_Q)[0] == 0xC0000100u && (uint32_t)I(SPAY_Q)[1] == 0xC0000300u);
    CHECK(I(SPAY_RANK)[0] == 0 && I(SPAY_RANK)[1] == 0x5); /* writes at sorted positions 0 and 2 */
    CHECK(I(KREC)[1] == 5 && I(KREC)[5] == 5 && I(QREC)[5] == 7 && I(QREC8)[2] == 7);
    float f;
    memcpy(&f, &I(KREC)[2], 4);
    CHECK(near_ulps(f, exp(-2.0), 1)); /* k_val * exp(rex) of t0 */
    memcpy(&f, &I(KREC)[6], 4);
    CHECK(f == 2.0f);
    CHECK(near_ulps(F(KSPA)[0], -0.5 * exp(-1.0), 1) && near_ulps(F(KSPA)[1], -0.25 * 2.0 * exp(-3.0), 1));
    /* L = 1: every index starts a tile; t1's write continues t0's group */
    CHECK(I(TILES_K)[0] == 0 && I(TILES_K)[1] == 2 && I(TILES_K)[2] == 2);
    CHECK(I(SEGB_K)[0] == 0 && I(SEGB_K)[1] == 1 && I(SEGB_K)[2] == 1);
    CHECK(I(TILES_Q)[0] == 0 && I(TILES_Q)[1] == 1 && I(TILES_Q)[2] == 2);
    CHECK(I(DC_KPOS)[0] == 0 && I(DC_KPOS)[1] == -1 && I(DC_BPRE)[0] == 0 && I(DC_BPRE)[1] == 1);
    CHECK(*(const int64_t*)v[SDM_P1_FIELD_REPEATS].data == 0);
#undef F
#undef I
#undef B
    sdm_p1_plan_destroy(plan);
}

/* ---- 1.3: the initializers as functions, and a plan's outputs without the plan --------- */

static void test_init_functions_and_describe(void) {
    /* sdm_p1_desc_init writes exactly the macro's bytes for this header's struct. */
    const sdm_p1_desc macro_desc = SDM_P1_DESC_INITIALIZER;
    sdm_p1_desc fn_desc;
    memset(&fn_desc, 0xAB, sizeof fn_desc);
    CHECK(sdm_p1_desc_init(&fn_desc, sizeof fn_desc) == SDM_P1_SUCCESS);
    CHECK(fn_desc.struct_size == macro_desc.struct_size && fn_desc.magic == macro_desc.magic);
    CHECK(fn_desc.version == macro_desc.version && fn_desc.N == 0 && fn_desc.num_parallel == 1);
    CHECK(fn_desc.valid_last == SDM_P1_UNSET && fn_desc.index_dtype == SDM_P1_DTYPE_INT32);
    CHECK(fn_desc.value_dtype == SDM_P1_DTYPE_FLOAT32 && fn_desc.gate_width == 1);
    CHECK(fn_desc.need_read_groups == SDM_P1_UNSET && fn_desc.det_fields == SDM_P1_UNSET);
    CHECK(fn_desc.rec_tile == 0 && fn_desc.backend == SDM_P1_BACKEND_AUTO);
    CHECK(fn_desc.device == SDM_P1_UNSET && fn_desc.num_threads == 0);
    CHECK(fn_desc.output_mode == SDM_P1_OUTPUTS_PLAN && fn_desc.allocator.alloc == NULL);
    /* Every byte of every field equal, padding aside: compare the fields' bytes one by one. */
    CHECK(memcmp(&fn_desc.N, &macro_desc.N, offsetof(sdm_p1_desc, index_dtype) - offsetof(sdm_p1_desc, N)) == 0);

    /* A newer caller's longer struct: the known fields, zero past them, its own size. */
    NewerDesc nd;
    memset(&nd, 0xAB, sizeof nd);
    CHECK(sdm_p1_desc_init(&nd.desc, sizeof nd) == SDM_P1_SUCCESS);
    CHECK(nd.desc.struct_size == sizeof nd && nd.desc.magic == SDM_P1_DESC_MAGIC);
    CHECK(nd.newer[0] == 0 && nd.newer[1] == 0);
    /* ... which then makes a plan like the macro's descriptor. */
    nd.desc.N = TN;
    nd.desc.C = TC;
    nd.desc.W = TW;
    nd.desc.R = TR;
    nd.desc.num_keys = TKEYS;
    nd.desc.backend = SDM_P1_BACKEND_CPU;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &nd.desc) == SDM_P1_SUCCESS);
    sdm_p1_plan_destroy(plan);
    /* An older caller's 1.0 struct: nothing written past it. */
    const size_t desc_10 = offsetof(sdm_p1_desc, allocator) + sizeof(sdm_p1_allocator);
    memset(&nd, 0xAB, sizeof nd);
    CHECK(sdm_p1_desc_init(&nd.desc, desc_10) == SDM_P1_SUCCESS);
    CHECK(nd.desc.struct_size == desc_10 && nd.desc.output_mode == SDM_P1_OUTPUTS_PLAN);
    CHECK(((const unsigned char*)&nd)[desc_10] == 0xAB);
    /* Refused, writing nothing: NULL, below the 1.0 layout, past UINT32_MAX. */
    memset(&nd, 0xAB, sizeof nd);
    CHECK(sdm_p1_desc_init(NULL, sizeof nd) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(sdm_p1_desc_init(&nd.desc, desc_10 - 8) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "sdm_p1_desc_init: struct_size") != NULL);
    CHECK(sdm_p1_desc_init(&nd.desc, (size_t)UINT32_MAX + 1u) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(nd.desc.struct_size == 0xABABABABu);

    /* sdm_p1_inputs_init: the macro's values. */
    sdm_p1_inputs fn_in;
    memset(&fn_in, 0xAB, sizeof fn_in);
    CHECK(sdm_p1_inputs_init(&fn_in, sizeof fn_in) == SDM_P1_SUCCESS);
    CHECK(fn_in.struct_size == sizeof fn_in && fn_in.k_idx == NULL && fn_in.beta == NULL);
    CHECK(fn_in.stream_lengths == NULL && fn_in.stream_lengths_dtype == 0 && fn_in.reserved == 0);
    CHECK(sdm_p1_inputs_init(&fn_in, 8) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "sdm_p1_inputs_init") != NULL);

    /* sdm_p1_describe_outputs: the views of the plan, data NULL, for several descriptors. */
    const int64_t fields[3] = {SDM_P1_UNSET, SDM_P1_DET_ALL, SDM_P1_DET_POS};
    for (int i = 0; i < 3; ++i) {
        sdm_p1_desc d = problem_desc();
        d.det_fields = fields[i];
        d.value_dtype = i == 1 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
        d.need_read_groups = i == 2 ? 0 : 1;
        sdm_p1_tensor described[SDM_P1_FIELD_COUNT + 1], planned[SDM_P1_FIELD_COUNT];
        memset(described, 0, sizeof described);
        CHECK(sdm_p1_describe_outputs(&d, described, SDM_P1_FIELD_COUNT + 1) == SDM_P1_SUCCESS);
        CHECK(described[SDM_P1_FIELD_COUNT].name == NULL); /* past the fields: untouched */
        CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
        CHECK(sdm_p1_outputs(plan, planned, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            const sdm_p1_tensor *a = &described[f], *b = &planned[f];
            CHECK_MSG(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->requested == b->requested &&
                          a->ndim == b->ndim && a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1] &&
                          a->shape[2] == b->shape[2] && a->bytes == b->bytes && a->data == NULL,
                      b->name);
        }
        sdm_p1_plan_destroy(plan);
    }
    /* The same errors as sdm_p1_plan_create. */
    sdm_p1_tensor v[2];
    sdm_p1_desc bad = problem_desc();
    bad.num_parallel = 3; /* does not divide N = 4 */
    CHECK(sdm_p1_describe_outputs(&bad, v, 2) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "num_parallel") != NULL);
    CHECK(sdm_p1_describe_outputs(NULL, v, 2) == SDM_P1_ERROR_INVALID_ARGUMENT);
    bad = problem_desc();
    CHECK(sdm_p1_describe_outputs(&bad, NULL, 2) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(sdm_p1_describe_outputs(&bad, v, -1) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(sdm_p1_describe_outputs(&bad, v, 0) == SDM_P1_SUCCESS);
}

/* ---- 1.4: sdm_p1_input_grads_init ------------------------------------------------------ */

typedef struct NewerInputGrads {
    sdm_p1_input_grads grads;
    uint64_t newer[2]; /* fields of a later header */
} NewerInputGrads;

static void test_input_grads_init(void) {
    /* This header's struct: every field at the macro's value, every byte as the macro's. */
    const sdm_p1_input_grads macro = SDM_P1_INPUT_GRADS_INITIALIZER;
    sdm_p1_input_grads fn;
    memset(&fn, 0xAB, sizeof fn);
    CHECK(sdm_p1_input_grads_init(&fn, sizeof fn) == SDM_P1_SUCCESS);
    CHECK(fn.struct_size == sizeof(sdm_p1_input_grads) && fn.struct_size == macro.struct_size);
    CHECK(fn.reserved == 0);
    CHECK(fn.k_val == NULL && fn.q_val == NULL && fn.g == NULL && fn.beta == NULL);
    CHECK(sizeof fn == 2 * sizeof(uint32_t) + 4 * sizeof(void*)); /* no padding to compare */
    CHECK(memcmp(&fn, &macro, sizeof fn) == 0);

    /* A newer caller's longer struct: the known fields, zero past them, its own size. */
    NewerInputGrads ng;
    memset(&ng, 0xAB, sizeof ng);
    CHECK(sdm_p1_input_grads_init(&ng.grads, sizeof ng) == SDM_P1_SUCCESS);
    CHECK(ng.grads.struct_size == sizeof ng && ng.grads.reserved == 0 && ng.grads.k_val == NULL);
    CHECK(ng.grads.q_val == NULL && ng.grads.g == NULL && ng.grads.beta == NULL);
    CHECK(ng.newer[0] == 0 && ng.newer[1] == 0);

    /* Refused, writing nothing: NULL, below the 1.3 layout (the oldest), past UINT32_MAX. */
    memset(&ng, 0xAB, sizeof ng);
    CHECK(sdm_p1_input_grads_init(NULL, sizeof ng) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "sdm_p1_input_grads_init") != NULL);
    CHECK(sdm_p1_input_grads_init(&ng.grads, sizeof(sdm_p1_input_grads) - 8) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sdm_p1_last_error(), "sdm_p1_input_grads_init: struct_size") != NULL);
    CHECK(sdm_p1_input_grads_init(&ng.grads, (size_t)UINT32_MAX + 1u) == SDM_P1_ERROR_INVALID_ARGUMENT);
    CHECK(ng.grads.struct_size == 0xABABABABu && ng.newer[1] == 0xABABABABABABABABull);

    /* A forward then a backward whose gradients' struct comes from the function: the same
     * bits as with the macro's struct, every gradient written. */
    Problem p;
    fill_problem(&p);
    sdm_p1_desc d = problem_desc();
    d.det_fields = SDM_P1_DET_ALL;
    d.backward = 1;
    sdm_p1_plan* plan = NULL;
    CHECK(sdm_p1_plan_create(&plan, &d) == SDM_P1_SUCCESS);
    if (plan == NULL) return;
    const sdm_p1_inputs in = problem_inputs(&p);
    CHECK(sdm_p1_execute(plan, &in, NULL, 0, NULL) == SDM_P1_SUCCESS);
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    CHECK(sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT) == SDM_P1_SUCCESS);
    static float up_a[TN * TC * TC], up_kspa[TN * TC * TW], up_log_q[TN * TC * TR];
    for (int i = 0; i < TN * TC * TC; ++i) up_a[i] = 0.5f + 0.0625f * (float)(i % 7);
    for (int i = 0; i < TN * TC * TW; ++i) up_kspa[i] = -0.25f * (float)(i % 3);
    for (int i = 0; i < TN * TC * TR; ++i) up_log_q[i] = 0.125f * (float)(i % 5) - 0.25f;
    const void* grads[SDM_P1_FIELD_COUNT] = {NULL};
    grads[SDM_P1_FIELD_A] = up_a;
    grads[SDM_P1_FIELD_KSPA] = up_kspa;
    grads[SDM_P1_FIELD_LOG_Q] = up_log_q;
    static float dk[2][TN * TC * TW], dq[2][TN * TC * TR], dg[2][TN * TC], db[2][TN * TC];
    memset(dk, 0xFF, sizeof dk); /* NaN patterns: every element must be overwritten */
    memset(dq, 0xFF, sizeof dq);
    memset(dg, 0xFF, sizeof dg);
    memset(db, 0xFF, sizeof db);
    for (int k = 0; k < 2; ++k) {
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        if (k == 1) {
            memset(&out, 0xAB, sizeof out);
            CHECK(sdm_p1_input_grads_init(&out, sizeof out) == SDM_P1_SUCCESS);
        }
        out.k_val = dk[k];
        out.q_val = dq[k];
        out.g = dg[k];
        out.beta = db[k];
        CHECK(sdm_p1_execute_backward(plan, &in, (const int32_t*)v[SDM_P1_FIELD_PAYLOAD].data, grads,
                                      SDM_P1_FIELD_COUNT, &out, NULL) == SDM_P1_SUCCESS);
    }
    CHECK(memcmp(dk[0], dk[1], sizeof dk[0]) == 0 && memcmp(dq[0], dq[1], sizeof dq[0]) == 0);
    CHECK(memcmp(dg[0], dg[1], sizeof dg[0]) == 0 && memcmp(db[0], db[1], sizeof db[0]) == 0);
    int finite = 1, nonzero = 0;
    for (int i = 0; i < TN * TC * TW; ++i) {
        finite &= isfinite(dk[1][i]) != 0;
        nonzero |= dk[1][i] != 0.0f;
    }
    for (int i = 0; i < TN * TC; ++i) finite &= isfinite(dg[1][i]) && isfinite(db[1][i]);
    for (int i = 0; i < TN * TC * TR; ++i) finite &= isfinite(dq[1][i]) != 0;
    CHECK(finite && nonzero);
    sdm_p1_plan_destroy(plan);
}

int main(void) {
    RUN(test_versions_and_statuses);
    RUN(test_cuda_architectures);
    RUN(test_thread_count_cap);
    RUN(test_descriptor_errors);
    RUN(test_resolved_desc_and_views);
    RUN(test_execute_errors);
    RUN(test_allocator_and_output_modes);
    RUN(test_struct_sizes);
    RUN(test_init_functions_and_describe);
    RUN(test_input_grads_init);
    RUN(test_size_limits);
    RUN(test_hand_worked_chunk);
    return test_summary();
}
