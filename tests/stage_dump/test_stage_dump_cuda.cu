// The CUDA half of the stage test: a test kernel made of the general kernel's own stage
// functions (kernels/common/ and kernels/general/ stage_*.cuh, in the order of phase1_kernel) runs one chunk a launch and,
// after each stage, copies the chunk's arrays to global memory (tests/stage_dump/stage_dump.h); the host
// compares them with the CPU stages' arrays for the same chunk (tests/stage_dump/stage_dump.cpp), a line
// per stage, stopping at the first difference with its stage, array and index. Each case runs
// twice: with the arrays in shared memory where they fit, and with every array in global
// scratch. Then the chunks' outputs must be the CPU's, byte for byte. One instance of the
// stages: 512 threads, 16-bit counts, generic addressing, the rows in sorted order with the
// slots kept, the match-ranked sort. Exits 77 (a skip for meson) where no GPU is present.
#include <cuda_runtime.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../kernels/common/stage_decode.cuh"
#include "../kernels/common/stage_load.cuh"
#include "../kernels/general/stage_pairs.cuh"
#include "../kernels/general/stage_records.cuh"
#include "../kernels/general/stage_scans.cuh"
#include "../kernels/common/stage_sort.cuh"
#include "../src/cuda/cuda_backend.h"
#include "stage_dump.h"

