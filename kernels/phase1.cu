// The CUDA backend's launch configuration and launch (launch.h), and the kernels that write
// the row fields with the entry fields (phase1_kernel.cuh).
#include <cuda_runtime.h>

#include <algorithm>

#include "general/phase1_kernel.cuh"

namespace sdm_p1 {
namespace cuda {

namespace {

// The sort's temporaries: the stage room holds them (ArrayLayout::stage).
template <int Threads>
size_t sort_bytes() {
    return sizeof(SortTemp<Threads>);
}

// Whether the chunk's counts and positions fit 16 bits (they run up to n = C * (W + R)). The
// layout and the kernel's Count type both follow this one rule.
bool narrow_counts(const KernelShape& s) { return s.C * (s.W + s.R) < 65536; }

// The layout of a chunk's arrays for blocks of `threads` (a full block per chunk, or a
// half-size one, two to an SM) with `smem_limit` bytes of shared memory a block.
ArrayLayout chunk_layout(const KernelShape& s, int threads, size_t smem_limit) {
    const int count_bytes = narrow_counts(s) ? 2 : 4;
    const size_t sort = threads == kMaxThreads ? sort_bytes<kMaxThreads>() : sort_bytes<kMaxThreads / 2>();
    return array_layout(s.C, s.W, s.R, s.gate_width, s.group_counts, s.slots, count_bytes, sort, pair_temp_bytes(),
                        smem_limit);
}

// The main kernel of launch configuration c.
KernelFn kernel_for(const LaunchConfig& c) {
    if (c.spread.capacity != 0) return spread_main_kernel(c);
    if (c.sorted_rows) return sorted_rows_kernel(c);
    return c.shipped_fields ? kernel_of<false, false, true>(c) : kernel_of<false, false>(c);
}

}   // namespace

cudaError_t raise_smem_limit(const void* kernel, int device, SmemLimits* out) {
    int optin = 0, per_sm = 0, reserved = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
    cudaFuncAttributes attr{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, kernel);
    if (e != cudaSuccess) return e;
    // Every plan on the device may then launch with any amount up to the device's limit.
    out->limit = static_cast<size_t>(optin) - attr.sharedSizeBytes;
    out->per_sm = static_cast<size_t>(per_sm);
    out->per_block_overhead = static_cast<size_t>(reserved) + attr.sharedSizeBytes;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(out->limit));
}

size_t SmemLimits::room(int blocks) const {
    const size_t share = per_sm / blocks - per_block_overhead;
    return std::min(limit, share) / 16 * 16;
}

namespace {

// The most dynamic shared memory a block of `kernel` may use with `blocks` blocks an SM,
// after setting the kernel's limit to the device's maximum.
cudaError_t smem_room_of(KernelFn kernel, int device, int blocks, size_t* room) {
    SmemLimits l{};
    const cudaError_t e = raise_smem_limit(kernel, device, &l);
    if (e == cudaSuccess) *room = l.room(blocks);
    return e;
}

// The room of smem_room_of that both kernels of configuration c (the main and the wide-log
// kernel, which share the layout) have.
cudaError_t smem_room(const LaunchConfig& c, int device, int blocks, size_t* room) {
    size_t main_room = 0, wide_room = 0;
    cudaError_t e = smem_room_of(kernel_for(c), device, blocks, &main_room);
    if (e == cudaSuccess) e = smem_room_of(wide_log_kernel(c), device, blocks, &wide_room);
    *room = std::min(main_room, wide_room);
    return e;
}

// Whether the lean kernel may load the ids 16 bytes at a time: whole vectors a token's
// lanes, aligned arrays.
bool lean_ids_vectorized(const KernelShape& s, const void* k_idx, const void* q_idx) {
    const int v = s.idx64 ? 2 : 4;
    const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0u; };
    return s.W % v == 0 && s.R % v == 0 && aligned(k_idx) && aligned(q_idx);
}

// Whether the lean kernel's entry writer may take four lanes at a time: a token's lanes in
// whole fours, and the values, gates and entry fields 16-byte aligned.
bool lean_entries_vectorized(const KernelShape& s, const void* k_val, const void* q_val, const float* g,
                             const OutputBuffers& out) {
    const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0u; };
    const void* const fields[] = {k_val,     q_val,     g,         out.log_k,   out.rex,
                                  out.cpe,   out.k_eff, out.pos_k, out.is_last, out.is_only,
                                  out.log_q, out.q_w,   out.pos_q, out.q_last,  out.q_only};
    for (const void* p : fields) {
        if (!aligned(p)) return false;   // null (a field not requested) is aligned
    }
    return s.W % 4 == 0 && s.R % 4 == 0;
}

