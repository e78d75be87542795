/* Times sdm_p1_execute on the benchmark shapes of docs/design.md, or on shapes given on the
 * command line.
 *
 *   phase1_bench [--backend cpu|cuda] [--reps K] [--threads T] [--json FILE] [--sweep]
 *                [--varlen] [SHAPE ...]
 *   SHAPE: S1 .. S7 (docs/design.md), a worst case (below), or N,C,W,R,num_keys[,streams] (bf16
 *   values, int32 ids, per-token gates, uniform ids; one stream unless given)
 *
 * CPU (the default): --reps 5 and the shape 256,64,32,32,65536; prints the best and mean
 * wall time per execute and the rate of input + output bytes.
 *
 * Worst cases, the legal chunks with the most pair terms, at C = W = R = 256 and N = 1 or 264
 * (two chunks an SM of an H200): WR1 / WR264, every read on one slot and each token writing
 * each of 256 slots once (about 17 M pair terms a chunk); WA1 / WA264, every id on one slot
 * (about 4.3 G terms a chunk). The time of a worst case is linear in its terms.
 *
 * CUDA (--backend cuda; built where the CUDA backend is): S1 .. S7, WR1 and WA1 unless shapes
 * are given.
 * First a device-to-device copy of 2 GiB (median of 20) gives the copy bandwidth (bytes read
 * + written per second). Each shape then runs with the default det_fields and with every
 * field (SDM_P1_DET_ALL, with beta): median and best of --reps (20 unless given, at least 3:
 * fewer serve the worst cases, whose executes take seconds) timed executes
 * after a warm-up, each timed by CUDA events around the execute on one stream; the bytes of
 * the inputs (ids, values, gates, beta when used) and of the requested outputs (the plan's
 * views); their rate, as a fraction of the copy bandwidth; and the plan's workspace. Then,
 * for the S1 shape, a line per N in 1024 .. 16384 shows the time and time per chunk (without
 * shapes given, or with --sweep). --varlen adds a row per shape ("varlen": default det_fields,
 * per-stream lengths with the odd streams at half their length, the even ones full) to compare
 * with its "default" row, the same batch padded to full length. --json FILE writes the same
 * figures (CUDA mode). In CUDA mode the library's plan log is on (SDMP1_LOG=1 unless the
 * environment sets it): each plan's creation prints on stderr which kernel computes its chunks
 * first (lean or general) and their launch shapes.
 *
 * Inputs as docs/design.md describes them: slot ids distinct within a token (K and Q each), uniform
 * (S7: by a Zipf law of exponent 1.1 over the keys, ranks mapped to slots by a fixed random
 * permutation), 128 streams (S6: 2), gates logsigmoid(x) of uniform x in [-2, 8) (negative),
 * values uniform in [-1, 1) as bf16 or f32; generated once per shape on the host. */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sdm/phase1.h"

#ifdef SDMP1_BENCH_CUDA
/* The runtime's header is C but not -pedantic clean (unnamed unions). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop
#endif

/* How a shape's slot ids are drawn (within a token distinct where num_keys allows, else
 * each uniform): uniform; by a Zipf law of exponent `zipf`; writes uniform and every read
 * on the stream's slot 0. */
enum { kUniform, kZipf, kReadsOnSlot0 };

typedef struct Shape {
    const char* name;
    int64_t N, C, W, R, num_keys, P;
    int bf16, idx64, per_write;
    int ids;
    double zipf;
} Shape;

