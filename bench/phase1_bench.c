/* Times sdm_p1_execute on the benchmark shapes of docs/design.md, or on shapes given on the
 * command line.
 *
 *   phase1_bench [--backend cpu|cuda] [--reps K] [--threads T] [--json PATH] [--sweep]
 *                [--varlen] [--fields MASK] [--backward] [--save-inputs DIR] [SHAPE ...]
 *   phase1_bench --help
 *   SHAPE: a named shape (below), or N,C,W,R,num_keys[,streams] (bf16 values, int32 ids,
 *   per-token gates, uniform ids; one stream unless given)
 *
 * Named shapes (docs/design.md): S1 .. S7; S8, S6's configuration (N 128, C 128, W = R = 64,
 * 262144 slots, 2 streams, bf16, per-token gates) with every id drawn from S7's Zipf law
 * (exponent 1.1); S7z0.8, S7z1.5, S8z0.8 and S8z1.5, S7 and S8 with the Zipf exponent 0.8 or
 * 1.5 instead of 1.1; S7split and S8split, S7 and S8 with the writes' ids (K) and the reads'
 * (Q) drawn from two independent Zipf 1.1 laws (the same exponent, each with its own random
 * ranking of the slots: a write's popular slots are not a read's); and the worst cases, the
 * legal chunks with the most pair terms, at C = W = R = 256 and N = 1 or 264 (two chunks an
 * SM of an H200): WR1 / WR264, every read on one slot and each token writing each of 256
 * slots once (about 17 M pair terms a chunk); WA1 / WA264, every id on one slot (about
 * 4.3 G terms a chunk). The time of a worst case is linear in its terms.
 *
 * --save-inputs DIR (either backend) first writes each shape's inputs, exactly the bytes the
 * timed executes get, to DIR/<shape>.npz (DIR is created where missing; a custom shape is
 * "custom", the CPU default "cpu"), then times as without it. Each file is an uncompressed
 * NumPy archive (bench/npz_writer.h) in the layout ../shared/peer/time_spec.py reads (for
 * bench/compare_spec.py, which sets the spec's kernels beside these rows): k_idx [N, C, W] and
 * q_idx [N, C, R] (int32, or int64 as the shape; stream offsets included), k_val [N, C, W] and
 * q_val [N, C, R] (float32, or uint16 holding the bf16 bits), g [N, C, 1] or [N, C, W]
 * (float32), and the int64 scalars num_parallel (the streams), stream_offset and num_keys
 * (both the shape's num_keys) and valid_last (C). No beta (the default rows run without it)
 * and not the N sweep's inputs. Chunk n belongs to stream n % num_parallel.
 *
 * CPU (the default): --reps 5 and the shape 256,64,32,32,65536 unless given; first a host
 * memcpy of 256 MiB on one thread (median of 5) gives the copy bandwidth; then per shape the
 * best, median and mean wall time per execute (default det_fields), the rate of input + output
 * bytes at the best time, and that rate at the median as a fraction of the copy bandwidth.
 *
 * CUDA (--backend cuda; built where the CUDA backend is): S1 .. S8, WR1 and WA1 unless shapes
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
 * with its "default" row, the same batch padded to full length. --fields MASK (up to 8 times)
 * adds a row per shape with those det_fields (its label and JSON "det_fields" the mask, beta
 * given where it has DET_KSPA): a trainer's sets are 296, 952 and 2872. In CUDA mode the library's
 * plan log is on (SDMP1_LOG=1 unless the environment sets it): each plan's creation prints on
 * stderr which kernel computes its chunks first (lean or general) and their launch shapes,
 * then each stage's kernel instantiation and why the kernel policy chose it.
 *
 * --backward (CUDA): the backward instead. Per shape, two rows: the sdm_layer's upstream
 * gradients (a, qk, rex, cpe, k_eff, q_w) and every differentiable output's, random in
 * [-1, 1); each row gives the forward's median ms (default det_fields, a plan without
 * backward), the backward's (a plan with backward = 1, every input gradient written) with the
 * forward's payload and the ids (the payload checked against them), with the payload alone
 * ("trusted": the check's cost is the difference) and sorted again (payload NULL), each as a
 * ratio to the forward, and both plans' workspace. A backward of over 100 ms (the worst cases) is timed 3 times after one
 * warm-up. No JSON.
 *
 * --json PATH (either backend) also writes the run's results to PATH as one JSON object:
 * "library" (version), "backend" ("cpu" or "cuda"), "device" (the GPU's name, or the CPU's
 * model name from /proc/cpuinfo), "date_utc" (the run's start, ISO 8601), "copy_bytes",
 * "copy_median_ms" and "copy_GBps" (the copy measured in this run, read + write),
 * "cuda_driver" and "cuda_runtime" (CUDA only), then "shapes": one object a timed row,
 * {"shape", "det_fields" ("default", "all" or a --fields mask), "varlen", "N", "C", "W", "R", "num_keys",
 * "streams", "value_dtype", "id_dtype", "gates" ("per_token" or "per_write"), "ids" ("uniform",
 * "zipf", "zipf_split" or "reads_on_slot_0"), "zipf_exponent" (null unless zipf or
 * zipf_split), "threads" (CPU only: the plan's), "repeats", "median_ms", "min_ms",
 * "us_per_chunk", "input_bytes", "output_bytes", "GBps" and "fraction_of_copy" (at the
 * median; null where not finite), "workspace_bytes"},
 * and "n_sweep" (the S1 rows against N, the same members; empty without the CUDA sweep).
 * Strings are JSON-escaped. bench/results/README.md says where such files are kept.
 *
 * Inputs as docs/design.md describes them: slot ids distinct within a token (K and Q each),
 * uniform or by a Zipf law over the keys (S7, S8 and their z variants; ranks mapped to slots
 * by a fixed random permutation; the split variants: K by one permutation, Q by a second,
 * drawn after the first), 128 streams (S6, S8: 2), gates logsigmoid(x) of uniform x in
 * [-2, 8) (negative), values uniform in [-1, 1) as bf16 or f32; generated once per shape on
 * the host. */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "npz_writer.h"
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
 * on the stream's slot 0; the writes by a Zipf law of exponent `zipf` and the reads by a
 * second, independent one (the same exponent, another ranking of the slots); writes uniform
 * and reads that follow recent writes (each read a slot that its token or one of the
 * kRecentTokens - 1 tokens before it in the chunk wrote, as a memory read back soon after
 * it is written). */
