/*
 * libsdmp1: Phase 1 of the chunked Sparse Delta Memory (SDM) recurrence.
 *
 * This header is the whole C API and its documentation. It is C99 and C++ compatible.
 *
 * Phase 1 turns N chunks of C tokens, each token writing W slots (K entries) and reading R
 * slots (Q entries) of a slot bank, into every quantity of the chunked recurrence that does
 * not depend on the memory contents: per-slot log-cumsums of the gates, the intra-chunk
 * matrices `a` and `qk`, the effective weights, the group flags, the sorted layouts and the
 * records a Phase 2 consumes. The meaning of each output is that of the specification
 * (sparse-delta-memory 2.0.0, `phase1_forward`); `sdm_p1_field` below summarises each one.
 *
 * Usage:
 *   sdm_p1_desc desc = SDM_P1_DESC_INITIALIZER;
 *   desc.N = ...; desc.C = ...; ...                  (shapes and options)
 *   sdm_p1_plan* plan;
 *   if (sdm_p1_plan_create(&plan, &desc) != SDM_P1_SUCCESS) puts(sdm_p1_last_error());
 *   sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
 *   in.k_idx = ...;                                  (input pointers)
 *   sdm_p1_execute(plan, &in, NULL, 0, NULL);        (outputs go to the plan's buffers)
 *   sdm_p1_tensor views[SDM_P1_FIELD_COUNT];
 *   sdm_p1_outputs(plan, views, SDM_P1_FIELD_COUNT); (views[SDM_P1_FIELD_A].data ...)
 *   sdm_p1_plan_destroy(plan);
 *
 * Conventions:
 *   - Every entry point returns an sdm_p1_status; on failure sdm_p1_last_error() gives a
 *     message for the calling thread (never NULL). No C++ exception crosses this API.
 *   - Structs passed in start with `struct_size` (and the descriptor with a magic and the
 *     version the caller compiled against) and are filled by an _INITIALIZER macro, which
 *     sets struct_size to the sizeof of the caller's header. They only grow at their end,
 *     so that callers built against an older or a newer header keep working, by this
 *     struct-size rule, for a struct of struct_size S given to a library whose own is K bytes:
 *       S below the struct's size in 1.0 (which 1.1 keeps: 160 bytes for sdm_p1_desc, 56 for
 *         sdm_p1_inputs on 64-bit targets): refused with SDM_P1_ERROR_INVALID_ARGUMENT;
 *       S <= K (an older or the same header): accepted; the fields past S take the values of
 *         this library's _INITIALIZER;
 *       S > K (a newer header): accepted when the S - K bytes past the fields this library
 *         knows are all zero (the newer fields left at their defaults); refused with
 *         SDM_P1_ERROR_INVALID_ARGUMENT naming the first non-zero byte otherwise.
 *     So that the rule holds, a field appended after 1.1 has zero as its default (its
 *     _INITIALIZER value), and a struct grows by whole 8-byte fields (or names its padding),
 *     so that no byte past an older layout is unnamed padding. A struct the library writes
 *     (sdm_p1_plan_desc) gets the fields both headers have, as many bytes as its
 *     struct_size says, never more.
 *   - Arrays are dense and row-major (C order), shapes as listed per field.
 *   - Bit-exactness: the CPU backend defines the arithmetic; every backend gives the same bits
 *     for the same inputs, shapes and options, independent of thread count or device. Values
 *     may be NaN or infinite; a float output that is NaN (0 * inf, inf - inf, a NaN value)
 *     is the quiet NaN 0x7FC00000 (bfloat16: 0x7FC0), whatever its sign or payload would be.
 *
 * Layout: the versions, status codes and the types every part uses; then the plan (its
 * descriptor, creation and queries), the forward (its outputs, inputs and sdm_p1_execute), the
 * backward (sdm_p1_execute_backward and its gradients) and the errors. Each item says the
 * release that added it ("Since 1.x."; minor releases only add), and a field appended to a
 * struct says so at the field.
 *
 * Global state: none, except the per-thread last-error message. A CPU plan owns its worker
 * threads (see sdm_p1_execute); no thread outlives the plan that started it.
 */
#ifndef SDM_PHASE1_H
#define SDM_PHASE1_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SDM_P1_API __declspec(dllimport)
#elif defined(__GNUC__)
#define SDM_P1_API __attribute__((visibility("default")))
#else
#define SDM_P1_API
#endif

/* ---------------------------------------------------------------------------------------- */
/* Versions                                                                                 */

/* SDM_P1_VERSION_MAJOR, _MINOR and _PATCH: the version of this header, in sdm/phase1_version.h
 * (generated from the build's project version and installed next to this header). The soname
 * is libsdmp1.so.<major>; minor releases only add. */
#include "sdm/phase1_version.h"
/* One number: major * 10000 + minor * 100 + patch (10400 for 1.4.0). */
#define SDM_P1_VERSION_NUMBER (SDM_P1_VERSION_MAJOR * 10000 + SDM_P1_VERSION_MINOR * 100 + SDM_P1_VERSION_PATCH)

/* Since 1.0. The version of the library actually loaded, as SDM_P1_VERSION_NUMBER. */
SDM_P1_API unsigned sdm_p1_version_number(void);
/* Since 1.0. The same as a string, "1.4.0"; static storage. */
SDM_P1_API const char* sdm_p1_version_string(void);

/* ---------------------------------------------------------------------------------------- */
/* Status codes                                                                             */

/* Since 1.0. What every entry point returns. Their names (sdm_p1_status_string) and the
 * message of a failure (sdm_p1_last_error) are under "Errors", at the end. */