static const Shape kShapes[] = {
    {"S1", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kUniform, 0.0},
    {"S2", 4096, 128, 32, 32, 65536, 128, 1, 0, 0, kUniform, 0.0},
    {"S3", 4096, 64, 64, 64, 65536, 128, 1, 0, 0, kUniform, 0.0},
    {"S4", 8192, 64, 32, 32, 1024, 128, 1, 0, 0, kUniform, 0.0},
    {"S5", 8192, 64, 32, 32, 65536, 128, 0, 1, 1, kUniform, 0.0},
    {"S6", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kUniform, 0.0},
    {"S7", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kZipf, 1.1},
    {"WR1", 1, 256, 256, 256, 256, 1, 1, 0, 0, kReadsOnSlot0, 0.0},
    {"WA1", 1, 256, 256, 256, 1, 1, 1, 0, 0, kUniform, 0.0},
    {"WR264", 264, 256, 256, 256, 256, 1, 1, 0, 0, kReadsOnSlot0, 0.0},
    {"WA264", 264, 256, 256, 256, 1, 1, 1, 0, 0, kUniform, 0.0},
};
enum { kShapeCount = sizeof kShapes / sizeof kShapes[0] };
/* The shapes timed without a shape list: S1 .. S7, WR1, WA1. */
enum { kDefaultShapes = 9 };

/* ---- inputs ----------------------------------------------------------------------------- */

typedef struct HostInputs {
    void* k_idx;
    void* q_idx;
    void* k_val;
    void* q_val;
    float* g;
    float* beta;
    size_t k_idx_bytes, q_idx_bytes, k_val_bytes, q_val_bytes, g_bytes, beta_bytes;
} HostInputs;

static uint64_t mix(uint64_t* s) {
    uint64_t z;
    *s += 0x9E3779B97F4A7C15ull;
    z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t* s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* nearest even (finite f) */
}

/* A Zipf law over the slots [0, n): rank r (from 1) has probability proportional to r^-s and
 * is slot perm[r - 1], for a random permutation. */
typedef struct Zipf {
    double* cdf;
    int64_t* perm;
    int64_t n;
} Zipf;

static int zipf_init(Zipf* z, int64_t n, double s, uint64_t* st) {
    double total = 0.0;
    int64_t r;
    z->n = n;
    z->cdf = malloc((size_t)n * sizeof *z->cdf);
    z->perm = malloc((size_t)n * sizeof *z->perm);
    if (z->cdf == NULL || z->perm == NULL) return 1;
    for (r = 0; r < n; ++r) z->cdf[r] = total += pow((double)(r + 1), -s);
    for (r = 0; r < n; ++r) {
        z->cdf[r] /= total;
        z->perm[r] = r;
    }
    for (r = n - 1; r > 0; --r) {
        const int64_t k = (int64_t)(mix(st) % (uint64_t)(r + 1));
        const int64_t t = z->perm[r];
        z->perm[r] = z->perm[k];
        z->perm[k] = t;
    }
    return 0;
}

