// Stage "pair sums", the warp path (CPU twin: pair_sums in src/cpu/chunk_stages.h, whose walk,
// walk_earlier_writes, takes a walker's terms a run at a time as here): one warp does one
// unit, its walkers 32 at a time (a batch). Each lane finds its walker's runs in O(1)
// (pair_common.cuh) and puts the walker in the warp's room; a warp scan lays the batch's
// run-terms (a walker with one run) out in canonical order, and the warp takes them in
// windows of 32, one a lane. A lane finds the walker its run-term belongs to from the marks
// of where walkers start in the window (one ballot), takes the exp of the run (the exps in
// parallel), and adds the run's terms, nearest first, to its cell of the unit's double row.
// A walker's runs have distinct cells, so run-terms of one window that share a cell belong
// to distinct walkers. A check of the cells by shared memory finds whether any do (most
// windows have none: then all lanes add at once); where some do, the window's walkers add
// one after the other (few walkers) or each lane after the earlier lanes of its cell (ranked
// by __match_any_sync). The work is linear in the terms: a window takes one step per walker
// it holds at most.
#ifndef SDM_P1_KERNELS_PAIR_WINDOWS_CUH
#define SDM_P1_KERNELS_PAIR_WINDOWS_CUH

#include "../common/pair_common.cuh"

