// The pair sums of one unit by one warp (stage "pair sums", first path). Lane x of the warp
// is lane x of the unit (32 at a time): if its entry walks (a walker), it counts its terms;
// a warp scan of the counts places each term in the unit's canonical order (lanes in order,
// each lane's terms in walk order). The walk keeps its terms' positions, so the terms are
// then listed without walking again, a window at a time, each lane computing its own (the
// exps, in parallel), and added to the unit's double row in shared memory with a lane a
// term: terms of distinct cells at once, terms of one cell in list order (ranked by
// __match_any_sync). Every cell so gets the canonical order of
// pair_term_add. No block barrier: the warps take units one after another.
//
// A unit with a walker of more than kWarpTerms terms is left to the block path
// (stage_pairs.cuh), which walks long groups with the whole block.
#ifndef SDM_P1_KERNELS_PAIR_WARP_CUH
#define SDM_P1_KERNELS_PAIR_WARP_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

constexpr uint32_t kFullWarp = 0xFFFFFFFFu;
constexpr uint32_t kWindow = 64;       // terms a warp lists at a time
constexpr uint32_t kWarpTerms = 16;    // the most terms of a walker on the warp path

// A warp's room in the stage: the unit's double row (C cells), the sorted positions of its
// lanes' terms, then its window of terms.
SDM_HD size_t warp_room_bytes(int C) {
    return align16(8 * static_cast<size_t>(C)) + 4 * 32 * kWarpTerms + kWindow * (sizeof(PairTerm) + 1);
}

struct WarpRoom {
    double* row;      // [C]
    uint32_t* at;     // [kWarpTerms][32] the sorted position of lane l's term t at [t][l]
    PairTerm* term;   // [kWindow]
    uint8_t* cell;    // [kWindow] the term's column (a token index)
};

__device__ __forceinline__ WarpRoom bind_warp_room(char* base, int C) {
    WarpRoom w;
    w.row = reinterpret_cast<double*>(base);
    w.at = reinterpret_cast<uint32_t*>(base + align16(8 * static_cast<size_t>(C)));
    w.term = reinterpret_cast<PairTerm*>(w.at + 32 * kWarpTerms);
    w.cell = reinterpret_cast<uint8_t*>(w.term + kWindow);
    return w;
}

// k_val / q_val of the entry with payload p (stage "load" keeps them by entry).
template <class Arrays>
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Arrays& arr, uint32_t p) {
    const int t = payload_token(p);
    const int lane = static_cast<int>(p & kLaneMask);
    return arr.value[t * (a.s.W + a.s.R) + ((p & kIsQ) ? a.s.W : 0) + lane];
}

// Moves *q down its group to the next write whose term the unit adds (a: of another token
// than i), the walk ending after the group's head. False when the walk is over.
template <class Arrays>
__device__ __forceinline__ bool next_term(const Arrays& arr, int i, bool qk, uint32_t* q, bool* more,
                                          uint32_t* pq) {
    while (*more) {
        --*q;
        *pq = arr.payload[*q];
        if (*pq & kHead) *more = false;
        // In a group every entry is valid.
        if (!(*pq & kIsQ) && (qk || payload_token(*pq) != i)) return true;
    }
    return false;
}

// A walker: its unit's row i, kind, sorted position, value and log.
struct Walker {
    int i;
    bool qk;
    uint32_t r;
    float v;
    Fix lr;   // its log's stored words (LogArray::raw)
};

// The terms of walker w, counted up to limit + 1.
template <class Arrays>
__device__ __forceinline__ uint32_t count_terms(const Arrays& arr, const Walker& w, uint32_t limit) {
    uint32_t q = w.r, pq, m = 0;
    bool more = true;
    while (m <= limit && next_term(arr, w.i, w.qk, &q, &more, &pq)) ++m;
    return m;
}

// The entry index of lane l of unit (i, qk).
__device__ __forceinline__ int unit_entry(const KernelArgs& a, int i, bool qk, int l) {
    return i * (a.s.W + a.s.R) + (qk ? a.s.W : 0) + l;
}