enum { kUniform, kZipf, kReadsOnSlot0, kZipfSplit, kRecentReads };
enum { kRecentTokens = 4 };

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
    {"S8", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kZipf, 1.1}, /* S6 with S7's ids */
    {"WR1", 1, 256, 256, 256, 256, 1, 1, 0, 0, kReadsOnSlot0, 0.0},
    {"WA1", 1, 256, 256, 256, 1, 1, 1, 0, 0, kUniform, 0.0},
    {"WR264", 264, 256, 256, 256, 256, 1, 1, 0, 0, kReadsOnSlot0, 0.0},
    {"WA264", 264, 256, 256, 256, 1, 1, 1, 0, 0, kUniform, 0.0},
    /* Hot groups: S7 and S8 with a milder and a steeper Zipf law. */
    {"S7z0.8", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kZipf, 0.8},
    {"S7z1.5", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kZipf, 1.5},
    {"S8z0.8", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kZipf, 0.8},
    {"S8z1.5", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kZipf, 1.5},
    /* S7 and S8 with K and Q drawn from two independent Zipf 1.1 laws (two rankings). */
    {"S7split", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kZipfSplit, 1.1},
    {"S8split", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kZipfSplit, 1.1},
    /* S1 and S6 with reads that follow recent writes (small groups, many pair terms). */
    {"S1recent", 8192, 64, 32, 32, 65536, 128, 1, 0, 0, kRecentReads, 0.0},
    {"S6recent", 128, 128, 64, 64, 262144, 2, 1, 0, 0, kRecentReads, 0.0},
};
enum { kShapeCount = sizeof kShapes / sizeof kShapes[0] };
/* The shapes timed without a shape list: the first ten, S1 .. S8, WR1, WA1. */
enum { kDefaultShapes = 10 };

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
    int64_t lo = 0, hi = z->n - 1; /* the first rank whose cdf reaches u */
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

/* Element `at` of an id array of the shape's id type. */
static int64_t id_at(const Shape* s, const void* ids, int64_t at) {
    return s->idx64 ? ((const int64_t*)ids)[at] : ((const int32_t*)ids)[at];
}

static void set_id(const Shape* s, void* ids, int64_t at, int64_t id) {
    if (s->idx64) ((int64_t*)ids)[at] = id;
    else ((int32_t*)ids)[at] = (int32_t)id;
}

/* Ids of one token's `lanes` entries, distinct where num_keys allows, uniform or by `zipf`
 * (non-NULL): `stamp` (num_keys words, or NULL for huge key ranges) marks the ids this token
 * already took with `mark`. */
static void token_ids(const Shape* s, int64_t lanes, int64_t base, uint32_t* stamp, uint32_t mark, const Zipf* zipf,
                      uint64_t* st, void* ids, int64_t first) {
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
                    const int64_t other = id_at(s, ids, first + k);
                    taken = other == base + id;
                }
            }
            if (!taken) break;
        }
        set_id(s, ids, first + j, base + id);
    }
}

/* Token tok's reads, each a slot written by tok or by one of the kRecentTokens - 1 tokens
 * before it in its chunk (their writes drawn already), distinct within the token while
 * those writes hold enough distinct slots (else uniform draws fill the rest). */
static void recent_read_ids(const Shape* s, int64_t base, uint32_t* stamp, uint32_t mark, uint64_t* st,
                            const void* k_idx, void* q_idx, int64_t tok) {
    const int64_t first_token = tok - tok % s->C;
    const int64_t from = tok - (kRecentTokens - 1) > first_token ? tok - (kRecentTokens - 1) : first_token;
    const int64_t writes = (tok + 1 - from) * s->W;
    int64_t j = 0, k, tries;
    for (tries = 0; j < s->R && tries < 64 * s->R; ++tries) {
        const int64_t id = id_at(s, k_idx, from * s->W + (int64_t)(mix(st) % (uint64_t)writes));
        int taken = 0;
        if (stamp != NULL) {
            taken = stamp[id - base] == mark;
            if (!taken) stamp[id - base] = mark;
        } else {
            for (k = 0; k < j && !taken; ++k) taken = id_at(s, q_idx, tok * s->R + k) == id;
        }
        if (taken) continue;
        set_id(s, q_idx, tok * s->R + j, id);
        ++j;
    }
    for (; j < s->R; ++j) set_id(s, q_idx, tok * s->R + j, base + (int64_t)(mix(st) % (uint64_t)s->num_keys));
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

/* Random inputs for a shape (stream s's ids start at s * num_keys); 0 on success. One random
 * stream (seed 42) in a fixed order: the Zipf law's permutation (then the split shapes' second
 * one), then per token its K ids, Q ids, K values, Q values, gates and beta. */
static int make_inputs(const Shape* s, HostInputs* in) {
    const int64_t tokens = s->N * s->C, isz = s->idx64 ? 8 : 4, vsz = s->bf16 ? 2 : 4;
    const int64_t gw = s->per_write ? s->W : 1;
    const int zipf_ids = s->ids == kZipf || s->ids == kZipfSplit;
    uint32_t* stamp = NULL;
    uint32_t mark = 0;
    uint64_t st = 42;
    int64_t tok, j;
    Zipf zipf = {NULL, NULL, 0}, read_zipf = {NULL, NULL, 0};
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
        (zipf_ids && zipf_init(&zipf, s->num_keys, s->zipf, &st) != 0) ||
        (s->ids == kZipfSplit && zipf_init(&read_zipf, s->num_keys, s->zipf, &st) != 0)) {
        fprintf(stderr, "%s: out of host memory for the inputs\n", s->name);
        free(stamp);
        zipf_free(&zipf);
        zipf_free(&read_zipf);
        free_inputs(in);
        return 1;
    }
    for (tok = 0; tok < tokens; ++tok) {
        const int64_t base = (tok / s->C % s->P) * s->num_keys;
        const Zipf* law = zipf_ids ? &zipf : NULL;
        const Zipf* read_law = s->ids == kZipfSplit ? &read_zipf : law;
        token_ids(s, s->W, base, stamp, ++mark, law, &st, in->k_idx, tok * s->W);
        if (s->ids == kRecentReads) {
            recent_read_ids(s, base, stamp, ++mark, &st, in->k_idx, in->q_idx, tok);
        } else if (s->ids == kReadsOnSlot0) {
            for (j = 0; j < s->R; ++j) set_id(s, in->q_idx, tok * s->R + j, base);
        } else {
            token_ids(s, s->R, base, stamp, ++mark, read_law, &st, in->q_idx, tok * s->R);
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
    zipf_free(&read_zipf);
    return 0;
}

/* Writes a shape's inputs (make_inputs's) to dir/<name>.npz, in the layout of the header
 * comment's --save-inputs; 0 on success. */
static int save_inputs(const Shape* s, const char* dir) {
    const int64_t k_shape[3] = {s->N, s->C, s->W}, q_shape[3] = {s->N, s->C, s->R};
    const int64_t g_shape[3] = {s->N, s->C, s->per_write ? s->W : 1};
    const NpzType ids = s->idx64 ? NPZ_INT64 : NPZ_INT32, vals = s->bf16 ? NPZ_UINT16 : NPZ_FLOAT32;
    HostInputs in;
    NpzWriter* z;
    char path[4096];
    int failed;
    if ((size_t)snprintf(path, sizeof path, "%s/%s.npz", dir, s->name) >= sizeof path) {
        fprintf(stderr, "%s: the path is too long\n", dir);
        return 1;
    }
    if (make_inputs(s, &in) != 0) return 1;
    z = npz_open(path);
    if (z == NULL) {
        free_inputs(&in);
        return 1;
    }
    npz_add(z, "k_idx", ids, 3, k_shape, in.k_idx);
    npz_add(z, "q_idx", ids, 3, q_shape, in.q_idx);
    npz_add(z, "k_val", vals, 3, k_shape, in.k_val);
    npz_add(z, "q_val", vals, 3, q_shape, in.q_val);
    npz_add(z, "g", NPZ_FLOAT32, 3, g_shape, in.g);
    npz_add_int64_scalar(z, "num_parallel", s->P);
    npz_add_int64_scalar(z, "stream_offset", s->num_keys);
    npz_add_int64_scalar(z, "num_keys", s->num_keys);
    npz_add_int64_scalar(z, "valid_last", s->C);
    failed = npz_close(z);
    free_inputs(&in);
    if (!failed) fprintf(stderr, "wrote %s\n", path);
    return failed;
}

/* --save-inputs: every shape's file (the directory created where missing); 0 on success. */
static int save_all_inputs(const Shape* shapes, int count, const char* dir) {
    int i, k;
    for (i = 0; i < count; ++i) {
        for (k = 0; k < i; ++k) {
            if (!strcmp(shapes[i].name, shapes[k].name)) {
                fprintf(stderr, "--save-inputs: two shapes named %s (one file a name)\n", shapes[i].name);
                return 1;
            }
        }
    }
    if (mkdir(dir, 0777) != 0) {
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "--save-inputs: cannot create the directory %s\n", dir);
            return 1;
        }
    }
    for (i = 0; i < count; ++i) {
        if (save_inputs(&shapes[i], dir) != 0) return 1;
    }
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
    return (double)(in->k_idx_bytes + in->q_idx_bytes + in->k_val_bytes + in->q_val_bytes + in->g_bytes +
                    (with_beta ? in->beta_bytes : 0));
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
    s->idx64 = P * K > INT32_MAX; /* int64 ids only where int32 cannot hold them */
    s->per_write = 0;
    s->ids = kUniform;
    s->zipf = 0.0;
    return 1;
}

