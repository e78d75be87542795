#include "cuda_backend.h"

#include <cuda.h>   // the driver's types and constants only: its functions come through the runtime
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../checked_size.h"
#include "../errors.h"
#include "../input_error.h"
#include "architectures.h"

namespace sdm_p1 {
namespace cuda {

namespace {

void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess) {
        fail(SDM_P1_ERROR_CUDA, call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    }
}

int device_alloc(void*, void** ptr, size_t bytes, void*) {
    return cudaMalloc(ptr, bytes) == cudaSuccess ? 0 : 1;
}

void device_free(void*, void* ptr, size_t, void*) { cudaFree(ptr); }

const char* memory_kind(cudaMemoryType t) {
    switch (t) {
        case cudaMemoryTypeHost: return "page-locked host memory";
        case cudaMemoryTypeDevice: return "device memory";
        case cudaMemoryTypeManaged: return "managed memory";
        default: return "host memory";
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
using PointerAttributes = CUresult (*)(unsigned count, CUpointer_attribute* attributes, void** data,
                                       CUdeviceptr ptr);

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
    s.group_counts = o.has(SDM_P1_DET_TILES) || o.has(SDM_P1_DET_DC_GIDX);
    const bool records = o.has(SDM_P1_DET_KREC) || o.has(SDM_P1_DET_QREC) || o.has(SDM_P1_DET_QREC8);
    // The row pass finds each entry's exponentials again; where the slots are fewer than the
    // entries (long groups: most logs are not an entry's own gate) that costs more than the
    // scattered stores it saves (measured: S4 3.83 -> 4.06 ms with every field, S1 2.77 -> 2.22).
    s.sorted_rows = (records || o.has(SDM_P1_DET_KSPA)) && o.num_keys >= o.C * (o.W + o.R);
    s.slots = records && s.sorted_rows;
    // The usual plans (the spec's default fields or fewer) get a kernel without the other
    // fields' code.
    s.shipped_fields = !records && !o.has(SDM_P1_DET_KSPA) && !s.group_counts;
    return s;
}

}  // namespace

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
        fail(SDM_P1_ERROR_BACKEND_UNAVAILABLE, "sdm_p1_plan_create: the CUDA backend has no device to run on (", why, ")");
    }
    int device = requested;
    if (device == SDM_P1_UNSET) check(cudaGetDevice(&device), "cudaGetDevice");
    if (device < 0 || device >= count) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_desc.device = ", requested, ": this machine has ",
             count, " CUDA device(s)");
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

Prepared prepare(const Options& o, size_t output_bytes) {
    Prepared p;
    const int e = configure(kernel_shape(o), o.device, output_bytes, &p.config);
    check(static_cast<cudaError_t>(e), "configuring the Phase 1 kernel");
    // Sized with the same checks as the outputs: a workspace past kMaxBytes refuses the plan.
    const char* what = "the CUDA workspace";
    p.status_offset = 0;
    p.value_offset = checked_align_up(sizeof(DeviceStatus), 256, what);
    const size_t values = checked_align_up(checked_mul(static_cast<size_t>(o.N), sizeof(uint64_t), what), 256, what);
    p.wide_offset = checked_add(p.value_offset, values, what);
    p.general_offset = checked_add(p.wide_offset, values, what);
    p.scratch_offset = checked_add(p.general_offset, values, what);
    const size_t scratch = checked_mul(static_cast<size_t>(p.config.grid), p.config.scratch_per_block, what);
    p.workspace_bytes = checked_add(p.scratch_offset, scratch, what);
    return p;
}

void log_plan(const Options& o, const Prepared& p) {
    const char* const env = std::getenv("SDMP1_LOG");
    if (env == nullptr || std::strcmp(env, "0") == 0) return;
    const LaunchConfig& c = p.config;
    const LeanLayout& l = c.lean;
    std::fprintf(stderr, "libsdmp1: plan N=%lld C=%d W=%d R=%d keys=%lld: kernel %s", static_cast<long long>(o.N),
                 o.C, o.W, o.R, static_cast<long long>(o.num_keys), kernel_name(c));
    if (l.threads != 0) {
        std::fprintf(stderr, " (%d blocks of %d threads, %d an SM, %u B shared, %u grouped entries a chunk)",
                     l.grid, l.threads, l.blocks_per_sm, l.smem_bytes, l.max_grouped);
    }
    std::fprintf(stderr, ", general (%d blocks of %d threads, %zu B shared)\n", c.grid, c.threads, c.smem_bytes);
}