static int64_t zipf_draw(const Zipf* z, uint64_t* st) {
    const double u = uniform01(st);
    int64_t lo = 0, hi = z->n - 1;   /* the first rank whose cdf reaches u */
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (z->cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return z->perm[lo];
}

static void zipf_free(Zipf* z) {
    free(z->cdf);
    free(z->perm);
}

/* Ids of one token's `lanes` entries, distinct where num_keys allows, uniform or by `zipf`
 * (non-NULL): `stamp` (num_keys words, or NULL for huge key ranges) marks the ids this token
 * already took with `mark`. */
static void token_ids(const Shape* s, int64_t lanes, int64_t base, uint32_t* stamp, uint32_t mark,
                      const Zipf* zipf, uint64_t* st, void* ids, int64_t first) {
    const int distinct = s->num_keys >= lanes;
    int64_t j, k;
    for (j = 0; j < lanes; ++j) {
        int64_t id;
        for (;;) {
            int taken = 0;
            id = zipf != NULL ? zipf_draw(zipf, st) : (int64_t)(mix(st) % (uint64_t)s->num_keys);
            if (!distinct) break;
            if (stamp != NULL) {
                taken = stamp[id] == mark;
                if (!taken) stamp[id] = mark;
            } else {
                for (k = 0; k < j && !taken; ++k) {
                    const int64_t other = s->idx64 ? ((int64_t*)ids)[first + k] : ((int32_t*)ids)[first + k];
                    taken = other == base + id;
                }
            }
            if (!taken) break;
        }
        if (s->idx64) ((int64_t*)ids)[first + j] = base + id;
        else ((int32_t*)ids)[first + j] = (int32_t)(base + id);
    }
}

static void token_values(const Shape* s, int64_t lanes, uint64_t* st, void* vals, int64_t first) {
    int64_t j;
    for (j = 0; j < lanes; ++j) {
        const float v = (float)(2.0 * uniform01(st) - 1.0);
        if (s->bf16) ((uint16_t*)vals)[first + j] = bf16_bits(v);
        else ((float*)vals)[first + j] = v;
    }
}

static void free_inputs(HostInputs* in) {
    free(in->k_idx);
    free(in->q_idx);
    free(in->k_val);
    free(in->q_val);
    free(in->g);
    free(in->beta);
    memset(in, 0, sizeof *in);
}

/* Random inputs for a shape (stream s's ids start at s * num_keys); 0 on success. */
static int make_inputs(const Shape* s, HostInputs* in) {
    const int64_t tokens = s->N * s->C, isz = s->idx64 ? 8 : 4, vsz = s->bf16 ? 2 : 4;
    const int64_t gw = s->per_write ? s->W : 1;
    uint32_t* stamp = NULL;
    uint32_t mark = 0;
    uint64_t st = 42;
    int64_t tok, j;
    Zipf zipf = {NULL, NULL, 0};
    memset(in, 0, sizeof *in);
    in->k_idx_bytes = (size_t)(tokens * s->W * isz);
    in->q_idx_bytes = (size_t)(tokens * s->R * isz);
    in->k_val_bytes = (size_t)(tokens * s->W * vsz);
    in->q_val_bytes = (size_t)(tokens * s->R * vsz);
    in->g_bytes = (size_t)(tokens * gw * 4);
    in->beta_bytes = (size_t)(tokens * 4);
    in->k_idx = malloc(in->k_idx_bytes);
    in->q_idx = malloc(in->q_idx_bytes);
    in->k_val = malloc(in->k_val_bytes);
    in->q_val = malloc(in->q_val_bytes);
    in->g = malloc(in->g_bytes);
    in->beta = malloc(in->beta_bytes);
    if (s->num_keys <= (int64_t)1 << 24) stamp = calloc((size_t)s->num_keys, sizeof *stamp);
    if (!in->k_idx || !in->q_idx || !in->k_val || !in->q_val || !in->g || !in->beta ||
        (s->num_keys <= (int64_t)1 << 24 && stamp == NULL) ||
        (s->ids == kZipf && zipf_init(&zipf, s->num_keys, s->zipf, &st) != 0)) {
        fprintf(stderr, "%s: out of host memory for the inputs\n", s->name);
        free(stamp);
        zipf_free(&zipf);
        free_inputs(in);
        return 1;
    }
    for (tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / s->C % s->P) * s->num_keys;
        const Zipf* law = s->ids == kZipf ? &zipf : NULL;
        token_ids(s, s->W, base, stamp, ++mark, law, &st, in->k_idx, tok * s->W);
        if (s->ids == kReadsOnSlot0) {
            for (j = 0; j < s->R; ++j) {
                if (s->idx64) ((int64_t*)in->q_idx)[tok * s->R + j] = base;
                else ((int32_t*)in->q_idx)[tok * s->R + j] = (int32_t)base;
            }
        } else {
            token_ids(s, s->R, base, stamp, ++mark, law, &st, in->q_idx, tok * s->R);
        }
        token_values(s, s->W, &st, in->k_val, tok * s->W);
        token_values(s, s->R, &st, in->q_val, tok * s->R);
        for (j = 0; j < gw; ++j) {
            const double x = -2.0 + 10.0 * uniform01(&st);
            in->g[tok * gw + j] = (float)-log1p(exp(-x)); /* logsigmoid(x) */
        }
        in->beta[tok] = (float)uniform01(&st);
    }
    free(stamp);
    zipf_free(&zipf);
    return 0;
}

static sdm_p1_desc shape_desc(const Shape* s, int backend, int64_t det, int threads) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = s->N;
    d.C = s->C;
    d.W = s->W;
    d.R = s->R;
    d.num_parallel = s->P;
    d.stream_offset = s->num_keys;
    d.num_keys = s->num_keys;
    d.index_dtype = s->idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = s->bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = s->per_write ? s->W : 1;
    d.det_fields = det;
    d.backend = backend;
    d.num_threads = threads;
    return d;
}

