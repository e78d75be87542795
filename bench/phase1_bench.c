/* Times sdm_p1_execute on the benchmark shapes of DESIGN.md, or on one shape given on the
 * command line, and prints per shape the time per execute, the bytes the inputs and the
 * requested outputs occupy, and the rate that makes.
 *
 *   phase1_bench [--backend cpu|cuda] [--reps K] [--threads T] [SHAPE ...]
 *   SHAPE: S1 .. S6 (DESIGN.md), or N,C,W,R,num_keys (bf16 values, per-token gates)
 * Default: --backend cpu --reps 5 and the shape 256,64,32,32,65536.
 * This release has only the CPU backend; the CUDA runs (and the copy-bandwidth ratio) come
 * with the CUDA backend. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sdm/phase1.h"

typedef struct Shape {
    const char* name;
    int64_t N, C, W, R, num_keys, P;
    int bf16, idx64, per_write;
} Shape;

static const Shape kShapes[] = {
    {"S1", 8192, 64, 32, 32, 65536, 128, 1, 0, 0},
    {"S2", 4096, 128, 32, 32, 65536, 128, 1, 0, 0},
    {"S3", 4096, 64, 64, 64, 65536, 128, 1, 0, 0},
    {"S4", 8192, 64, 32, 32, 1024, 128, 1, 0, 0},
    {"S5", 8192, 64, 32, 32, 65536, 128, 0, 1, 1},
    {"S6", 128, 128, 64, 64, 262144, 2, 1, 0, 0},
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t* s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int run_shape(const Shape* s, int backend, int reps, int threads) {
    const int64_t tokens = s->N * s->C, isz = s->idx64 ? 8 : 4, vsz = s->bf16 ? 2 : 4;
    const int64_t gw = s->per_write ? s->W : 1;
    void* k_idx = malloc((size_t)(tokens * s->W * isz));
    void* q_idx = malloc((size_t)(tokens * s->R * isz));
    void* k_val = malloc((size_t)(tokens * s->W * vsz));
    void* q_val = malloc((size_t)(tokens * s->R * vsz));
    float* g = malloc((size_t)(tokens * gw * 4));
    if (!k_idx || !q_idx || !k_val || !q_val || !g) {
        fprintf(stderr, "%s: out of host memory for the inputs\n", s->name);
        return 1;
    }
    const int64_t offset = s->num_keys;
    uint64_t st = 42;
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / s->C % s->P) * offset;
        /* distinct slots per token: W consecutive slots from a random start (mod num_keys) */
        const int64_t start = (int64_t)(mix(&st) % (uint64_t)s->num_keys);
        for (int64_t w = 0; w < s->W; ++w) {
            const int64_t id = base + (start + w * 7919) % s->num_keys;
            if (s->idx64) ((int64_t*)k_idx)[tok * s->W + w] = id;
            else ((int32_t*)k_idx)[tok * s->W + w] = (int32_t)id;
            const float v = (float)(mix(&st) % 2001) / 1000.0f - 1.0f;
            if (s->bf16) { uint32_t u; memcpy(&u, &v, 4); ((uint16_t*)k_val)[tok * s->W + w] = (uint16_t)(u >> 16); }
            else ((float*)k_val)[tok * s->W + w] = v;
        }
        for (int64_t r = 0; r < s->R; ++r) {
            const int64_t id = base + (int64_t)(mix(&st) % (uint64_t)s->num_keys);
            if (s->idx64) ((int64_t*)q_idx)[tok * s->R + r] = id;
            else ((int32_t*)q_idx)[tok * s->R + r] = (int32_t)id;
            const float v = (float)(mix(&st) % 2001) / 1000.0f - 1.0f;
            if (s->bf16) { uint32_t u; memcpy(&u, &v, 4); ((uint16_t*)q_val)[tok * s->R + r] = (uint16_t)(u >> 16); }
            else ((float*)q_val)[tok * s->R + r] = v;
        }
        for (int64_t j = 0; j < gw; ++j) g[tok * gw + j] = -0.01f * (float)(1 + mix(&st) % 100);
    }

    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = s->N; d.C = s->C; d.W = s->W; d.R = s->R;
    d.num_parallel = s->P; d.stream_offset = offset; d.num_keys = s->num_keys;
    d.index_dtype = s->idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = s->bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = gw;
    d.backend = backend;
    d.num_threads = threads;
    sdm_p1_plan* plan = NULL;
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) {
        fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
        return 1;
    }
    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
    double bytes = (double)(tokens * (s->W + s->R) * (isz + vsz) + tokens * gw * 4);
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) bytes += (double)v[f].bytes;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = k_idx; in.q_idx = q_idx; in.k_val = k_val; in.q_val = q_val; in.g = g;
    double best = 1e30, total = 0.0;
    for (int rep = 0; rep < reps; ++rep) {
        const double t0 = now_seconds();
        if (sdm_p1_execute(plan, &in, NULL, 0, NULL) != SDM_P1_SUCCESS) {
            fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
            return 1;
        }
        const double dt = now_seconds() - t0;
        total += dt;
        if (dt < best) best = dt;
        fprintf(stderr, "  %s: run %d/%d: %.3f ms\n", s->name, rep + 1, reps, 1e3 * dt);
    }
    sdm_p1_desc r;
    sdm_p1_plan_desc(plan, &r);
    printf("%-4s N=%lld C=%lld W=%lld R=%lld keys=%lld %s%s: best %.3f ms, mean %.3f ms, "
           "%.1f MB in+out, %.2f GB/s (%s, %d threads)\n",
           s->name, (long long)s->N, (long long)s->C, (long long)s->W, (long long)s->R,
           (long long)s->num_keys, s->bf16 ? "bf16" : "f32", s->idx64 ? " int64" : "",
           1e3 * best, 1e3 * total / reps, bytes / 1e6, bytes / best / 1e9,
           r.backend == SDM_P1_BACKEND_CPU ? "cpu" : "cuda", r.num_threads);
    sdm_p1_plan_destroy(plan);
    free(k_idx); free(q_idx); free(k_val); free(q_val); free(g);
    return 0;
}

int main(int argc, char** argv) {
    int backend = SDM_P1_BACKEND_CPU, reps = 5, threads = 0, ran = 0, failed = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            backend = !strcmp(argv[i], "cuda") ? SDM_P1_BACKEND_CUDA : SDM_P1_BACKEND_CPU;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else {
            Shape s = {"custom", 0, 0, 0, 0, 0, 1, 1, 0, 0};
            int found = 0;
            for (size_t k = 0; k < sizeof kShapes / sizeof kShapes[0]; ++k) {
                if (!strcmp(argv[i], kShapes[k].name)) { s = kShapes[k]; found = 1; }
            }
            if (!found) {
                long long N, C, W, R, K;
                if (sscanf(argv[i], "%lld,%lld,%lld,%lld,%lld", &N, &C, &W, &R, &K) != 5) {
                    fprintf(stderr, "usage: %s [--backend cpu|cuda] [--reps K] [--threads T] "
                                    "[S1..S6 | N,C,W,R,num_keys ...]\n", argv[0]);
                    return 2;
                }
                s.N = N; s.C = C; s.W = W; s.R = R; s.num_keys = K;
            }
            failed |= run_shape(&s, backend, reps < 1 ? 1 : reps, threads);
            ran = 1;
        }
    }
    if (!ran) {
        const Shape s = {"cpu", 256, 64, 32, 32, 65536, 1, 1, 0, 0};
        failed |= run_shape(&s, backend, reps < 1 ? 1 : reps, threads);
    }
    return failed;
}
