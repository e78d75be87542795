// Stage "pair sums", the main kernel's side of the spread path (kernels/spread/README.md):
// a chunk on the warp path whose pair terms reach SpreadLayout::min_terms takes a slot,
// copies the arrays its units read into it and leaves a and qk to the spread kernel, whose
// warps on every SM take its units with the others'. Without a free slot the block sums
// them itself, as it would without the path: the bits are the same either way.
#ifndef SDM_P1_KERNELS_SPREAD_SPREAD_EXPORT_CUH
#define SDM_P1_KERNELS_SPREAD_SPREAD_EXPORT_CUH

#include "../common/pair_common.cuh"

namespace sdm_p1 {
namespace cuda {

// The chunk's pair terms (each walker's earlier writes in its group, its own token's
// included), summed by the block into sh.pair_terms.
template <class Arrays>
__device__ __forceinline__ void count_pair_terms(const Chunk& k, const Arrays& arr, ChunkShared& sh) {
    if (threadIdx.x == 0) sh.pair_terms = 0;
    __syncthreads();
    unsigned long long mine = 0;
    for (int r = threadIdx.x; r < k.n; r += blockDim.x) {
        const uint32_t p = arr.payload[r];
        if (!is_walker(p)) continue;
        Walker w{};
        w.qk = (p & kIsQ) != 0u;
        w.r = static_cast<uint32_t>(r);
        mine += arr.writes[w.r] - walker_range_start(arr, w);
    }
    for (int d = 16; d != 0; d >>= 1) mine += __shfl_down_sync(kFullWarp, mine, d);
    if ((threadIdx.x & 31u) == 0u && mine != 0u) atomicAdd(&sh.pair_terms, mine);
    __syncthreads();
}

// A slot for a chunk, whole or split (SpreadLayout: whole chunks' from the pool's start,
// split ones' from its end), or -1 where all `capacity` are taken. One atomic add takes it on
// both counts at once (DeviceStatus::spread_taken: complements, so the add subtracts); a claim
// that finds no room undoes its add, so that each count ends exactly the slots its kind took.
// Claims fail only once `capacity` have succeeded (a pending undo only raises the sum), so
// no two chunks get one slot. (A compare-and-swap loop cost S8 through the main kernel's
// registers.)
__device__ __forceinline__ int64_t take_slot(DeviceStatus* status, int64_t capacity, bool split) {
    const unsigned long long step = split ? 1ull << 32 : 1ull;
    const uint64_t taken = ~atomicAdd(&status->spread_taken, ~step + 1ull);   // the counts before this claim
    const uint64_t whole = taken & 0xFFFFFFFFu, splits = taken >> 32;
    if (whole + splits < static_cast<uint64_t>(capacity)) {
        return split ? capacity - 1 - static_cast<int64_t>(splits) : static_cast<int64_t>(whole);
    }
    atomicAdd(&status->spread_taken, step);   // undone
    return -1;
}

// Hands chunk k's units to the spread kernel where its terms reach the plan's threshold and a
// slot is free (every thread calls it; true: handed over, the block writes no pair sum).
// Compiled only into the main kernels of plans with slots (the group spread of
// kernels/instantiations.txt): compiled into
// every main kernel it cost the chunks that never take it 5-7 % inlined (S4, S7, S6 with every
// field) and 10-32 % out of line.
template <class Arrays>
__device__ __forceinline__ bool hand_over_chunk(const KernelArgs& a, const Chunk& k, const Arrays& arr,
                                                const ChunkRuns<typename Arrays::Count>& runs, ChunkShared& sh) {
    const SpreadLayout& l = a.spread;
    count_pair_terms(k, arr, sh);
    if (sh.pair_terms < l.min_terms) return false;
    const uint64_t C = static_cast<uint64_t>(a.s.C);
    if (threadIdx.x == 0)
        sh.spread_slot = take_slot(a.status, l.capacity, sh.pair_terms >= kSpreadSplitTermsPerCell * C * C);
    __syncthreads();
    const int64_t s = sh.spread_slot;
    if (s < 0) return false;
    char* const to = a.spread_slots + s * l.slot_bytes;
    if (threadIdx.x == 0) {
        *reinterpret_cast<SpreadHeader*>(to) = SpreadHeader{k.c, arr.log.shift, runs.id != nullptr ? 1u : 0u};
    }
    // The arrays, 16 bytes a thread a step (each a multiple of 16 bytes).
    const struct {
        size_t at, bytes;
        const void* from;
    } arrays[] = {{l.payload, l.payload_bytes, arr.payload.base},
                  {l.log_low, l.log_bytes, arr.log.low.base},
                  {l.writes, l.count_bytes, arr.writes.base},
                  {l.before, l.count_bytes, arr.before.base},
                  {l.write_row, l.write_row_bytes, arr.write_row},
                  {l.position, l.position_bytes, arr.position},
                  {l.value, l.value_bytes, arr.value},
                  {l.runs, runs.id ? l.runs_bytes : 0, runs.value}};
    for (const auto& x : arrays) {
        const uint4* const src = static_cast<const uint4*>(x.from);
        uint4* const dst = reinterpret_cast<uint4*>(to + x.at);
        for (uint32_t i = threadIdx.x; i < x.bytes / 16; i += blockDim.x) dst[i] = src[i];
    }
    SpreadWrite* const facts = reinterpret_cast<SpreadWrite*>(to + l.facts);
    for (uint32_t j = threadIdx.x; j < static_cast<uint32_t>(a.s.C * a.s.W); j += blockDim.x) {
        const WriteFacts f = write_facts(a, arr, j);
        facts[j] = SpreadWrite{f.log.lo, f.value, f.cell};
    }
    return true;
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_SPREAD_SPREAD_EXPORT_CUH
