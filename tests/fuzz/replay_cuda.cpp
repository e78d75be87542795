// replay_cuda: the fuzzer's inputs on the CPU and the CUDA backend, compared.
//
//   replay_cuda FILE_OR_DIR...        (a folder: every file in it, e.g. tests/fuzz/corpus)
//   replay_cuda --cpu FILE_OR_DIR...  (the second plan a 3-thread CPU plan: checks the replay
//                                      itself on a machine without a GPU)
//
// Each input is decoded as fuzz_api decodes it (fuzz_case.cpp) into a 1-thread CPU plan and a
// CUDA plan on the current device; then the case's Execute steps run on both, with its Poke
// steps between them (its other steps test host-side calls, which fuzz_api covers). After each
// Execute step, a case with backward calls (C API 1.3) runs its next one on both plans, with
// the CPU forward's payload (or NULL, a corrupted or a stale one, as the case says): the same
// status and message, the same gradient bytes on success. While the CUDA backward is not
// written, a CUDA plan returns SDM_P1_ERROR_UNSUPPORTED there; such a call is counted and
// not compared. The
// inputs go to the device as they are (NULL stays NULL, a misaligned pointer one byte off),
// and each CUDA execute is synchronized and read back with sdm_p1_execute_status. Every pair
// must agree: the same status from both creations and from each execute, the same message
// for bad input data (the header promises it), the same bytes of every output on success.
// Statuses are checked against the header as fuzz_api checks them. A case where either
// backend runs out of memory is skipped (their workspaces differ).
// Exit status: 0 when every case agrees, 1 when one does not (each named), 77 without a GPU.
// meson test runs it on the seed corpus (test fuzz_replay_cuda).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "api_contract.h"
#include "fuzz_case.h"
#include "sdm/phase1.h"

