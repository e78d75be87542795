"""Finding and loading libsdmp1.so: the cffi declarations (ABI mode) and the dlopen.

The declarations below mirror ``include/sdm/phase1.h`` and the version macros the build
generates from Meson's project version (tests/test_binding.py checks both). Macros whose value
is an expression in the header are written here as their value.
"""

from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

import cffi

__all__ = ["CDEF", "ENV_VAR", "ffi", "lib", "library_path", "candidate_paths"]

#: The environment variable naming the exact library file to load.
ENV_VAR = "SDMP1_LIBRARY"

#: The C declarations given to cffi: include/sdm/phase1.h without its comments and
#: preprocessor logic.
CDEF = r"""
#define SDM_P1_VERSION_MAJOR 1
#define SDM_P1_VERSION_MINOR 3
#define SDM_P1_VERSION_PATCH 0
#define SDM_P1_VERSION_NUMBER 10300

unsigned sdm_p1_version_number(void);
const char* sdm_p1_version_string(void);

typedef enum sdm_p1_status {
    SDM_P1_SUCCESS = 0,
    SDM_P1_ERROR_INVALID_ARGUMENT = 1,
    SDM_P1_ERROR_UNSUPPORTED = 2,
    SDM_P1_ERROR_INVALID_INPUT = 3,
    SDM_P1_ERROR_OUT_OF_MEMORY = 4,
    SDM_P1_ERROR_BACKEND_UNAVAILABLE = 5,
    SDM_P1_ERROR_CUDA = 6,
    SDM_P1_ERROR_INTERNAL = 7
} sdm_p1_status;

const char* sdm_p1_status_string(sdm_p1_status status);
const char* sdm_p1_last_error(void);

typedef enum sdm_p1_dtype {
    SDM_P1_DTYPE_INT8 = 1,
    SDM_P1_DTYPE_INT32 = 2,
    SDM_P1_DTYPE_INT64 = 3,
    SDM_P1_DTYPE_FLOAT32 = 4,
    SDM_P1_DTYPE_BFLOAT16 = 5
} sdm_p1_dtype;

typedef enum sdm_p1_backend {
    SDM_P1_BACKEND_AUTO = 0,
    SDM_P1_BACKEND_CPU = 1,
    SDM_P1_BACKEND_CUDA = 2
} sdm_p1_backend;

#define SDM_P1_DET_POS 1
#define SDM_P1_DET_SPAY_RANK 2
#define SDM_P1_DET_FLAGS 4
#define SDM_P1_DET_SPAY_K 8
#define SDM_P1_DET_SPAY_Q 16
#define SDM_P1_DET_KREC 32
#define SDM_P1_DET_KSPA 64
#define SDM_P1_DET_QREC 128
#define SDM_P1_DET_TILES 256
#define SDM_P1_DET_DC_GIDX 512
#define SDM_P1_DET_QREC8 2048
#define SDM_P1_DET_SHIPPED 31
#define SDM_P1_DET_ALL 3071

#define SDM_P1_UNSET -1

typedef struct sdm_p1_allocator {
    void* ctx;
    int (*alloc)(void* ctx, void** ptr, size_t bytes, void* stream);
    void (*free)(void* ctx, void* ptr, size_t bytes, void* stream);
} sdm_p1_allocator;

#define SDM_P1_DESC_MAGIC 0x53445031

typedef enum sdm_p1_output_mode {
    SDM_P1_OUTPUTS_PLAN = 0,
    SDM_P1_OUTPUTS_CALLER = 1
} sdm_p1_output_mode;

typedef struct sdm_p1_desc {
    uint32_t struct_size;
    uint32_t magic;
    uint32_t version;
    int64_t N;
    int64_t C;
    int64_t W;
    int64_t R;
    int64_t num_parallel;
    int64_t stream_offset;
    int64_t num_keys;
    int64_t valid_last;
    int32_t index_dtype;
    int32_t value_dtype;
    int64_t gate_width;
    int32_t need_read_groups;
    int64_t det_fields;
    int64_t rec_tile;
    int32_t backend;
    int32_t device;
    int32_t num_threads;
    int32_t output_mode;
    sdm_p1_allocator allocator;
} sdm_p1_desc;

typedef enum sdm_p1_field {
    SDM_P1_FIELD_A = 0,
    SDM_P1_FIELD_QK = 1,
    SDM_P1_FIELD_LOG_K = 2,
    SDM_P1_FIELD_LOG_Q = 3,
    SDM_P1_FIELD_REX = 4,
    SDM_P1_FIELD_CPE = 5,
    SDM_P1_FIELD_IS_LAST = 6,
    SDM_P1_FIELD_IS_ONLY = 7,
    SDM_P1_FIELD_K_EFF = 8,
    SDM_P1_FIELD_Q_W = 9,
    SDM_P1_FIELD_PAYLOAD = 10,
    SDM_P1_FIELD_POS_K = 11,
    SDM_P1_FIELD_POS_Q = 12,
    SDM_P1_FIELD_Q_LAST = 13,
    SDM_P1_FIELD_Q_ONLY = 14,
    SDM_P1_FIELD_SPAY_K = 15,
    SDM_P1_FIELD_SPAY_Q = 16,
    SDM_P1_FIELD_SPAY_RANK = 17,
    SDM_P1_FIELD_KREC = 18,
    SDM_P1_FIELD_KSPA = 19,
    SDM_P1_FIELD_QREC = 20,
    SDM_P1_FIELD_TILES_K = 21,
    SDM_P1_FIELD_TILES_Q = 22,
    SDM_P1_FIELD_SEGB_K = 23,
    SDM_P1_FIELD_DC_KPOS = 24,
    SDM_P1_FIELD_DC_BPRE = 25,
    SDM_P1_FIELD_DC_REC = 26,
    SDM_P1_FIELD_QREC8 = 27,
    SDM_P1_FIELD_REPEATS = 28,
    SDM_P1_FIELD_COUNT = 29
} sdm_p1_field;

typedef struct sdm_p1_tensor {
    const char* name;
    int32_t dtype;
    int32_t requested;
    int32_t ndim;
    int64_t shape[3];
    size_t bytes;
    void* data;
} sdm_p1_tensor;

typedef struct sdm_p1_plan sdm_p1_plan;

sdm_p1_status sdm_p1_plan_create(sdm_p1_plan** plan, const sdm_p1_desc* desc);
sdm_p1_status sdm_p1_plan_destroy(sdm_p1_plan* plan);
sdm_p1_status sdm_p1_plan_desc(const sdm_p1_plan* plan, sdm_p1_desc* desc);
sdm_p1_status sdm_p1_workspace_size(const sdm_p1_plan* plan, size_t* bytes);
sdm_p1_status sdm_p1_outputs(const sdm_p1_plan* plan, sdm_p1_tensor* views, int32_t count);

typedef struct sdm_p1_inputs {
    uint32_t struct_size;
    const void* k_idx;
    const void* q_idx;
    const void* k_val;
    const void* q_val;
    const float* g;
    const float* beta;
    const void* stream_lengths;
    int32_t stream_lengths_dtype;
    int32_t reserved;
} sdm_p1_inputs;

sdm_p1_status sdm_p1_execute(sdm_p1_plan* plan, const sdm_p1_inputs* inputs,
                             void* const* outputs, int32_t count, void* stream);

sdm_p1_status sdm_p1_execute_status(sdm_p1_plan* plan);
sdm_p1_status sdm_p1_cuda_device_count(int32_t* count);

sdm_p1_status sdm_p1_cuda_architectures(const char** list);

sdm_p1_status sdm_p1_desc_init(sdm_p1_desc* desc, size_t struct_size);
sdm_p1_status sdm_p1_inputs_init(sdm_p1_inputs* inputs, size_t struct_size);
sdm_p1_status sdm_p1_describe_outputs(const sdm_p1_desc* desc, sdm_p1_tensor* views,
                                      int32_t count);
"""