/* ---- results and their JSON -------------------------------------------------------------- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void out_of_memory(void) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
}

/* One timed configuration (a shape with one det_fields). */
typedef struct Result {
    Shape shape;
    int64_t det_fields; /* SDM_P1_UNSET (the default set), SDM_P1_DET_ALL or a --fields mask */
    int varlen;         /* half the streams at half length (per-stream lengths) */
    int threads;        /* CPU: the plan's threads; CUDA: 0 */
    double median_ms, min_ms, mean_ms;
    int repeats;
    double in_bytes, out_bytes, gbps, of_copy; /* gbps and of_copy at the median */
    size_t workspace;
} Result;

/* The --fields masks, a row each after a shape's default and every-field rows. */
typedef struct FieldSets {
    int64_t masks[8];
    int count;
} FieldSets;

typedef struct Results {
    Result* items;
    int count, cap;
} Results;

static void push_result(Results* rs, const Result* r) {
    if (rs->count == rs->cap) {
        Result* grown;
        rs->cap = rs->cap ? 2 * rs->cap : 16;
        grown = realloc(rs->items, (size_t)rs->cap * sizeof *grown);
        if (grown == NULL) out_of_memory();
        rs->items = grown;
    }
    rs->items[rs->count++] = *r;
}

static int cmp_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static double median_of(double* v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The run's facts besides its rows: the JSON's top-level members. */
typedef struct RunInfo {
    const char* backend; /* "cpu" or "cuda" */
    char device[256];
    char date_utc[32];
    double copy_bytes, copy_ms, copy_gbps;
    int cuda_driver, cuda_runtime; /* CUDA only */
} RunInfo;

static void utc_now(char* buf, size_t n) {
    const time_t now = time(NULL);
    const struct tm* t = gmtime(&now);
    if (t == NULL || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", t) == 0) snprintf(buf, n, "unknown");
}

/* A JSON string: quotes, backslashes and control characters escaped; other bytes as they are
 * (UTF-8 passes through). */
static void json_string(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s != '\0'; ++s) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* `sep` "name": x, or null where x is not finite (JSON has no NaN or infinity). */
static void json_number(FILE* f, const char* sep, const char* name, double x, const char* format) {
    fprintf(f, "%s\"%s\": ", sep, name);
    if (isfinite(x)) fprintf(f, format, x);
    else fputs("null", f);
}

/* A row's det_fields as the table and the JSON name it: "default", "all" or the mask. */
static const char* fields_label(int64_t det) {
    static char mask[24];
    if (det == SDM_P1_UNSET) return "default";
    if (det == SDM_P1_DET_ALL) return "all";
    snprintf(mask, sizeof mask, "%lld", (long long)det);
    return mask;
}

static void json_result(FILE* f, const Result* r, int last) {
    static const char* const kIdNames[] = {"uniform", "zipf", "reads_on_slot_0", "zipf_split", "recent_reads"};
    const Shape* s = &r->shape;
    fputs("    {\"shape\": ", f);
    json_string(f, s->name);
    fprintf(f,
            ", \"det_fields\": \"%s\", \"varlen\": %s, \"N\": %lld, \"C\": %lld, \"W\": %lld, "
            "\"R\": %lld, \"num_keys\": %lld, \"streams\": %lld, \"value_dtype\": \"%s\", "
            "\"id_dtype\": \"%s\", \"gates\": \"%s\", \"ids\": \"%s\"",
            fields_label(r->det_fields), r->varlen ? "true" : "false", (long long)s->N, (long long)s->C,
            (long long)s->W, (long long)s->R, (long long)s->num_keys, (long long)s->P, s->bf16 ? "bf16" : "f32",
            s->idx64 ? "int64" : "int32", s->per_write ? "per_write" : "per_token", kIdNames[s->ids]);
    if (s->ids == kZipf || s->ids == kZipfSplit) json_number(f, ", ", "zipf_exponent", s->zipf, "%g");
    else fputs(", \"zipf_exponent\": null", f);
    if (r->threads > 0) fprintf(f, ", \"threads\": %d", r->threads);
    fprintf(f, ", \"repeats\": %d", r->repeats);
    json_number(f, ", ", "median_ms", r->median_ms, "%.6f");
    json_number(f, ", ", "min_ms", r->min_ms, "%.6f");
    json_number(f, ", ", "us_per_chunk", 1e3 * r->median_ms / (double)s->N, "%.6f");
    json_number(f, ", ", "input_bytes", r->in_bytes, "%.0f");
    json_number(f, ", ", "output_bytes", r->out_bytes, "%.0f");
    json_number(f, ", ", "GBps", r->gbps, "%.3f");
    json_number(f, ", ", "fraction_of_copy", r->of_copy, "%.5f");
    json_number(f, ", ", "workspace_bytes", (double)r->workspace, "%.0f");
    fprintf(f, "}%s\n", last ? "" : ",");
}

/* The run as one JSON object (the header comment lists its members); 0 on success. */
static int write_json(const char* path, const RunInfo* run, const Results* shapes, const Results* sweep) {
    FILE* f = fopen(path, "w");
    int i, failed;
    if (f == NULL) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    fputs("{\n  \"library\": ", f);
    json_string(f, sdm_p1_version_string());
    fputs(",\n  \"backend\": ", f);
    json_string(f, run->backend);
    fputs(",\n  \"device\": ", f);
    json_string(f, run->device);
    fputs(",\n  \"date_utc\": ", f);
    json_string(f, run->date_utc);
    json_number(f, ",\n  ", "copy_bytes", run->copy_bytes, "%.0f");
    json_number(f, ",\n  ", "copy_median_ms", run->copy_ms, "%.6f");
    json_number(f, ",\n  ", "copy_GBps", run->copy_gbps, "%.3f");
    if (run->cuda_driver > 0 || run->cuda_runtime > 0)
        fprintf(f, ",\n  \"cuda_driver\": %d,\n  \"cuda_runtime\": %d", run->cuda_driver, run->cuda_runtime);
    fputs(",\n  \"shapes\": [\n", f);
    for (i = 0; i < shapes->count; ++i) json_result(f, &shapes->items[i], i + 1 == shapes->count);
    fputs("  ],\n  \"n_sweep\": [\n", f);
    for (i = 0; i < sweep->count; ++i) json_result(f, &sweep->items[i], i + 1 == sweep->count);
    fputs("  ]\n}\n", f);
    failed = ferror(f) != 0;
    if (fclose(f) != 0) failed = 1;
    if (failed) fprintf(stderr, "could not write %s\n", path);
    else fprintf(stderr, "wrote %s\n", path);
    return failed;
}

/* ---- CPU mode --------------------------------------------------------------------------- */

/* The CPU's model name (Linux: /proc/cpuinfo), else "CPU". */
static void cpu_name(char* buf, size_t n) {
    FILE* f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(buf, n, "CPU");
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        char* v = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && v != NULL) {
            for (++v; *v == ' ' || *v == '\t'; ++v) {}
            v[strcspn(v, "\n")] = '\0';
            snprintf(buf, n, "%s", v);
            break;
        }
    }
    fclose(f);
}

