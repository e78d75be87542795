#include "cuda_backend.h"

#include <cuda.h>   // the driver's types and constants only: its functions come through the runtime
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../canon/field_members.h"
#include "../../canon/field_sets.h"
#include "../checked_size.h"
#include "../errors.h"
#include "../input_error.h"
#include "../payload_error.h"
#include "architectures.h"

namespace sdm_p1 {
namespace cuda {

namespace {

void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess) {
        fail(SDM_P1_ERROR_CUDA, call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    }
}

int device_alloc(void*, void** ptr, size_t bytes, void*) { return cudaMalloc(ptr, bytes) == cudaSuccess ? 0 : 1; }

void device_free(void*, void* ptr, size_t, void*) { cudaFree(ptr); }

const char* memory_kind(cudaMemoryType t) {
    switch (t) {
        case cudaMemoryTypeHost:
            return "page-locked host memory";
        case cudaMemoryTypeDevice:
            return "device memory";
        case cudaMemoryTypeManaged:
            return "managed memory";
        default:
            return "host memory";
    }
}

// A function of the driver, through the runtime (no link to libcuda); null where the driver
// lacks it.
void* driver_function(const char* name) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return f;
}

// cuMemGetAddressRange: the base and size of the allocation holding a device pointer. Looked
// up once; null where unavailable.
using AddressRange = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);

AddressRange address_range_function() {
    static const AddressRange function = reinterpret_cast<AddressRange>(driver_function("cuMemGetAddressRange"));
    return function;
}

// cuPointerGetAttributes: a pointer's memory type, device and allocation range in one driver
// query, where cudaPointerGetAttributes and cuMemGetAddressRange take two. Looked up once;
// null where unavailable.
using PointerAttributes = CUresult (*)(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr);

PointerAttributes pointer_attributes_function() {
    static const PointerAttributes function =
        reinterpret_cast<PointerAttributes>(driver_function("cuPointerGetAttributes"));
    return function;
}

// True where the driver says `address` is device memory of `device` (its allocation's range in
// *begin, *end); false where it says anything else or cannot say, and the runtime's query then
// decides and words the error. Only an acceptance is taken from here, so the messages stay
// those of require_device_pointer.
bool driver_device_memory(uintptr_t address, int device, uintptr_t* begin, uintptr_t* end) {
    const PointerAttributes query = pointer_attributes_function();
    if (query == nullptr) return false;
    unsigned type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void* data[] = {&type, &ordinal, &start, &size};
    if (query(4, attributes, data, static_cast<CUdeviceptr>(address)) != CUDA_SUCCESS) return false;
    if (type != CU_MEMORYTYPE_DEVICE || ordinal != device || size == 0) return false;
    if (address < start || address - start >= size) return false;
    *begin = static_cast<uintptr_t>(start);
    *end = static_cast<uintptr_t>(start + size);
    return true;
}

// The device's payload problems are PayloadError's (kernels/backward/backward_args.h).
static_assert(kPayloadNoEntry == PayloadError::kNoEntry && kPayloadTwice == PayloadError::kTwice &&
                  kPayloadPaddingBit == PayloadError::kPaddingBit &&
                  kPayloadPaddingFirst == PayloadError::kPaddingFirst && kPayloadNoHead == PayloadError::kNoHead &&
                  kPayloadOrder == PayloadError::kOrder && kPayloadGroupHead == PayloadError::kGroupHead,
              "the payload problems agree");

// The number environment variable `name` is set to, where it is set to one, in place of
// *value (Backend::prepare): SDMP1_SPREAD_TERMS, the pair terms from which a chunk's pair sums
// go to the spread kernel; SDMP1_SPREAD_SLOTS, the most spread slots a plan may have.
void spread_setting(const char* name, uint64_t* value) {
    const char* const env = std::getenv(name);
    if (env == nullptr || *env == '\0') return;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*end == '\0') *value = v;
}

// Whether SDMP1_LOG is set to anything but "0" (the plan lines below).
bool log_wanted() {
    const char* const env = std::getenv("SDMP1_LOG");
    return env != nullptr && std::strcmp(env, "0") != 0;
}

// SDMP1_LOG's lines (Backend::prepare): the policy's choice, stage by stage, and why.
void log_plan(const PlanRequest& plan, const KernelPolicy& policy) {
    if (!log_wanted()) return;
    std::fputs(policy_log(plan, policy).c_str(), stderr);
}

}   // namespace