#: The library major version this binding speaks.
ABI_MAJOR = 1


def _package_library():
    """The libsdmp1.so inside this package (where the wheel puts it), else None."""
    path = Path(__file__).resolve().parent / "libsdmp1.so"
    return path if path.is_file() else None


def _source_tree_library():
    """<repo>/build/libsdmp1.so when this package runs from the source tree
    (<repo>/bindings/python/sdm_phase1), else None."""
    here = Path(__file__).resolve().parent
    if here.parent.name != "python" or here.parent.parent.name != "bindings":
        return None
    return here.parents[2] / "build" / "libsdmp1.so"


def candidate_paths() -> list:
    """The library files or names tried, in order, after the SDMP1_LIBRARY override: the
    package's own libsdmp1.so (an installed wheel), the source tree's build/libsdmp1.so, then
    the system's (find_library, libsdmp1.so.1)."""
    own = _package_library()
    if own is not None:
        return [str(own)]
    tree = _source_tree_library()
    found = ctypes.util.find_library("sdmp1")
    system = [found] if found else []
    if "libsdmp1.so.1" not in system:
        system.append("libsdmp1.so.1")
    return ([str(tree)] if tree is not None else []) + system


def _load(ffi: cffi.FFI):
    """dlopens libsdmp1 (see the package docs for the search order); returns (lib, path)."""
    override = os.environ.get(ENV_VAR)
    if override:
        if not os.path.isfile(override):
            raise ImportError(
                f"sdm_phase1: {ENV_VAR}={override!r} does not name an existing file "
                "(it must be the path of libsdmp1.so)"
            )
        try:
            return ffi.dlopen(override), override
        except OSError as e:
            raise ImportError(f"sdm_phase1: cannot load {ENV_VAR}={override!r}: {e}") from e
    tried = [f"1. {ENV_VAR}: not set",
             f"2. the package's own libsdmp1.so: none in {Path(__file__).parent} (a wheel has it)"]
    if _source_tree_library() is None:
        tried.append(f"3. the source tree's build/libsdmp1.so: none ({Path(__file__).parent} is "
                     "an installed package, not bindings/python/sdm_phase1 of a checkout)")
    for cand in candidate_paths():
        own = cand == str(_package_library())
        step = ("2. the package's own" if own else "3. the source tree's build") if os.path.sep in cand \
            else "4. the system's library path"
        if os.path.sep in cand and not os.path.isfile(cand):
            tried.append(f"{step}: {cand} (no such file)")
            continue
        try:
            return ffi.dlopen(cand), cand
        except OSError as e:
            tried.append(f"{step}: {cand} ({e})")
    raise ImportError(
        "sdm_phase1: libsdmp1 not found. Install the wheel (pip install . from the repository "
        "root, which builds it inside the package), build it (meson setup build && ninja -C "
        f"build), install it (meson install -C build, then ldconfig), or set {ENV_VAR} to the "
        "path of libsdmp1.so. Tried, in order:\n  " + "\n  ".join(tried)
    )


def _check_version(lib, path: str) -> None:
    number = int(lib.sdm_p1_version_number())
    if number // 10000 != ABI_MAJOR:
        raise ImportError(
            f"sdm_phase1: {path} is libsdmp1 {ffi.string(lib.sdm_p1_version_string()).decode()}"
            f" (version number {number}); this binding needs major version {ABI_MAJOR}"
        )


ffi = cffi.FFI()
ffi.cdef(CDEF)
#: ``lib``: the loaded library; ``library_path``: the file or name it was loaded from.
lib, library_path = _load(ffi)
_check_version(lib, library_path)