typedef enum sdm_p1_status {
    SDM_P1_SUCCESS = 0,
    /* A null pointer, a malformed struct (size, magic, version) or an option out of its
     * range: shapes, dtypes, num_parallel not dividing N, valid_last outside 1..C, ... */
    SDM_P1_ERROR_INVALID_ARGUMENT = 1,
    /* A legal request this library does not support (e.g. C > 256, C * (W + R) > 2^17), or a
     * plan too large to address: an output, the outputs together or the workspace of more
     * than PTRDIFF_MAX bytes (the message names it). */
    SDM_P1_ERROR_UNSUPPORTED = 2,
    /* The input data break a rule: a valid token's slot id outside its stream's range, a
     * non-finite gate, a gate of magnitude 2^22 or more. Outputs are then unspecified. */
    SDM_P1_ERROR_INVALID_INPUT = 3,
    /* The allocator (default or caller's) failed, or the system refused a resource the call
     * needs: a CPU plan's worker thread that could not be started (the message says which). */
    SDM_P1_ERROR_OUT_OF_MEMORY = 4,
    /* The requested backend is not built into this library, has no device, or (CUDA) was not
     * built for the device's architecture (the message names it and those built). */
    SDM_P1_ERROR_BACKEND_UNAVAILABLE = 5,
    /* A CUDA runtime call failed (the message names it). */
    SDM_P1_ERROR_CUDA = 6,
    /* A bug in libsdmp1 (please report the message). */
    SDM_P1_ERROR_INTERNAL = 7
} sdm_p1_status;

/* ---------------------------------------------------------------------------------------- */
/* Element types, backends, optional outputs                                                */

/* Since 1.0. */
typedef enum sdm_p1_dtype {
    SDM_P1_DTYPE_INT8 = 1,
    SDM_P1_DTYPE_INT32 = 2,
    SDM_P1_DTYPE_INT64 = 3,
    SDM_P1_DTYPE_FLOAT32 = 4,
    /* bfloat16: the upper 16 bits of a float32, stored as uint16_t. */
    SDM_P1_DTYPE_BFLOAT16 = 5
} sdm_p1_dtype;

/* Since 1.0. */
typedef enum sdm_p1_backend {
    /* The library picks: CUDA when built in and a device is present, else the CPU. */
    SDM_P1_BACKEND_AUTO = 0,
    /* Host memory, threads over chunks. The definition of every output bit. */
    SDM_P1_BACKEND_CPU = 1,
    /* Device memory of desc.device, on the caller's stream. */
    SDM_P1_BACKEND_CUDA = 2
} sdm_p1_backend;

/* Since 1.0. det_fields bits: the optional outputs to compute (the spec's DET_* values). */
#define SDM_P1_DET_POS 1       /* pos_k, pos_q */
#define SDM_P1_DET_SPAY_RANK 2 /* spay_rank */
#define SDM_P1_DET_FLAGS 4     /* is_last, is_only; q_last, q_only (with read groups) */
#define SDM_P1_DET_SPAY_K 8    /* spay_k */
#define SDM_P1_DET_SPAY_Q 16   /* spay_q (with read groups) */
#define SDM_P1_DET_KREC 32     /* krec */
#define SDM_P1_DET_KSPA 64     /* kspa (needs beta at execute) */
#define SDM_P1_DET_QREC 128    /* qrec (with read groups) */
#define SDM_P1_DET_TILES 256   /* tiles_k, segb_k; tiles_q (with read groups) */
#define SDM_P1_DET_DC_GIDX 512 /* dc_kpos, dc_bpre */
#define SDM_P1_DET_QREC8 2048  /* qrec8 (with read groups) */
/* The spec's default set (DET_POS | DET_SPAY_RANK | DET_FLAGS | DET_SPAY_K | DET_SPAY_Q). */
#define SDM_P1_DET_SHIPPED 31
/* Every bit the library accepts. Bit 1024 (the spec's dc_rec) is refused, as by the spec. */
#define SDM_P1_DET_ALL 3071

/* Since 1.0. "Unset: the library picks" for the integer options that document it. */
#define SDM_P1_UNSET (-1)

/* ---------------------------------------------------------------------------------------- */
/* Allocator                                                                                */

/* Since 1.0. Memory for a plan's outputs and workspace. For the CPU backend it must return host
 * memory, for CUDA device memory of the plan's device, usable on `stream` (stream-ordered
 * allocators such as a framework's caching allocator fit). Blocks must be aligned to 256 bytes
 * (CUDA) or 16 bytes (CPU, as malloc's are); a block that is not fails the plan's creation.
 * alloc and free NULL: the library's default (64-byte aligned host memory, or cudaMalloc /
 * cudaFree on the plan's device). The plan calls alloc only in sdm_p1_plan_create and free only
 * in sdm_p1_plan_destroy, with the stream NULL (the default stream) and the plan's device
 * current; never during execute. */
typedef struct sdm_p1_allocator {
    /* Passed back to alloc and free as is. */
    void* ctx;
    /* Stores a block of `bytes` bytes (> 0) in *ptr; returns 0 on success, non-zero on
     * failure (the plan then fails with SDM_P1_ERROR_OUT_OF_MEMORY). */
    int (*alloc)(void* ctx, void** ptr, size_t bytes, void* stream);
    /* Releases a block returned by alloc, with its size. */
    void (*free)(void* ctx, void* ptr, size_t bytes, void* stream);
} sdm_p1_allocator;

/* ======================================================================================== */
/* The plan                                                                                 */
/* ======================================================================================== */

/* ---------------------------------------------------------------------------------------- */
/* Plan: the descriptor                                                                     */

/* Since 1.0. */
#define SDM_P1_DESC_MAGIC 0x53445031u /* "SDP1" */

/* Since 1.0. Who provides the output buffers of an execute. */
typedef enum sdm_p1_output_mode {
    /* The plan allocates every requested output once, at creation; each execute overwrites
     * them and sdm_p1_outputs views them. */
    SDM_P1_OUTPUTS_PLAN = 0,
    /* The caller hands its buffers to every execute; the plan allocates no outputs (its
     * views still give names, dtypes, shapes and sizes, with data NULL). */
    SDM_P1_OUTPUTS_CALLER = 1
} sdm_p1_output_mode;

