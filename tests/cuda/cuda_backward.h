// The backward (sdm_p1_execute_backward) on both backends for tests/cuda/test_cuda.cpp: upstream
// gradients for a case (random, zero, with NaN and infinities; any subset given, NULL for the
// rest; NaN in every cell the backward never reads), one backward on the CPU backend (the
// definition of every bit) and on the CUDA backend (with the CUDA forward's payload, a given
// one, or NULL: sorted again), and the comparison of every gradient byte.
#ifndef SDM_P1_TESTS_CUDA_BACKWARD_H
#define SDM_P1_TESTS_CUDA_BACKWARD_H

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../canon/field_sets.h"
#include "cuda_cases.h"
#include "cuda_harness.h"
#include "sdm/phase1.h"

namespace cuda_test {

// The differentiable fields, their element types and where their elements lie: the library's
// one definition (canon/field_sets.h).
constexpr sdm_p1::FieldList kDifferentiable = sdm_p1::differentiable_fields();
constexpr uint32_t kAllUpstream = ~0u;

// The upstream gradients' values: normal; all zero; normal with NaN, +-inf, 0 and 1e30 among
// them (an eighth each).
enum class Upstream { Normal, Zero, NonFinite };

// The input gradients a backward writes (bits of GradOut).
enum GradOut : unsigned { kGradK = 1, kGradQ = 2, kGradG = 4, kGradBeta = 8, kGradAll = 15 };

// How a backward is run: the upstream gradients given (bit f: field f's; the others NULL),
// their values, the payload (the forward's, else NULL: sorted again) and the gradients
// written.
struct BackwardSpec {
    Upstream kind = Upstream::Normal;
    uint32_t given = kAllUpstream;
    bool payload = true;
    unsigned outputs = kGradAll;
    uint64_t seed = 7;
};

inline std::string describe(const BackwardSpec& b) {
    const char* kinds[] = {"normal", "zero", "non-finite"};
    char s[160];
    std::snprintf(s, sizeof s, " backward[%s upstream, given=0x%x, %s, out=%u]", kinds[static_cast<int>(b.kind)],
                  b.given, b.payload ? "payload" : "sorted again", b.outputs);
    return s;
}

inline bool value_typed(int f) { return sdm_p1::upstream_of(f) == sdm_p1::Upstream::kValueDtype; }

inline bool is_given(const BackwardSpec& b, int f) { return f < 32 && (b.given >> f & 1u) != 0u; }

// Elements of field f's upstream gradient.
inline int64_t upstream_count(const CaseSpec& s, int f) {
    const sdm_p1::UpstreamGrad u = sdm_p1::upstream_grad(f);
    switch (u.index) {
        case sdm_p1::UpstreamIndex::kCells:
            return s.N * s.C * s.C * u.words;
        case sdm_p1::UpstreamIndex::kReads:
        case sdm_p1::UpstreamIndex::kReadRows:
            return s.N * s.C * s.R * u.words;
        default:
            return s.N * s.C * s.W * u.words;
    }
}

// Whether element i of field f's upstream gradient is one the backward reads: cells of a at
// j < i and of qk at j <= i between valid tokens, valid tokens' entries, valid rows of the
// records (a chunk's valid entries come first in its sorted row).
inline bool read_cell(const CaseSpec& s, int f, int64_t i) {
    const int64_t C = s.C, W = s.W, R = s.R;
    const sdm_p1::UpstreamGrad u = sdm_p1::upstream_grad(f);
    const int64_t e = i / u.words;   // the cell, entry or row
    switch (u.index) {
        case sdm_p1::UpstreamIndex::kCells: {
            const int64_t c = e / (C * C), row = e / C % C, col = e % C;
            const int64_t valid = s.chunk_valid(c);
            return row < valid && col < valid && (f == SDM_P1_FIELD_A ? col < row : col <= row);
        }
        case sdm_p1::UpstreamIndex::kReads:
            return e / R % C < s.chunk_valid(e / (C * R));
        case sdm_p1::UpstreamIndex::kReadRows:
            return e % (C * R) < s.chunk_valid(e / (C * R)) * R;
        case sdm_p1::UpstreamIndex::kWriteRows:
            return e % (C * W) < s.chunk_valid(e / (C * W)) * W;
        default:
            return e / W % C < s.chunk_valid(e / (C * W));
    }
}

inline float upstream_value(Upstream kind, Rng& rng) {
    switch (kind) {
        case Upstream::Zero:
            return 0.0f;
        case Upstream::NonFinite:
            return value(Values::NonFinite, rng);
        default:
            return static_cast<float>(rng.normal());
    }
}

// The upstream gradients by field, as the library reads them (value-typed ones in bfloat16
// where the case's values are); empty: NULL.
inline std::vector<Bytes> make_upstream(const CaseSpec& s, const BackwardSpec& b) {
    std::vector<Bytes> up(SDM_P1_FIELD_COUNT);
    Rng rng(mix_seed(s.seed, b.seed));
    for (int f : kDifferentiable) {
        if (!is_given(b, f)) continue;
        const int64_t n = upstream_count(s, f);
        const bool bf16 = value_typed(f) && s.bf16;
        up[f].resize(static_cast<size_t>(n) * (bf16 ? 2 : 4));
        for (int64_t i = 0; i < n; ++i) {
            const float v = read_cell(s, f, i) ? upstream_value(b.kind, rng) : std::nanf("");
            if (bf16) {
                const uint16_t h = bf16_bits(v);
                std::memcpy(up[f].data() + 2 * i, &h, 2);
            } else {
                std::memcpy(up[f].data() + 4 * i, &v, 4);
            }
        }
    }
    return up;
}

// One backward's outcome: its status (CUDA: sdm_p1_execute_status after the sync), the
// message on failure, and the bytes of dk_val, dq_val, dg, dbeta (empty where not written).
struct GradResult {
    sdm_p1_status status = SDM_P1_SUCCESS;
    std::string error;
    Bytes grads[4];
};

inline size_t grad_bytes(const CaseSpec& s, int which) {
    const size_t value = s.bf16 && !s.grad_f32 ? 2 : 4;
    switch (which) {
        case 0:
            return static_cast<size_t>(s.N * s.C * s.W) * value;
        case 1:
            return static_cast<size_t>(s.N * s.C * s.R) * value;
        case 2:
            return static_cast<size_t>(s.N * s.C * s.gate_width()) * 4;
        default:
            return static_cast<size_t>(s.N * s.C) * 4;
    }
}

inline const char* grad_name(int which) {
    const char* names[] = {"dk_val", "dq_val", "dg", "dbeta"};
    return names[which];
}

inline sdm_p1_input_grads grad_pointers(void* const (&p)[4], unsigned outputs) {
    sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
    out.k_val = outputs & kGradK ? p[0] : nullptr;
    out.q_val = outputs & kGradQ ? p[1] : nullptr;
    out.g = outputs & kGradG ? static_cast<float*>(p[2]) : nullptr;
    out.beta = outputs & kGradBeta ? static_cast<float*>(p[3]) : nullptr;
    return out;
}

// The CPU backend's backward (the case's desc with backward = 1); `payload`: the forward's
// (run here first), else NULL. The result's forward payload is returned in *payload_out
// where asked.
inline GradResult run_cpu_backward(CaseSpec s, const Encoded& e, const BackwardSpec& b, const std::vector<Bytes>& up,
                                   std::vector<int32_t>* payload_out = nullptr,
                                   const int32_t* payload_override = nullptr) {
    s.backward = true;
    GradResult r;
    const sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CPU);
    sdm_p1_plan* plan = nullptr;
    r.status = sdm_p1_plan_create(&plan, &d);
    if (r.status != SDM_P1_SUCCESS) {
        r.error = api_error("cpu plan_create", r.status);
        return r;
    }
    const int32_t* payload = payload_override;
    if (payload == nullptr && (b.payload || payload_out != nullptr)) {
        const sdm_p1_inputs fin = host_view(e, s.needs_beta());
        r.status = sdm_p1_execute(plan, &fin, nullptr, 0, nullptr);
        if (r.status != SDM_P1_SUCCESS) {
            r.error = api_error("cpu forward", r.status);
            sdm_p1_plan_destroy(plan);
            return r;
        }
        sdm_p1_tensor v[SDM_P1_FIELD_COUNT];
        sdm_p1_outputs(plan, v, SDM_P1_FIELD_COUNT);
        const int32_t* p = static_cast<const int32_t*>(v[SDM_P1_FIELD_PAYLOAD].data);
        if (payload_out != nullptr) payload_out->assign(p, p + v[SDM_P1_FIELD_PAYLOAD].bytes / 4);
        if (b.payload) payload = p;
    }
    const sdm_p1_inputs in = host_view(e, is_given(b, SDM_P1_FIELD_KSPA));
    std::vector<const void*> grads(SDM_P1_FIELD_COUNT, nullptr);
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) grads[f] = up[f].empty() ? nullptr : up[f].data();
    void* where[4];
    for (int w = 0; w < 4; ++w) {
        r.grads[w].assign(b.outputs >> w & 1u ? grad_bytes(s, w) : 0, 0xA5);
        where[w] = r.grads[w].data();
    }
    const sdm_p1_input_grads out = grad_pointers(where, b.outputs);
    r.status = sdm_p1_execute_backward(plan, &in, payload, grads.data(), SDM_P1_FIELD_COUNT, &out, nullptr);
    if (r.status != SDM_P1_SUCCESS) r.error = sdm_p1_last_error();
    sdm_p1_plan_destroy(plan);
    return r;
}