namespace {

using namespace fuzz;

constexpr size_t kLargestBlock = size_t{256} << 20;

int host_alloc(void*, void** ptr, size_t bytes, void*) {
    if (bytes > kLargestBlock) return 1;
    *ptr = std::malloc(bytes);
    return *ptr == nullptr ? 1 : 0;
}

void host_free(void*, void* ptr, size_t, void*) { std::free(ptr); }

int device_alloc(void*, void** ptr, size_t bytes, void*) {
    return bytes <= kLargestBlock && cudaMalloc(ptr, bytes) == cudaSuccess ? 0 : 1;
}

void device_free(void*, void* ptr, size_t, void*) { cudaFree(ptr); }

// A device copy of a host array, freed with it.
struct DeviceArray {
    void* p = nullptr;
    DeviceArray() = default;
    explicit DeviceArray(size_t bytes) {
        if (bytes != 0 && cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
    }
    ~DeviceArray() { cudaFree(p); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
};

bool out_of_memory(sdm_p1_status s) { return s == SDM_P1_ERROR_OUT_OF_MEMORY; }

// One backend's plan of a case and the caller buffers it writes to (host or device).
struct Side {
    bool cuda = false;
    int32_t threads = 1;
    sdm_p1_plan* plan = nullptr;
    sdm_p1_status created = SDM_P1_SUCCESS;
    sdm_p1_desc resolved{};
    sdm_p1_tensor views[SDM_P1_FIELD_COUNT]{};
    std::vector<std::vector<uint8_t>> host_buffers;
    std::vector<DeviceArray> device_buffers;
    void* buffers[SDM_P1_FIELD_COUNT]{};

    ~Side() {
        if (plan != nullptr) sdm_p1_plan_destroy(plan);
    }
};

class Replay {
public:
    Replay(const std::string& name, Case& c, bool against_cuda) : name_(name), c_(c), cuda_(against_cuda) {}

    // 1 when the backends disagree, 0 when they agree, -1 when the case was skipped.
    int run() {
        Side cpu, gpu;   // gpu: the CUDA plan, or a 3-thread CPU plan (--cpu)
        gpu.cuda = cuda_;
        gpu.threads = cuda_ ? 1 : 3;
        create(cpu);
        create(gpu);
        if (out_of_memory(cpu.created) || out_of_memory(gpu.created)) return -1;
        if (cpu.created != gpu.created) {
            return disagree("creation", cpu.created, gpu.created, "");
        }
        if (cpu.created != SDM_P1_SUCCESS || !c_.runnable) return 0;
        int step = 0;
        for (const Step& s : c_.steps) {
            ++step;
            if (s.op == Op::Poke) poke(c_, s.arg);
            if (s.op != Op::Execute) continue;
            const sdm_p1_status sc = execute(cpu);
            const std::string message = sdm_p1_last_error();
            const sdm_p1_status sg = execute(gpu);
            if (out_of_memory(sc) || out_of_memory(sg)) return -1;
            const std::string where = "execute at step " + std::to_string(step);
            if (sc != sg) return disagree(where, sc, sg, message);
            if (sc == SDM_P1_ERROR_INVALID_INPUT && message != sdm_p1_last_error()) {
                return disagree(where + " (the messages: CPU '" + message + "')", sc, sg, sdm_p1_last_error());
            }
            if (sc != SDM_P1_SUCCESS) {
                const int r = backward(cpu, gpu, where, nullptr);
                if (r != 0) return r;
                continue;
            }
            const Outputs a = host_outputs(cpu.views, caller_mode(cpu) ? cpu.buffers : nullptr);
            const Outputs b =
                gpu.cuda ? device_outputs(gpu) : host_outputs(gpu.views, caller_mode(gpu) ? gpu.buffers : nullptr);
            for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
                if (a[f] != b[f]) {
                    return disagree(where + ": output '" + cpu.views[f].name + "' differs", sc, sg, "");
                }
            }
            ++compared_;
            const int r = backward(cpu, gpu, where, &a[SDM_P1_FIELD_PAYLOAD]);
            if (r != 0) return r;
        }
        return 0;
    }

    int compared() const { return compared_; }
    int backward_compared() const { return backward_compared_; }
    int backward_unsupported() const { return backward_unsupported_; }

private:
    static bool caller_mode(const Side& s) { return s.resolved.output_mode == SDM_P1_OUTPUTS_CALLER; }

    int disagree(const std::string& what, sdm_p1_status cpu, sdm_p1_status gpu, const std::string& message) {
        std::printf("DISAGREE %s: %s: CPU %s, CUDA %s%s%s\n", name_.c_str(), what.c_str(), sdm_p1_status_string(cpu),
                    sdm_p1_status_string(gpu), message.empty() ? "" : "; ", message.c_str());
        return 1;
    }

    void create(Side& s) {
        sdm_p1_desc d = c_.desc;
        d.num_threads = s.threads;
        const bool valid_backend = d.backend >= SDM_P1_BACKEND_AUTO && d.backend <= SDM_P1_BACKEND_CUDA;
        if (valid_backend) d.backend = s.cuda ? SDM_P1_BACKEND_CUDA : SDM_P1_BACKEND_CPU;
        if (d.device >= SDM_P1_UNSET) d.device = SDM_P1_UNSET;   // the CPU ignores a device the GPU may lack
        if (c_.allocator != AllocatorKind::Default) {            // Misaligned: served aligned here, as Capped
            d.allocator.alloc = s.cuda ? device_alloc : host_alloc;
            d.allocator.free = c_.allocator == AllocatorKind::HalfSet ? nullptr : s.cuda ? device_free : host_free;
        }
        DescBuffer buf = sized_desc(d, c_.desc_form);
        s.created =
            checked(Call::Create, "sdm_p1_plan_create", s.cuda, [&] { return sdm_p1_plan_create(&s.plan, &buf.desc); });
        if (s.created != SDM_P1_SUCCESS) return;
        s.resolved = buf.desc;
        checked(Call::Query, "sdm_p1_plan_desc", s.cuda, [&] { return sdm_p1_plan_desc(s.plan, &s.resolved); });
        checked(Call::Query, "sdm_p1_outputs", s.cuda,
                [&] { return sdm_p1_outputs(s.plan, s.views, SDM_P1_FIELD_COUNT); });
        check_views(s.views, s.resolved);
        if (!caller_mode(s) || !c_.runnable) return;
        s.host_buffers.resize(SDM_P1_FIELD_COUNT);
        s.device_buffers = std::vector<DeviceArray>(SDM_P1_FIELD_COUNT);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!s.views[f].requested) continue;
            if (s.cuda) {
                DeviceArray& a = s.device_buffers[f];
                if (cudaMalloc(&a.p, s.views[f].bytes) != cudaSuccess) a.p = nullptr;
                s.buffers[f] = a.p;
            } else {
                s.host_buffers[f].resize(s.views[f].bytes);
                s.buffers[f] = s.host_buffers[f].data();
            }
        }
    }

