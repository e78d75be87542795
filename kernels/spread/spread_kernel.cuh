// The spread kernel (kernels/spread/README.md): the pair sums of the chunks the main kernel
// handed over, a unit (or a part of one) a warp, over every SM. Each warp takes units from one counter, the
// heaviest rows first (a chunk's last tokens have the most earlier writes), and sums a unit
// exactly as the main kernel's warp path would (warp_unit, stage_pairs.cuh) from the slot's
// copy of the chunk's arrays, so every cell keeps its one writer and its canonical order:
// which warp takes which unit never reaches an output bit.
#ifndef SDM_P1_KERNELS_SPREAD_SPREAD_KERNEL_CUH
#define SDM_P1_KERNELS_SPREAD_SPREAD_KERNEL_CUH

#include "../general/stage_pairs.cuh"

namespace sdm_p1 {
namespace cuda {

// The arrays of a slot, under the names warp_unit reads (ChunkArrays's).
template <typename CountT>
struct SlotArrays {
    using Count = CountT;
    LogArray log;
    InterleavedWords payload;
    Interleaved<Count> writes;
    Interleaved<Count> before;
    const Count* write_row;
    const Count* position;
    const float* value;
    const SpreadWrite* facts;
};

// Write-row index j's facts in one 16-byte load (pair_common.cuh's, for the slots).
template <typename Count>
__device__ __forceinline__ WriteFacts write_facts(const KernelArgs&, const SlotArrays<Count>& arr, uint32_t j) {
    const SpreadWrite w = arr.facts[j];
    return WriteFacts{w.cell, w.value, Fix{w.log, 0u}};
}

template <typename Count>
__device__ __forceinline__ SlotArrays<Count> bind_slot(const SpreadLayout& l, uint32_t stride, char* slot,
                                                       int32_t shift) {
    SlotArrays<Count> s;
    s.log = LogArray{Interleaved<uint64_t>{reinterpret_cast<uint64_t*>(slot + l.log_low), stride},
                     Interleaved<uint64_t>{nullptr, stride}, shift};
    s.payload = InterleavedWords{reinterpret_cast<uint32_t*>(slot + l.payload), stride};
    s.writes = Interleaved<Count>{reinterpret_cast<Count*>(slot + l.writes), stride};
    s.before = Interleaved<Count>{reinterpret_cast<Count*>(slot + l.before), stride};
    s.write_row = reinterpret_cast<const Count*>(slot + l.write_row);
    s.position = reinterpret_cast<const Count*>(slot + l.position);
    s.value = reinterpret_cast<const float*>(slot + l.value);
    s.facts = reinterpret_cast<const SpreadWrite*>(slot + l.facts);
    return s;
}

// The runs of a slot whose header says they were listed (ChunkRuns, list_writes' layout).
template <typename Count>
__device__ __forceinline__ ChunkRuns<Count> slot_runs(const KernelArgs& a, char* slot, bool listed) {
    if (!listed) return ChunkRuns<Count>{nullptr, nullptr, nullptr};
    const size_t nk = static_cast<size_t>(a.s.C) * a.s.W;
    const float* const value = reinterpret_cast<const float*>(slot + a.spread.runs);
    const Count* const id = reinterpret_cast<const Count*>(slot + a.spread.runs + align16(4 * nk));
    return ChunkRuns<Count>{value, id, id + nk};
}

static_assert(kDenseCells == kSpreadPartCells, "a part is one dense pass's cells");

// Launched after the wide-log kernel (launch.h); kSpreadThreads threads, a warp's row each in
// dynamic shared memory (SpreadLayout::smem_bytes). Two instantiations, launched one after the
// other: Split false sums the whole chunks' units as the main kernel's warp path does; Split
// true the split chunks' units by parts, with the dense batches (its blocks return at once
// where no chunk was split). Apart, each keeps its resources: S8 went 5 % slower with both in
// one kernel (64 registers with spills, or 80 and three blocks an SM). The block bounds hold
// ptxas to four blocks an SM (64 registers, no spills; left to itself it chose 48 and spilled)
// and three for the split kernel (80 registers; 64 with spills).
template <typename Count, bool Split>
__global__ void __launch_bounds__(kSpreadThreads, Split ? 3 : 4) spread_kernel(const __grid_constant__ KernelArgs a) {
    extern __shared__ __align__(16) char smem[];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");   // the kernels before it, ended
#endif
    const uint64_t taken = ~a.status->spread_taken;
    const uint64_t slots = Split ? taken >> 32 : taken & 0xFFFFFFFFu;
    const uint32_t units = 2 * static_cast<uint32_t>(a.s.C);
    const uint32_t parts = Split ? static_cast<uint32_t>((a.s.C + kSpreadPartCells - 1) / kSpreadPartCells) : 1u;
    const uint64_t items = slots * units * parts;
    if (items == 0) return;
    unsigned long long* const claimed = Split ? &a.status->spread_split_claimed : &a.status->spread_claimed;
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31u);
    double* const row = reinterpret_cast<double*>(smem + warp * warp_room_bytes(a.s.C));
    for (int j = lane; j < a.s.C; j += 32) row[j] = 0.0;
    __syncwarp();
    for (;;) {
        unsigned long long x = 0;
        if (lane == 0) x = ~atomicAdd(claimed, ~0ull);   // minus one
        x = __shfl_sync(kFullWarp, x, 0);
        if (x >= items) break;
        // Item x: part x % parts of unit y = x / parts, whose slot is the kernel's y % slots-th
        // and whose row is units - 1 - y / slots (the last rows first).
        const uint64_t y = Split ? x / parts : x;
        const int p = static_cast<int>(x - y * parts);
        const uint64_t k = y % slots;
        const uint64_t at = Split ? static_cast<uint64_t>(a.spread.capacity) - 1u - k : k;
        char* const slot = a.spread_slots + at * a.spread.slot_bytes;
        const uint32_t u = units - 1u - static_cast<uint32_t>(y / slots);
        const SpreadHeader h = *reinterpret_cast<const SpreadHeader*>(slot);
        const SlotArrays<Count> arr = bind_slot<Count>(a.spread, a.layout.stride, slot, h.shift);
        const ChunkRuns<Count> runs = slot_runs<Count>(a, slot, h.runs != 0u);
        const CellRange part =
            Split ? CellRange{p * kSpreadPartCells, min(a.s.C, (p + 1) * kSpreadPartCells)} : CellRange{0, a.s.C};
        warp_unit<Split>(a, h.chunk, arr, runs, u, part, row);
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_SPREAD_SPREAD_KERNEL_CUH