// The walker at lane l of unit (i, qk) (an entry that is_walker).
template <class Arrays>
__device__ __forceinline__ Walker unit_walker(const KernelArgs& a, const Arrays& arr, int i, bool qk, int l) {
    const int e = unit_entry(a, i, qk, l);
    Walker w;
    w.i = i;
    w.qk = qk;
    w.r = arr.position[e];
    w.v = arr.value[e];
    w.lr = arr.log.raw(w.r);
    return w;
}

// Adds the `listed` terms of the window to the row: a lane a term, 32 at a time. Terms of
// one cell go in list order: a term's rank is the number of earlier lanes with its cell,
// and rank s is added in step s.
__device__ __forceinline__ void add_window(const WarpRoom& room, uint32_t listed) {
    const uint32_t lane = threadIdx.x & 31u, earlier = (1u << lane) - 1u;
    for (uint32_t g = 0; g < listed; g += 32) {
        const bool has = g + lane < listed;
        const uint32_t cell = has ? room.cell[g + lane] : 256u + lane;   // matches no term's
        const PairTerm t = has ? room.term[g + lane] : PairTerm{0.0, 0.0};
        const uint32_t rank = __popc(__match_any_sync(kFullWarp, cell) & earlier);
        const uint32_t steps = __reduce_max_sync(kFullWarp, rank);
        for (uint32_t s = 0; s <= steps; ++s) {
            if (has && rank == s) room.row[cell] = pair_term_add(room.row[cell], t);
            __syncwarp();
        }
    }
}

// Unit u (row u / 2 of a if u is even, else of qk) by the calling warp, into out_row (the
// unit's row of the output), with room's row all zeros (and left so). False, with nothing
// stored, where a walker has more than kWarpTerms terms: the block path takes the unit.
template <class Arrays>
__device__ __forceinline__ bool warp_unit(const KernelArgs& a, const Arrays& arr, int u, const WarpRoom& room,
                                          float* out_row) {
    const int C = a.s.C, i = u >> 1;
    const bool qk = (u & 1) != 0;
    const int lanes = qk ? a.s.R : a.s.W;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    for (int l0 = 0; l0 < lanes; l0 += 32) {
        const bool walks = l0 + lane < lanes && is_walker(arr.payload[arr.position[unit_entry(a, i, qk, l0 + lane)]]);
        const Walker w = walks ? unit_walker(a, arr, i, qk, l0 + lane) : Walker{};
        // The walk, once: its terms counted (up to kWarpTerms + 1) and their positions kept.
        uint32_t m = 0;
        if (walks) {
            uint32_t q = w.r, pq;
            bool more = true;
            while (m <= kWarpTerms && next_term(arr, i, qk, &q, &more, &pq)) {
                if (m < kWarpTerms) room.at[32 * m + lane] = q;
                ++m;
            }
        }
        if (__any_sync(kFullWarp, m > kWarpTerms)) {
            for (int j = lane; j < C; j += 32) room.row[j] = 0.0;
            __syncwarp();
            return false;
        }
        uint32_t incl = m;   // the lanes' inclusive sum of m: my terms' place in the unit's list
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const uint32_t lower = __shfl_up_sync(kFullWarp, incl, d);
            if (lane >= d) incl += lower;
        }
        const uint32_t first = incl - m, total = __shfl_sync(kFullWarp, incl, 31);
        uint32_t made = 0;
        for (uint32_t w0 = 0; w0 < total; w0 += kWindow) {
            for (; made < m && first + made < w0 + kWindow; ++made) {
                const uint32_t q = room.at[32 * made + lane], pq = arr.payload[q];
                const uint32_t at = first + made - w0;
                room.term[at] = pair_term(w.v, entry_value(a, arr, pq), arr.log.exp_diff(w.lr, arr.log.raw(q)));
                room.cell[at] = static_cast<uint8_t>(payload_token(pq));
            }
            __syncwarp();
            add_window(room, min(total - w0, kWindow));
        }
    }
    for (int j = lane; j < C; j += 32) {
        const bool kept = qk ? j <= i : j < i;
        out_row[j] = kept ? to_f32(room.row[j]) : 0.0f;
        room.row[j] = 0.0;
    }
    __syncwarp();
    return true;
}

}  // namespace cuda
}  // namespace sdm_p1

#endif  // SDM_P1_KERNELS_PAIR_WARP_CUH