// Launches `kernel` with configuration c after the stream's previous kernel: a programmatic
// dependent launch where the device has them (sm_90 on), whose grid is launched while the
// previous one runs and waits for it in griddepcontrol.wait (phase1_kernel), hiding the
// launch's latency; elsewhere it follows the previous kernel as any launch does.
// The grid, block and shared memory are c's unless given.
cudaError_t launch_after_previous(KernelFn kernel, const LaunchConfig& c, const KernelArgs& a, cudaStream_t st,
                                  int grid = 0, int threads = 0, size_t smem_bytes = 0) {
    cudaLaunchAttribute after_previous{};
    after_previous.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    after_previous.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch{};
    launch.gridDim = dim3(static_cast<unsigned>(grid != 0 ? grid : c.grid));
    launch.blockDim = dim3(static_cast<unsigned>(threads != 0 ? threads : c.threads));
    launch.dynamicSmemBytes = threads != 0 ? smem_bytes : c.smem_bytes;
    launch.stream = st;
    launch.attrs = &after_previous;
    launch.numAttrs = c.dependent_launch ? 1 : 0;
    return cudaLaunchKernelEx(&launch, kernel, a);
}

// The plan's part of the kernels' arguments (configure): everything but the pointers.
KernelArgs kernel_constants(const KernelShape& s, const LaunchConfig& c) {
    const int n = s.C * (s.W + s.R);
    KernelArgs a{};
    a.s = s;
    a.scratch_per_block = c.scratch_per_block;
    a.layout = chunk_layout(s, c.threads, c.smem_limit);
    // The sort keys' layout, as the CPU backend's (canon/chunk_arrays.h): padding entries
    // take the largest slot the key bits hold (stage "load"). One bit less where num_keys is a
    // power of two (S6: 32-bit keys).
    a.entry_bits = sort_entry_bits(n);
    a.key_bits = sort_key_bits(n, s.num_keys);
    a.div = Dividers{make_divider(s.W), make_divider(s.R),          make_divider(s.W + s.R),
                     make_divider(s.C), make_divider(s.gate_width), make_divider(s.rec_tile)};
    a.lean = c.lean;
    a.spread = c.spread;
    return a;
}

}   // namespace