    sdm_p1_status execute(Side& s) {
        std::vector<DeviceArray> arrays(kArrays);
        const uint8_t* bases[kArrays];
        for (int i = 0; i < kArrays; ++i) {
            bases[i] = c_.arrays[i].data();
            if (!s.cuda || c_.arrays[i].empty()) continue;
            if (cudaMalloc(&arrays[i].p, c_.arrays[i].size()) != cudaSuccess) return SDM_P1_ERROR_OUT_OF_MEMORY;
            cudaMemcpy(arrays[i].p, c_.arrays[i].data(), c_.arrays[i].size(), cudaMemcpyHostToDevice);
            bases[i] = static_cast<const uint8_t*>(arrays[i].p);
        }
        InputsBuffer in = sized_inputs(inputs_at(c_, bases), c_.inputs_form);
        void* const* outputs = caller_mode(s) ? s.buffers : nullptr;
        const int32_t count = caller_mode(s) ? SDM_P1_FIELD_COUNT : 0;
        sdm_p1_status st = checked(Call::Execute, "sdm_p1_execute", s.cuda,
                                   [&] { return sdm_p1_execute(s.plan, &in.in, outputs, count, nullptr); });
        if (st != SDM_P1_SUCCESS || !s.cuda) return st;
        if (cudaDeviceSynchronize() != cudaSuccess) broken("cudaDeviceSynchronize failed after an execute");
        return checked(Call::ExecuteStatus, "sdm_p1_execute_status", true,
                       [&] { return sdm_p1_execute_status(s.plan); });
    }

    // Host memory for a CPU side, device memory for a CUDA side, freed with the object.
    class Staging {
    public:
        explicit Staging(bool cuda) : cuda_(cuda) {}
        // A copy of `bytes` (`offset` bytes on: a misaligned pointer), or NULL when empty.
        const void* put(const void* bytes, size_t size, size_t offset) {
            if (size == 0) return nullptr;
            if (!cuda_) {
                host_.emplace_back(size + offset);
                std::memcpy(host_.back().data() + offset, bytes, size);
                return host_.back().data() + offset;
            }
            device_.emplace_back(new DeviceArray(size + offset));
            char* p = static_cast<char*>(device_.back()->p);
            if (p == nullptr || cudaMemcpy(p + offset, bytes, size, cudaMemcpyHostToDevice) != cudaSuccess) {
                broken("a device copy of " + std::to_string(size) + " bytes failed");
            }
            return p + offset;
        }
        // A buffer of `size` bytes filled with `pattern`.
        void* buffer(size_t size, uint8_t pattern, size_t offset) {
            const std::vector<uint8_t> filled(size + offset, pattern);
            return static_cast<char*>(const_cast<void*>(put(filled.data(), filled.size(), 0))) + offset;
        }
        std::vector<uint8_t> read(const void* p, size_t size) const {
            std::vector<uint8_t> out(size);
            if (!cuda_) {
                std::memcpy(out.data(), p, size);
            } else if (cudaMemcpy(out.data(), p, size, cudaMemcpyDeviceToHost) != cudaSuccess) {
                broken("cudaMemcpy of a gradient failed");
            }
            return out;
        }

    private:
        bool cuda_;
        std::vector<std::vector<uint8_t>> host_;
        std::vector<std::unique_ptr<DeviceArray>> device_;
    };

    // One backward of `call` on side s: its status (CUDA: the call's, then after a synchronize
    // sdm_p1_execute_status's), its message, and each given input gradient's bytes on success.
    struct BackwardOutcome {
        sdm_p1_status status = SDM_P1_SUCCESS;
        std::string message;
        std::vector<uint8_t> grads[kInputGrads];
    };