KernelShape kernel_shape(const Options& o) {
    KernelShape s{};
    s.N = o.N;
    s.C = o.C;
    s.W = o.W;
    s.R = o.R;
    s.P = o.P;
    s.stream_offset = o.stream_offset;
    s.num_keys = o.num_keys;
    s.valid_last = o.valid_last;
    s.gate_width = o.gate_width;
    s.rec_tile = o.rec_tile;
    s.idx64 = o.idx64;
    s.bf16 = o.bf16;
    // group_counts, slots, sorted_rows and shipped_fields: the policy's (kernels/policy/).
    return s;
}

int device_count(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();   // not sticky: leave no error behind for the caller's next check
        if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
        return 0;
    }
    if (count == 0 && why) *why = "no CUDA device";
    return count;
}

DeviceGuard::DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) {
        check(cudaSetDevice(device), "cudaSetDevice");
        changed_ = true;
    }
}

DeviceGuard::~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
}

int resolve_device(int requested) {
    std::string why;
    const int count = device_count(&why);
    if (count == 0) {
        fail(SDM_P1_ERROR_BACKEND_UNAVAILABLE, "sdm_p1_plan_create: the CUDA backend has no device to run on (", why,
             ")");
    }
    int device = requested;
    if (device == SDM_P1_UNSET) check(cudaGetDevice(&device), "cudaGetDevice");
    if (device < 0 || device >= count) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.device = ", requested, ": this machine has ", count,
             " CUDA device(s)");
    }
    // A device none of the kernels runs on is refused here, not by a launch error at execute.
    ComputeCapability cc{};
    check(cudaDeviceGetAttribute(&cc.major, cudaDevAttrComputeCapabilityMajor, device),
          "cudaDeviceGetAttribute (compute capability)");
    check(cudaDeviceGetAttribute(&cc.minor, cudaDevAttrComputeCapabilityMinor, device),
          "cudaDeviceGetAttribute (compute capability)");
    if (!runs_on(built_architectures(), cc)) {
        throw Error(SDM_P1_ERROR_BACKEND_UNAVAILABLE, no_kernels_message(device, cc, built_architectures()));
    }
    return device;
}

void Backend::prepare(const Options& o, size_t output_bytes) {
    const DeviceGuard guard(device_);
    PlanRequest plan{};
    plan.shape = kernel_shape(o);
    plan.det_fields = o.det_fields;
    plan.output_bytes = output_bytes;
    plan.backward = o.backward;
    plan.spread_min_terms = kSpreadMinTerms;
    spread_setting("SDMP1_SPREAD_TERMS", &plan.spread_min_terms);
    uint64_t max_slots = INT64_MAX;
    spread_setting("SDMP1_SPREAD_SLOTS", &max_slots);
    plan.spread_max_slots = static_cast<int64_t>(std::min<uint64_t>(max_slots, INT64_MAX));
    bool in_backward = false;
    const int e = plan_kernels(plan, device_, &policy_, &in_backward);
    check(static_cast<cudaError_t>(e),
          in_backward ? "configuring the Phase 1 backward kernel" : "configuring the Phase 1 kernel");
    // Sized with the same checks as the outputs: a workspace past kMaxBytes refuses the plan.
    if (policy_.workspace.too_large) too_large("the CUDA workspace");
    args_ = plan_arguments(policy_);
    log_plan(plan, policy_);
}

sdm_p1_allocator Backend::default_allocator() const { return sdm_p1_allocator{nullptr, device_alloc, device_free}; }

Block Backend::allocate(const sdm_p1_allocator& allocator, size_t bytes) const {
    const DeviceGuard guard(device_);
    return Block(allocator, bytes, alignment());
}

void Backend::release(Block& block) const noexcept {
    if (block.data() == nullptr) return;
    try {
        const DeviceGuard guard(device_);
        block = Block();
    } catch (...) {
        // The device could not be made current: free on the current one (the default
        // allocator's cudaFree accepts any device's pointer).
        block = Block();
    }
}

void require_device_pointer(const void* p, int device, const char* kind, const char* name, const char* who) {
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", kind, name, " is not memory CUDA knows (", cudaGetErrorString(e),
             "); a CUDA plan needs device memory of device ", device);
    }
    const bool on_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    if (!on_device || attr.device != device) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, who, ": ", kind, name, " is ", memory_kind(attr.type),
             on_device ? " of device " : "", on_device ? std::to_string(attr.device) : std::string(),
             "; a CUDA plan needs device memory of device ", device);
    }
}

bool DevicePointerCheck::known(const void* p) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(p);
    for (int i = 0; i < count_; ++i) {
        if (address >= ranges_[i].begin && address < ranges_[i].end) return true;
    }
    uintptr_t begin = 0, end = 0;
    if (!driver_device_memory(address, device_, &begin, &end)) return false;
    if (count_ < 8) ranges_[count_++] = Range{begin, end};
    return true;
}

