// What the paths of stage "pair sums" share: walkers, the runs of the write row their terms
// lie in, and the values of entries (CPU twins in src/cpu/chunk_stages.h: walk_start,
// walk_earlier_writes, entry_value).
//
// A unit is a row i of a (the writes of token i) or of qk (its reads). A walker is a valid
// entry with an earlier entry in its slot group. Its terms are the earlier valid writes of its
// group, nearest first, each added to the cell of that write's token (a: but the walker's own
// token's, which are the nearest ones and exist only where a token repeats a slot). Each cell
// is a double sum in the canonical order of pair_term_add: the walkers of its unit in lane
// order, each one's terms nearest first.
//
// The write row lists the chunk's write entries in sorted order (the sorted position of
// each), so a walker's terms are a range of it ending at writes[r], found in O(1) whatever
// else its group holds (walker_range_start). A run is a token's writes of one slot: consecutive in the
// write row and in the sorted row, all with one log-cumsum (a repeat adds no gate), so all of
// one cell and one exp. Where no write repeats a slot of its token (the usual case) each run
// is one write; else stage "pair sums" lists the runs (ChunkRuns).
#ifndef SDM_P1_KERNELS_PAIR_COMMON_CUH
#define SDM_P1_KERNELS_PAIR_COMMON_CUH

#include "chunk_context.cuh"