namespace sdm_p1 {
namespace cuda {

// A walker of the batch as the window's lanes read it: its value, one past its last run, and
// where its run-terms start in the batch's list.
struct BatchWalker {
    float v;
    uint32_t hi;
    uint32_t first;
    uint32_t unused;
};

// A warp's room on the warp path: the unit's double row (C cells); the batch's walkers and
// their logs' stored words (LogArray::raw) by lane; by place in the window, the lane whose
// walker's run-terms start there (kNoLane: none); by cell, a lane that has a run-term in it.
struct WarpRoom {
    double* row;
    BatchWalker* walker;
    uint64_t* log_lo;
    uint64_t* log_hi;
    uint8_t* start;
    uint8_t* stamp;
};

constexpr uint8_t kNoLane = 0xFF;

SDM_HD constexpr size_t warp_room_bytes(int C) {
    return align16(8 * static_cast<size_t>(C)) + 32 * sizeof(BatchWalker) + 2 * 32 * 8 + 32 +
           align16(static_cast<size_t>(C));
}

// The room of the warp at `base` (warp_room_bytes(C) bytes), its row zero and no place marked
// (every lane of the warp calls it).
__device__ __forceinline__ WarpRoom bind_warp_room(char* base, int C) {
    WarpRoom r;
    r.row = reinterpret_cast<double*>(base);
    base += align16(8 * static_cast<size_t>(C));
    r.walker = reinterpret_cast<BatchWalker*>(base);
    r.log_lo = reinterpret_cast<uint64_t*>(base + 32 * sizeof(BatchWalker));
    r.log_hi = r.log_lo + 32;
    r.start = reinterpret_cast<uint8_t*>(r.log_hi + 32);
    r.stamp = r.start + 32;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    for (int j = lane; j < C; j += 32) r.row[j] = 0.0;
    r.start[lane] = kNoLane;
    __syncwarp();
    return r;
}

// One run-term: its run's first write-row index and length, its cell, the run's exp.
struct RunTerm {
    uint32_t j0, len;
    int cell;
    double e;
};

// Adds the terms of run-term t of walker value v to `row`, nearest (last) first.
__device__ __forceinline__ void add_run(const float* run_value, float v, const RunTerm& t, double* row) {
    double sum = row[t.cell];
#pragma unroll 8
    for (uint32_t k = t.len; k > 0; --k) sum = pair_term_add(sum, pair_term(v, run_value[t.j0 + k - 1u], t.e));
    row[t.cell] = sum;
}

// A lane's run-term in a window: its walker's value and log, the run, and the facts of the
// run's first write.
struct WindowTerm {
    bool has;
    uint32_t walker_no, walkers;   // the lane's walker's number in the window, from 0, and how many
    float v;
    Fix lr;
    uint32_t j0, len;
    WriteFacts f;
};

// The run-term of the calling lane in the window from w0 of a batch of `total` run-terms
// (the lane's own walker has m of them from `first`); `carried`: the walker whose run-terms
// go on from the window before, set to the one that goes on past this window.
template <bool Repeats, class Arrays>
__device__ __forceinline__ WindowTerm window_term(const KernelArgs& a, const Arrays& arr,
                                                  const ChunkRuns<typename Arrays::Count>& runs, const WarpRoom& room,
                                                  uint32_t w0, uint32_t total, uint32_t m, uint32_t first, bool wide,
                                                  uint32_t& carried) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const uint32_t up_to_me = 0xFFFFFFFFu >> (31 - lane);   // lanes 0 .. lane
    // The window before has read and cleared its marks.
    __syncwarp();
    if (m != 0u && first >= w0 && first - w0 < 32u) room.start[first - w0] = static_cast<uint8_t>(lane);
    __syncwarp();   // the marks (and, at a batch's first window, the walkers) written
    const uint32_t mark = room.start[lane];
    room.start[lane] = kNoLane;   // read by this lane alone
    const uint32_t starts = __ballot_sync(kFullWarp, mark != kNoLane);
    const uint32_t starts_to_me = starts & up_to_me;
    const uint32_t from = __shfl_sync(kFullWarp, mark, starts_to_me ? 31 - __clz(starts_to_me) : 0);
    const uint32_t owner = starts_to_me ? from : carried;
    carried = __shfl_sync(kFullWarp, owner, 31);
    const uint32_t t = w0 + static_cast<uint32_t>(lane);
    WindowTerm x{};
    x.has = t < total;
    // The carried walker is number 0 where the window starts inside it.
    x.walker_no = __popc(starts_to_me) - (starts & 1u);
    x.walkers = __popc(starts) + 1u - (starts & 1u);
    if (x.has) {
        const BatchWalker o = room.walker[owner];
        x.v = o.v;
        x.lr = Fix{room.log_lo[owner], wide ? room.log_hi[owner] : 0u};
        const uint32_t run = o.hi - 1u - (t - o.first);   // nearest first
        x.j0 = Repeats ? runs.first(run) : run;
        x.len = Repeats ? runs.first(run + 1u) - x.j0 : 1u;
        x.f = write_facts(a, arr, x.j0);
    }
    return x;
}

// A window with shared cells and at most this many walkers adds them a walker a step, without
// ranking its lanes; more walkers (S4's windows hold many of one or two run-terms each) are
// ranked. H100, ms: ranks always S7 4.20, S4 2.36; walker steps always S7 3.99, S4 2.51; up to
// 4 walkers S7 4.06, S4 2.38; up to 8 S7 4.04, S4 2.38 (docs/performance.md, pair sums).
constexpr uint32_t kWalkerSteps = 8;

// Adds the window's run-terms to room.row (every lane calls, each with its WindowTerm).
template <bool Repeats, class Arrays>
__device__ __forceinline__ void add_window(const Arrays& arr, const ChunkRuns<typename Arrays::Count>& runs,
                                           const WarpRoom& room, const WindowTerm& x) {
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const uint32_t earlier = (1u << lane) - 1u;
    RunTerm rt{x.j0, x.len, x.f.cell, 0.0};
    if (x.has) {
        rt.e = arr.log.exp_diff(x.lr, x.f.log);
        room.stamp[rt.cell] = static_cast<uint8_t>(lane);
    }
    __syncwarp();
    const bool shared_cell = x.has && room.stamp[rt.cell] != static_cast<uint8_t>(lane);
    // Where two lanes share a cell (distinct walkers), the window's walkers add one after the
    // other where they are few, else each lane after the lanes before it with its cell (its
    // rank among them, by __match_any_sync); else all at once.
    uint32_t rank = 0, steps = 0;
    if (__any_sync(kFullWarp, shared_cell)) {
        if (x.walkers <= kWalkerSteps) {
            rank = x.walker_no;
            steps = x.walkers - 1u;
        } else {
            const uint32_t key = x.has ? static_cast<uint32_t>(rt.cell) : 256u + static_cast<uint32_t>(lane);
            rank = __popc(__match_any_sync(kFullWarp, key) & earlier);
            steps = __reduce_max_sync(kFullWarp, rank);
        }
    }
    // A single write's term is known: one fused multiply-add.
    const PairTerm single = pair_term(x.v, x.f.value, rt.e);
    for (uint32_t s = 0; s <= steps; ++s) {
        if (x.has && rank == s) {
            if (Repeats) {
                add_run(runs.value, x.v, rt, room.row);
            } else {
                room.row[rt.cell] = pair_term_add(room.row[rt.cell], single);
            }
        }
        __syncwarp();
    }
}

// Unit (i, qk) by the calling warp, added to room.row (the unit's C cells). Repeats: the chunk
// has writes repeating slots of their tokens (runs listed); without, each run is one write,
// and the path is compiled for that.
template <bool Repeats, class Arrays>
__device__ __forceinline__ void warp_unit_windows(const KernelArgs& a, const Arrays& arr,
                                                  const ChunkRuns<typename Arrays::Count>& runs, int i, bool qk,
                                                  const WarpRoom& room) {
    const int lanes = qk ? a.s.R : a.s.W;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const bool wide = arr.log.shift < 0;
    for (int l0 = 0; l0 < lanes; l0 += 32) {
        Walker w{};
        w.i = i;
        w.qk = qk;
        uint32_t m = 0;
        if (l0 + lane < lanes && is_walker(arr.payload[arr.position[unit_entry(a, i, qk, l0 + lane)]])) {
            w = unit_walker(a, arr, i, qk, l0 + lane);
            set_walker_runs(arr, runs, w);
            m = w.hi - w.lo;
        }
        uint32_t incl = m;   // the lanes' inclusive sum of m: my run-terms' place in the list
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const uint32_t lower = __shfl_up_sync(kFullWarp, incl, d);
            if (lane >= d) incl += lower;
        }
        const uint32_t total = __shfl_sync(kFullWarp, incl, 31);
        if (total == 0u) continue;
        const uint32_t first = incl - m;
        room.walker[lane] = BatchWalker{w.v, w.hi, first, 0u};
        room.log_lo[lane] = w.lr.lo;
        if (wide) room.log_hi[lane] = w.lr.hi;
        // The walker whose run-terms go on from the window before (the first window starts
        // with a walker's first run-term).
        uint32_t carried = 0;
        for (uint32_t w0 = 0; w0 < total; w0 += 32) {
            add_window<Repeats>(arr, runs, room,
                                window_term<Repeats>(a, arr, runs, room, w0, total, m, first, wide, carried));
        }
    }
}

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_PAIR_WINDOWS_CUH