/* Since 1.0 (grown by 1.3). The shapes and options of a plan. Fill it from
 * SDM_P1_DESC_INITIALIZER, then set fields. */
typedef struct sdm_p1_desc {
    uint32_t struct_size; /* sizeof(sdm_p1_desc) of the caller's header (the struct-size rule) */
    uint32_t magic;       /* SDM_P1_DESC_MAGIC */
    uint32_t version;     /* SDM_P1_VERSION_NUMBER of the caller's header (same major) */

    /* Shapes. N chunks of C tokens (1..256), W write slots and R read slots per token
     * (1..256 each), with C * (W + R) <= 2^17. N >= 1. */
    int64_t N;
    int64_t C;
    int64_t W;
    int64_t R;
    /* Streams: chunk c belongs to stream c % num_parallel (num_parallel divides N; the chunks
     * are time-major, so the last num_parallel chunks are the streams' last chunks). Stream s
     * owns the slot ids [s * stream_offset, s * stream_offset + num_keys). num_keys is in
     * 1..2^32 and stream_offset >= 0. */
    int64_t num_parallel;
    int64_t stream_offset;
    int64_t num_keys;
    /* Valid tokens in each stream's last chunk, 1..C; the later tokens of those chunks are
     * padding: their ids, values and gates are never read and their outputs are neutral
     * (zero logs and weights, cpe 1, flags 0, zero rows and columns of a and qk).
     * SDM_P1_UNSET: C. An execute given sdm_p1_inputs.stream_lengths (1.2) ignores it. */
    int64_t valid_last;
    /* k_idx / q_idx element type: SDM_P1_DTYPE_INT32 or SDM_P1_DTYPE_INT64. */
    int32_t index_dtype;
    /* k_val / q_val element type, also that of cpe, k_eff and q_w: SDM_P1_DTYPE_FLOAT32 or
     * SDM_P1_DTYPE_BFLOAT16. */
    int32_t value_dtype;
    /* Gates per token (1: g is [N, C, 1]) or per write (W: g is [N, C, W]). */
    int64_t gate_width;
    /* Compute the read-side groups (q_last, q_only, spay_q, qrec, qrec8, tiles_q): 1 or 0.
     * SDM_P1_UNSET: 1. */
    int32_t need_read_groups;
    /* SDM_P1_DET_* bits of the optional outputs; SDM_P1_UNSET: SDM_P1_DET_SHIPPED. */
    int64_t det_fields;
    /* Tile length L of tiles_k / tiles_q / segb_k, 1..2^20; 0 or SDM_P1_UNSET: 128. */
    int64_t rec_tile;
    /* An sdm_p1_backend. */
    int32_t backend;
    /* CUDA device ordinal; SDM_P1_UNSET: the current device. Ignored by the CPU backend. */
    int32_t device;
    /* CPU backend threads (the calling thread and num_threads - 1 workers), >= 1; 0 or
     * SDM_P1_UNSET: the hardware's thread count. Capped at the hardware's thread count (the
     * processors online, std::thread::hardware_concurrency) and at N (a chunk is the unit of
     * work); sdm_p1_plan_desc reports the count used. The output bits never depend on it. */
    int32_t num_threads;
    /* An sdm_p1_output_mode. */
    int32_t output_mode;
    /* Memory for outputs and workspace; all members NULL: the default. */
    sdm_p1_allocator allocator;
    /* Since 1.3: backward and grad_dtype, one 8-byte unit past the 1.0 layout (168 bytes on
     * 64-bit targets); a 1.0 to 1.2 caller's 160-byte struct reads them as 0: a forward-only
     * plan. See "The backward" below. */
    /* 1: the plan may also run sdm_p1_execute_backward (its workspace is sized for both);
     * 0 or SDM_P1_UNSET: it refuses to. Any other value is refused. */
    int32_t backward;
    /* Element type of the k_val / q_val gradients of sdm_p1_execute_backward: 0 or
     * SDM_P1_UNSET: the value dtype; SDM_P1_DTYPE_FLOAT32, or the value dtype itself.
     * sdm_p1_plan_desc reports the dtype chosen. Ignored without backward. */
    int32_t grad_dtype;
} sdm_p1_desc;

/* Since 1.0. */
#define SDM_P1_DESC_INITIALIZER                                                                              \
    {                                                                                                        \
        sizeof(sdm_p1_desc), SDM_P1_DESC_MAGIC, SDM_P1_VERSION_NUMBER, 0, 0, 0, 0, 1, 0, 0, SDM_P1_UNSET,    \
            SDM_P1_DTYPE_INT32, SDM_P1_DTYPE_FLOAT32, 1, SDM_P1_UNSET, SDM_P1_UNSET, 0, SDM_P1_BACKEND_AUTO, \
            SDM_P1_UNSET, 0, SDM_P1_OUTPUTS_PLAN, {NULL, NULL, NULL}, 0, 0                                   \
    }

/* Since 1.3. Fills *desc with SDM_P1_DESC_INITIALIZER's values, for callers that cannot use the
 * macro (a binding that loads the library at run time, a language without C's initializers), as
 * libgit2's git_clone_options_init. struct_size: the caller's sizeof(sdm_p1_desc), at least the
 * 1.0 layout's and at most UINT32_MAX (else SDM_P1_ERROR_INVALID_ARGUMENT, nothing written).
 * The library writes struct_size bytes: its defaults for the fields both headers have, zero for
 * the fields of a newer header (whose defaults are zero by the struct-size rule); struct_size
 * is set to the caller's size and version to this library's SDM_P1_VERSION_NUMBER. */
SDM_P1_API sdm_p1_status sdm_p1_desc_init(sdm_p1_desc* desc, size_t struct_size);

/* ---------------------------------------------------------------------------------------- */
/* Plan: creation and queries                                                               */