void DevicePointerCheck::admit(const void* p, const char* kind, const char* name) {
    require_device_pointer(p, device_, kind, name, who_);
    const AddressRange range = address_range_function();
    unsigned long long base = 0;
    size_t size = 0;
    if (count_ < 8 && range != nullptr && range(&base, &size, reinterpret_cast<uintptr_t>(p)) == 0 && size > 0) {
        ranges_[count_++] = Range{static_cast<uintptr_t>(base), static_cast<uintptr_t>(base + size)};
    }
}

void Backend::execute(const Options&, const InputRecord& in, void* workspace, void* stream) {
    const DeviceGuard guard(device_);   // current for the checks' driver queries too
    DevicePointerCheck memory(device_);
    memory.require(in.k_idx, "inputs->", "k_idx");
    memory.require(in.q_idx, "inputs->", "q_idx");
    memory.require(in.k_val, "inputs->", "k_val");
    memory.require(in.q_val, "inputs->", "q_val");
    memory.require(in.g, "inputs->", "g");
    if (in.beta != nullptr) memory.require(in.beta, "inputs->", "beta");
    if (in.stream_lengths != nullptr) memory.require(in.stream_lengths, "inputs->", "stream_lengths");
    for (const InputRecord::CallerOutput& given : in.caller_outputs) {
        if (given.data != nullptr) memory.require(given.data, "the buffer of output ", given.name);
    }
    char* ws = static_cast<char*>(workspace);
    KernelArgs a = args_;
    a.k_idx = in.k_idx;
    a.q_idx = in.q_idx;
    a.k_val = in.k_val;
    a.q_val = in.q_val;
    a.g = in.g;
    a.beta = in.beta;
    a.stream_lengths = in.stream_lengths;
    a.lengths64 = in.lengths64;
    a.out = in.out;
    const ForwardKernels& f = policy_.forward;
    const WorkspaceLayout& w = policy_.workspace;
    a.scratch = f.scratch_per_block != 0 ? ws + w.scratch : nullptr;
    a.status = reinterpret_cast<DeviceStatus*>(ws + w.status);
    a.chunk_value = reinterpret_cast<uint64_t*>(ws + w.chunk_value);
    a.wide_chunks = reinterpret_cast<unsigned long long*>(ws + w.wide_chunks);
    // Null: the general kernel computes every chunk (no lean kernel leaves it a list).
    a.general_chunks = f.lean.launched() ? reinterpret_cast<unsigned long long*>(ws + w.general_chunks) : nullptr;
    a.spread_slots = f.spread.launched() ? ws + w.spread_slots : nullptr;
    check(static_cast<cudaError_t>(graphs_.forward(policy_, a, stream)), "launching the Phase 1 kernel");
}

void Backend::execute_backward(const Options& o, const BackwardRecord& b, void* workspace, void* stream) {
    const DeviceGuard guard(device_);
    DevicePointerCheck memory(device_, "sdm_p1_execute_backward");
    const InputRecord& in = b.in;
    if (in.k_idx != nullptr) {   // needed without a payload; checked against it with one
        memory.require(in.k_idx, "inputs->", "k_idx");
        memory.require(in.q_idx, "inputs->", "q_idx");
    }
    memory.require(in.k_val, "inputs->", "k_val");
    memory.require(in.q_val, "inputs->", "q_val");
    memory.require(in.g, "inputs->", "g");
    if (b.up.kspa != nullptr) memory.require(in.beta, "inputs->", "beta");
    if (in.stream_lengths != nullptr) memory.require(in.stream_lengths, "inputs->", "stream_lengths");
    if (b.payload != nullptr) memory.require(b.payload, "", "payload");
    // The upstream gradients given (one member a differentiable field, canon/field_members.h),
    // named as backward_plan.cpp names them; the name is made only for memory not yet known.
    for_each_upstream(b.up, [&](int f, const void* p) {
        if (p != nullptr && !memory.known(p))
            memory.admit(p, "", upstream_label(f, describe_outputs(o)[f].name).c_str());
    });
    const InputGradBuffers& g = b.grads;
    if (g.k_val != nullptr) memory.require(g.k_val, "out->", "k_val");
    if (g.q_val != nullptr) memory.require(g.q_val, "out->", "q_val");
    if (g.g != nullptr) memory.require(g.g, "out->", "g");
    if (g.beta != nullptr) memory.require(g.beta, "out->", "beta");
    char* ws = static_cast<char*>(workspace);
    const BackwardKernels& k = policy_.backward_kernels;
    const WorkspaceLayout& w = policy_.workspace;
    BackwardArgs a{};
    a.k = args_;
    a.k.k_idx = in.k_idx;
    a.k.q_idx = in.q_idx;
    a.k.k_val = in.k_val;
    a.k.q_val = in.q_val;
    a.k.g = in.g;
    a.k.beta = b.up.kspa != nullptr ? in.beta : nullptr;
    a.k.stream_lengths = in.stream_lengths;
    a.k.lengths64 = in.lengths64;
    a.k.status = reinterpret_cast<DeviceStatus*>(ws + w.status);
    a.k.chunk_value = reinterpret_cast<uint64_t*>(ws + w.chunk_value);
    a.payload = b.payload;
    a.row = o.row();
    a.grad_bf16 = o.grad_bf16;
    a.compute = g.k_val != nullptr || g.q_val != nullptr || g.g != nullptr || g.beta != nullptr;
    a.up = b.up;
    a.grads = g;
    a.slices = ws + w.scratch;
    a.layout = k.layout;
    a.payload_value = reinterpret_cast<uint64_t*>(ws + w.payload_value);
    a.lean = k.lean_layout;
    a.lean_slices = k.lean_layout.slice_bytes != 0 ? ws + w.lean_slices : nullptr;
    // The chunks the lean backward leaves to the general one (the forward's list, unused now).
    a.k.general_chunks = k.lean.launched() ? reinterpret_cast<unsigned long long*>(ws + w.general_chunks) : nullptr;
    check(static_cast<cudaError_t>(graphs_.backward(policy_, a, stream)), "launching the Phase 1 backward kernel");
}