/* A host memcpy of 256 MiB on one thread, median of 5 after a warm-up: GB/s of bytes read +
 * written (the CPU mode's counterpart of the device-to-device copy). */
static double host_copy_bandwidth(double* bytes, double* median_ms) {
    const size_t n = (size_t)1 << 28;
    char* a = malloc(n);
    char* b = malloc(n);
    volatile char sink; /* a byte of each copy is read, so the copy is not optimized away */
    double ms[5];
    int i;
    if (a == NULL || b == NULL) out_of_memory();
    memset(a, 1, n);
    memset(b, 0, n);
    for (i = -1; i < 5; ++i) {
        const double t0 = now_seconds();
        memcpy(b, a, n);
        sink = b[(size_t)(i + 1) * 4096];
        if (i >= 0) ms[i] = 1e3 * (now_seconds() - t0);
    }
    (void)sink;
    free(a);
    free(b);
    *bytes = (double)n;
    *median_ms = median_of(ms, 5);
    return 2.0 * (double)n / (*median_ms * 1e-3) / 1e9;
}

static int run_cpu_shape(const Shape* s, int reps, int threads, double copy_gbps, Result* r) {
    HostInputs hin;
    sdm_p1_desc d = shape_desc(s, SDM_P1_BACKEND_CPU, SDM_P1_UNSET, threads), pd;
    sdm_p1_plan* plan = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    double* ms = malloc((size_t)reps * sizeof *ms);
    double total = 0.0;
    int rep;
    if (ms == NULL) out_of_memory();
    if (make_inputs(s, &hin) != 0) {
        free(ms);
        return 1;
    }
    if (sdm_p1_plan_create(&plan, &d) != SDM_P1_SUCCESS) {
        fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
        free_inputs(&hin);
        free(ms);
        return 1;
    }
    memset(r, 0, sizeof *r);
    r->shape = *s;
    r->det_fields = SDM_P1_UNSET;
    r->repeats = reps;
    r->in_bytes = input_bytes(&hin, SDM_P1_UNSET);
    r->out_bytes = output_bytes(plan);
    in.k_idx = hin.k_idx;
    in.q_idx = hin.q_idx;
    in.k_val = hin.k_val;
    in.q_val = hin.q_val;
    in.g = hin.g;
    for (rep = 0; rep < reps; ++rep) {
        const double t0 = now_seconds();
        if (sdm_p1_execute(plan, &in, NULL, 0, NULL) != SDM_P1_SUCCESS) {
            fprintf(stderr, "%s: %s\n", s->name, sdm_p1_last_error());
            sdm_p1_plan_destroy(plan);
            free_inputs(&hin);
            free(ms);
            return 1;
        }
        ms[rep] = 1e3 * (now_seconds() - t0);
        total += ms[rep];
        fprintf(stderr, "  %s: run %d/%d: %.3f ms\n", s->name, rep + 1, reps, ms[rep]);
    }
    r->mean_ms = total / reps;
    r->median_ms = median_of(ms, reps);
    r->min_ms = ms[0]; /* sorted by median_of */
    r->gbps = (r->in_bytes + r->out_bytes) / (r->median_ms * 1e-3) / 1e9;
    r->of_copy = r->gbps / copy_gbps;
    sdm_p1_plan_desc(plan, &pd);
    r->threads = pd.num_threads;
    if (sdm_p1_workspace_size(plan, &r->workspace) != SDM_P1_SUCCESS) r->workspace = 0;
    printf(
        "%-6s N=%lld C=%lld W=%lld R=%lld keys=%lld %s%s: best %.3f ms, median %.3f ms, mean %.3f ms, "
        "%.1f MB in+out, %.2f GB/s at the best, %.4f of copy at the median (%s, %d threads)\n",
        s->name, (long long)s->N, (long long)s->C, (long long)s->W, (long long)s->R, (long long)s->num_keys,
        s->bf16 ? "bf16" : "f32", s->idx64 ? " int64" : "", r->min_ms, r->median_ms, r->mean_ms,
        (r->in_bytes + r->out_bytes) / 1e6, (r->in_bytes + r->out_bytes) / (r->min_ms * 1e-3) / 1e9, r->of_copy,
        pd.backend == SDM_P1_BACKEND_CPU ? "cpu" : "cuda", pd.num_threads);
    fflush(stdout);
    sdm_p1_plan_destroy(plan);
    free_inputs(&hin);
    free(ms);
    return 0;
}