/* Since 1.0. An immutable plan: shapes, options, output buffers and workspace. A plan may be
 * executed any number of times, but not concurrently with itself; different plans may run
 * concurrently from different threads. */
typedef struct sdm_p1_plan sdm_p1_plan;

/* Since 1.0. Creates a plan in *plan from *desc (validated field by field); allocates the
 * workspace and, in SDM_P1_OUTPUTS_PLAN mode, the outputs through the allocator (in one block,
 * each field at a multiple of 256 bytes). Every size is computed with overflow checks: a plan
 * with an output, the outputs together (in either output mode) or a workspace of more than
 * PTRDIFF_MAX bytes is refused with SDM_P1_ERROR_UNSUPPORTED naming it, before anything is
 * allocated. On failure *plan is NULL.
 * CUDA: the plan's device is made current for the call and restored after; the call enqueues
 * no work on any stream. A device of an architecture this library has no kernels for (no
 * SASS of its major version at or below its minor one, no PTX at or below it; see
 * sdm_p1_cuda_architectures) gives SDM_P1_ERROR_BACKEND_UNAVAILABLE naming both. Where the
 * environment variable SDMP1_LOG is set (to anything but "0"), a CUDA plan's creation prints
 * on stderr a line naming the kernels that will compute its chunks (the lean kernel first or
 * the general one) and their launch shapes, then a line a stage naming its kernel's exact
 * instantiation and why it was chosen. SDMP1_SPREAD_TERMS, where set to a decimal
 * number, replaces the pair terms a chunk needs before a CUDA plan hands its a and qk to the
 * spread kernel (kernels/spread/README.md; 0: every hot chunk, 18446744073709551615: none):
 * for tests and benchmarks, since the outputs' bits never depend on it. The environment is
 * read for nothing else. */
SDM_P1_API sdm_p1_status sdm_p1_plan_create(sdm_p1_plan** plan, const sdm_p1_desc* desc);

/* Since 1.0. Frees a plan and everything it allocated, and stops and joins its worker threads
 * (CPU). NULL is accepted and ignored. In a child process forked after the plan's workers
 * started, the workers do not exist: their bookkeeping (a few hundred bytes) is left
 * unfreed. */
SDM_P1_API sdm_p1_status sdm_p1_plan_destroy(sdm_p1_plan* plan);

/* Since 1.0. The options the plan resolved (every UNSET replaced by the library's choice, e.g.
 * the backend, det_fields, rec_tile, num_threads); the allocator as given. When *desc was
 * filled from SDM_P1_DESC_INITIALIZER (its magic set), the library writes the fields of the
 * caller's header and of its own, min(desc->struct_size, its sizeof(sdm_p1_desc)) bytes, and
 * sets struct_size to that; a desc not filled (as 1.1 allowed) receives the 1.0 layout. */
SDM_P1_API sdm_p1_status sdm_p1_plan_desc(const sdm_p1_plan* plan, sdm_p1_desc* desc);

/* Since 1.0. Bytes of workspace the plan holds (allocated at creation through the
 * allocator). */
SDM_P1_API sdm_p1_status sdm_p1_workspace_size(const sdm_p1_plan* plan, size_t* bytes);

/* Since 1.1. The number of CUDA devices the CUDA backend can use, in *count: 0 when the backend
 * is built in but the machine has no NVIDIA driver or no device (SDM_P1_SUCCESS); 0 with
 * SDM_P1_ERROR_BACKEND_UNAVAILABLE when this library was built without the CUDA backend. */
SDM_P1_API sdm_p1_status sdm_p1_cuda_device_count(int32_t* count);

/* Since 1.2. The GPU architectures the CUDA backend carries kernels for, in *list: a
 * space-separated, static string of sm_XY names (machine code, which runs on devices of compute
 * capability X.Y to X.9; sm_XYa: on X.Y alone) and compute_XY names (PTX, compiled by the
 * driver for any device of compute capability X.Y or later; compute_XYa: X.Y alone), e.g.
 * "sm_80 sm_90 sm_100 compute_100" for the release build (Meson option gpu_arch). Without the
 * CUDA backend: "" and SDM_P1_ERROR_BACKEND_UNAVAILABLE. Needs no device. */
SDM_P1_API sdm_p1_status sdm_p1_cuda_architectures(const char** list);

/* ======================================================================================== */
/* The forward                                                                              */
/* ======================================================================================== */

/* ---------------------------------------------------------------------------------------- */
/* Forward: the outputs                                                                     */

/* Since 1.0. Output fields, in the order of the spec's Phase1 tuple, then repeats. "Entry"
 * below is one (token, lane) of a chunk; a chunk's sorted row orders its C * (W + R) entries
 * stably by slot (entry order: token-major, the W writes then the R reads), padding entries
 * last. A slot group is the valid entries of one slot in one chunk. Shapes are per plan. */