namespace sdm_p1 {
namespace cuda {

constexpr uint32_t kFullWarp = 0xFFFFFFFFu;

// k_val / q_val of the entry with payload p (stage "load" keeps them by entry).
template <class Arrays>
__device__ __forceinline__ float entry_value(const KernelArgs& a, const Arrays& arr, uint32_t p) {
    const int t = payload_token(p);
    const int lane = static_cast<int>(p & kLaneMask);
    return arr.value[t * (a.s.W + a.s.R) + ((p & kIsQ) ? a.s.W : 0) + lane];
}

// The token of write-row entry j.
template <class Arrays>
__device__ __forceinline__ int write_token(const Arrays& arr, uint32_t j) {
    return payload_token(arr.payload[arr.write_row[j]]);
}

// What a pair term needs of the write at write-row index j: its cell (token), value and log.
struct WriteFacts {
    int cell;
    float value;
    Fix log;   // its log's stored words (LogArray::raw)
};

// The facts of write-row index j, from the chunk's arrays (the spread kernel's slots keep
// them by write-row index: kernels/spread/spread_kernel.cuh).
template <class Arrays>
__device__ __forceinline__ WriteFacts write_facts(const KernelArgs& a, const Arrays& arr, uint32_t j) {
    const uint32_t p = arr.write_row[j], pq = arr.payload[p];
    return WriteFacts{payload_token(pq), entry_value(a, arr, pq), arr.log.raw(p)};
}

// The runs of the chunk's write row: `value` and `id` by write-row index (the write's value
// and its run), `start` by run (the first write-row index, and after the last run C * W); all
// null where each run is one write.
template <typename Count>
struct ChunkRuns {
    const float* value;
    const Count* id;
    const Count* start;
    __device__ uint32_t run_of(uint32_t j) const { return id ? id[j] : j; }
    __device__ uint32_t first(uint32_t run) const { return start ? start[run] : run; }
};

// The cells [lo, hi) of a unit's row that one warp sums: the whole row, or in the spread
// kernel one part of a split unit (kernels/spread/README.md).
struct CellRange {
    int lo, hi;
    __device__ bool holds(int j) const { return j >= lo && j < hi; }
};

// A walker: its unit's row i and kind, sorted position, value, log, and the runs its terms
// lie in, [lo, hi) (its own token's run excluded).
struct Walker {
    int i;
    bool qk;
    uint32_t r;
    float v;
    Fix lr;   // its log's stored words (LogArray::raw)
    uint32_t lo, hi;
};

// The entry index of lane l of unit (i, qk).
__device__ __forceinline__ int unit_entry(const KernelArgs& a, int i, bool qk, int l) {
    return i * (a.s.W + a.s.R) + (qk ? a.s.W : 0) + l;
}

// The walker at lane l of unit (i, qk) (an entry that is_walker), its runs left unset.
template <class Arrays>
__device__ __forceinline__ Walker unit_walker(const KernelArgs& a, const Arrays& arr, int i, bool qk, int l) {
    const int e = unit_entry(a, i, qk, l);
    Walker w;
    w.i = i;
    w.qk = qk;
    w.r = arr.position[e];
    w.v = arr.value[e];
    w.lr = arr.log.raw(w.r);
    w.lo = w.hi = 0;
    return w;
}

// The write-row range of walker w's terms: [lo, writes[r]), lo the write-row index of its
// group's first write. A write knows its valid writes before it in the group (before); for
// a read, the nearest earlier write y (the write row's entry before writes[r]) is in its
// group unless a group starts after y, which the counts tell but where the reads between
// y and r exactly fill the read's peers: then the head bit after y does.
template <class Arrays>
__device__ __forceinline__ uint32_t walker_range_start(const Arrays& arr, const Walker& w) {
    const uint32_t hi = arr.writes[w.r];
    if (!w.qk) return hi - arr.before[w.r];
    if (hi == 0u) return 0u;
    const uint32_t y = arr.write_row[hi - 1u], reads_between = w.r - y - 1u, peers = arr.before[w.r];
    const bool in_group = reads_between < peers || (reads_between == peers && !(arr.payload[y + 1u] & kHead));
    return in_group ? hi - 1u - arr.before[y] : hi;
}

// Sets w's runs from its range of the write row.
template <class Arrays>
__device__ __forceinline__ void set_walker_runs(const Arrays& arr, const ChunkRuns<typename Arrays::Count>& runs,
                                                Walker& w) {
    const uint32_t lo = walker_range_start(arr, w), hi = arr.writes[w.r];
    w.lo = runs.run_of(lo);
    w.hi = hi > lo ? runs.run_of(hi - 1u) + 1u : w.lo;
    // A write's own token's earlier writes of the slot: the top run, where tokens repeat slots.
    if (runs.id && !w.qk && w.hi > w.lo && write_token(arr, runs.first(w.hi - 1u)) == w.i) --w.hi;
}

// A walker's fields from lane `from` of the warp (every lane calls, each with the unit's i
// and qk in w; `wide`: the log's high word is in use, LogArray::shift).
__device__ __forceinline__ Walker shfl_walker(const Walker& w, int from, bool wide) {
    const auto word = [from](uint32_t x) { return __shfl_sync(kFullWarp, x, from); };
    const auto dword = [&word](uint64_t x) {
        return static_cast<uint64_t>(word(static_cast<uint32_t>(x))) |
               static_cast<uint64_t>(word(static_cast<uint32_t>(x >> 32))) << 32;
    };
    Walker r;
    r.i = w.i;
    r.qk = w.qk;
    r.r = word(w.r);
    r.v = __shfl_sync(kFullWarp, w.v, from);
    r.lr.lo = dword(w.lr.lo);
    r.lr.hi = wide ? dword(w.lr.hi) : 0u;
    r.lo = word(w.lo);
    r.hi = word(w.hi);
    return r;
}

// Sets the n floats at p to 0 (16-byte stores where p and n allow).
__device__ __forceinline__ void zero_floats(float* p, int n) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0u && n % 4 == 0) {
        float4* const q = reinterpret_cast<float4*>(p);
        for (int x = threadIdx.x; x < n / 4; x += blockDim.x) q[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
        for (int x = threadIdx.x; x < n; x += blockDim.x) p[x] = 0.0f;
    }
}

// Each cell of a unit's row that has terms, from the unit's term list [lo, hi) (term[x] into
// the row's cell cell[x], in canonical order): the sum of the cell's terms in list order from
// +0.0, rounded once. A term's cell is in the kept triangle (a: an earlier token; qk: not a
// later one), so the other cells keep the zeros stored before.
__device__ __forceinline__ void store_cell_sums(const PairTerm* term, const uint8_t* cell, uint32_t lo, uint32_t hi,
                                                float* row) {
    for (uint32_t t = lo; t < hi; ++t) {
        const uint8_t c = cell[t];
        bool seen = false;   // an earlier term of the unit has this cell
        for (uint32_t x = lo; x < t && !seen; ++x) seen = cell[x] == c;
        if (seen) continue;
        double sum = 0.0;
        for (uint32_t x = t; x < hi; ++x) {
            if (cell[x] == c) sum = pair_term_add(sum, term[x]);
        }
        row[c] = to_f32(sum);
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PAIR_COMMON_CUH