// A CUDA plan of the case with backward = 1, its upstream gradients and gradient buffers on
// the device; runs the forward (for its payload) and backwards.
class CudaBackward {
public:
    CudaBackward(CaseSpec s, const std::vector<Bytes>& up) : spec_(mark(s)), plan_(spec_, OutMode::Plan) {
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            up_[f] = DeviceBuffer(up[f].size());
            up_[f].upload(up[f]);
            grads_[f] = up[f].empty() ? nullptr : up_[f].get();
        }
        for (int w = 0; w < 4; ++w) {
            out_[w] = DeviceBuffer(grad_bytes(spec_, w));
            where_[w] = out_[w].get();
        }
    }
    const CudaPlan& plan() const { return plan_; }
    // The forward on the device (then synchronized); its payload, in the plan's buffer.
    const int32_t* forward(const DeviceInputs& dev, cudaStream_t stream) const {
        if (plan_.execute(dev.view(spec_.needs_beta()), stream) != SDM_P1_SUCCESS)
            throw std::runtime_error(api_error("cuda forward", SDM_P1_ERROR_INVALID_ARGUMENT));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        if (sdm_p1_execute_status(plan_.get()) != SDM_P1_SUCCESS)
            throw std::runtime_error(std::string("cuda forward: ") + sdm_p1_last_error());
        return static_cast<const int32_t*>(plan_.views()[SDM_P1_FIELD_PAYLOAD].data);
    }
    // 0xA5 in every gradient buffer.
    void poison(cudaStream_t stream) const {
        for (int w = 0; w < 4; ++w) CUDA_CHECK(cudaMemsetAsync(where_[w], 0xA5, out_[w].bytes(), stream));
    }
    sdm_p1_status enqueue(const sdm_p1_inputs& in, const int32_t* payload, unsigned outputs,
                          cudaStream_t stream) const {
        const sdm_p1_input_grads out = grad_pointers(where_, outputs);
        return sdm_p1_execute_backward(plan_.get(), &in, payload, grads_, SDM_P1_FIELD_COUNT, &out, stream);
    }
    // After the stream is synchronized: the data check and the gradients written.
    GradResult result(unsigned outputs) const {
        GradResult r;
        r.status = sdm_p1_execute_status(plan_.get());
        if (r.status != SDM_P1_SUCCESS) r.error = sdm_p1_last_error();
        for (int w = 0; w < 4; ++w) {
            if (!(outputs >> w & 1u)) continue;
            r.grads[w].resize(out_[w].bytes());
            CUDA_CHECK(cudaMemcpy(r.grads[w].data(), where_[w], out_[w].bytes(), cudaMemcpyDeviceToHost));
        }
        return r;
    }
    // Poisons, enqueues, synchronizes, returns the result (or the enqueue's refusal).
    GradResult run(const sdm_p1_inputs& in, const int32_t* payload, unsigned outputs, cudaStream_t stream) const {
        poison(stream);
        const sdm_p1_status st = enqueue(in, payload, outputs, stream);
        if (st != SDM_P1_SUCCESS) {
            GradResult r;
            r.status = st;
            r.error = api_error("execute_backward", st);
            return r;
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return result(outputs);
    }
    void* const* grads() const { return grads_; }

private:
    static CaseSpec& mark(CaseSpec& s) {
        s.backward = true;
        return s;
    }
    CaseSpec spec_;
    CudaPlan plan_;
    DeviceBuffer up_[SDM_P1_FIELD_COUNT];
    void* grads_[SDM_P1_FIELD_COUNT] = {};
    DeviceBuffer out_[4];
    void* where_[4] = {};
};

