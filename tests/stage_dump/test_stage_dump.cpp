// The CPU half of the stage test. Chunk by chunk, the CPU backend's stages
// (src/cpu/chunk_stages.h) run one by one, and the arrays each stage leaves (tests/stage_dump/stage_dump.h)
// are compared, stage by stage, with an independent computation of the stage's contract
// (docs/design.md, "The stages") from the case's ids, values and gates: the sort is
// std::stable_sort by slot, a group is a run of one slot, a count is a count. Then the
// outputs of the stages' run must be those of compute_chunk, the backend's own. The CUDA half
// (tests/stage_dump/test_stage_dump_cuda.cu) holds the general kernel's stages to the same dumps.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "stage_dump.h"

namespace {

using namespace stage_dump;
__extension__ typedef unsigned __int128 u128;   // GCC and clang

// A gate as a Q31.96 fixed-point number (two's complement, 128 bits): exact for the test's
// gates, whose magnitudes are 0 or 2^-72 and above (every bit of the mantissa is then above
// 2^-96).
u128 fixed_point(float g) {
    if (g == 0.0f) return 0;
    int e = 0;
    const double m = std::frexp(static_cast<double>(g), &e);                     // |m| in [0.5, 1)
    const uint64_t mant = static_cast<uint64_t>(std::ldexp(std::fabs(m), 24));   // exact
    const u128 v = static_cast<u128>(mant) << (e - 24 + 96);
    return g < 0.0f ? ~v + 1 : v;
}

// Bits of n - 1 (at least one), as the sort keys' entry bits; bits of v.
int bits_of(uint64_t v) {
    int b = 0;
    while (b < 64 && (v >> b) != 0u) ++b;
    return b;
}

uint64_t word_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

uint64_t word_of(double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return b;
}

struct Entry {
    bool valid, is_q;
    int t, lane;
    uint64_t slot;   // padding: the padding slot
    float value;
    u128 gate;   // the gate a write adds (its token's, or its lane's with per-write gates)
};

// The dump chunk `chunk` of case c must give, by each stage's contract.
std::vector<uint64_t> contract_dump(const Case& c, int64_t chunk) {
    const sdm_p1::Options& o = c.options;
    const int W = o.W, R = o.R, WR = W + R, n = o.n(), gw = o.gate_width;
    const int t_valid = chunk >= o.N - o.P ? o.valid_last : o.C;
    const int64_t base = (chunk % o.P) * o.stream_offset;
    const int entry_bits = std::max(1, bits_of(static_cast<uint64_t>(n - 1)));
    const int slot_bits = bits_of(static_cast<uint64_t>(o.num_keys - 1));
    const uint64_t padding_slot = (uint64_t{1} << slot_bits) - 1u;
    const DumpLayout l = dump_layout(o);
    std::vector<uint64_t> d(l.total, 0);
    const auto put = [&](DumpArray a, uint64_t i, uint64_t w) { d[l.offset[a] + i * l.words[a]] = w; };
    const auto put_fix = [&](DumpArray a, uint64_t i, u128 v) {
        d[l.offset[a] + 2 * i] = static_cast<uint64_t>(v);
        d[l.offset[a] + 2 * i + 1] = static_cast<uint64_t>(v >> 64);
    };

    // Stage "load and check": keys and values by entry, gates by token, masks cleared.
    std::vector<Entry> entry(static_cast<size_t>(n));
    std::vector<u128> gate(static_cast<size_t>(o.C * gw), 0);
    for (int t = 0; t < t_valid; ++t) {
        for (int x = 0; x < gw; ++x)
            gate[static_cast<size_t>(t * gw + x)] = fixed_point(c.g[static_cast<size_t>((chunk * o.C + t) * gw + x)]);
    }
    for (int e = 0; e < n; ++e) {
        Entry& x = entry[static_cast<size_t>(e)];
        x.t = e / WR;
        x.is_q = e % WR >= W;
        x.lane = x.is_q ? e % WR - W : e % WR;
        x.valid = x.t < t_valid;
        const int64_t tok = chunk * o.C + x.t;
        x.slot = x.valid ? static_cast<uint64_t>(input_id(c, x.is_q, tok, x.lane) - base) : padding_slot;
        x.value = x.valid ? input_value(c, x.is_q, tok, x.lane) : 0.0f;
        x.gate = gate[static_cast<size_t>(x.t * gw + (gw == 1 ? 0 : x.lane))];
        put(kLoadKeys, static_cast<uint64_t>(e), x.slot << entry_bits | static_cast<uint64_t>(e));
        put(kLoadValue, static_cast<uint64_t>(e), word_of(x.value));
    }
    for (size_t x = 0; x < gate.size(); ++x) put_fix(kLoadGate, x, gate[x]);
    for (uint64_t t = 0; t < l.count[kLoadGateExp]; ++t) {
        sdm_p1::Fix f{static_cast<uint64_t>(gate[t]), static_cast<uint64_t>(gate[t] >> 64)};
        put(kLoadGateExp, t, word_of(sdm_p1::exp_fix(f)));
    }

    // Stage "sort": the stable order by slot, padding last.
    std::vector<int> order(static_cast<size_t>(n));
    for (int e = 0; e < n; ++e) order[static_cast<size_t>(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
        const Entry &a = entry[static_cast<size_t>(x)], &b = entry[static_cast<size_t>(y)];
        return (a.valid ? a.slot : UINT64_MAX) < (b.valid ? b.slot : UINT64_MAX);
    });
    const auto at = [&](int r) -> const Entry& { return entry[static_cast<size_t>(order[static_cast<size_t>(r)])]; };
    for (int r = 0; r < n; ++r) {
        put(kSortKeys, static_cast<uint64_t>(r),
            at(r).slot << entry_bits | static_cast<uint64_t>(order[static_cast<size_t>(r)]));
    }

    // Stage "decode": a group is a run of one slot among the valid entries; a padding entry is
    // a group of its own.
    std::vector<int> first(static_cast<size_t>(n)), last(static_cast<size_t>(n));
    std::vector<uint32_t> payload(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
        const Entry& x = at(r);
        const bool head = r == 0 || !x.valid || !at(r - 1).valid || at(r - 1).slot != x.slot;
        first[static_cast<size_t>(r)] = head ? r : first[static_cast<size_t>(r - 1)];
        payload[static_cast<size_t>(r)] = static_cast<uint32_t>(x.lane) | (x.is_q ? 1u << 8 : 0u) |
                                          static_cast<uint32_t>(x.t) << 9 | (x.valid ? 0u : 1u << 17) |
                                          (head ? 1u << 31 : 0u);
        put(kDecodePayload, static_cast<uint64_t>(r), payload[static_cast<size_t>(r)]);
        put(kDecodePosition, static_cast<uint64_t>(order[static_cast<size_t>(r)]), static_cast<uint64_t>(r));
        put(kDecodeSlot, static_cast<uint64_t>(r), x.slot);
    }
    for (int r = n - 1; r >= 0; --r) {
        last[static_cast<size_t>(r)] =
            r == n - 1 || first[static_cast<size_t>(r + 1)] == r + 1 ? r : last[static_cast<size_t>(r + 1)];
    }

    // Stage "scans", forward: counted over each group and the row.
    uint32_t repeats = 0, walkers = 0, writes = 0;
    for (int r = 0; r < n; ++r) {
        const Entry& x = at(r);
        uint32_t before = 0;
        u128 log = 0;
        for (int y = first[static_cast<size_t>(r)]; y <= r && x.valid; ++y) {
            const Entry& z = at(y);
            if (y < r && z.is_q == x.is_q) ++before;
            if (z.is_q) continue;
            bool repeat = false;   // its token wrote this slot before
            for (int v = first[static_cast<size_t>(r)]; v < y; ++v) repeat |= !at(v).is_q && at(v).t == z.t;
            if (!repeat) log += z.gate;
            if (y == r && repeat) ++repeats;
        }
        walkers += x.valid && first[static_cast<size_t>(r)] != r ? 1u : 0u;
        put_fix(kForwardLog, static_cast<uint64_t>(r), log);
        put(kForwardBefore, static_cast<uint64_t>(r), before);
        put(kForwardWrites, static_cast<uint64_t>(r), writes);
        writes += x.is_q ? 0u : 1u;
    }
    put(kForwardCounts, 0, repeats);
    put(kForwardCounts, 1, walkers);

    // Stage "scans", backward.
    uint32_t firsts = 0;
    for (int r = n - 1; r >= 0; --r) {
        const Entry& x = at(r);
        const bool write = x.valid && !x.is_q;
        bool earlier = false, later = false;   // valid writes of its group before / after it
        for (int y = first[static_cast<size_t>(r)]; y < r; ++y) earlier |= !at(y).is_q;
        for (int y = r + 1; y <= last[static_cast<size_t>(r)]; ++y) later |= !at(y).is_q;
        firsts += write && !earlier ? 1u : 0u;
        put(kBackwardEnd, static_cast<uint64_t>(r), static_cast<uint64_t>(last[static_cast<size_t>(r)]));
        put(kBackwardFirsts, static_cast<uint64_t>(r), firsts);
        put(kBackwardPayload, static_cast<uint64_t>(r),
            payload[static_cast<size_t>(r)] | (write && !later ? 1u << 30 : 0u));
    }
    put(kBackwardCounts, 0, firsts);

    // Stage "records": the walkers (valid entries with an earlier entry in their group) by
    // token and lane.
    const int words = (W + 31) / 32 + (R + 31) / 32;
    for (int r = 0; r < n; ++r) {
        const Entry& x = at(r);
        if (!x.valid || first[static_cast<size_t>(r)] == r) continue;
        const uint64_t word = static_cast<uint64_t>(x.t * words + (x.is_q ? (W + 31) / 32 : 0) + x.lane / 32);
        d[l.offset[kRecordsWalkMask] + word] |= uint64_t{1} << (x.lane % 32);
    }

    // Stage "pair sums": the write row.
    uint64_t j = 0;
    for (int r = 0; r < n; ++r) {
        if (!at(r).is_q) put(kPairsWriteRow, j++, static_cast<uint64_t>(r));
    }
    return d;
}

bool same_outputs(const HostOutputs& x, const HostOutputs& y, int* fields) {
    *fields = 0;
    for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
        if (f == SDM_P1_FIELD_REPEATS || x.fields[static_cast<size_t>(f)].empty()) continue;
        ++*fields;
        if (x.fields[static_cast<size_t>(f)] != y.fields[static_cast<size_t>(f)]) {
            std::printf("  outputs: field %d differs between the stages' run and compute_chunk\n", f);
            return false;
        }
    }
    return true;
}

}   // namespace

