// Running one case on each backend through the public API and comparing the outputs byte
// for byte: device buffers, CPU and CUDA runs, the comparison, and the pass/fail tally.
// Used by tests/cuda/test_cuda.cpp. CUDA runtime errors throw; each check catches and records.
#ifndef SDM_P1_TESTS_CUDA_HARNESS_H
#define SDM_P1_TESTS_CUDA_HARNESS_H

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_cases.h"
#include "sdm/phase1.h"

namespace cuda_test {

#define CUDA_CHECK(call) ::cuda_test::cuda_check((call), #call, __FILE__, __LINE__)

inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e == cudaSuccess) return;
    char b[512];
    std::snprintf(b, sizeof b, "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorName(e), cudaGetErrorString(e));
    throw std::runtime_error(b);
}

// ---- device memory ------------------------------------------------------------------------

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    void* get() const { return ptr_; }
    size_t bytes() const { return bytes_; }
    void upload(const std::vector<unsigned char>& host) {
        if (host.size() != bytes_) throw std::runtime_error("upload: size mismatch");
        if (bytes_ > 0) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice));
    }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// The inputs of one case on the device.
struct DeviceInputs {
    DeviceBuffer k_idx, q_idx, k_val, q_val, g, beta, lengths;
    int32_t lengths_dtype;

    explicit DeviceInputs(const Encoded& e)
        : k_idx(e.k_idx.size()),
          q_idx(e.q_idx.size()),
          k_val(e.k_val.size()),
          q_val(e.q_val.size()),
          g(e.g.size()),
          beta(e.beta.size()),
          lengths(e.lengths.size()),
          lengths_dtype(e.lengths_dtype) {
        upload(e);
    }
    // New contents, same shapes (graph replays read the same addresses).
    void upload(const Encoded& e) {
        k_idx.upload(e.k_idx);
        q_idx.upload(e.q_idx);
        k_val.upload(e.k_val);
        q_val.upload(e.q_val);
        g.upload(e.g);
        beta.upload(e.beta);
        lengths.upload(e.lengths);
    }
    sdm_p1_inputs view(bool with_beta) const {
        sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
        in.k_idx = k_idx.get();
        in.q_idx = q_idx.get();
        in.k_val = k_val.get();
        in.q_val = q_val.get();
        in.g = static_cast<const float*>(g.get());
        in.beta = with_beta ? static_cast<const float*>(beta.get()) : nullptr;
        in.stream_lengths = lengths.get();   // null without lengths
        in.stream_lengths_dtype = lengths_dtype;
        return in;
    }
};

inline sdm_p1_inputs host_view(const Encoded& e, bool with_beta) {
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = e.k_idx.data();
    in.q_idx = e.q_idx.data();
    in.k_val = e.k_val.data();
    in.q_val = e.q_val.data();
    in.g = reinterpret_cast<const float*>(e.g.data());
    in.beta = with_beta ? reinterpret_cast<const float*>(e.beta.data()) : nullptr;
    in.stream_lengths = e.lengths.empty() ? nullptr : e.lengths.data();
    in.stream_lengths_dtype = e.lengths_dtype;
    return in;
}

// ---- results ------------------------------------------------------------------------------

using Bytes = std::vector<unsigned char>;

// One execute's outcome: its status (CUDA: sdm_p1_execute_status after the sync), the
// message on failure and every field's bytes (empty where not requested).
struct RunResult {
    sdm_p1_status status = SDM_P1_SUCCESS;
    std::string error;
    std::vector<Bytes> fields;
    std::vector<sdm_p1_tensor> views;
};

inline std::string api_error(const char* what, sdm_p1_status s) {
    return std::string(what) + ": " + sdm_p1_status_string(s) + ": " + sdm_p1_last_error();
}

// The CPU backend's outputs for these inputs: the definition of every bit.
inline RunResult run_cpu(const CaseSpec& s, const Encoded& e) {
    RunResult r;
    const sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CPU);
    sdm_p1_plan* plan = nullptr;
    r.status = sdm_p1_plan_create(&plan, &d);
    if (r.status != SDM_P1_SUCCESS) {
        r.error = api_error("cpu plan_create", r.status);
        return r;
    }
    const sdm_p1_inputs in = host_view(e, s.needs_beta());
    r.status = sdm_p1_execute(plan, &in, nullptr, 0, nullptr);
    r.views.resize(SDM_P1_FIELD_COUNT);
    sdm_p1_outputs(plan, r.views.data(), SDM_P1_FIELD_COUNT);
    if (r.status == SDM_P1_SUCCESS) {
        for (const sdm_p1_tensor& v : r.views) {
            const unsigned char* p = static_cast<const unsigned char*>(v.data);
            r.fields.emplace_back(p, p + (v.requested ? v.bytes : 0));
        }
    } else {
        r.error = sdm_p1_last_error();
    }
    sdm_p1_plan_destroy(plan);
    return r;
}