/* Bytes of the requested outputs (the plan's views) and of the inputs the plan reads. */
static double output_bytes(const sdm_p1_plan* plan) {
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    double bytes = 0.0;
    int f;
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    for (f = 0; f < SDM_P1_FIELD_COUNT; ++f) bytes += v[f].requested ? (double)v[f].bytes : 0.0;
    return bytes;
}

static double input_bytes(const HostInputs* in, int64_t det) {
    const int with_beta = det != SDM_P1_UNSET && (det & SDM_P1_DET_KSPA) != 0;
    return (double)(in->k_idx_bytes + in->q_idx_bytes + in->k_val_bytes + in->q_val_bytes +
                    in->g_bytes + (with_beta ? in->beta_bytes : 0));
}

static int parse_shape(const char* arg, Shape* s) {
    long long N, C, W, R, K, P = 1;
    int k, n;
    for (k = 0; k < kShapeCount; ++k) {
        if (!strcmp(arg, kShapes[k].name)) {
            *s = kShapes[k];
            return 1;
        }
    }
    n = sscanf(arg, "%lld,%lld,%lld,%lld,%lld,%lld", &N, &C, &W, &R, &K, &P);
    if (n < 5) return 0;
    s->name = "custom";
    s->N = N;
    s->C = C;
    s->W = W;
    s->R = R;
    s->num_keys = K;
    s->P = P;
    s->bf16 = 1;
    s->idx64 = P * K > INT32_MAX;   /* int64 ids only where int32 cannot hold them */
    s->per_write = 0;
    s->ids = kUniform;
    s->zipf = 0.0;
    return 1;
}

/* ---- CPU mode --------------------------------------------------------------------------- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run_cpu_shape(const Shape* s, int reps, int threads) {
    HostInputs hin;
    sdm_p1_desc d = shape_desc(s, SDM_P1_BACKEND_CPU, SDM_P1_UNSET, threads), r;
    sdm_p1_plan* plan = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    double bytes, best = 1e30, total = 0.0;
    int rep;
    if (make_inputs(s, &hin) != 0) return 1;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) {
        fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
        free_inputs(&hin);
        return 1;
    }
    bytes = input_bytes(&hin, SDM_P1_UNSET) + output_bytes(plan);
    in.k_idx = hin.k_idx;
    in.q_idx = hin.q_idx;
    in.k_val = hin.k_val;
    in.q_val = hin.q_val;
    in.g = hin.g;
    for (rep = 0; rep < reps; ++rep) {
        const double t0 = now_seconds();
        double dt;
        if (sdm_p1_execute(plan, &in, NULL, 0, NULL) != SDM_P1_SUCCESS) {
            fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
            sdm_p1_plan_destroy(plan);
            free_inputs(&hin);
            return 1;
        }
        dt = now_seconds() - t0;
        total += dt;
        if (dt < best) best = dt;
        fprintf(stderr, "  %s: run %d/%d: %.3f ms\n", s->name, rep + 1, reps, 1e3 * dt);
    }
    sdm_p1_plan_desc(plan, &r);
    printf("%-4s N=%lld C=%lld W=%lld R=%lld keys=%lld %s%s: best %.3f ms, mean %.3f ms, "
           "%.1f MB in+out, %.2f GB/s (%s, %d threads)\n",
           s->name, (long long)s->N, (long long)s->C, (long long)s->W, (long long)s->R,
           (long long)s->num_keys, s->bf16 ? "bf16" : "f32", s->idx64 ? " int64" : "",
           1e3 * best, 1e3 * total / reps, bytes / 1e6, bytes / best / 1e9,
           r.backend == SDM_P1_BACKEND_CPU ? "cpu" : "cuda", r.num_threads);
    sdm_p1_plan_destroy(plan);
    free_inputs(&hin);
    return 0;
}

/* ---- CUDA mode -------------------------------------------------------------------------- */