typedef enum sdm_p1_field {
    /* [N, C, C] float32: a[i, j] = sum over the slots both write of
     * k_i * k_j * exp(log_k_i - log_k_j), for j < i; 0 elsewhere. */
    SDM_P1_FIELD_A = 0,
    /* [N, C, C] float32: qk[i, j] = sum over slots token i reads and token j writes of
     * q_i * k_j * exp(log_q_i - log_k_j), for j <= i; 0 elsewhere. */
    SDM_P1_FIELD_QK = 1,
    /* [N, C, W] float32: the slot's log-cumsum of gates through this K entry. */
    SDM_P1_FIELD_LOG_K = 2,
    /* [N, C, R] float32: the slot's log-cumsum of gates through this token's writes. */
    SDM_P1_FIELD_LOG_Q = 3,
    /* [N, C, W] float32: the sum of the gates of the slot's later K entries in the chunk. */
    SDM_P1_FIELD_REX = 4,
    /* [N, C, W] value dtype: exp(total gate of the slot in the chunk). */
    SDM_P1_FIELD_CPE = 5,
    /* [N, C, W] int8: the last K entry of its slot group (DET_FLAGS). */
    SDM_P1_FIELD_IS_LAST = 6,
    /* [N, C, W] int8: the only K entry of its slot group (DET_FLAGS). */
    SDM_P1_FIELD_IS_ONLY = 7,
    /* [N, C, W] value dtype: k_val * exp(log_k). */
    SDM_P1_FIELD_K_EFF = 8,
    /* [N, C, R] value dtype: q_val * exp(log_q). */
    SDM_P1_FIELD_Q_W = 9,
    /* [N, row] int32 with row = C * (W + R) rounded up to a multiple of 16: the sorted
     * payloads: lane bits 0-7, read bit 8, token bits 9-16, padding bit 17, last-write-of-
     * group bit 30, group-head bit 31; positions past C * (W + R) hold bits 17 and 31. */
    SDM_P1_FIELD_PAYLOAD = 10,
    /* [N, C, W] int32 (DET_POS): position in the sorted row (bits 0-16), K peers after the
     * entry in its group (bits 17-23) and K peers in the group (bits 24-30), both saturating
     * at 127; padding entries: the position only. */
    SDM_P1_FIELD_POS_K = 11,
    /* [N, C, R] int32 (DET_POS): as pos_k, with the group's valid Q entries as peers. */
    SDM_P1_FIELD_POS_Q = 12,
    /* [N, C, R] int8 (DET_FLAGS, read groups): the last valid Q entry of its slot group. */
    SDM_P1_FIELD_Q_LAST = 13,
    /* [N, C, R] int8 (DET_FLAGS, read groups): the only valid Q entry of its slot group. */
    SDM_P1_FIELD_Q_ONLY = 14,
    /* [N, C * W] int32 (DET_SPAY_K): the K entries in sorted order: payload bits 0-17,
     * distance back to the group's first K entry (bits 18-29, saturating at 4095), LAST bit
     * 30, FIRST bit 31; a padding entry is FIRST | LAST. */
    SDM_P1_FIELD_SPAY_K = 15,
    /* [N, C * R] int32 (DET_SPAY_Q, read groups): the same for the Q entries. */
    SDM_P1_FIELD_SPAY_Q = 16,
    /* [N, ceil(C * (W + R) / 32), 2] int32 (DET_SPAY_RANK): per 32 sorted positions, the K
     * entries before them and the bit mask of K entries among them. */
    SDM_P1_FIELD_SPAY_RANK = 17,
    /* [N, C * W, 4] int32 (DET_KREC), by K-row index: {spay_k element, absolute slot,
     * float bits of k_val * exp(rex), float bits of cpe (as stored, widened)}; padding:
     * {element, 0, +0.0f, 1.0f}. */
    SDM_P1_FIELD_KREC = 18,
    /* [N, C * W] float32 (DET_KSPA), by K-row index: -beta[token] * k_val * exp(log_k);
     * padding: 0. */
    SDM_P1_FIELD_KSPA = 19,
    /* [N, C * R, 4] int32 (DET_QREC, read groups), by Q-row index: {spay_q element, absolute
     * slot, float bits of q_val * exp(log_q), 0}; padding {element, 0, 0, 0}. */
    SDM_P1_FIELD_QREC = 20,
    /* [N, ceil(C * W / L) + 1] int32 (DET_TILES): tiles_k[t] is the first group start at or
     * after K-row index t * L; the last element is C * W. */
    SDM_P1_FIELD_TILES_K = 21,
    /* [N, ceil(C * R / L) + 1] int32 (DET_TILES, read groups): the same for the Q row. */
    SDM_P1_FIELD_TILES_Q = 22,
    /* [N, ceil(C * W / L) + 1] int32 (DET_TILES): valid slot groups that start before
     * tiles_k[t]; the last element is the chunk's number of valid slot groups. */
    SDM_P1_FIELD_SEGB_K = 23,
    /* [N, C, W] int32 (DET_DC_GIDX): for the first K entry of a valid group, the number of
     * valid groups before it in the K row; -1 for every other entry. */
    SDM_P1_FIELD_DC_KPOS = 24,
    /* [N, ceil(C * W / 32) + 1] int32 (DET_DC_GIDX): valid groups started before K-row
     * index 32 b; the last element is the chunk's number of valid groups. */
    SDM_P1_FIELD_DC_BPRE = 25,
    /* The spec's dc_rec, which no caller may request: always reported as not requested. */
    SDM_P1_FIELD_DC_REC = 26,
    /* [N, C * R, 2] int32 (DET_QREC8, read groups): qrec's words 1 and 2. */
    SDM_P1_FIELD_QREC8 = 27,
    /* [1] int64: the K entries of this execute that repeat a slot already written by their
     * token (their gate is not added again). */
    SDM_P1_FIELD_REPEATS = 28,
    SDM_P1_FIELD_COUNT = 29
} sdm_p1_field;

/* Since 1.0. A view of one output of a plan. */
typedef struct sdm_p1_tensor {
    /* The spec's field name ("a", "qk", "log_k", ...; "repeats"); static storage. */
    const char* name;
    /* An sdm_p1_dtype. */
    int32_t dtype;
    /* 1 if the plan computes this field, 0 if not (det_fields, need_read_groups); a field
     * not computed has ndim 0, no shape, 0 bytes and data NULL. */
    int32_t requested;
    /* Number of dimensions (1..3) and the dimensions; unused dimensions are 0. */
    int32_t ndim;
    int64_t shape[3];
    /* Size in bytes of the whole array (at most PTRDIFF_MAX: a larger plan is refused). */
    size_t bytes;
    /* The plan's buffer (SDM_P1_OUTPUTS_PLAN), else NULL. Host memory for the CPU backend,
     * device memory for CUDA. */
    void* data;
} sdm_p1_tensor;

/* Since 1.0. Fills views[f] for f < min(count, SDM_P1_FIELD_COUNT), indexed by sdm_p1_field. */
SDM_P1_API sdm_p1_status sdm_p1_outputs(const sdm_p1_plan* plan, sdm_p1_tensor* views, int32_t count);