int main() {
    int failed = 0;
    for (const Case& c : make_cases()) {
        const sdm_p1::Options& o = c.options;
        std::printf("case %s: N=%" PRId64 " C=%d W=%d R=%d num_keys=%" PRId64 " gate_width=%d\n", c.name.c_str(), o.N,
                    o.C, o.W, o.R, o.num_keys, o.gate_width);
        HostOutputs staged = host_outputs(o, 0xA5), whole = host_outputs(o, 0xA5);
        const DumpLayout l = dump_layout(o);
        bool ok = true;
        for (int64_t chunk = 0; chunk < o.N && ok; ++chunk) {
            std::vector<uint64_t> dump;
            if (run_cpu_stages(c, staged.buffers, chunk, &dump).found) {
                std::printf(" chunk %" PRId64 ": load and check: a bad input in a case of valid inputs\n", chunk);
                ok = false;
                break;
            }
            std::printf(" chunk %" PRId64 ": %" PRIu64 " repeats, %" PRIu64 " walkers, %" PRIu64 " valid groups\n",
                        chunk, dump[l.offset[kForwardCounts]], dump[l.offset[kForwardCounts] + 1],
                        dump[l.offset[kBackwardCounts]]);
            ok = compare_dumps(l, contract_dump(c, chunk), dump, "contract", "CPU");
            compute_chunk_whole(c, whole.buffers, chunk);
        }
        int fields = 0;
        if (ok && same_outputs(staged, whole, &fields)) {
            std::printf(" outputs: %d fields of the stages' run equal to compute_chunk's\n", fields);
        } else {
            ok = false;
        }
        if (!ok) ++failed;
        std::printf("%s %s\n", ok ? "ok  " : "FAIL", c.name.c_str());
    }
    std::printf("%s\n", failed == 0 ? "every stage of every case as its contract says" : "FAILED");
    return failed == 0 ? 0 : 1;
}
