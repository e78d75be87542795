#include "options.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend_registry.h"
#include "errors.h"
#include "../canon/phase1_shared.h"
#include "versioned_struct.h"

namespace sdm_p1 {

namespace {

// The first fields of every descriptor version: size, magic, version.
constexpr size_t kDescMinSize = 3 * sizeof(uint32_t);

void require(bool ok, const char* field, int64_t value, const char* rule) {
    if (!ok) fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.", field, " = ", value, ": ", rule);
}

void require_supported(bool ok, const char* field, int64_t value, const char* rule) {
    if (!ok) fail(SDM_P1_ERROR_UNSUPPORTED, "sdm_p1_desc.", field, " = ", value, ": ", rule);
}

}   // namespace

int Options::row() const { return (n() + kRowAlign - 1) / kRowAlign * kRowAlign; }

Options resolve_options(const sdm_p1_desc* desc) {
    if (desc == nullptr) fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_plan_create: desc is NULL");
    if (desc->struct_size < kDescMinSize || desc->magic != SDM_P1_DESC_MAGIC) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT,
             "sdm_p1_plan_create: desc was not filled from SDM_P1_DESC_INITIALIZER (struct_size ", desc->struct_size,
             ", magic ", desc->magic, ")");
    }
    if (desc->version / 10000 != SDM_P1_VERSION_MAJOR) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_plan_create: desc->version = ", desc->version,
             " is of another major version than this library (", SDM_P1_VERSION_NUMBER, ")");
    }
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;   // the defaults of fields an older caller lacks
    read_struct(desc, desc->struct_size, &d, kDescLayout);
    Options o{};

    require(d.N >= 1, "N", d.N, "needs at least one chunk");
    require(d.C >= 1, "C", d.C, "the chunk length must be at least 1");
    require(d.W >= 1, "W", d.W, "each token must write at least one slot");
    require(d.R >= 1, "R", d.R, "each token must read at least one slot");
    require_supported(d.C <= kMaxC, "C", d.C, "chunks of at most 256 tokens are supported");
    require_supported(d.W <= kMaxLanes, "W", d.W, "at most 256 write slots per token are supported");
    require_supported(d.R <= kMaxLanes, "R", d.R, "at most 256 read slots per token are supported");
    const int64_t n = d.C * (d.W + d.R);
    if (n > kMaxRowEntries) {
        fail(SDM_P1_ERROR_UNSUPPORTED, "sdm_p1_desc: C * (W + R) = ", d.C, " * (", d.W, " + ", d.R, ") = ", n,
             " exceeds the supported 2^17 = ", kMaxRowEntries, " entries per chunk");
    }
    o.N = d.N;
    o.C = static_cast<int>(d.C);
    o.W = static_cast<int>(d.W);
    o.R = static_cast<int>(d.R);

    require(d.num_parallel >= 1, "num_parallel", d.num_parallel, "needs at least one stream");
    if (d.N % d.num_parallel != 0) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc: num_parallel = ", d.num_parallel,
             " does not divide N = ", d.N);
    }
    o.P = d.num_parallel;
    require(d.num_keys >= 1 && d.num_keys <= (int64_t{1} << 32), "num_keys", d.num_keys, "must be in 1..2^32");
    o.num_keys = d.num_keys;
    require(d.stream_offset >= 0, "stream_offset", d.stream_offset, "must not be negative");
    // The largest id, (P - 1) * stream_offset + num_keys - 1, must fit int64.
    require(o.P == 1 || d.stream_offset <= (INT64_MAX - d.num_keys) / (o.P - 1), "stream_offset", d.stream_offset,
            "the streams' id ranges overflow int64");
    o.stream_offset = d.stream_offset;

    const int64_t vl = d.valid_last == SDM_P1_UNSET ? d.C : d.valid_last;
    require(vl >= 1 && vl <= d.C, "valid_last", d.valid_last, "must be in 1..C");
    o.valid_last = static_cast<int>(vl);

    require(d.index_dtype == SDM_P1_DTYPE_INT32 || d.index_dtype == SDM_P1_DTYPE_INT64, "index_dtype", d.index_dtype,
            "ids must be SDM_P1_DTYPE_INT32 or SDM_P1_DTYPE_INT64");
    o.idx64 = d.index_dtype == SDM_P1_DTYPE_INT64;
    require(d.value_dtype == SDM_P1_DTYPE_FLOAT32 || d.value_dtype == SDM_P1_DTYPE_BFLOAT16, "value_dtype",
            d.value_dtype, "values must be SDM_P1_DTYPE_FLOAT32 or SDM_P1_DTYPE_BFLOAT16");
    o.bf16 = d.value_dtype == SDM_P1_DTYPE_BFLOAT16;
    require(d.gate_width == 1 || d.gate_width == d.W, "gate_width", d.gate_width,
            "gates are per token (1) or per write (W)");
    o.gate_width = static_cast<int>(d.gate_width);

    require(d.need_read_groups == SDM_P1_UNSET || d.need_read_groups == 0 || d.need_read_groups == 1,
            "need_read_groups", d.need_read_groups, "must be 0, 1 or SDM_P1_UNSET");
    o.read_groups = d.need_read_groups != 0;

    const int64_t df = d.det_fields == SDM_P1_UNSET ? SDM_P1_DET_SHIPPED : d.det_fields;
    if (df < 0 || (df & ~int64_t{SDM_P1_DET_ALL}) != 0) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.det_fields = ", d.det_fields, ": unknown bits ",
             (df & ~int64_t{SDM_P1_DET_ALL}), " (1024, dc_rec, is refused; known: SDM_P1_DET_ALL = ", SDM_P1_DET_ALL,
             ")");
    }
    o.det_fields = static_cast<uint32_t>(df);

    if (o.has(SDM_P1_DET_TILES)) {
        const int64_t L = (d.rec_tile == 0 || d.rec_tile == SDM_P1_UNSET) ? 128 : d.rec_tile;
        require(L >= 1 && L <= kMaxRecTile, "rec_tile", d.rec_tile, "the tile length must be in 1..2^20");
        o.rec_tile = static_cast<int>(L);
    } else {
        o.rec_tile = 128;
    }

    // Records hold absolute slot ids in 32 bits.
    if (o.has(SDM_P1_DET_KREC) || (o.read_groups && o.has(SDM_P1_DET_QREC | SDM_P1_DET_QREC8))) {
        const int64_t max_id = (o.P - 1) * o.stream_offset + o.num_keys - 1;
        if (max_id > INT32_MAX) {
            fail(SDM_P1_ERROR_UNSUPPORTED,
                 "sdm_p1_desc: the records (krec, qrec, qrec8) hold slot ids "
                 "in 32 bits, but ids reach (num_parallel - 1) * stream_offset + num_keys - 1 = ",
                 max_id);
        }
    }

    o.backend = resolve_backend(d.backend);
    require(d.device >= SDM_P1_UNSET, "device", d.device, "must be a device ordinal or SDM_P1_UNSET");
    o.device = d.device;

    require(d.num_threads >= SDM_P1_UNSET, "num_threads", d.num_threads,
            "must be >= 1, or 0 / SDM_P1_UNSET for the hardware's count");
    // At most the hardware's threads (more only take turns on it) and N (a chunk is the unit
    // of work).
    const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    int threads = d.num_threads <= 0 ? hardware : std::min(d.num_threads, hardware);
    if (threads > o.N) threads = static_cast<int>(o.N);
    o.num_threads = threads;

    require(d.output_mode == SDM_P1_OUTPUTS_PLAN || d.output_mode == SDM_P1_OUTPUTS_CALLER, "output_mode",
            d.output_mode, "must be SDM_P1_OUTPUTS_PLAN or SDM_P1_OUTPUTS_CALLER");
    o.output_mode = static_cast<sdm_p1_output_mode>(d.output_mode);

    const sdm_p1_allocator& a = d.allocator;
    const bool none = a.alloc == nullptr && a.free == nullptr;
    if (!none && (a.alloc == nullptr || a.free == nullptr)) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.allocator: set both alloc and free, or neither (the default)");
    }
    o.allocator = a;

    require(d.backward == SDM_P1_UNSET || d.backward == 0 || d.backward == 1, "backward", d.backward,
            "must be 0, 1 or SDM_P1_UNSET");
    o.backward = d.backward == 1;
    const int32_t value_dtype = o.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    // Ignored without backward (the header): a forward-only plan accepts any value.
    require(!o.backward || d.grad_dtype == 0 || d.grad_dtype == SDM_P1_UNSET || d.grad_dtype == SDM_P1_DTYPE_FLOAT32 ||
                d.grad_dtype == value_dtype,
            "grad_dtype", d.grad_dtype,
            "the gradients of k_val / q_val are SDM_P1_DTYPE_FLOAT32 or the value dtype (0 or SDM_P1_UNSET)");
    o.grad_bf16 = o.bf16 && d.grad_dtype != SDM_P1_DTYPE_FLOAT32;
    return o;
}