int configure(const KernelShape& s, int device, size_t output_bytes, LaunchConfig* config, KernelArgs* args) {
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    LaunchConfig c{};
    c.narrow_counts = narrow_counts(s);
    c.sorted_rows = s.sorted_rows;
    c.shipped_fields = s.shipped_fields;
    int major = 0;
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
    c.dependent_launch = major >= 9;
    // Sets c.threads and c.smem_limit for `blocks` blocks an SM of `threads`, and per_sm;
    // *fits: the core arrays are on chip and the device holds that many such blocks.
    int per_sm = 0;
    const auto size_for = [&](int threads, int blocks, bool* fits) {
        c.threads = threads;
        cudaError_t err = smem_room(c, device, blocks, &c.smem_limit);
        const ArrayLayout l = chunk_layout(s, threads, c.smem_limit);
        if (err == cudaSuccess) {
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(c), threads, l.smem_bytes);
        }
        *fits = core_arrays_in_smem(l) && per_sm >= blocks;
        return err;
    };
    // Two half-size blocks an SM run two chunks at once, each overlapping the other's
    // barriers and memory waits (measured: S1 1.05x, S4 1.08x faster than one full block),
    // where every SM gets two chunks and both blocks keep their core arrays on chip.
    bool half = false;
    if (c.narrow_counts && s.N >= 2 * static_cast<int64_t>(sms)) {
        c.on_chip = true;
        e = size_for(kMaxThreads / 2, 2, &half);
        if (e != cudaSuccess) return e;
    }
    if (!half) {
        bool on_chip;   // the full-size block runs whether or not its arrays fit on chip
        c.on_chip = false;
        e = size_for(kMaxThreads, 1, &on_chip);
        if (e != cudaSuccess) return e;
        if (on_chip && c.narrow_counts) {
            // The kernel that knows its core arrays are on chip, where its own limits (its
            // static shared memory) still hold them.
            const LaunchConfig generic = c;
            const int generic_per_sm = per_sm;
            c.on_chip = true;
            e = size_for(kMaxThreads, 1, &on_chip);
            if (e != cudaSuccess) return e;
            if (!on_chip) {
                c = generic;
                per_sm = generic_per_sm;
            }
        }
    }
    const ArrayLayout layout = chunk_layout(s, c.threads, c.smem_limit);
    c.smem_bytes = layout.smem_bytes;
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    int64_t grid = std::min<int64_t>(s.N, resident);
    if (layout.global_bytes != 0) {
        // Each resident block gets its slice of global scratch, which stays no larger than
        // the outputs.
        c.scratch_per_block = (layout.global_bytes + 255) / 256 * 256;
        grid = std::min<int64_t>(grid, std::max<int64_t>(1, output_bytes / c.scratch_per_block));
    }
    c.grid = static_cast<int>(grid);
    e = static_cast<cudaError_t>(lean_configure(s, device, sms, &c.lean));
    if (e != cudaSuccess) return e;
    e = static_cast<cudaError_t>(spread_configure(s, layout, c, output_bytes, device, sms, &c.spread));
    if (e != cudaSuccess) return e;
    *config = c;
    *args = kernel_constants(s, c);
    return cudaSuccess;
}

const char* kernel_name(const LaunchConfig& config) { return config.lean.threads != 0 ? "lean" : "general"; }

int launch(const LaunchConfig& config, const KernelArgs& args, void* stream) {
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(args.status, 0xFF, sizeof(DeviceStatus), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(args.out.repeats, 0, sizeof(int64_t), st);
    if (e != cudaSuccess) return e;
    if (config.lean.threads != 0) {
        // The lean kernel first; the main kernel computes the chunks it leaves (general_chunks).
        KernelArgs a = args;
        a.lean_vec_ids = lean_ids_vectorized(a.s, a.k_idx, a.q_idx);
        a.lean_vec_entries = lean_entries_vectorized(a.s, a.k_val, a.q_val, a.g, a.out);
        lean_kernel_for(a.s)<<<config.lean.grid, config.lean.threads, config.lean.smem_bytes, st>>>(a);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = launch_after_previous(kernel_for(config), config, a, st);
    } else {
        kernel_for(config)<<<config.grid, config.threads, config.smem_bytes, st>>>(args);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) return e;
    // Its blocks return at once where the main kernel listed no chunk; the spread kernel's
    // where it handed over none.
    e = launch_after_previous(wide_log_kernel(config), config, args, st);
    if (e != cudaSuccess || config.spread.capacity == 0) return e;
    return launch_after_previous(spread_kernel_for(config.narrow_counts), config, args, st, config.spread.grid,
                                 kSpreadThreads, config.spread.smem_bytes);
}

}   // namespace cuda
}   // namespace sdm_p1