/* Since 1.3. The output views a plan created from *desc would have, without creating it:
 * views[f] for f < min(count, SDM_P1_FIELD_COUNT), indexed by sdm_p1_field, as sdm_p1_outputs
 * gives them (name, dtype, requested, shape, bytes) with data NULL. *desc is validated as by
 * sdm_p1_plan_create, with the same errors; nothing is allocated and no device is touched
 * beyond what resolving SDM_P1_BACKEND_AUTO asks (the device count). For frameworks that need
 * output shapes before any data exist (a tracer's fake tensors, an XLA custom call's result
 * shapes). */
SDM_P1_API sdm_p1_status sdm_p1_describe_outputs(const sdm_p1_desc* desc, sdm_p1_tensor* views, int32_t count);

/* ---------------------------------------------------------------------------------------- */
/* Forward: the inputs and the execute                                                      */

/* Since 1.0 (grown by 1.2). The input pointers of one execute: host memory for the CPU backend,
 * device memory of the plan's device for CUDA; dense row-major, naturally aligned. */
typedef struct sdm_p1_inputs {
    uint32_t struct_size; /* sizeof(sdm_p1_inputs) of the caller's header (the struct-size rule) */
    /* [N, C, W] slot ids of the K entries, index dtype. A token's W slots are normally
     * distinct; a repeat counts in `repeats` and its gate is not added again. */
    const void* k_idx;
    /* [N, C, R] slot ids of the Q entries, index dtype. */
    const void* q_idx;
    /* [N, C, W] / [N, C, R] weights, value dtype. */
    const void* k_val;
    const void* q_val;
    /* [N, C, gate_width] float32 log-gates of the valid tokens: finite, of magnitude below
     * 2^22. Each is held exactly as a multiple of 2^-96, so gates of magnitude 2^-73 and more
     * are exact and smaller ones are rounded (an error below 2^-97 each). */
    const float* g;
    /* [N, C] float32; needed (non-NULL) when det_fields has DET_KSPA, else ignored. */
    const float* beta;
    /* Since 1.2: stream_lengths, stream_lengths_dtype and reserved (72 bytes on 64-bit
     * targets); a 1.0 or 1.1 caller's 56-byte struct reads them as NULL, 0 and 0: the
     * valid_last rule. [num_parallel] per-stream lengths, of stream_lengths_dtype; NULL (the
     * default): the valid_last rule of sdm_p1_desc. Stream s then has stream_lengths[s]
     * valid tokens, in 0..steps * C with steps = N / num_parallel, and chunk c (stream
     * c % num_parallel, step c / num_parallel) has clamp(stream_lengths[s] - step * C, 0, C)
     * valid tokens, its first ones; the others are padding as described at valid_last
     * (valid_last is then ignored), and a chunk with none is wholly padding: neutral outputs
     * throughout. Given at each execute, so one plan serves batches of one padded shape
     * with any lengths (CUDA: a graph replays with the lengths its buffer holds then).
     * Host memory for a CPU plan, device memory of the plan's device for a CUDA plan, as the
     * other inputs. A length outside 0..steps * C is bad input data
     * (SDM_P1_ERROR_INVALID_INPUT naming the stream, its length and the allowed range: CPU at
     * execute, before any output is written; CUDA from sdm_p1_execute_status, where it is
     * reported before any bad id or gate, the smallest such stream first, and such a
     * stream's chunks read no input). Example: num_parallel = 2, steps = 3 (N = 6), C = 4,
     * stream_lengths = {10, 3}: stream 0's chunks 0, 2, 4 have 4, 4 and 2 valid tokens,
     * stream 1's chunks 1, 3, 5 have 3, 0 and 0. */
    const void* stream_lengths;
    /* The element type of stream_lengths: SDM_P1_DTYPE_INT32 or SDM_P1_DTYPE_INT64 (any
     * other value, 0 included, is refused with SDM_P1_ERROR_INVALID_ARGUMENT when
     * stream_lengths is set); ignored when stream_lengths is NULL. */
    int32_t stream_lengths_dtype;
    /* Reserved (the padding to 8 bytes, named): must be 0. */
    int32_t reserved;
} sdm_p1_inputs;

/* Since 1.0. */
#define SDM_P1_INPUTS_INITIALIZER \
    { sizeof(sdm_p1_inputs), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 }

/* Since 1.3. Fills *inputs with SDM_P1_INPUTS_INITIALIZER's values (every pointer NULL, the
 * valid_last rule), as sdm_p1_desc_init fills a descriptor, by the same rules. */
SDM_P1_API sdm_p1_status sdm_p1_inputs_init(sdm_p1_inputs* inputs, size_t struct_size);