// "" when every gradient is equal byte for byte; else the first differing one, its first
// differing element (both values) and how many differ.
inline std::string compare_grads(const CaseSpec& s, const GradResult& cpu, const GradResult& gpu) {
    for (int w = 0; w < 4; ++w) {
        const Bytes &x = cpu.grads[w], &y = gpu.grads[w];
        if (x.size() != y.size()) return std::string(grad_name(w)) + ": sizes differ";
        if (x == y) continue;
        const size_t es = w < 2 && s.bf16 && !s.grad_f32 ? 2 : 4, n = x.size() / es;
        size_t first = n, count = 0;
        for (size_t i = 0; i < n; ++i) {
            if (std::memcmp(x.data() + i * es, y.data() + i * es, es) != 0) {
                if (first == n) first = i;
                ++count;
            }
        }
        char b[300];
        std::snprintf(
            b, sizeof b, "%s: %zu of %zu elements differ; first at %zu: cpu 0x%llx, cuda 0x%llx%s", grad_name(w), count,
            n, first, (unsigned long long)element_bits(x, first, es), (unsigned long long)element_bits(y, first, es),
            element_bits(y, first, es) == 0xA5A5A5A5ull >> (32 - 8 * es) ? " (the poison: never written)" : "");
        return b;
    }
    return "";
}

// "" when the CUDA backward of the case equals the CPU's byte for byte (the CUDA forward's
// payload, or NULL).
inline std::string compare_backward(CaseSpec s, const BackwardSpec& b, cudaStream_t stream) {
    s.backward = true;
    const Encoded e = make_inputs(s).encode();
    const std::vector<Bytes> up = make_upstream(s, b);
    const GradResult cpu = run_cpu_backward(s, e, b, up);
    if (cpu.status != SDM_P1_SUCCESS) return "cpu: " + cpu.error;
    const DeviceInputs dev(e);
    const CudaBackward gpu(s, up);
    const int32_t* payload = b.payload ? gpu.forward(dev, stream) : nullptr;
    const GradResult r = gpu.run(dev.view(is_given(b, SDM_P1_FIELD_KSPA)), payload, b.outputs, stream);
    if (r.status != SDM_P1_SUCCESS) return "cuda: " + r.error;
    return compare_grads(s, cpu, r);
}

}   // namespace cuda_test

#endif   // SDM_P1_TESTS_CUDA_BACKWARD_H