// How a CUDA plan gets its output buffers: its own; the caller's for every field; the
// caller's, each placed one element past a 256-byte boundary (the least alignment the API
// accepts, so the kernels' wide stores take their unaligned paths); or its own with caller
// buffers for every other requested field (NULL elements fall back to the plan's).
enum class OutMode { Plan, Caller, CallerShifted, Mixed };

inline const char* mode_name(OutMode m) {
    switch (m) {
        case OutMode::Plan:
            return "plan buffers";
        case OutMode::Caller:
            return "caller buffers";
        case OutMode::CallerShifted:
            return "caller buffers, shifted";
        default:
            return "mixed buffers";
    }
}

inline size_t dtype_size(int32_t dtype) {
    switch (dtype) {
        case SDM_P1_DTYPE_INT8:
            return 1;
        case SDM_P1_DTYPE_BFLOAT16:
            return 2;
        case SDM_P1_DTYPE_INT64:
            return 8;
        default:
            return 4;
    }
}

// A CUDA plan with the buffers of its output mode; poisons outputs before each execute.
class CudaPlan {
public:
    CudaPlan(const CaseSpec& s, OutMode mode, const sdm_p1_allocator* alloc = nullptr) : mode_(mode) {
        sdm_p1_desc d = make_desc(
            s, SDM_P1_BACKEND_CUDA,
            mode == OutMode::Caller || mode == OutMode::CallerShifted ? SDM_P1_OUTPUTS_CALLER : SDM_P1_OUTPUTS_PLAN);
        if (alloc != nullptr) d.allocator = *alloc;
        sdm_p1_plan* plan = nullptr;
        const sdm_p1_status st = sdm_p1_plan_create(&plan, &d);
        if (st != SDM_P1_SUCCESS) throw std::runtime_error(api_error("cuda plan_create", st));
        plan_.reset(plan);
        sdm_p1_outputs(plan, views_, SDM_P1_FIELD_COUNT);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            given_[f] = nullptr;
            where_[f] = views_[f].data;
            if (!views_[f].requested) continue;
            const bool own =
                mode == OutMode::Caller || mode == OutMode::CallerShifted || (mode == OutMode::Mixed && f % 2 == 1);
            if (own) {
                const size_t shift = mode == OutMode::CallerShifted ? dtype_size(views_[f].dtype) : 0;
                caller_.emplace_back(views_[f].bytes + shift);
                given_[f] = where_[f] = static_cast<char*>(caller_.back().get()) + shift;
            }
        }
    }
    CudaPlan(const CudaPlan&) = delete;
    CudaPlan& operator=(const CudaPlan&) = delete;

    sdm_p1_plan* get() const { return plan_.get(); }
    const sdm_p1_tensor* views() const { return views_; }
    void* const* buffers() const { return given_; }

    // 0xA5 in every requested output, so a byte the backend does not write shows.
    void poison(cudaStream_t stream) const {
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (views_[f].requested) CUDA_CHECK(cudaMemsetAsync(where_[f], 0xA5, views_[f].bytes, stream));
        }
    }
    sdm_p1_status execute(const sdm_p1_inputs& in, cudaStream_t stream) const {
        poison(stream);
        return enqueue(in, stream);
    }
    // The execute alone (graph capture poisons outside the graph).
    sdm_p1_status enqueue(const sdm_p1_inputs& in, cudaStream_t stream) const {
        if (mode_ == OutMode::Plan) return sdm_p1_execute(get(), &in, nullptr, 0, stream);
        return sdm_p1_execute(get(), &in, given_, SDM_P1_FIELD_COUNT, stream);
    }
    // Every field's bytes (call after the execute's stream is synchronized).
    std::vector<Bytes> fetch() const {
        std::vector<Bytes> out(SDM_P1_FIELD_COUNT);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!views_[f].requested) continue;
            out[f].resize(views_[f].bytes);
            CUDA_CHECK(cudaMemcpy(out[f].data(), where_[f], views_[f].bytes, cudaMemcpyDeviceToHost));
        }
        return out;
    }
    // After cudaStreamSynchronize: the data check, then the outputs.
    RunResult result() const {
        RunResult r;
        r.status = sdm_p1_execute_status(get());
        if (r.status != SDM_P1_SUCCESS) r.error = sdm_p1_last_error();
        r.views.assign(views_, views_ + SDM_P1_FIELD_COUNT);
        r.fields = fetch();
        return r;
    }