static int run_cpu(const Shape* shapes, int count, int reps, int threads, const char* json) {
    RunInfo run;
    Results rs = {NULL, 0, 0}, none = {NULL, 0, 0};
    int i, failed = 0;
    memset(&run, 0, sizeof run);
    run.backend = "cpu";
    utc_now(run.date_utc, sizeof run.date_utc);
    cpu_name(run.device, sizeof run.device);
    run.copy_gbps = host_copy_bandwidth(&run.copy_bytes, &run.copy_ms);
    printf("%s; libsdmp1 %s; %d timed runs per shape\n", run.device, sdm_p1_version_string(), reps);
    printf("copy: 256 MiB memcpy on one thread, median %.3f ms: %.1f GB/s (read + write)\n", run.copy_ms,
           run.copy_gbps);
    for (i = 0; i < count; ++i) {
        Result r;
        if (run_cpu_shape(&shapes[i], reps, threads, run.copy_gbps, &r) != 0) failed = 1;
        else push_result(&rs, &r);
    }
    if (json != NULL && write_json(json, &run, &rs, &none) != 0) failed = 1;
    free(rs.items);
    return failed;
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

/* Device-to-device copy of 2 GiB, median of 20 after a warm-up: GB/s of bytes read + written. */
static double copy_bandwidth(cudaStream_t stream, double* bytes_out, double* median_ms) {
    const size_t bytes = (size_t)1 << 31;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    double ms[20];
    int i;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMemsetAsync(a, 1, bytes, stream));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (i = -2; i < 20; ++i) {
        float t;
        CUDA_OK(cudaEventRecord(e0, stream));
        CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
        if (i >= 0) ms[i] = t;
    }
    *bytes_out = (double)bytes;
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
static void time_plan(const Shape* s, int64_t det, const DeviceInputs* dev, const HostInputs* host, const void* lengths,
                      int reps, cudaStream_t stream, double copy_gbps, Result* r) {
    sdm_p1_desc d = shape_desc(s, SDM_P1_BACKEND_CUDA, det, 0);
    sdm_p1_plan* plan = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    cudaEvent_t e0, e1;
    double* ms = malloc((size_t)reps * sizeof *ms);
    int i;
    if (ms == NULL) out_of_memory();
    sdm_ok(sdm_p1_plan_create(&plan, &d), s->name);
    in.k_idx = dev->k_idx;
    in.q_idx = dev->q_idx;
    in.k_val = dev->k_val;
    in.q_val = dev->q_val;
    in.g = (const float*)dev->g;
    in.beta = det != SDM_P1_UNSET && (det & SDM_P1_DET_KSPA) ? (const float*)dev->beta : NULL;
    in.stream_lengths = lengths;
    in.stream_lengths_dtype = SDM_P1_DTYPE_INT32;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (i = 0; i < 3; ++i) sdm_ok(sdm_p1_execute(plan, &in, NULL, 0, stream), "warm-up execute");
    CUDA_OK(cudaStreamSynchronize(stream));
    sdm_ok(sdm_p1_execute_status(plan), "the data check of the warm-up");
    for (i = 0; i < reps; ++i) {
        float t;
        CUDA_OK(cudaEventRecord(e0, stream));
        sdm_ok(sdm_p1_execute(plan, &in, NULL, 0, stream), "execute");
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
        ms[i] = t;
    }
    memset(r, 0, sizeof *r);
    r->shape = *s;
    r->det_fields = det;
    r->varlen = lengths != NULL;
    r->repeats = reps;
    r->median_ms = median_of(ms, reps);
    r->min_ms = ms[0]; /* sorted by median_of */
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
           s->name, r->varlen ? "varlen" : fields_label(r->det_fields), (long long)s->N, (long long)s->C,
           (long long)s->W, (long long)s->R, (long long)s->num_keys, (long long)s->P, s->bf16 ? "bf16" : "f32",
           s->idx64 ? "i64" : "i32", s->per_write ? "write" : "token", r->median_ms, r->min_ms, r->in_bytes / 1e6,
           r->out_bytes / 1e6, r->gbps, r->of_copy, (double)r->workspace / 1e6);
}

static void print_table_header(void) {
    printf("%-6s %-7s %6s %4s %4s %4s %7s %4s %-4s %-3s %-5s %9s %9s %9s %9s %8s %7s %9s\n", "shape", "fields", "N",
           "C", "W", "R", "keys", "P", "vals", "ids", "gates", "median_ms", "min_ms", "in_MB", "out_MB", "GB/s",
           "of_copy", "work_MB");
}

/* Both det_fields settings of one shape, then (varlen) the default one with the odd streams
 * at half their length, then a row per --fields mask. */