namespace {

using namespace sdm_p1;
using namespace sdm_p1::cuda;
using namespace stage_dump;

constexpr int kThreads = kMaxThreads;
using Count = uint16_t;   // every case has n < 2^16

// The scans' and pair sums' static temporaries (phase1_kernel's).
union ScanTemp {
    ForwardScanTemp forward;
    BlockScanTemp<BackwardItem> backward;
    BlockScanTemp<uint32_t> pairs;
};

// Where a launch leaves its chunk's dump, and two words for the host: the log form's shift
// and the load stage's error code.
struct DumpOut {
    uint64_t* words;
    DumpLayout l;
    int64_t* info;
};

__device__ uint64_t bits(float f) { return __float_as_uint(f); }
__device__ uint64_t bits(double x) { return static_cast<uint64_t>(__double_as_longlong(x)); }

// Array a of the dump, element i = get(i).
template <typename Get>
__device__ void put(const DumpOut& d, int a, Get get) {
    for (uint64_t i = threadIdx.x; i < d.l.count[a]; i += blockDim.x) {
        d.words[d.l.offset[a] + i] = static_cast<uint64_t>(get(static_cast<uint32_t>(i)));
    }
}

template <typename Get>
__device__ void put_fix(const DumpOut& d, int a, Get get) {
    for (uint64_t i = threadIdx.x; i < d.l.count[a]; i += blockDim.x) {
        const Fix f = get(static_cast<uint32_t>(i));
        d.words[d.l.offset[a] + 2 * i] = f.lo;
        d.words[d.l.offset[a] + 2 * i + 1] = f.hi;
    }
}

// Chunk c by phase1_kernel's stages (one block), its arrays dumped after each.
__global__ void __launch_bounds__(kThreads, 1)
    stage_dump_kernel(const __grid_constant__ KernelArgs a, const int64_t c, const DumpOut d) {
    extern __shared__ __align__(16) char smem[];
    __shared__ ChunkShared sh;
    __shared__ ScanTemp scan_temp;
    const KernelShape& s = a.s;
    char* const stage = smem + a.layout.stage;
    const size_t stage_room = a.layout.stage_room;
    ChunkArrays<Count> arr = bind_arrays<Count, false>(smem, a.scratch, a.layout);
    auto& sort_temp = *reinterpret_cast<SortTemp<kThreads>*>(stage);
    const bool stage_keys = !(a.layout.log_low.in_smem && a.layout.log_high.in_smem) &&
                            stage_room >= 8 * sizeof(uint64_t) * a.layout.stride;
    const InterleavedKeys staged{stage_keys ? reinterpret_cast<uint64_t*>(stage) : nullptr, a.layout.stride};
    const Chunk k{c, valid_tokens(a, c), s.C * (s.W + s.R), (c % s.P) * s.stream_offset};
    if (threadIdx.x == 0) {
        sh.error_code = kNoError;
        sh.repeats = 0;
        sh.valid_groups = 0;
        sh.walkers = 0;
        sh.gate_lowest_bit = 128;
        sh.gate_bits = 0;
    }
    __syncthreads();

    load_and_check(a, k, arr, sh);
    __syncthreads();
    arr.log.shift = log_shift(sh.gate_lowest_bit, sh.gate_bits, s.C);
    put(d, kLoadKeys, [&](uint32_t e) { return arr.keys[e]; });
    put(d, kLoadValue, [&](uint32_t e) { return bits(arr.value[e]); });
    put_fix(d, kLoadGate, [&](uint32_t x) { return arr.gate[x]; });
    put(d, kLoadGateExp, [&](uint32_t t) { return bits(arr.gate_exp[t]); });
    put(d, kLoadWalkMask, [&](uint32_t x) { return arr.walk_mask[x]; });
    if (threadIdx.x == 0) {
        d.info[0] = arr.log.shift;
        d.info[1] = sh.error_code;
    }
    __syncthreads();

    const InterleavedKeys sorted = sort_entries<kThreads, true>(a, k, arr.keys, arr.keys_alt, staged, sort_temp);
    put(d, kSortKeys, [&](uint32_t r) { return sorted[r]; });
    __syncthreads();

    decode<true>(a, k, sorted, arr);
    __syncthreads();
    const uint32_t* const slots = slot_array(a);
    put(d, kDecodePayload, [&](uint32_t r) { return arr.payload[r]; });
    put(d, kDecodePosition, [&](uint32_t e) { return arr.position[e]; });
    put(d, kDecodeSlot, [&](uint32_t r) { return slots[r]; });
    __syncthreads();

    scan_forward(a, k, arr, sh, scan_temp.forward);
    __syncthreads();
    put_fix(d, kForwardLog, [&](uint32_t r) { return arr.log.get(r); });
    put(d, kForwardBefore, [&](uint32_t r) { return arr.before[r]; });
    put(d, kForwardWrites, [&](uint32_t r) { return arr.writes[r]; });
    put(d, kForwardCounts, [&](uint32_t i) { return i == 0 ? sh.repeats : sh.walkers; });
    __syncthreads();

    scan_backward(a, k, arr, sh, scan_temp.backward);
    __syncthreads();
    put(d, kBackwardEnd, [&](uint32_t r) { return arr.end[r]; });
    put(d, kBackwardFirsts, [&](uint32_t r) { return arr.firsts[r]; });
    put(d, kBackwardPayload, [&](uint32_t r) { return arr.payload[r]; });
    put(d, kBackwardCounts, [&](uint32_t) { return sh.valid_groups; });
    __syncthreads();

    write_records<true>(a, a.out, k, arr, sh);
    __syncthreads();
    put(d, kRecordsWalkMask, [&](uint32_t x) { return arr.walk_mask[x]; });
    __syncthreads();

    // The write row as stage "pair sums" lists it (its warp path does first; the one-batch
    // path walks the groups instead).
    list_writes(a, k, arr, sh, scan_temp.pairs);
    put(d, kPairsWriteRow, [&](uint32_t j) { return arr.write_row[j]; });
    __syncthreads();
    pair_sums<kThreads, true, false>(a, k, arr, sh, stage, stage_room, scan_temp.pairs);
}

#define CHECK_CUDA(call)                                                                       \
    do {                                                                                       \
        const cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                               \
            std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

template <typename T>
T* device_copy(const std::vector<T>& v) {
    T* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, v.size() * sizeof(T) + 16));
    CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

// Every field a plan computes, on the device, filled as host_outputs fills the CPU's.
struct DeviceOutputs {
    std::vector<void*> fields;
    OutputBuffers buffers;
    DeviceOutputs(const Options& o, unsigned char fill) : fields(SDM_P1_FIELD_COUNT, nullptr) {
        const OutputViews views = describe_outputs(o);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!views[static_cast<size_t>(f)].requested) continue;
            CHECK_CUDA(cudaMalloc(&fields[static_cast<size_t>(f)], views[static_cast<size_t>(f)].bytes));
            CHECK_CUDA(cudaMemset(fields[static_cast<size_t>(f)], fill, views[static_cast<size_t>(f)].bytes));
        }
        buffers = output_buffers(fields.data());
    }
    ~DeviceOutputs() {
        for (void* p : fields) cudaFree(p);
    }
};