private:
    struct Destroy {
        void operator()(sdm_p1_plan* p) const { sdm_p1_plan_destroy(p); }
    };
    OutMode mode_;
    std::unique_ptr<sdm_p1_plan, Destroy> plan_;
    sdm_p1_tensor views_[SDM_P1_FIELD_COUNT];
    void* given_[SDM_P1_FIELD_COUNT];   // what execute gets (caller buffers or NULL)
    void* where_[SDM_P1_FIELD_COUNT];   // where each field lands
    std::vector<DeviceBuffer> caller_;
};

// ---- comparison ---------------------------------------------------------------------------

inline uint64_t element_bits(const Bytes& b, size_t i, size_t size) {
    uint64_t v = 0;
    std::memcpy(&v, b.data() + i * size, size);
    return v;
}

// "[c, i, j]" of a flat element index in a view's shape.
inline std::string coordinates(const sdm_p1_tensor& v, size_t index) {
    int64_t idx[3] = {0, 0, 0};
    size_t rest = index;
    for (int d = v.ndim - 1; d >= 0; --d) {
        idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(v.shape[d]));
        rest /= static_cast<size_t>(v.shape[d]);
    }
    std::string s = "[";
    for (int d = 0; d < v.ndim; ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
    return s + "]";
}

inline std::string same_views(const std::vector<sdm_p1_tensor>& a, const std::vector<sdm_p1_tensor>& b) {
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const sdm_p1_tensor &x = a[f], &y = b[f];
        bool same = std::string(x.name) == y.name && x.dtype == y.dtype && x.requested == y.requested &&
                    x.ndim == y.ndim && x.bytes == y.bytes;
        for (int d = 0; d < 3; ++d) same &= x.shape[d] == y.shape[d];
        if (!same) return std::string("the views of '") + x.name + "' differ between the backends";
    }
    return "";
}

// "" when every field is equal byte for byte; else the first differing field, its first
// differing element (both values) and how many elements differ.
inline std::string compare_fields(const RunResult& cpu, const RunResult& gpu) {
    std::string why = same_views(cpu.views, gpu.views);
    if (!why.empty()) return why;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        const Bytes &x = cpu.fields[f], &y = gpu.fields[f];
        if (x.size() != y.size()) return std::string(cpu.views[f].name) + ": sizes differ";
        if (x == y) continue;
        const size_t es = dtype_size(cpu.views[f].dtype), n = x.size() / es;
        size_t first = n, count = 0;
        for (size_t i = 0; i < n; ++i) {
            if (std::memcmp(x.data() + i * es, y.data() + i * es, es) != 0) {
                if (first == n) first = i;
                ++count;
            }
        }
        char b[400];
        std::snprintf(
            b, sizeof b, "%s: %zu of %zu elements differ; first at %s: cpu 0x%llx, cuda 0x%llx%s", cpu.views[f].name,
            count, n, coordinates(cpu.views[f], first).c_str(), (unsigned long long)element_bits(x, first, es),
            (unsigned long long)element_bits(y, first, es),
            element_bits(y, first, es) == 0xA5A5A5A5A5A5A5A5ull >> (64 - 8 * es) ? " (the poison: never written)" : "");
        return b;
    }
    return "";
}

// ---- the tally ----------------------------------------------------------------------------

// Per family: checks passed and failed; each failure is printed when it happens.
class Tally {
public:
    void begin(const std::string& family) {
        family_ = family;
        passed_ = failed_ = 0;
        start_ = std::chrono::steady_clock::now();
    }
    // Records one check: ok when why is empty.
    void check(const std::string& what, const std::string& why) {
        if (why.empty()) {
            ++passed_;
            return;
        }
        ++failed_;
        std::printf("  FAIL %s / %s: %s\n", family_.c_str(), what.c_str(), why.c_str());
        std::fflush(stdout);
    }
    // Runs body (which returns "" or why it failed) as one check; exceptions are failures.
    void run(const std::string& what, const std::function<std::string()>& body) {
        std::string why;
        try {
            why = body();
        } catch (const std::exception& e) {
            why = std::string("exception: ") + e.what();
        }
        check(what, why);
    }
    void end() {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        std::printf("%-14s %4d checks: %4d passed, %d failed (%.1f s)\n", family_.c_str(), passed_ + failed_, passed_,
                    failed_, s);
        std::fflush(stdout);
        total_passed_ += passed_;
        total_failed_ += failed_;
    }
    int total_passed() const { return total_passed_; }
    int total_failed() const { return total_failed_; }

private:
    std::string family_;
    int passed_ = 0, failed_ = 0, total_passed_ = 0, total_failed_ = 0;
    std::chrono::steady_clock::time_point start_;
};

}   // namespace cuda_test

#endif   // SDM_P1_TESTS_CUDA_HARNESS_H