static void run_cuda_shape(const Shape* s, int reps, int varlen, const FieldSets* fields, cudaStream_t stream,
                           double copy_gbps, Results* rs) {
    HostInputs host;
    DeviceInputs dev;
    void* lengths = NULL;
    int all, k;
    if (make_inputs(s, &host) != 0) exit(1);
    dev = upload_inputs(&host);
    if (varlen) {
        int32_t* half = malloc((size_t)s->P * sizeof *half);
        int64_t p;
        if (half == NULL) out_of_memory();
        for (p = 0; p < s->P; ++p) half[p] = (int32_t)(s->N / s->P * s->C / (p % 2 ? 2 : 1));
        lengths = upload(half, (size_t)s->P * sizeof *half);
        free(half);
    }
    for (all = 0; all <= 1 + varlen; ++all) {
        Result r;
        time_plan(s, all == 1 ? SDM_P1_DET_ALL : SDM_P1_UNSET, &dev, &host, all == 2 ? lengths : NULL, reps, stream,
                  copy_gbps, &r);
        print_result(&r);
        fflush(stdout);
        push_result(rs, &r);
    }
    for (k = 0; k < fields->count; ++k) {
        Result r;
        time_plan(s, fields->masks[k], &dev, &host, NULL, reps, stream, copy_gbps, &r);
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
    printf("\nS1 time against N (default det_fields):\n%6s %9s %13s %13s\n", "N", "median_ms", "us_per_chunk",
           "vs_N=2048");
    for (i = 0; i < 5; ++i) {
        Result r;
        double per_chunk;
        s.N = Ns[i];
        time_plan(&s, SDM_P1_UNSET, &dev, &host, NULL, reps, stream, copy_gbps, &r);
        r.in_bytes = r.in_bytes * (double)Ns[i] / (double)Ns[4]; /* the inputs of this N only */
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

static int run_cuda(const Shape* shapes, int count, int reps, int sweep, int varlen, const FieldSets* fields,
                    const char* json) {
    struct cudaDeviceProp prop;
    cudaStream_t stream;
    RunInfo run;
    Results rs = {NULL, 0, 0}, sw = {NULL, 0, 0};
    int i, device = 0, failed = 0;
    memset(&run, 0, sizeof run);
    run.backend = "cuda";
    utc_now(run.date_utc, sizeof run.date_utc);
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaGetDeviceProperties(&prop, device));
    CUDA_OK(cudaDriverGetVersion(&run.cuda_driver));
    CUDA_OK(cudaRuntimeGetVersion(&run.cuda_runtime));
    snprintf(run.device, sizeof run.device, "%s", prop.name);
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    run.copy_gbps = copy_bandwidth(stream, &run.copy_bytes, &run.copy_ms);
    printf("device %d: %s; libsdmp1 %s; %d timed runs per row (CUDA events, median)\n", device, prop.name,
           sdm_p1_version_string(), reps);
    printf("copy: 2 GiB device to device, median %.4f ms: %.1f GB/s (read + write)\n\n", run.copy_ms, run.copy_gbps);
    print_table_header();
    for (i = 0; i < count; ++i) run_cuda_shape(&shapes[i], reps, varlen, fields, stream, run.copy_gbps, &rs);
    if (sweep) run_sweep(reps, stream, run.copy_gbps, &sw);
    if (json != NULL) failed = write_json(json, &run, &rs, &sw);
    CUDA_OK(cudaStreamDestroy(stream));
    free(rs.items);
    free(sw.items);
    return failed;
}

/* ---- the backward (--backward) ---------------------------------------------------------- */

/* One backward row: the forward (default det_fields) and the backward of a plan with
 * backward = 1 on the same inputs, with the sdm_layer's upstream gradients (a, qk, rex, cpe,
 * k_eff, q_w) or every differentiable output's, the payload given (the forward's) and NULL
 * (sorted again); every input gradient written. */
typedef struct BackwardRow {
    Shape shape;
    int every_upstream;
    double fwd_ms, bwd_ms, bwd_trusted_ms, bwd_sorted_ms;
    size_t fwd_workspace, bwd_workspace;
} BackwardRow;

static const int kLayerUpstream[] = {SDM_P1_FIELD_A,   SDM_P1_FIELD_QK,    SDM_P1_FIELD_REX,
                                     SDM_P1_FIELD_CPE, SDM_P1_FIELD_K_EFF, SDM_P1_FIELD_Q_W};
static const int kEveryUpstream[] = {SDM_P1_FIELD_A,    SDM_P1_FIELD_QK,   SDM_P1_FIELD_LOG_K, SDM_P1_FIELD_LOG_Q,
                                     SDM_P1_FIELD_REX,  SDM_P1_FIELD_CPE,  SDM_P1_FIELD_K_EFF, SDM_P1_FIELD_Q_W,
                                     SDM_P1_FIELD_KREC, SDM_P1_FIELD_KSPA, SDM_P1_FIELD_QREC,  SDM_P1_FIELD_QREC8};

/* Elements of field f's upstream gradient, and whether it is of the value dtype. */
static int64_t upstream_elements(const Shape* s, int f, int* value_typed) {
    const int64_t N = s->N, C = s->C, W = s->W, R = s->R;
    *value_typed = f == SDM_P1_FIELD_CPE || f == SDM_P1_FIELD_K_EFF || f == SDM_P1_FIELD_Q_W;
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
            return N * C * C;
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_Q_W:
        case SDM_P1_FIELD_QREC:
        case SDM_P1_FIELD_QREC8:
            return N * C * R;
        case SDM_P1_FIELD_KREC:
            return 2 * N * C * W;
        default:
            return N * C * W;
    }
}

/* A device buffer of `count` values uniform in [-1, 1), as bf16 or f32. */
static void* random_device_values(int64_t count, int bf16, uint64_t seed) {
    const size_t size = bf16 ? 2 : 4;
    void* host = malloc((size_t)count * size);
    void* dev;
    int64_t i;
    if (host == NULL) out_of_memory();
    for (i = 0; i < count; ++i) {
        const float v = (float)(2.0 * uniform01(&seed) - 1.0);
        if (bf16) ((uint16_t*)host)[i] = bf16_bits(v);
        else ((float*)host)[i] = v;
    }
    dev = upload(host, (size_t)count * size);
    free(host);
    return dev;
}

/* One execute (backward = 0: payload, grads and out unused) or backward, timed by CUDA events
 * around it on `stream`: ms. */
static double time_call(sdm_p1_plan* plan, int backward, const sdm_p1_inputs* in, const int32_t* payload,
                        const void* const* grads, const sdm_p1_input_grads* out, cudaStream_t stream, cudaEvent_t e0,
                        cudaEvent_t e1) {
    float t;
    CUDA_OK(cudaEventRecord(e0, stream));
    if (backward) {
        sdm_ok(sdm_p1_execute_backward(plan, in, payload, grads, SDM_P1_FIELD_COUNT, out, stream), "backward");
    } else {
        sdm_ok(sdm_p1_execute(plan, in, NULL, 0, stream), "execute");
    }
    CUDA_OK(cudaEventRecord(e1, stream));
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
    return t;
}

/* Median ms of `reps` calls after 3 warm-ups; where the first warm-up takes over 100 ms (the
 * worst cases' backward), after that one alone and of at most 3 calls. */
static double time_calls(sdm_p1_plan* plan, int backward, const sdm_p1_inputs* in, const int32_t* payload,
                         const void* const* grads, const sdm_p1_input_grads* out, int reps, cudaStream_t stream) {
    cudaEvent_t e0, e1;
    double* ms = malloc((size_t)reps * sizeof *ms);
    double median;
    int i;
    if (ms == NULL) out_of_memory();
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    if (time_call(plan, backward, in, payload, grads, out, stream, e0, e1) > 100.0) {
        if (reps > 3) reps = 3;
    } else {
        for (i = 0; i < 2; ++i) time_call(plan, backward, in, payload, grads, out, stream, e0, e1);
    }
    for (i = 0; i < reps; ++i) ms[i] = time_call(plan, backward, in, payload, grads, out, stream, e0, e1);
    sdm_ok(sdm_p1_execute_status(plan), backward ? "the backward's data check" : "the forward's data check");
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    median = median_of(ms, reps);
    free(ms);
    return median;
}

static void time_backward(const Shape* s, const DeviceInputs* dev, int reps, cudaStream_t stream, BackwardRow* rows) {
    sdm_p1_desc d = shape_desc(s, SDM_P1_BACKEND_CUDA, SDM_P1_UNSET, 0);
    sdm_p1_plan *fwd = NULL, *bwd = NULL;
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
    sdm_p1_tensor views[SDM_P1_FIELD_COUNT];
    void* upstream[SDM_P1_FIELD_COUNT];
    const void* grads[SDM_P1_FIELD_COUNT];
    const int64_t tokens = s->N * s->C, gw = s->per_write ? s->W : 1;
    const size_t vsz = s->bf16 ? 2 : 4;
    size_t i;
    int every, f;
    in.k_idx = dev->k_idx;
    in.q_idx = dev->q_idx;
    in.k_val = dev->k_val;
    in.q_val = dev->q_val;
    in.g = (const float*)dev->g;
    in.beta = (const float*)dev->beta;
    sdm_ok(sdm_p1_plan_create(&fwd, &d), s->name);
    d.backward = 1;
    sdm_ok(sdm_p1_plan_create(&bwd, &d), s->name);
    memset(upstream, 0, sizeof upstream);
    for (i = 0; i < sizeof kEveryUpstream / sizeof kEveryUpstream[0]; ++i) {
        int value_typed;
        const int64_t count = upstream_elements(s, kEveryUpstream[i], &value_typed);
        upstream[kEveryUpstream[i]] = random_device_values(count, value_typed && s->bf16, 1000 + i);
    }
    CUDA_OK(cudaMalloc(&out.k_val, (size_t)(tokens * s->W) * vsz));
    CUDA_OK(cudaMalloc(&out.q_val, (size_t)(tokens * s->R) * vsz));
    CUDA_OK(cudaMalloc((void**)&out.g, (size_t)(tokens * gw) * 4));
    CUDA_OK(cudaMalloc((void**)&out.beta, (size_t)tokens * 4));
    sdm_ok(sdm_p1_outputs(bwd, views, SDM_P1_FIELD_COUNT), "outputs");
    for (every = 0; every <= 1; ++every) {
        BackwardRow* r = &rows[every];
        memset(grads, 0, sizeof grads);
        if (every) {
            for (i = 0; i < sizeof kEveryUpstream / sizeof kEveryUpstream[0]; ++i) {
                f = kEveryUpstream[i];
                grads[f] = upstream[f];
            }
        } else {
            for (i = 0; i < sizeof kLayerUpstream / sizeof kLayerUpstream[0]; ++i) {
                f = kLayerUpstream[i];
                grads[f] = upstream[f];
            }
        }
        memset(r, 0, sizeof *r);
        r->shape = *s;
        r->every_upstream = every;
        r->fwd_ms = time_calls(fwd, 0, &in, NULL, NULL, NULL, reps, stream);
        sdm_ok(sdm_p1_execute(bwd, &in, NULL, 0, stream), "the backward plan's forward");
        r->bwd_ms =
            time_calls(bwd, 1, &in, (const int32_t*)views[SDM_P1_FIELD_PAYLOAD].data, grads, &out, reps, stream);
        {
            sdm_p1_inputs no_ids = in; /* the payload trusted: no ids to check it against */
            no_ids.k_idx = NULL;
            no_ids.q_idx = NULL;
            r->bwd_trusted_ms = time_calls(bwd, 1, &no_ids, (const int32_t*)views[SDM_P1_FIELD_PAYLOAD].data, grads,
                                           &out, reps, stream);
        }
        r->bwd_sorted_ms = time_calls(bwd, 1, &in, NULL, grads, &out, reps, stream);
        sdm_ok(sdm_p1_workspace_size(fwd, &r->fwd_workspace), "workspace_size");
        sdm_ok(sdm_p1_workspace_size(bwd, &r->bwd_workspace), "workspace_size");
    }
    for (f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (upstream[f] != NULL) CUDA_OK(cudaFree(upstream[f]));
    }
    CUDA_OK(cudaFree(out.k_val));
    CUDA_OK(cudaFree(out.q_val));
    CUDA_OK(cudaFree(out.g));
    CUDA_OK(cudaFree(out.beta));
    sdm_p1_plan_destroy(fwd);
    sdm_p1_plan_destroy(bwd);
}

static void print_backward_row(const BackwardRow* r) {
    printf("%-7s %-6s %9.4f %9.4f %7.2f %9.4f %7.2f %9.4f %7.2f %9.1f %9.1f %6.2f\n", r->shape.name,
           r->every_upstream ? "every" : "layer", r->fwd_ms, r->bwd_ms, r->bwd_ms / r->fwd_ms, r->bwd_trusted_ms,
           r->bwd_ms / r->bwd_trusted_ms, r->bwd_sorted_ms, r->bwd_sorted_ms / r->fwd_ms,
           (double)r->fwd_workspace / 1e6, (double)r->bwd_workspace / 1e6,
           (double)r->bwd_workspace / (double)r->fwd_workspace);
}

/* The backward rows of every shape (bf16 or f32 as the shape; default det_fields). */
static int run_cuda_backward(const Shape* shapes, int count, int reps) {
    struct cudaDeviceProp prop;
    cudaStream_t stream;
    int i, device = 0;
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaGetDeviceProperties(&prop, device));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    printf("device %d: %s; libsdmp1 %s; the backward, %d timed runs per column (CUDA events, median)\n", device,
           prop.name, sdm_p1_version_string(), reps);
    printf("upstream: layer = a, qk, rex, cpe, k_eff, q_w (the sdm_layer's); every = all 12 differentiable outputs\n");
    printf(
        "bwd_ms: the payload with the ids (checked against them); trusted_ms: the payload alone (check = bwd / "
        "trusted); sorted_ms: payload NULL\n");
    printf("%-7s %-6s %9s %9s %7s %9s %7s %9s %7s %9s %9s %6s\n", "shape", "up", "fwd_ms", "bwd_ms", "ratio",
           "trusted_ms", "check", "sorted_ms", "ratio", "fwd_MB", "bwd_MB", "ws_x");
    for (i = 0; i < count; ++i) {
        HostInputs host;
        DeviceInputs dev;
        BackwardRow rows[2];
        if (make_inputs(&shapes[i], &host) != 0) exit(1);
        dev = upload_inputs(&host);
        time_backward(&shapes[i], &dev, reps, stream, rows);
        print_backward_row(&rows[0]);
        print_backward_row(&rows[1]);
        fflush(stdout);
        free_device_inputs(&dev);
        free_inputs(&host);
    }
    CUDA_OK(cudaStreamDestroy(stream));
    return 0;
}