/* Since 1.0. Computes every requested output of the plan for the given inputs.
 * outputs: NULL with count 0 in SDM_P1_OUTPUTS_PLAN mode (the plan's buffers); otherwise an
 *   array indexed by sdm_p1_field of `count` pointers (count <= SDM_P1_FIELD_COUNT; fields
 *   at or past count are treated as NULL): each requested field needs a buffer of its view's
 *   bytes, each unrequested field is ignored. In SDM_P1_OUTPUTS_PLAN mode a NULL element
 *   falls back to the plan's buffer of that field.
 * stream: the CUDA stream (cudaStream_t) to run on; NULL: the default stream. The CUDA
 *   backend only enqueues work on it: it does not synchronize the host, does not allocate
 *   and may be captured in a CUDA graph (each replay recomputes every output and the data
 *   check below). It checks that every input pointer (and every caller output buffer) is
 *   device memory of the plan's device (SDM_P1_ERROR_INVALID_ARGUMENT naming the field
 *   otherwise) and makes the plan's device current for the launch only. From a plan's
 *   second execute on (stream not being captured) its launches go as one CUDA graph of its
 *   own, recorded then and replayed with each execute's pointers (one launch a call in place
 *   of up to seven memsets and kernels: the host's cost of a call, not the GPU's; the same
 *   work in the same order, so the same bits); the plan frees it. In a caller's capture, and
 *   for arrays that are not 16-byte aligned, the kernels are launched one by one. The backward
 *   does the same with its own graphs. The CPU backend ignores `stream`, runs the chunks on
 *   the calling thread and the plan's num_threads - 1 worker threads, and returns when the
 *   outputs are complete. The workers belong to the plan: started by its first execute (in
 *   each process: a child forked from a process whose plan had started them starts its own
 *   at its first execute), parked between executes without using the processor, and joined
 *   by sdm_p1_plan_destroy. Their scratch is the plan's workspace. A worker that cannot be
 *   started gives SDM_P1_ERROR_OUT_OF_MEMORY (the plan stays usable; a later execute tries
 *   again).
 * Bad input data (ids out of range, bad gates, stream lengths out of range): the CPU backend
 * returns SDM_P1_ERROR_INVALID_INPUT with the first bad stream length, else the first
 * offending chunk, token and lane. The CUDA backend
 * cannot know before its kernels run: execute succeeds, the kernels record the first
 * offender on the device (never reading or writing out of bounds, never hanging) and
 * sdm_p1_execute_status reports it once the caller has synchronized. */
SDM_P1_API sdm_p1_status sdm_p1_execute(sdm_p1_plan* plan, const sdm_p1_inputs* inputs, void* const* outputs,
                                        int32_t count, void* stream);

/* ======================================================================================== */
/* The backward                                                                             */
/* ======================================================================================== */

/* Since 1.3. The backward (vector-Jacobian product) of Phase 1: docs/backward.md has the
 * formulas, the fixed summing order and the float64 reference it is tested against. A plan runs
 * it when created with sdm_p1_desc.backward = 1 (1.3).
 *
 * Differentiable outputs, with their upstream gradients (grads[f] below) and what they
 * depend on:
 *   A           [N, C, C] float32; cells j >= i never read           k_val, g
 *   QK          [N, C, C] float32; cells j > i never read            q_val, k_val, g
 *   LOG_K, REX  [N, C, W] float32; LOG_Q [N, C, R] float32           g
 *   CPE         [N, C, W] value dtype                                g
 *   K_EFF       [N, C, W] value dtype; Q_W [N, C, R] value dtype     k_val / q_val, g
 *   KREC        [N, C * W, 2] float32 by K-row index: the gradients of krec's words 2
 *               (k_val * exp(rex)) and 3 (cpe)                       k_val, g
 *   KSPA        [N, C * W] float32 by K-row index                    beta, k_val, g
 *   QREC, QREC8 [N, C * R] float32 by Q-row index: the gradient of the scale (q_w); both
 *               may be given, they add                               q_val, g
 * A record's gradient may be given whether or not the plan computes that record. kspa is the
 * only output beta enters: without a KSPA gradient the beta gradient is +0.0. Every other
 * field (the integers, flags, layouts and repeats) is not differentiable. */

/* Since 1.3. The input gradients sdm_p1_execute_backward writes, in the caller's buffers (host
 * memory for a CPU plan). NULL: not computed. Fill it from SDM_P1_INPUT_GRADS_INITIALIZER (the
 * struct-size rule; its oldest layout is 1.3's, 40 bytes on 64-bit targets). Each one given is
 * overwritten whole: padding tokens get +0.0, and so do the per-write gates of repeat lanes (a
 * K entry that repeats a slot its token already wrote adds no gate). Dense, row-major,
 * naturally aligned. */
typedef struct sdm_p1_input_grads {
    uint32_t struct_size; /* sizeof(sdm_p1_input_grads) of the caller's header */
    uint32_t reserved;    /* must be 0 */
    /* [N, C, W] dL/dk_val and [N, C, R] dL/dq_val, of the plan's grad_dtype (bfloat16 ones
     * are the float32 results rounded to nearest even). */
    void* k_val;
    void* q_val;
    /* [N, C, gate_width] float32 dL/dg. */
    float* g;
    /* [N, C] float32 dL/dbeta. */
    float* beta;
} sdm_p1_input_grads;

/* Since 1.3. */
#define SDM_P1_INPUT_GRADS_INITIALIZER \
    { sizeof(sdm_p1_input_grads), 0, NULL, NULL, NULL, NULL }

/* Since 1.4. Fills *grads with SDM_P1_INPUT_GRADS_INITIALIZER's values (reserved 0, every
 * pointer NULL: no gradient requested), as sdm_p1_desc_init fills a descriptor, by the same
 * rules: struct_size at least the 1.3 layout's (40 bytes on 64-bit targets) and at most
 * UINT32_MAX, else SDM_P1_ERROR_INVALID_ARGUMENT with nothing written. */
SDM_P1_API sdm_p1_status sdm_p1_input_grads_init(sdm_p1_input_grads* grads, size_t struct_size);