#ifdef SDMP1_BENCH_CUDA

#define CUDA_OK(call) cuda_ok((call), #call, __LINE__)

static void cuda_ok(cudaError_t e, const char* what, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "phase1_bench.c:%d: %s: %s\n", line, what, cudaGetErrorString(e));
    exit(1);
}

static void sdm_ok(sdm_p1_status st, const char* what) {
    if (st == SDM_P1_SUCCESS) return;
    fprintf(stderr, "%s: %s: %s\n", what, sdm_p1_status_string(st), sdm_p1_last_error());
    exit(1);
}

/* One timed configuration (a shape with one det_fields). */
typedef struct Result {
    Shape shape;
    int all_fields;
    int varlen;   /* half the streams at half length (per-stream lengths) */
    double median_ms, min_ms;
    int runs;
    double in_bytes, out_bytes, gbps, of_copy;
    size_t workspace;
} Result;

typedef struct Results {
    Result* items;
    int count, cap;
} Results;

static void push_result(Results* rs, const Result* r) {
    if (rs->count == rs->cap) {
        Result* grown;
        rs->cap = rs->cap ? 2 * rs->cap : 16;
        grown = realloc(rs->items, (size_t)rs->cap * sizeof *grown);
        if (grown == NULL) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        rs->items = grown;
    }
    rs->items[rs->count++] = *r;
}