#endif /* SDMP1_BENCH_CUDA */

/* ---- main ------------------------------------------------------------------------------ */

static void print_usage(FILE* f, const char* argv0) {
    int k;
    fprintf(f,
            "usage: %s [--backend cpu|cuda] [--reps K] [--threads T] [--json PATH] [--sweep] [--varlen] "
            "[--fields MASK] [--backward] [--save-inputs DIR] [SHAPE ...]\n       %s --help\nSHAPE: ",
            argv0, argv0);
    for (k = 0; k < kShapeCount; ++k) fprintf(f, "%s | ", kShapes[k].name);
    fputs("N,C,W,R,num_keys[,streams]\n", f);
}

static int usage(const char* argv0) {
    print_usage(stderr, argv0);
    fprintf(stderr, "(--help for more)\n");
    return 2;
}

static int help(const char* argv0) {
    print_usage(stdout, argv0);
    fputs(
        "\n"
        "  --backend cpu|cuda  the backend to time (default cpu; cuda where the benchmark was\n"
        "                      built with the CUDA backend)\n"
        "  --reps K            timed executes a row (CPU: 5; CUDA: 20, at least 3)\n"
        "  --threads T         the CPU backend's threads (default: the hardware's)\n"
        "  --json PATH         also write the run's results to PATH as one JSON object: the\n"
        "                      library version, backend, device, date and time (UTC), the copy\n"
        "                      bandwidth measured in the run, and per shape and det_fields the\n"
        "                      shape's parameters, median and best ms, bytes, GB/s, fraction of\n"
        "                      the copy bandwidth and repeats (bench/results/README.md)\n"
        "  --sweep             CUDA: also S1 at N = 1024 .. 16384\n"
        "  --varlen            CUDA: also a row per shape with the odd streams at half length\n"
        "  --fields MASK       CUDA: also a row per shape with these det_fields (SDM_P1_DET_* bits,\n"
        "                      decimal or 0x; beta given where the mask has DET_KSPA), up to 8 times;\n"
        "                      a trainer's sets: 296, 952, 2872\n"
        "  --backward          CUDA: the backward instead: per shape, the forward's time, the\n"
        "                      backward's with the forward's payload and the ids (checked\n"
        "                      against it), with the payload alone and sorted again, their\n"
        "                      ratios and both plans' workspace, with the sdm_layer's upstream\n"
        "                      gradients and with every one\n"
        "  --save-inputs DIR   first write each shape's inputs (the bytes the executes get) to\n"
        "                      DIR/<shape>.npz, then time as without it: NumPy archives of k_idx,\n"
        "                      q_idx, k_val, q_val (bf16 as uint16 bits), g and the scalars\n"
        "                      num_parallel, stream_offset, num_keys, valid_last, the layout of\n"
        "                      ../shared/peer/time_spec.py (bench/compare_spec.py sets the spec's\n"
        "                      kernels beside this run's --json); a custom shape is custom.npz\n"
        "\n"
        "Shapes (docs/design.md): S1 .. S7; S8 = S6's configuration with S7's Zipf 1.1 ids;\n"
        "S7z0.8, S7z1.5, S8z0.8, S8z1.5 = S7 and S8 with Zipf exponent 0.8 or 1.5; S7split,\n"
        "S8split = S7 and S8 with writes and reads from two independent Zipf 1.1 laws (two\n"
        "rankings of the slots); S1recent, S6recent = S1 and S6 with each read a slot that its\n"
        "token or one of the 3 before it wrote; the worst cases WR1, WA1, WR264, WA264\n"
        "(C = W = R = 256).\n"
        "Without shapes: CPU 256,64,32,32,65536; CUDA S1 .. S8, WR1, WA1 and the S1 sweep, each\n"
        "with the default and every field.\n",
        stdout);
    return 0;
}