/* Since 1.3. Computes the gradients of L = sum over the given fields f of <grads[f], output f>
 * with respect to k_val, q_val, g and beta, for the outputs a forward of this plan computes
 * from `inputs`. The plan must have been created with desc.backward = 1. inputs:  the
 * forward's: k_val, q_val, g and stream_lengths as at sdm_p1_execute; beta when
 *          a KSPA gradient is given (else not read); k_idx and q_idx when payload is NULL;
 *          with a payload, both (since 1.4: the payload is checked against them) or
 *          neither (both NULL: the payload is trusted as below; one alone is refused with
 *          SDM_P1_ERROR_INVALID_ARGUMENT). Ids, gates and stream lengths are checked as at
 *          sdm_p1_execute, with the same messages under this function's name.
 * payload: the forward's PAYLOAD output for these inputs ([N, row] int32: the sort), or NULL:
 *          the backward sorts again from the ids. It is checked: each chunk's first
 *          C * (W + R) words must name each of the chunk's entries once, with the padding
 *          bit set exactly on the entries of padding tokens, the padding last and the group
 *          head bit on the first word when the chunk has valid tokens; then, with the ids
 *          given (after their check), it must be their sort: each word's entry after the
 *          previous word's by (slot, entry index), and each valid entry's group-head bit set
 *          exactly where its slot differs from the previous word's (else
 *          SDM_P1_ERROR_INVALID_INPUT naming the chunk and position; the check reads the ids
 *          once, in O(C * (W + R)) a chunk). A payload of other ids is refused where it is
 *          not the sort of these; where it is, the gradients are these inputs'. Without the
 *          ids the payload is trusted beyond its own checks: another payload that passes
 *          gives unspecified gradients, never an access out of bounds. Bits 18-30 and the
 *          words past C * (W + R) are not read.
 * grads:   `count` pointers indexed by sdm_p1_field (count in 0..SDM_P1_FIELD_COUNT; fields
 *          at or past count are NULL; grads may be NULL with count 0): the upstream gradient
 *          of each differentiable output, or NULL, read as +0.0 everywhere. Cells of A at
 *          j >= i and of QK at j > i, the rows and columns of padding tokens, and padding
 *          entries and rows of the other fields are never read (they may hold NaN). A
 *          non-NULL pointer for a non-differentiable field is refused
 *          (SDM_P1_ERROR_INVALID_ARGUMENT, "grads[10] (payload): the output is not
 *          differentiable"), as is a KSPA gradient without inputs->beta.
 * out:     the gradients to compute (sdm_p1_input_grads).
 * stream:  the CUDA stream (cudaStream_t) to run on (NULL: the default stream), as at
 *          sdm_p1_execute: the CUDA backend only enqueues work (no host synchronization, no
 *          allocation: the plan's workspace holds what it needs), may be captured in a CUDA
 *          graph, and checks that every pointer it reads or writes is device memory of the
 *          plan's device. The plan's workspace serves its forward and backward alike: at most
 *          one of them runs on a plan at a time. The CPU backend ignores it, runs the chunks
 *          on the calling thread and the plan's workers, and returns when the gradients are
 *          complete.
 * What is differentiated is the exact function: the roundings of the outputs to float32 or
 * bfloat16, of gates to fixed point and the clamp of exp at 700 are taken as the identity.
 * Each gradient is a double sum in one fixed order (docs/backward.md), rounded once: the
 * bits never depend on the number of threads, and are the same on every backend that
 * computes them. Only first derivatives: the backward is not itself differentiable.
 * Errors: SDM_P1_ERROR_INVALID_ARGUMENT for NULL or misaligned pointers, a bad count, a
 * non-differentiable gradient, a plan without backward (CUDA: memory that is not the plan's
 * device's); SDM_P1_ERROR_INVALID_INPUT for bad data (the first bad stream length, else the
 * first bad chunk in chunk order: its payload, ids or gates). CPU backend: returned here,
 * and nothing is written on any error. CUDA backend: bad data are found on the device, as at
 * sdm_p1_execute: this call succeeds and sdm_p1_execute_status, after the stream is
 * synchronized, reports the CPU backend's message for the same data; the gradients of such
 * a backward are unspecified. The bits of every gradient are the CPU backend's. */
SDM_P1_API sdm_p1_status sdm_p1_execute_backward(sdm_p1_plan* plan, const sdm_p1_inputs* inputs, const int32_t* payload,
                                                 const void* const* grads, int32_t count, const sdm_p1_input_grads* out,
                                                 void* stream);

/* ======================================================================================== */
/* Errors                                                                                   */
/* ======================================================================================== */

/* Since 1.0. A constant name for a status code ("SDM_P1_ERROR_INVALID_ARGUMENT", ...); never
 * NULL. */
SDM_P1_API const char* sdm_p1_status_string(sdm_p1_status status);

/* Since 1.0. The message of the calling thread's last failed call ("" if none yet); never NULL.
 * Valid until the thread's next libsdmp1 call. Successful calls leave it unchanged. */
SDM_P1_API const char* sdm_p1_last_error(void);

/* Since 1.1. The data check of the plan's last execute: SDM_P1_SUCCESS when every stream length
 * (1.2) lay in 0..steps * C, every valid token's ids lay in its stream's range and every gate
 * was finite and of magnitude below 2^22; otherwise SDM_P1_ERROR_INVALID_INPUT with the message
 * the CPU backend gives for the same inputs (the first bad stream length; else the first
 * offending chunk, token and lane in chunk order, and the bad value) in sdm_p1_last_error().
 * The outputs of such an execute are unspecified.
 * CUDA backend: the kernels write the result to the plan's workspace; call this only after
 * the stream of that execute has been synchronized (cudaStreamSynchronize, an event, or a
 * device synchronize), from any thread. It copies 48 bytes (56 when there is an offender)
 * from the device with cudaMemcpy, so it also waits for work queued on the legacy default
 * stream. Each execute clears the result first (graph replays too). Since 1.3 an
 * sdm_p1_execute_backward is an execute here too: the result is that of whichever of the two
 * ran last on the plan, its message under that function's name (a backward's also names a
 * bad payload word).
 * CPU backend: always SDM_P1_SUCCESS (execute itself returns data errors).
 * A plan never executed: SDM_P1_SUCCESS.
 *
 * Example (CUDA):
 *   sdm_p1_execute(plan, &in, NULL, 0, stream);
 *   ... more work on stream ...
 *   cudaStreamSynchronize(stream);
 *   if (sdm_p1_execute_status(plan) == SDM_P1_ERROR_INVALID_INPUT)
 *       fprintf(stderr, "bad data: %s\n", sdm_p1_last_error());
 */
SDM_P1_API sdm_p1_status sdm_p1_execute_status(sdm_p1_plan* plan);

#ifdef __cplusplus
}
#endif

#endif /* SDM_PHASE1_H */