namespace {

// The descriptor of resolved options.
sdm_p1_desc describe_options(const Options& o) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = o.N;
    d.C = o.C;
    d.W = o.W;
    d.R = o.R;
    d.num_parallel = o.P;
    d.stream_offset = o.stream_offset;
    d.num_keys = o.num_keys;
    d.valid_last = o.valid_last;
    d.index_dtype = o.idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = o.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = o.gate_width;
    d.need_read_groups = o.read_groups ? 1 : 0;
    d.det_fields = o.det_fields;
    d.rec_tile = o.rec_tile;
    d.backend = o.backend;
    d.device = o.device;
    d.num_threads = o.num_threads;
    d.output_mode = o.output_mode;
    d.allocator = o.allocator;
    d.backward = o.backward ? 1 : 0;
    d.grad_dtype = o.grad_bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    return d;
}

}   // namespace

void report_options(const Options& o, sdm_p1_desc* out) {
    // A descriptor filled from the initializer says how much room it has; one that was not
    // (1.1 allowed that) has at least the 1.0 layout.
    const bool sized = out->magic == SDM_P1_DESC_MAGIC && out->struct_size >= kDescLayout.oldest_bytes;
    const size_t n = bytes_to_write(sized ? out->struct_size : kDescLayout.oldest_bytes, kDescLayout);
    sdm_p1_desc d = describe_options(o);
    d.struct_size = static_cast<uint32_t>(n);
    std::memcpy(out, &d, n);
}

}   // namespace sdm_p1