int main(int argc, char** argv) {
    Shape shapes[64];
    int count = 0, cuda = 0, reps = 0, threads = 0, sweep = 0, varlen = 0, backward = 0, i;
    const char *json = NULL, *save_dir = NULL;
    FieldSets fields = {{0}, 0};
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            return help(argv[0]);
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            if (!strcmp(argv[i], "cuda")) cuda = 1;
            else if (strcmp(argv[i], "cpu") != 0) return usage(argv[0]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(argv[i], "--save-inputs") && i + 1 < argc) {
            save_dir = argv[++i];
        } else if (!strcmp(argv[i], "--sweep")) {
            sweep = 1;
        } else if (!strcmp(argv[i], "--varlen")) {
            varlen = 1;
        } else if (!strcmp(argv[i], "--fields") && i + 1 < argc) {
            char* end = NULL;
            const long long mask = strtoll(argv[++i], &end, 0);
            if (*end != '\0' || mask <= 0 || (mask & ~(long long)SDM_P1_DET_ALL) != 0 || fields.count == 8) {
                fprintf(stderr, "%s: --fields takes a nonzero mask of SDM_P1_DET_* bits (within %d), at most 8 times\n",
                        argv[0], SDM_P1_DET_ALL);
                return 2;
            }
            fields.masks[fields.count++] = mask;
        } else if (!strcmp(argv[i], "--backward")) {
            backward = 1;
        } else if (count < 64 && parse_shape(argv[i], &shapes[count])) {
            ++count;
        } else {
            return usage(argv[0]);
        }
    }
    if (cuda) {
#ifdef SDMP1_BENCH_CUDA
        setenv("SDMP1_LOG", "1", 0); /* which kernel each plan runs, on stderr */
        /* Without shapes: the canonical ones, two worst cases and (forward) the N sweep. */
        if (count == 0) {
            for (count = 0; count < kDefaultShapes; ++count) shapes[count] = kShapes[count];
            if (!backward) sweep = 1;
        }
        if (save_dir != NULL && save_all_inputs(shapes, count, save_dir) != 0) return 1;
        if (backward) return run_cuda_backward(shapes, count, reps == 0 ? 20 : reps < 3 ? 3 : reps);
        return run_cuda(shapes, count, reps == 0 ? 20 : reps < 3 ? 3 : reps, sweep, varlen, &fields, json);
#else
        fprintf(stderr, "%s: built without the CUDA backend (no --backend cuda)\n", argv[0]);
        return 2;
#endif
    }
    if (sweep || varlen || backward || fields.count > 0) {
        fprintf(stderr, "%s: --sweep, --varlen, --fields and --backward are for --backend cuda\n", argv[0]);
        return 2;
    }
    if (count == 0) {
        const Shape s = {"cpu", 256, 64, 32, 32, 65536, 1, 1, 0, 0, kUniform, 0.0};
        shapes[count++] = s;
    }
    if (save_dir != NULL && save_all_inputs(shapes, count, save_dir) != 0) return 1;
    return run_cpu(shapes, count, reps < 1 ? 5 : reps, threads, json);
}