static int cmp_float(const void* a, const void* b) {
    const float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

static double median_of(float* v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

/* Device-to-device copy of 2 GiB, median of 20 after a warm-up: GB/s of bytes read + written. */
static double copy_bandwidth(cudaStream_t stream, double* median_ms) {
    const size_t bytes = (size_t)1 << 31;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    float ms[20];
    int i;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMemsetAsync(a, 1, bytes, stream));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (i = -2; i < 20; ++i) {
        CUDA_OK(cudaEventRecord(e0, stream));
        CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        if (i >= 0) CUDA_OK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    *median_ms = median_of(ms, 20);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    return 2.0 * (double)bytes / (*median_ms * 1e-3) / 1e9;
}

/* A shape's inputs on the device. */
typedef struct DeviceInputs {
    void *k_idx, *q_idx, *k_val, *q_val, *g, *beta;
} DeviceInputs;

static void* upload(const void* host, size_t bytes) {
    void* d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes));
    CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static DeviceInputs upload_inputs(const HostInputs* h) {
    DeviceInputs d;
    d.k_idx = upload(h->k_idx, h->k_idx_bytes);
    d.q_idx = upload(h->q_idx, h->q_idx_bytes);
    d.k_val = upload(h->k_val, h->k_val_bytes);
    d.q_val = upload(h->q_val, h->q_val_bytes);
    d.g = upload(h->g, h->g_bytes);
    d.beta = upload(h->beta, h->beta_bytes);
    return d;
}

static void free_device_inputs(DeviceInputs* d) {
    CUDA_OK(cudaFree(d->k_idx));
    CUDA_OK(cudaFree(d->q_idx));
    CUDA_OK(cudaFree(d->k_val));
    CUDA_OK(cudaFree(d->q_val));
    CUDA_OK(cudaFree(d->g));
    CUDA_OK(cudaFree(d->beta));
}

/* Times one plan: `reps` executes after 3 warm-ups, each between two events on `stream`;
 * `lengths`: device int32 per-stream lengths, or NULL. */
static void time_plan(const Shape* s, int all, const DeviceInputs* dev, const HostInputs* host,
                      const void* lengths, int reps, cudaStream_t stream, double copy_gbps, Result* r) {
    const int64_t det = all ? SDM_P1_DET_ALL : SDM_P1_UNSET;
    sdm_p1_desc d = shape_desc(s, SDM_P1_BACKEND_CUDA, det, 0);
    sdm_p1_plan* plan = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    cudaEvent_t e0, e1;
    float* ms = malloc((size_t)reps * sizeof *ms);
    int i;
    if (ms == NULL) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    sdm_ok(sdm_p1_plan_create(&plan, &d), s->name);
    in.k_idx = dev->k_idx;
    in.q_idx = dev->q_idx;
    in.k_val = dev->k_val;
    in.q_val = dev->q_val;
    in.g = (const float*)dev->g;
    in.beta = all ? (const float*)dev->beta : NULL;
    in.stream_lengths = lengths;
    in.stream_lengths_dtype = SDM_P1_DTYPE_INT32;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (i = 0; i < 3; ++i) sdm_ok(sdm_p1_execute(plan, &in, NULL, 0, stream), "warm-up execute");
    CUDA_OK(cudaStreamSynchronize(stream));
    sdm_ok(sdm_p1_execute_status(plan), "the data check of the warm-up");
    for (i = 0; i < reps; ++i) {
        CUDA_OK(cudaEventRecord(e0, stream));
        sdm_ok(sdm_p1_execute(plan, &in, NULL, 0, stream), "execute");
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    memset(r, 0, sizeof *r);
    r->shape = *s;
    r->all_fields = all;
    r->varlen = lengths != NULL;
    r->runs = reps;
    r->median_ms = median_of(ms, reps);
    r->min_ms = ms[0];   /* sorted by median_of */
    r->in_bytes = input_bytes(host, det);
    r->out_bytes = output_bytes(plan);
    r->gbps = (r->in_bytes + r->out_bytes) / (r->median_ms * 1e-3) / 1e9;
    r->of_copy = r->gbps / copy_gbps;
    sdm_ok(sdm_p1_workspace_size(plan, &r->workspace), "workspace_size");
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    sdm_p1_plan_destroy(plan);
    free(ms);
}

static void print_result(const Result* r) {
    const Shape* s = &r->shape;
    printf("%-6s %-7s %6lld %4lld %4lld %4lld %7lld %4lld %-4s %-3s %-5s %9.4f %9.4f %9.1f %9.1f %8.1f %7.3f %9.1f\n",
           s->name, r->all_fields ? "all" : r->varlen ? "varlen" : "default", (long long)s->N,
           (long long)s->C, (long long)s->W, (long long)s->R, (long long)s->num_keys, (long long)s->P,
           s->bf16 ? "bf16" : "f32", s->idx64 ? "i64" : "i32", s->per_write ? "write" : "token",
           r->median_ms, r->min_ms, r->in_bytes / 1e6, r->out_bytes / 1e6, r->gbps, r->of_copy,
           (double)r->workspace / 1e6);
}

static void print_table_header(void) {
    printf("%-6s %-7s %6s %4s %4s %4s %7s %4s %-4s %-3s %-5s %9s %9s %9s %9s %8s %7s %9s\n",
           "shape", "fields", "N", "C", "W", "R", "keys", "P", "vals", "ids", "gates", "median_ms",
           "min_ms", "in_MB", "out_MB", "GB/s", "of_copy", "work_MB");
}

/* Both det_fields settings of one shape, then (varlen) the default one with the odd streams
 * at half their length. */
static void run_cuda_shape(const Shape* s, int reps, int varlen, cudaStream_t stream, double copy_gbps,
                           Results* rs) {
    HostInputs host;
    DeviceInputs dev;
    void* lengths = NULL;
    int all;
    if (make_inputs(s, &host) != 0) exit(1);
    dev = upload_inputs(&host);
    if (varlen) {
        int32_t* half = malloc((size_t)s->P * sizeof *half);
        int64_t p;
        if (half == NULL) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        for (p = 0; p < s->P; ++p) half[p] = (int32_t)(s->N / s->P * s->C / (p % 2 ? 2 : 1));
        lengths = upload(half, (size_t)s->P * sizeof *half);
        free(half);
    }
    for (all = 0; all <= 1 + varlen; ++all) {
        Result r;
        time_plan(s, all == 1, &dev, &host, all == 2 ? lengths : NULL, reps, stream, copy_gbps, &r);
        print_result(&r);
        fflush(stdout);
        push_result(rs, &r);
    }
    if (lengths != NULL) CUDA_OK(cudaFree(lengths));
    free_device_inputs(&dev);
    free_inputs(&host);
}

/* S1 at N = 1024 .. 16384 (default det_fields): the inputs of the largest N serve every N
 * (chunks are independent and 128 divides each N). */
static void run_sweep(int reps, cudaStream_t stream, double copy_gbps, Results* sweep) {
    static const int64_t Ns[] = {1024, 2048, 4096, 8192, 16384};
    Shape s = kShapes[0];
    HostInputs host;
    DeviceInputs dev;
    double per_chunk_2048 = 0.0;
    int i;
    s.N = Ns[4];
    if (make_inputs(&s, &host) != 0) exit(1);
    dev = upload_inputs(&host);
    printf("\nS1 time against N (default det_fields):\n%6s %9s %13s %13s\n", "N", "median_ms",
           "us_per_chunk", "vs_N=2048");
    for (i = 0; i < 5; ++i) {
        Result r;
        double per_chunk;
        s.N = Ns[i];
        time_plan(&s, 0, &dev, &host, NULL, reps, stream, copy_gbps, &r);
        r.in_bytes = r.in_bytes * (double)Ns[i] / (double)Ns[4];   /* the inputs of this N only */
        r.gbps = (r.in_bytes + r.out_bytes) / (r.median_ms * 1e-3) / 1e9;
        r.of_copy = r.gbps / copy_gbps;
        per_chunk = 1e3 * r.median_ms / (double)Ns[i];
        if (Ns[i] == 2048) per_chunk_2048 = per_chunk;
        printf("%6lld %9.4f %13.4f %13.3f\n", (long long)Ns[i], r.median_ms, per_chunk,
               per_chunk_2048 > 0.0 ? per_chunk / per_chunk_2048 : 0.0);
        fflush(stdout);
        push_result(sweep, &r);
    }
    free_device_inputs(&dev);
    free_inputs(&host);
}

static void json_result(FILE* f, const Result* r, int last) {
    const Shape* s = &r->shape;
    fprintf(f, "    {\"shape\": \"%s\", \"det_fields\": \"%s\", \"N\": %lld, \"C\": %lld, \"W\": %lld, "
               "\"R\": %lld, \"num_keys\": %lld, \"streams\": %lld, \"values\": \"%s\", \"ids\": \"%s\", "
               "\"gates\": \"%s\", \"runs\": %d, \"median_ms\": %.6f, \"min_ms\": %.6f, "
               "\"us_per_chunk\": %.6f, \"input_bytes\": %.0f, \"output_bytes\": %.0f, \"GBps\": %.3f, "
               "\"fraction_of_copy\": %.5f, \"workspace_bytes\": %zu}%s\n",
            s->name, r->all_fields ? "all" : r->varlen ? "varlen" : "default", (long long)s->N,
            (long long)s->C, (long long)s->W, (long long)s->R, (long long)s->num_keys, (long long)s->P,
            s->bf16 ? "bf16" : "f32", s->idx64 ? "int64" : "int32", s->per_write ? "per_write" : "per_token",
            r->runs, r->median_ms, r->min_ms, 1e3 * r->median_ms / (double)s->N, r->in_bytes,
            r->out_bytes, r->gbps, r->of_copy, r->workspace, last ? "" : ",");
}

static int write_json(const char* path, const char* device, double copy_ms, double copy_gbps,
                      const Results* shapes, const Results* sweep) {
    FILE* f = fopen(path, "w");
    int i, driver = 0, runtime = 0;
    if (f == NULL) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    CUDA_OK(cudaDriverGetVersion(&driver));
    CUDA_OK(cudaRuntimeGetVersion(&runtime));
    fprintf(f, "{\n  \"library\": \"%s\",\n  \"device\": \"%s\",\n  \"cuda_driver\": %d,\n  \"cuda_runtime\": %d,\n",
            sdm_p1_version_string(), device, driver, runtime);
    fprintf(f, "  \"copy\": {\"bytes_per_copy\": %zu, \"median_ms\": %.6f, \"GBps_read_plus_write\": %.3f},\n",
            (size_t)1 << 31, copy_ms, copy_gbps);
    fprintf(f, "  \"shapes\": [\n");
    for (i = 0; i < shapes->count; ++i) json_result(f, &shapes->items[i], i + 1 == shapes->count);
    fprintf(f, "  ],\n  \"n_sweep\": [\n");
    for (i = 0; i < sweep->count; ++i) json_result(f, &sweep->items[i], i + 1 == sweep->count);
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0 ? 0 : 1;
}

static int run_cuda(const Shape* shapes, int count, int reps, int sweep, int varlen, const char* json) {
    struct cudaDeviceProp prop;
    cudaStream_t stream;
    Results rs = {NULL, 0, 0}, sw = {NULL, 0, 0};
    double copy_ms, copy_gbps;
    int i, device = 0, failed = 0;
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaGetDeviceProperties(&prop, device));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    copy_gbps = copy_bandwidth(stream, &copy_ms);
    printf("device %d: %s; libsdmp1 %s; %d timed runs per row (CUDA events, median)\n", device,
           prop.name, sdm_p1_version_string(), reps);
    printf("copy: 2 GiB device to device, median %.4f ms: %.1f GB/s (read + write)\n\n",
           copy_ms, copy_gbps);
    print_table_header();
    for (i = 0; i < count; ++i) run_cuda_shape(&shapes[i], reps, varlen, stream, copy_gbps, &rs);
    if (sweep) run_sweep(reps, stream, copy_gbps, &sw);
    if (json != NULL) failed = write_json(json, prop.name, copy_ms, copy_gbps, &rs, &sw);
    CUDA_OK(cudaStreamDestroy(stream));
    free(rs.items);
    free(sw.items);
    return failed;
}

#endif /* SDMP1_BENCH_CUDA */

/* ---- main ------------------------------------------------------------------------------ */

static int usage(const char* argv0) {
    fprintf(stderr, "usage: %s [--backend cpu|cuda] [--reps K] [--threads T] [--json FILE] [--sweep] [--varlen] "
                    "[S1..S7 | WR1 | WA1 | WR264 | WA264 | N,C,W,R,num_keys[,streams] ...]\n", argv0);
    return 2;
}

int main(int argc, char** argv) {
    Shape shapes[64];
    int count = 0, cuda = 0, reps = 0, threads = 0, sweep = 0, varlen = 0, failed = 0, i;
    const char* json = NULL;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            if (!strcmp(argv[i], "cuda")) cuda = 1;
            else if (strcmp(argv[i], "cpu") != 0) return usage(argv[0]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(argv[i], "--sweep")) {
            sweep = 1;
        } else if (!strcmp(argv[i], "--varlen")) {
            varlen = 1;
        } else if (count < 64 && parse_shape(argv[i], &shapes[count])) {
            ++count;
        } else {
            return usage(argv[0]);
        }
    }
    if (cuda) {
#ifdef SDMP1_BENCH_CUDA
        setenv("SDMP1_LOG", "1", 0);   /* which kernel each plan runs, on stderr */
        if (count == 0) {   /* the canonical shapes, two worst cases and the N sweep */
            for (count = 0; count < kDefaultShapes; ++count) shapes[count] = kShapes[count];
            sweep = 1;
        }
        return run_cuda(shapes, count, reps == 0 ? 20 : reps < 3 ? 3 : reps, sweep, varlen, json);
#else
        fprintf(stderr, "%s: built without the CUDA backend (no --backend cuda)\n", argv[0]);
        return 2;
#endif
    }
    if (json != NULL || sweep || varlen) {
        fprintf(stderr, "%s: --json, --sweep and --varlen are for --backend cuda\n", argv[0]);
        return 2;
    }
    if (count == 0) {
        const Shape s = {"cpu", 256, 64, 32, 32, 65536, 1, 1, 0, 0, kUniform, 0.0};
        shapes[count++] = s;
    }
    for (i = 0; i < count; ++i) failed |= run_cpu_shape(&shapes[i], reps < 1 ? 5 : reps, threads);
    return failed;
}
