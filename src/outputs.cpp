#include "outputs.h"

#include <string>
#include <type_traits>

#include "../canon/field_members.h"
#include "checked_size.h"

namespace sdm_p1 {

namespace {

size_t dtype_bytes(int32_t dtype) {
    switch (dtype) {
        case SDM_P1_DTYPE_INT8:
            return 1;
        case SDM_P1_DTYPE_BFLOAT16:
            return 2;
        case SDM_P1_DTYPE_INT32:
        case SDM_P1_DTYPE_FLOAT32:
            return 4;
        default:
            return 8;
    }
}

// "[d0, d1]" for a view of two dimensions, and so on (for messages).
std::string shape_text(const sdm_p1_tensor& t) {
    std::string s = "[";
    for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
}

sdm_p1_tensor view(const char* name, int32_t dtype, bool requested, int ndim, int64_t d0, int64_t d1 = 0,
                   int64_t d2 = 0) {
    sdm_p1_tensor t{};
    t.name = name;
    t.dtype = dtype;
    t.requested = requested ? 1 : 0;
    if (!requested) return t;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    // Every dimension is positive (the options are validated), so only the product can
    // overflow; a field past kMaxBytes refuses the plan, naming the field and its shape.
    size_t bytes = dtype_bytes(dtype);
    for (int i = 0; i < ndim; ++i) {
        if (!mul_within(bytes, static_cast<size_t>(t.shape[i]), &bytes)) {
            too_large("output '", name, "' of shape ", shape_text(t), " and ", dtype_bytes(dtype), "-byte elements");
        }
    }
    t.bytes = bytes;
    return t;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}   // namespace

std::string upstream_label(int f, const char* field) { return "grads[" + std::to_string(f) + "] (" + field + ")"; }

OutputViews describe_outputs(const Options& o) {
    const int64_t N = o.N, C = o.C, W = o.W, R = o.R;
    const int64_t L = o.rec_tile;
    const int32_t i8 = SDM_P1_DTYPE_INT8, i32 = SDM_P1_DTYPE_INT32, f32 = SDM_P1_DTYPE_FLOAT32;
    const int32_t val = o.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    const bool flags = o.has(SDM_P1_DET_FLAGS), rg = o.read_groups;
    const bool tiles = o.has(SDM_P1_DET_TILES), gidx = o.has(SDM_P1_DET_DC_GIDX);
    OutputViews v{};
    v[SDM_P1_FIELD_A] = view("a", f32, true, 3, N, C, C);
    v[SDM_P1_FIELD_QK] = view("qk", f32, true, 3, N, C, C);
    v[SDM_P1_FIELD_LOG_K] = view("log_k", f32, true, 3, N, C, W);
    v[SDM_P1_FIELD_LOG_Q] = view("log_q", f32, true, 3, N, C, R);
    v[SDM_P1_FIELD_REX] = view("rex", f32, true, 3, N, C, W);
    v[SDM_P1_FIELD_CPE] = view("cpe", val, true, 3, N, C, W);
    v[SDM_P1_FIELD_IS_LAST] = view("is_last", i8, flags, 3, N, C, W);
    v[SDM_P1_FIELD_IS_ONLY] = view("is_only", i8, flags, 3, N, C, W);
    v[SDM_P1_FIELD_K_EFF] = view("k_eff", val, true, 3, N, C, W);
    v[SDM_P1_FIELD_Q_W] = view("q_w", val, true, 3, N, C, R);
    v[SDM_P1_FIELD_PAYLOAD] = view("payload", i32, true, 2, N, o.row());
    v[SDM_P1_FIELD_POS_K] = view("pos_k", i32, o.has(SDM_P1_DET_POS), 3, N, C, W);
    v[SDM_P1_FIELD_POS_Q] = view("pos_q", i32, o.has(SDM_P1_DET_POS), 3, N, C, R);
    v[SDM_P1_FIELD_Q_LAST] = view("q_last", i8, flags && rg, 3, N, C, R);
    v[SDM_P1_FIELD_Q_ONLY] = view("q_only", i8, flags && rg, 3, N, C, R);
    v[SDM_P1_FIELD_SPAY_K] = view("spay_k", i32, o.has(SDM_P1_DET_SPAY_K), 2, N, C * W);
    v[SDM_P1_FIELD_SPAY_Q] = view("spay_q", i32, rg && o.has(SDM_P1_DET_SPAY_Q), 2, N, C * R);
    v[SDM_P1_FIELD_SPAY_RANK] = view("spay_rank", i32, o.has(SDM_P1_DET_SPAY_RANK), 3, N, ceil_div(o.n(), 32), 2);
    v[SDM_P1_FIELD_KREC] = view("krec", i32, o.has(SDM_P1_DET_KREC), 3, N, C * W, 4);
    v[SDM_P1_FIELD_KSPA] = view("kspa", f32, o.has(SDM_P1_DET_KSPA), 2, N, C * W);
    v[SDM_P1_FIELD_QREC] = view("qrec", i32, rg && o.has(SDM_P1_DET_QREC), 3, N, C * R, 4);
    v[SDM_P1_FIELD_TILES_K] = view("tiles_k", i32, tiles, 2, N, ceil_div(C * W, L) + 1);
    v[SDM_P1_FIELD_TILES_Q] = view("tiles_q", i32, tiles && rg, 2, N, ceil_div(C * R, L) + 1);
    v[SDM_P1_FIELD_SEGB_K] = view("segb_k", i32, tiles, 2, N, ceil_div(C * W, L) + 1);
    v[SDM_P1_FIELD_DC_KPOS] = view("dc_kpos", i32, gidx, 3, N, C, W);
    v[SDM_P1_FIELD_DC_BPRE] = view("dc_bpre", i32, gidx, 2, N, ceil_div(C * W, 32) + 1);
    v[SDM_P1_FIELD_DC_REC] = view("dc_rec", i32, false, 3, N, C * W, 4);
    v[SDM_P1_FIELD_QREC8] = view("qrec8", i32, rg && o.has(SDM_P1_DET_QREC8), 3, N, C * R, 2);
    v[SDM_P1_FIELD_REPEATS] = view("repeats", SDM_P1_DTYPE_INT64, true, 1, 1);
    return v;
}

OutputBuffers output_buffers(void* const* f) {
    OutputBuffers b{};
    for_each_output(
        b, [f](int field, auto& member) { member = static_cast<std::remove_reference_t<decltype(member)>>(f[field]); });
    return b;
}

}   // namespace sdm_p1