sdm_p1_allocator default_allocator() { return sdm_p1_allocator{nullptr, device_alloc, device_free}; }

void require_device_pointer(const void* p, int device, const char* kind, const char* name) {
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: ", kind, name, " is not memory CUDA knows (",
             cudaGetErrorString(e), "); a CUDA plan needs device memory of device ", device);
    }
    const bool on_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    if (!on_device || attr.device != device) {
        fail(SDM_P1_ERROR_INVALID_ARGUMENT, "sdm_p1_execute: ", kind, name, " is ", memory_kind(attr.type),
             on_device ? " of device " : "", on_device ? std::to_string(attr.device) : std::string(),
             "; a CUDA plan needs device memory of device ", device);
    }
}

void DevicePointerCheck::require(const void* p, const char* kind, const char* name) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(p);
    for (int i = 0; i < count_; ++i) {
        if (address >= ranges_[i].begin && address < ranges_[i].end) return;
    }
    uintptr_t begin = 0, end = 0;
    if (driver_device_memory(address, device_, &begin, &end)) {
        if (count_ < 8) ranges_[count_++] = Range{begin, end};
        return;
    }
    require_device_pointer(p, device_, kind, name);
    const AddressRange range = address_range_function();
    unsigned long long base = 0;
    size_t size = 0;
    if (count_ < 8 && range != nullptr && range(&base, &size, address) == 0 && size > 0) {
        ranges_[count_++] = Range{static_cast<uintptr_t>(base), static_cast<uintptr_t>(base + size)};
    }
}

void execute(const Options& o, const Prepared& p, const sdm_p1_inputs& in, const OutputBuffers& out,
             void* workspace, void* stream) {
    char* ws = static_cast<char*>(workspace);
    const int e = launch(kernel_shape(o), p.config, in.k_idx, in.q_idx, in.k_val, in.q_val, in.g,
                         out.kspa ? in.beta : nullptr, in.stream_lengths,
                         in.stream_lengths_dtype == SDM_P1_DTYPE_INT64, out, ws + p.scratch_offset,
                         reinterpret_cast<DeviceStatus*>(ws + p.status_offset),
                         reinterpret_cast<uint64_t*>(ws + p.value_offset),
                         reinterpret_cast<uint64_t*>(ws + p.wide_offset),
                         reinterpret_cast<uint64_t*>(ws + p.general_offset), stream);
    check(static_cast<cudaError_t>(e), "launching the Phase 1 kernel");
}

void check_status(const Options& o, const Prepared& p, void* workspace) {
    char* ws = static_cast<char*>(workspace);
    DeviceStatus status{};
    check(cudaMemcpy(&status, ws + p.status_offset, sizeof status, cudaMemcpyDeviceToHost),
          "cudaMemcpy (reading the data check)");
    if (status.bad_stream != ~0ull) {
        // The length error comes first, as on the CPU, which checks lengths before any chunk.
        const int64_t stream = static_cast<int64_t>(status.bad_stream);
        uint64_t length = 0;
        check(cudaMemcpy(&length, ws + p.value_offset + static_cast<size_t>(stream) * sizeof(uint64_t),
                         sizeof length, cudaMemcpyDeviceToHost),
              "cudaMemcpy (reading the data check)");
        report_length_error(o, stream, static_cast<int64_t>(length));
    }
    if (status.key == ~0ull) return;
    const int64_t c = static_cast<int64_t>(status.key >> kStatusCodeBits);
    const uint32_t code = static_cast<uint32_t>(status.key & ((1u << kStatusCodeBits) - 1u));
    uint64_t bits = 0;
    check(cudaMemcpy(&bits, ws + p.value_offset + static_cast<size_t>(c) * sizeof(uint64_t), sizeof bits,
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
    report_input_error(o, c, err);
}

}  // namespace cuda
}  // namespace sdm_p1
