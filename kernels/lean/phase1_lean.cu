// The lean kernel's instantiations (one per plan form: id type, value type, gate width) and
// its plan-time choice and launch configuration (launch.h, phase1.cu).
#include <cuda_runtime.h>

#include <algorithm>

#include "lean_kernel.cuh"
#include "../common/smem_limits.cuh"

namespace sdm_p1 {
namespace cuda {

using LeanFn = KernelFn;

namespace {

template <typename Id, typename Value, bool PerWrite>
LeanFn lean_of_block(const KernelShape& s) {
    const bool small = lean_threads(s.C * (s.W + s.R)) <= kLeanSmallBlock;
    return small ? lean::lean_kernel<Id, Value, PerWrite, kLeanSmallBlock>
                 : lean::lean_kernel<Id, Value, PerWrite, kLeanMaxThreads>;
}

template <typename Id, typename Value>
LeanFn lean_of_gates(const KernelShape& s) {
    return s.gate_width == 1 ? lean_of_block<Id, Value, false>(s) : lean_of_block<Id, Value, true>(s);
}

template <typename Id>
LeanFn lean_of_values(const KernelShape& s) {
    return s.bf16 ? lean_of_gates<Id, uint16_t>(s) : lean_of_gates<Id, float>(s);
}

// The bits of a positive value below 2^63 (bit_width(4096) = 13).
int bits_of(int64_t v) {
    int b = 0;
    for (; v != 0; v >>= 1) ++b;
    return b;
}

// The lean kernel serves plans of the default fields or fewer whose slots outnumber a
// chunk's entries eightfold (uniform ids then leave about a ninth of the entries in groups),
// with chunks of up to 16 * kLeanMaxThreads entries and 32-bit sort keys whose bucket bits
// are slot bits (so a slot's entries share a bucket). Other data (hot or skewed slots in
// such a plan) is found per chunk and left to the main kernel.
bool lean_serves(const KernelShape& s) {
    const int64_t n = static_cast<int64_t>(s.C) * (s.W + s.R);
    if (!s.shipped_fields || n > static_cast<int64_t>(kLeanKeysPerThread) * kLeanMaxThreads) return false;
    if (s.num_keys < 8 * n) return false;
    const int entry_bits = std::max(1, bits_of(n - 1)), slot_bits = bits_of(s.num_keys - 1);
    const int bucket_bits = bits_of(kLeanBucketsPerThread * lean_threads(static_cast<int>(n)) - 1);
    return entry_bits + slot_bits <= 32 && slot_bits >= bucket_bits;
}

}   // namespace

LeanFn lean_kernel_for(const KernelShape& s) {
    return s.idx64 ? lean_of_values<int64_t>(s) : lean_of_values<int32_t>(s);
}

int lean_configure(const KernelShape& s, int device, int sms, LeanLayout* layout) {
    *layout = LeanLayout{};
    if (!lean_serves(s)) return cudaSuccess;
    const LeanFn kernel = lean_kernel_for(s);
    const int n = s.C * (s.W + s.R), threads = lean_threads(n);
    SmemLimits limits{};
    cudaError_t e = raise_smem_limit(kernel, device, &limits);
    if (e != cudaSuccess) return e;
    const bool per_token = s.gate_width == 1;
    const size_t fixed = lean_fixed_bytes(s.C, s.W, s.R, per_token, threads);
    const uint32_t want = static_cast<uint32_t>(std::max(n / 4, 4)), least = static_cast<uint32_t>(std::max(n / 8, 1));
    // The most blocks an SM whose shares hold the arrays and at least n / 8 grouped entries.
    for (int blocks = 4; blocks >= 1; --blocks) {
        const size_t room = limits.room(blocks);
        if (room <= fixed) continue;
        const uint32_t grouped = static_cast<uint32_t>(std::min<size_t>(want, (room - fixed) / kLeanGroupedBytes));
        if (grouped < least) continue;
        LeanLayout l = lean_layout(s.C, s.W, s.R, per_token, threads, grouped);
        while (l.smem_bytes > room && l.max_grouped > least) {   // the records' alignment
            l = lean_layout(s.C, s.W, s.R, per_token, threads, l.max_grouped - 4);
        }
        if (l.smem_bytes > room) continue;
        int resident = 0;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, l.smem_bytes);
        if (e != cudaSuccess) return e;
        if (resident < blocks) continue;
        const int entry_bits = std::max(1, bits_of(n - 1)), slot_bits = bits_of(s.num_keys - 1);
        l.bucket_shift = entry_bits + slot_bits - bits_of(kLeanBucketsPerThread * threads - 1);
        l.blocks_per_sm = blocks;
        l.grid = static_cast<int>(std::min<int64_t>(s.N, static_cast<int64_t>(sms) * blocks));
        *layout = l;
        return cudaSuccess;
    }
    return cudaSuccess;   // no room: the main kernel computes every chunk
}

}   // namespace cuda
}   // namespace sdm_p1
