/* A small Phase-1 run on the CPU backend: 2 streams of 4 chunks of 16 tokens, each token
 * writing 4 and reading 4 slots of its stream's 64 slots. Prints what the outputs hold.
 * Build: cc phase1_cpu.c $(pkg-config --cflags --libs sdmp1) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sdm/phase1.h"

enum { N = 8, C = 16, W = 4, R = 4, P = 2, KEYS = 64, OFFSET = 1000 };

/* A fixed pseudo-random sequence, so every run prints the same numbers. */
static uint32_t next_random(uint32_t* state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

static int check(sdm_p1_status s, const char* what) {
    if (s == SDM_P1_SUCCESS) return 0;
    fprintf(stderr, "%s failed: %s: %s\n", what, sdm_p1_status_string(s), sdm_p1_last_error());
    return 1;
}

int main(void) {
    static int32_t k_idx[N * C * W], q_idx[N * C * R];
    static float k_val[N * C * W], q_val[N * C * R], g[N * C], beta[N * C];
    uint32_t state = 12345u;
    for (int c = 0; c < N; ++c) {
        const int base = (c % P) * OFFSET; /* stream c % P owns [base, base + KEYS) */
        for (int t = 0; t < C; ++t) {
            const int tok = c * C + t;
            for (int w = 0; w < W; ++w) {
                /* distinct slots per token: W consecutive slots from a random start */
                k_idx[tok * W + w] = base + (int32_t)((next_random(&state) % (KEYS / W)) * W + w);
                k_val[tok * W + w] = (float)(next_random(&state) % 1000) / 1000.0f - 0.5f;
            }
            for (int r = 0; r < R; ++r) {
                q_idx[tok * R + r] = base + (int32_t)(next_random(&state) % KEYS);
                q_val[tok * R + r] = (float)(next_random(&state) % 1000) / 1000.0f;
            }
            g[tok] = -0.05f * (float)(1 + next_random(&state) % 20); /* log-gates in [-1, -0.05] */
            beta[tok] = 0.5f;
        }
    }

    sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
    desc.N = N;
    desc.C = C;
    desc.W = W;
    desc.R = R;
    desc.num_parallel = P;
    desc.stream_offset = OFFSET;
    desc.num_keys = KEYS;
    desc.valid_last = 12; /* the streams' last chunks hold 12 tokens and 4 padding tokens */
    desc.det_fields = SDM_P1_DET_SHIPPED | SDM_P1_DET_KREC | SDM_P1_DET_KSPA | SDM_P1_DET_QREC | SDM_P1_DET_TILES;
    desc.backend = SDM_P1_BACKEND_CPU;

    sdm_p1_plan* plan = NULL;
    if (check(sdm_p1_plan_create(&plan, &desc), "sdm_p1_plan_create")) return 1;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = k_idx;
    in.q_idx = q_idx;
    in.k_val = k_val;
    in.q_val = q_val;
    in.g = g;
    in.beta = beta;
    if (check(sdm_p1_execute(plan, &in, NULL, 0, NULL), "sdm_p1_execute")) return 1;

    sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
    if (check(sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT), "sdm_p1_outputs")) return 1;
    printf("libsdmp1 %s, CPU backend: N=%d chunks of C=%d tokens, W=%d, R=%d, %d streams\n", sdm_p1_version_string(), N,
           C, W, R, P);
    int computed = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) computed += v[f].requested;
    printf("outputs computed: %d of %d fields\n", computed, SDM_P1_FIELD_COUNT);

    const float* a = (const float*)v[SDM_P1_FIELD_A].data;
    const float* qk = (const float*)v[SDM_P1_FIELD_QK].data;
    const float* log_k = (const float*)v[SDM_P1_FIELD_LOG_K].data;
    const float* cpe = (const float*)v[SDM_P1_FIELD_CPE].data;
    const int8_t* is_last = (const int8_t*)v[SDM_P1_FIELD_IS_LAST].data;
    const int8_t* is_only = (const int8_t*)v[SDM_P1_FIELD_IS_ONLY].data;
    const int32_t* segb_k = (const int32_t*)v[SDM_P1_FIELD_SEGB_K].data;
    double a_abs = 0.0, qk_abs = 0.0, min_log = 0.0, min_cpe = 1.0;
    int nonzero_a = 0, lasts = 0, onlys = 0, groups = 0;
    for (int i = 0; i < N * C * C; ++i) {
        a_abs += fabs(a[i]);
        qk_abs += fabs(qk[i]);
        nonzero_a += a[i] != 0.0f;
    }
    for (int i = 0; i < N * C * W; ++i) {
        if (log_k[i] < min_log) min_log = log_k[i];
        if (cpe[i] < min_cpe) min_cpe = cpe[i];
        lasts += is_last[i];
        onlys += is_only[i];
    }
    const int64_t tiles = v[SDM_P1_FIELD_SEGB_K].shape[1];
    for (int c = 0; c < N; ++c) groups += segb_k[c * tiles + tiles - 1];
    printf("a: %d non-zero cells, sum |a| = %.6f; sum |qk| = %.6f\n", nonzero_a, a_abs, qk_abs);
    printf("slot groups written: %d (valid last writes %d, single writes %d)\n", groups, lasts, onlys);
    printf("smallest log_k = %.6f, smallest cpe = %.6f, repeats = %lld\n", min_log, min_cpe,
           (long long)*(const int64_t*)v[SDM_P1_FIELD_REPEATS].data);
    printf("chunk 0, token 1: log_k = [%.6f %.6f %.6f %.6f]\n", log_k[W], log_k[W + 1], log_k[W + 2], log_k[W + 3]);
    return check(sdm_p1_plan_destroy(plan), "sdm_p1_plan_destroy");
}