// The kernel's shape for case c: every field, group counts, the slots kept.
KernelShape shape_of(const Options& o) {
    KernelShape s = kernel_shape(o);
    s.group_counts = true;
    s.slots = true;
    s.sorted_rows = true;
    s.shipped_fields = false;
    return s;
}

// Case c on the device with `smem_limit` bytes of shared memory for the arrays, chunk by
// chunk, each chunk's dump against the CPU's; then the outputs. False at the first difference.
bool run_layout(const Case& c, const char* placement, size_t smem_limit, const std::vector<std::vector<uint64_t>>& cpu,
                const HostOutputs& cpu_out) {
    const Options& o = c.options;
    const int n = o.n();
    const KernelShape s = shape_of(o);
    const ArrayLayout layout = array_layout(o.C, o.W, o.R, o.gate_width, s.group_counts, s.slots, sizeof(Count),
                                            sizeof(SortTemp<kThreads>), pair_temp_bytes(), smem_limit);
    CHECK_CUDA(cudaFuncSetAttribute(stage_dump_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(layout.smem_bytes)));
    DeviceOutputs out(o, 0xA5);
    KernelArgs a{};
    a.s = s;
    a.k_idx = device_copy(c.k_idx);
    a.q_idx = device_copy(c.q_idx);
    a.k_val = device_copy(c.k_val);
    a.q_val = device_copy(c.q_val);
    a.g = device_copy(c.g);
    a.beta = device_copy(c.beta);
    a.stream_lengths = nullptr;
    a.out = out.buffers;
    a.scratch_per_block = (layout.global_bytes + 255) / 256 * 256;
    CHECK_CUDA(cudaMalloc(&a.scratch, a.scratch_per_block + 256));
    a.layout = layout;
    a.entry_bits = sort_entry_bits(n);
    a.key_bits = sort_key_bits(n, o.num_keys);
    a.div =
        Dividers{make_divider(static_cast<uint32_t>(o.W)),          make_divider(static_cast<uint32_t>(o.R)),
                 make_divider(static_cast<uint32_t>(o.W + o.R)),    make_divider(static_cast<uint32_t>(o.C)),
                 make_divider(static_cast<uint32_t>(o.gate_width)), make_divider(static_cast<uint32_t>(o.rec_tile))};
    CHECK_CUDA(cudaMalloc(&a.status, sizeof(DeviceStatus)));
    CHECK_CUDA(cudaMemset(a.status, 0xFF, sizeof(DeviceStatus)));
    CHECK_CUDA(cudaMalloc(&a.chunk_value, static_cast<size_t>(o.N) * sizeof(uint64_t)));
    CHECK_CUDA(cudaMalloc(&a.wide_chunks, static_cast<size_t>(o.N) * sizeof(unsigned long long)));
    DumpOut d{};
    d.l = dump_layout(o);
    CHECK_CUDA(cudaMalloc(&d.words, d.l.total * sizeof(uint64_t)));
    CHECK_CUDA(cudaMalloc(&d.info, 2 * sizeof(int64_t)));
    bool ok = true;
    for (int64_t chunk = 0; chunk < o.N && ok; ++chunk) {
        CHECK_CUDA(cudaMemset(d.words, 0, d.l.total * sizeof(uint64_t)));
        stage_dump_kernel<<<1, kThreads, layout.smem_bytes>>>(a, chunk, d);
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint64_t> got(d.l.total);
        int64_t info[2];
        CHECK_CUDA(cudaMemcpy(got.data(), d.words, d.l.total * sizeof(uint64_t), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(info, d.info, sizeof info, cudaMemcpyDeviceToHost));
        std::printf(" %s, chunk %" PRId64 ": log form %s (shift %" PRId64 ")\n", placement, chunk,
                    info[0] >= 0 ? "compact" : "wide", info[0]);
        if (static_cast<uint32_t>(info[1]) != kNoError) {
            std::printf("  load and check: error code %" PRId64 " in a case of valid inputs\n", info[1]);
            ok = false;
            break;
        }
        ok = compare_dumps(d.l, cpu[static_cast<size_t>(chunk)], got, "CPU", "CUDA");
    }
    const OutputViews views = describe_outputs(o);
    int fields = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT && ok; ++f) {
        if (f == SDM_P1_FIELD_REPEATS || !views[static_cast<size_t>(f)].requested) continue;
        std::vector<unsigned char> got(views[static_cast<size_t>(f)].bytes);
        CHECK_CUDA(cudaMemcpy(got.data(), out.fields[static_cast<size_t>(f)], got.size(), cudaMemcpyDeviceToHost));
        const std::vector<unsigned char>& want = cpu_out.fields[static_cast<size_t>(f)];
        for (size_t i = 0; i < got.size(); ++i) {
            if (got[i] == want[i]) continue;
            std::printf("  outputs: %s differs at byte %zu: CPU 0x%02x, CUDA 0x%02x\n",
                        views[static_cast<size_t>(f)].name, i, want[i], got[i]);
            ok = false;
            break;
        }
        ++fields;
    }
    if (ok) std::printf(" %s: outputs: %d fields equal to the CPU's\n", placement, fields);
    for (const void* p :
         {a.k_idx, a.q_idx, a.k_val, a.q_val, static_cast<const void*>(a.g), static_cast<const void*>(a.beta)}) {
        cudaFree(const_cast<void*>(p));
    }
    cudaFree(a.scratch);
    cudaFree(a.status);
    cudaFree(a.chunk_value);
    cudaFree(a.wide_chunks);
    cudaFree(d.words);
    cudaFree(d.info);
    return ok;
}

}   // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    // The most dynamic shared memory the test kernel may have (raise_smem_limit's rule).
    int optin = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    cudaFuncAttributes attr{};
    CHECK_CUDA(cudaFuncGetAttributes(&attr, stage_dump_kernel));
    const size_t on_chip = static_cast<size_t>(optin) - attr.sharedSizeBytes;
    int failed = 0;
    for (const Case& c : make_cases()) {
        const Options& o = c.options;
        std::printf("case %s: N=%" PRId64 " C=%d W=%d R=%d num_keys=%" PRId64 " gate_width=%d\n", c.name.c_str(), o.N,
                    o.C, o.W, o.R, o.num_keys, o.gate_width);
        HostOutputs cpu_out = host_outputs(o, 0xA5);
        std::vector<std::vector<uint64_t>> cpu(static_cast<size_t>(o.N));
        for (int64_t chunk = 0; chunk < o.N; ++chunk)
            run_cpu_stages(c, cpu_out.buffers, chunk, &cpu[static_cast<size_t>(chunk)]);
        const bool ok = run_layout(c, "arrays on chip where they fit", on_chip, cpu, cpu_out) &&
                        run_layout(c, "arrays in global scratch", 0, cpu, cpu_out);
        std::printf("%s %s\n", ok ? "ok  " : "FAIL", c.name.c_str());
        if (!ok) {
            ++failed;
            break;   // the first difference is the one to look at
        }
    }
    std::printf("%s\n", failed == 0 ? "every stage of every case as the CPU's" : "FAILED");
    return failed == 0 ? 0 : 1;
}