    BackwardOutcome run_backward(Side& s, const BackwardCall& call, const std::vector<int32_t>* payload,
                                 bool misaligned_payload) {
        Staging mem(s.cuda);
        const uint8_t* bases[kArrays];
        for (int i = 0; i < kArrays; ++i) {
            bases[i] = static_cast<const uint8_t*>(mem.put(c_.arrays[i].data(), c_.arrays[i].size(), 0));
        }
        InputsBuffer in = sized_inputs(inputs_at(c_, bases), c_.inputs_form);
        if (call.misuse == BackwardMisuse::DropBeta) in.in.beta = nullptr;
        if (call.misuse == BackwardMisuse::InputsReserved) in.in.reserved = 1;
        const int32_t* pp = nullptr;
        if (payload != nullptr) {
            pp = static_cast<const int32_t*>(mem.put(payload->data(), payload->size() * 4, misaligned_payload ? 1 : 0));
        }
        const void* grads[SDM_P1_FIELD_COUNT + 1] = {};
        bool shifted = false;
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            const bool shift = call.misuse == BackwardMisuse::MisalignedUpstream && !shifted && f < call.count &&
                               differentiable(f) && !call.up[f].empty();
            shifted = shifted || shift;
            grads[f] = mem.put(call.up[f].data(), call.up[f].size(), shift ? 1 : 0);
        }
        const sdm_p1_desc& d = c_.desc;
        const size_t tokens = static_cast<size_t>(d.N * d.C);
        const size_t value = s.resolved.grad_dtype == SDM_P1_DTYPE_BFLOAT16 ? 2 : 4;
        const size_t bytes[kInputGrads] = {tokens * static_cast<size_t>(d.W) * value,
                                           tokens * static_cast<size_t>(d.R) * value,
                                           tokens * static_cast<size_t>(d.gate_width) * 4, tokens * 4};
        void* buffer[kInputGrads] = {};
        for (int g = 0; g < kInputGrads; ++g) {
            if ((call.requested >> g & 1u) != 0) buffer[g] = mem.buffer(bytes[g], 0xA5, call.misaligned >> g & 1u);
        }
        sdm_p1_input_grads plain = SDM_P1_INPUT_GRADS_INITIALIZER;
        plain.k_val = buffer[gK];
        plain.q_val = buffer[gQ];
        plain.g = static_cast<float*>(buffer[gG]);
        plain.beta = static_cast<float*>(buffer[gBeta]);
        plain.reserved = call.misuse == BackwardMisuse::OutReserved ? 1u : 0u;
        InputGradsBuffer out = sized_input_grads(plain, call.out_form);
        int32_t count = call.count;
        if (call.misuse == BackwardMisuse::BadCount) count = (call.corrupt_arg & 1u) != 0 ? -1 : SDM_P1_FIELD_COUNT + 1;
        if (call.misuse == BackwardMisuse::NullGrads && count == 0) count = 1;
        sdm_p1_plan* plan = call.misuse == BackwardMisuse::NullPlan ? nullptr : s.plan;
        const sdm_p1_inputs* inputs = call.misuse == BackwardMisuse::NullInputs ? nullptr : &in.in;
        const void* const* grads_arg = call.misuse == BackwardMisuse::NullGrads ? nullptr : grads;
        const sdm_p1_input_grads* out_arg = call.misuse == BackwardMisuse::NullOut ? nullptr : &out.out;