void Backend::check_status(const Options& o, void* workspace) const {
    char* ws = static_cast<char*>(workspace);
    DeviceStatus status{};
    check(cudaMemcpy(&status, ws + policy_.workspace.status, sizeof status, cudaMemcpyDeviceToHost),
          "cudaMemcpy (reading the data check)");
    const char* const who = status.backward == 0u ? "sdm_p1_execute_backward" : "sdm_p1_execute";
    if (status.bad_stream != ~0ull) {
        // The length error comes first, as on the CPU, which checks lengths before any chunk.
        const int64_t stream = static_cast<int64_t>(status.bad_stream);
        uint64_t length = 0;
        check(cudaMemcpy(&length, ws + policy_.workspace.chunk_value + static_cast<size_t>(stream) * sizeof(uint64_t),
                         sizeof length, cudaMemcpyDeviceToHost),
              "cudaMemcpy (reading the data check)");
        report_length_error(o, stream, static_cast<int64_t>(length), who);
    }
    // A backward's bad payload word: first where its chunk is the first bad one (the CPU checks
    // a chunk's payload before its gates).
    const uint64_t payload_chunk = status.payload_key >> kStatusCodeBits;
    if (status.backward == 0u && status.payload_key != ~0ull &&
        (status.key == ~0ull || payload_chunk <= status.key >> kStatusCodeBits)) {
        const int64_t c = static_cast<int64_t>(payload_chunk);
        const uint32_t code = static_cast<uint32_t>(status.payload_key & ((1u << kStatusCodeBits) - 1u));
        uint64_t bits = 0;
        check(cudaMemcpy(&bits, ws + policy_.workspace.payload_value + static_cast<size_t>(c) * sizeof(uint64_t),
                         sizeof bits, cudaMemcpyDeviceToHost),
              "cudaMemcpy (reading the data check)");
        PayloadError err{};
        err.found = true;
        err.problem = static_cast<PayloadError::Problem>(code & 7u);
        err.position = static_cast<int>(code >> 3);
        err.word = static_cast<uint32_t>(bits);
        err.t_valid = static_cast<int>(bits >> 32);
        report_payload_error(o, c, err);
    }
    if (status.key == ~0ull) return;
    const int64_t c = static_cast<int64_t>(status.key >> kStatusCodeBits);
    const uint32_t code = static_cast<uint32_t>(status.key & ((1u << kStatusCodeBits) - 1u));
    uint64_t bits = 0;
    check(cudaMemcpy(&bits, ws + policy_.workspace.chunk_value + static_cast<size_t>(c) * sizeof(uint64_t), sizeof bits,
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy (reading the data check)");
    const int WR = o.W + o.R;
    const uint32_t stride = static_cast<uint32_t>(WR + o.gate_width);
    InputError err{};
    err.found = true;
    err.token = static_cast<int>(code / stride);
    const int col = static_cast<int>(code % stride);
    if (col < WR) {
        err.is_q = col >= o.W;
        err.lane = err.is_q ? col - o.W : col;
        err.id = static_cast<int64_t>(bits);
    } else {
        err.gate = true;
        err.lane = col - WR;
        uint32_t g = static_cast<uint32_t>(bits);
        memcpy(&err.gate_value, &g, sizeof g);
    }
    report_input_error(o, c, err, who);
}

}   // namespace cuda
}   // namespace sdm_p1