        BackwardOutcome o;
        o.status = checked(Call::Backward, "sdm_p1_execute_backward", s.cuda, [&] {
            return sdm_p1_execute_backward(plan, inputs, pp, grads_arg, count, out_arg, nullptr);
        });
        if (o.status == SDM_P1_SUCCESS && s.cuda) {
            if (cudaDeviceSynchronize() != cudaSuccess) broken("cudaDeviceSynchronize failed after a backward");
            o.status = checked(Call::ExecuteStatus, "sdm_p1_execute_status", true,
                               [&] { return sdm_p1_execute_status(s.plan); });
        }
        if (o.status != SDM_P1_SUCCESS) {
            o.message = sdm_p1_last_error();
            return o;
        }
        for (int g = 0; g < kInputGrads; ++g) {
            if (buffer[g] != nullptr) o.grads[g] = mem.read(buffer[g], bytes[g]);
        }
        return o;
    }

    // The case's next backward call after an execute (`forward_payload`: the CPU forward's
    // PAYLOAD on success, else NULL) on both sides: the same status and message, the same
    // gradient bytes on success. A CUDA backward that returns SDM_P1_ERROR_UNSUPPORTED (not
    // yet written) is skipped. 1 when they disagree, else 0.
    int backward(Side& cpu, Side& gpu, const std::string& where, const std::vector<uint8_t>* forward_payload) {
        if (c_.backward.empty()) return 0;
        const BackwardCall& call = c_.backward[backward_calls_++ % c_.backward.size()];
        std::vector<int32_t> fwd;
        if (forward_payload != nullptr) {
            fwd.resize(forward_payload->size() / 4);
            std::memcpy(fwd.data(), forward_payload->data(), fwd.size() * 4);
        }
        std::vector<int32_t> payload;
        switch (call.payload) {
            case PayloadMode::Forward:
                payload = fwd;
                break;
            case PayloadMode::Null:
                break;
            case PayloadMode::Corrupt:
                payload = fwd;
                if (!payload.empty()) corrupt_payload(c_, call, cpu.views[SDM_P1_FIELD_PAYLOAD].shape[1], payload);
                break;
            case PayloadMode::Stale:
                payload = stale_;
                break;
        }
        if (!fwd.empty()) stale_ = fwd;
        const std::vector<int32_t>* pp = payload.empty() ? nullptr : &payload;
        const bool misaligned = call.payload == PayloadMode::Corrupt && call.corruption == Corruption::Misaligned;
        const BackwardOutcome a = run_backward(cpu, call, pp, misaligned);
        const BackwardOutcome b = run_backward(gpu, call, pp, misaligned);
        const std::string what = "backward after the " + where;
        if (gpu.cuda && b.status == SDM_P1_ERROR_UNSUPPORTED) {
            ++backward_unsupported_;
            return 0;
        }
        if (out_of_memory(a.status) || out_of_memory(b.status)) return 0;
        if (a.status != b.status) return disagree(what, a.status, b.status, a.message + " / " + b.message);
        if (a.status == SDM_P1_ERROR_INVALID_INPUT && a.message != b.message) {
            return disagree(what + " (the messages: CPU '" + a.message + "')", a.status, b.status, b.message);
        }
        if (a.status != SDM_P1_SUCCESS) return 0;
        for (int g = 0; g < kInputGrads; ++g) {
            if (a.grads[g] != b.grads[g]) {
                return disagree(what + ": gradient " + std::to_string(g) + " (k_val, q_val, g, beta) differs", a.status,
                                b.status, "");
            }
        }
        ++backward_compared_;
        return 0;
    }

    Outputs device_outputs(const Side& s) const {
        Outputs out(SDM_P1_FIELD_COUNT);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!s.views[f].requested) continue;
            const void* data = caller_mode(s) ? s.buffers[f] : s.views[f].data;
            out[f].resize(s.views[f].bytes);
            if (cudaMemcpy(out[f].data(), data, out[f].size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
                broken("cudaMemcpy of output " + std::string(s.views[f].name) + " failed");
            }
        }
        return out;
    }

    std::string name_;
    Case& c_;
    bool cuda_;
    int compared_ = 0;
    size_t backward_calls_ = 0;    // the next backward call is this one modulo their count
    std::vector<int32_t> stale_;   // the last successful forward's payload
    int backward_compared_ = 0, backward_unsupported_ = 0;
};

std::vector<std::string> input_files(int count, char** paths) {
    std::vector<std::string> files;
    for (int i = 0; i < count; ++i) {
        const char* path = paths[i];
        if (std::filesystem::is_directory(path)) {
            for (const auto& e : std::filesystem::directory_iterator(path)) {
                if (e.is_regular_file()) files.push_back(e.path().string());
            }
        } else {
            files.push_back(path);
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

}   // namespace

int main(int argc, char** argv) {
    const bool against_cuda = argc < 2 || std::string(argv[1]) != "--cpu";
    int32_t devices = 0;
    if (against_cuda && (sdm_p1_cuda_device_count(&devices) != SDM_P1_SUCCESS || devices == 0)) {
        std::printf("SKIPPED replay_cuda: no CUDA device\n");
        return 77;
    }
    const std::vector<std::string> files = input_files(argc - (against_cuda ? 1 : 2), argv + (against_cuda ? 1 : 2));
    int disagreements = 0, skipped = 0, executes = 0, backwards = 0, unsupported = 0;
    for (const std::string& file : files) {
        std::ifstream f(file, std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        Case c = decode_case(bytes.data(), bytes.size());
        Replay replay(file, c, against_cuda);
        const int r = replay.run();
        disagreements += r > 0 ? 1 : 0;
        skipped += r < 0 ? 1 : 0;
        executes += replay.compared();
        backwards += replay.backward_compared();
        unsupported += replay.backward_unsupported();
    }
    std::printf(
        "replay_cuda: %zu inputs, %d executes and %d backwards compared byte for byte, %d backwards "
        "UNSUPPORTED on CUDA (not compared), %d skipped (out of memory), %d disagreements\n",
        files.size(), executes, backwards, unsupported, skipped, disagreements);
    return disagreements == 0 && !files.empty() ? 0 : 1;
}
