#include "fuzz_case.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>

#include "../splitmix64.h"

namespace fuzz {

namespace {

// The values a field takes when a case probes the limits: in, at and past each of them.
constexpr int64_t kEdges[] = {
    0,
    1,
    2,
    3,
    -1,
    -2,
    7,
    16,
    255,
    256,
    257,
    4096,
    65535,
    int64_t{1} << 16,
    int64_t{1} << 17,
    (int64_t{1} << 17) + 1,
    INT32_MAX,
    int64_t{1} << 31,
    int64_t{1} << 32,
    (int64_t{1} << 32) + 1,
    int64_t{1} << 40,
    int64_t{1} << 55,
    3 * (int64_t{1} << 55),
    int64_t{1} << 61,
    int64_t{1} << 62,
    INT64_MAX,
    INT64_MIN,
    INT64_MIN + 1,
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Gates: ordinary, tiny (rounded to 2^-96), subnormal, at and past 2^22, not finite.
constexpr float kEdgeGates[] = {
    0.0f,        -0.0f,      -1e-9f,      -20.0f, -1e-30f, 1e-45f, -1e-40f, 3.0f,
    -4194303.5f, 4194304.0f, -4194304.0f, 1e30f,  kNaN,    kInf,   -kInf,   -0.5f,
};

// Values: zeros, subnormals, the extremes and not-a-numbers.
constexpr float kEdgeValues[] = {
    0.0f, -0.0f, 1e-40f, -1e-45f, 3.4028235e38f, -1.1754944e-38f, 1e30f, kNaN, kInf, -kInf, 1.0f, -2.0f,
};

template <typename T, size_t n>
constexpr size_t count_of(const T (&)[n]) {
    return n;
}

int64_t edge(Bytes& b) { return kEdges[b.u8() % count_of(kEdges)]; }

// splitmix64: the data of a case from its seed.
struct Rng {
    uint64_t s;
    uint64_t next() { return splitmix64(&s); }
    float unit() { return static_cast<float>(next() >> 40) * 0x1p-24f * 2.0f - 1.0f; }   // [-1, 1)
    bool chance(int in_256) { return static_cast<int>(next() & 255u) < in_256; }
};

uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

size_t index_bytes(const sdm_p1_desc& d) { return d.index_dtype == SDM_P1_DTYPE_INT64 ? 8 : 4; }
size_t value_bytes(const sdm_p1_desc& d) { return d.value_dtype == SDM_P1_DTYPE_BFLOAT16 ? 2 : 4; }

size_t element_bytes(const Case& c, int input) {
    if (input == kIdx || input == qIdx) return index_bytes(c.desc);
    if (input == kVal || input == qVal) return value_bytes(c.desc);
    return 4;
}

// Slack after each array, so that a misaligned pointer (one byte on) stays inside it.
constexpr size_t kSlack = 8;

size_t elements(const Case& c, int input) {
    const size_t bytes = c.arrays[input].size();
    return bytes <= kSlack ? 0 : (bytes - kSlack) / element_bytes(c, input);
}

void store_id(Case& c, int input, size_t i, int64_t id) {
    uint8_t* p = c.arrays[input].data() + i * index_bytes(c.desc);
    if (index_bytes(c.desc) == 8) {
        std::memcpy(p, &id, 8);
    } else {
        const int32_t narrow = static_cast<int32_t>(id);
        std::memcpy(p, &narrow, 4);
    }
}

int64_t load_id(const Case& c, int input, size_t i) {
    const uint8_t* p = c.arrays[input].data() + i * index_bytes(c.desc);
    if (index_bytes(c.desc) == 8) {
        int64_t id;
        std::memcpy(&id, p, 8);
        return id;
    }
    int32_t narrow;
    std::memcpy(&narrow, p, 4);
    return narrow;
}

void store_value(Case& c, int input, size_t i, float v, Rng* raw_bits) {
    uint8_t* p = c.arrays[input].data() + i * element_bytes(c, input);
    if (element_bytes(c, input) == 2) {
        const uint16_t bits = raw_bits != nullptr ? static_cast<uint16_t>(raw_bits->next()) : to_bf16(v);
        std::memcpy(p, &bits, 2);
    } else {
        std::memcpy(p, &v, 4);
    }
}

// An id outside (or at the edge of) the stream's range [base, base + num_keys).
int64_t edge_id(uint64_t base, const sdm_p1_desc& d, uint64_t r) {
    switch (r % 7) {
        case 0:
            return static_cast<int64_t>(base - 1);
        case 1:
            return static_cast<int64_t>(base + static_cast<uint64_t>(d.num_keys));
        case 2:
            return -1;
        case 3:
            return INT32_MIN;
        case 4:
            return INT64_MAX;
        case 5:
            return static_cast<int64_t>(base + static_cast<uint64_t>(d.num_keys) - 1);   // the last valid
        default:
            return static_cast<int64_t>(r);
    }
}

bool shape_runnable(const sdm_p1_desc& d) {
    if (d.N < 1 || d.N > 8 || d.C < 1 || d.C > 256 || d.W < 1 || d.W > 256 || d.R < 1 || d.R > 256) {
        return false;
    }
    // Slot groups of up to n entries: the pair sums of one chunk are at most n^2 terms.
    const int64_t n = d.C * (d.W + d.R);
    return n <= 256 && d.N * n <= 1024 && (d.gate_width == 1 || d.gate_width == d.W);
}

// The arrays of a runnable case, from its seed and the knobs: the share of ids out of range,
// of edge gates and values, and of garbage in the padding tokens (which are never read).
void fill_arrays(Case& c, Bytes& b) {
    const sdm_p1_desc& d = c.desc;
    const int64_t tokens = d.N * d.C;
    const size_t sizes[kInputs] = {
        static_cast<size_t>(tokens * d.W) * index_bytes(d), static_cast<size_t>(tokens * d.R) * index_bytes(d),
        static_cast<size_t>(tokens * d.W) * value_bytes(d), static_cast<size_t>(tokens * d.R) * value_bytes(d),
        static_cast<size_t>(tokens * d.gate_width) * 4,     static_cast<size_t>(tokens) * 4,
    };
    for (int i = 0; i < kInputs; ++i) c.arrays[i].assign(sizes[i] + kSlack, 0);
    Rng rng{c.seed};
    const int out_of_range = b.u8() / 8, edge_gates = b.u8() / 4, edge_values = b.u8() / 4;
    const int padding_garbage = b.u8();
    const uint64_t keys = d.num_keys >= 1 && d.num_keys <= (int64_t{1} << 32) ? static_cast<uint64_t>(d.num_keys) : 1;
    const uint64_t used_keys = 1 + rng.next() % keys;   // few keys: long slot groups
    const int64_t P = d.num_parallel >= 1 ? d.num_parallel : 1;
    const int64_t valid_last = d.valid_last >= 1 && d.valid_last <= d.C ? d.valid_last : d.C;
    for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t chunk = tok / d.C, t = tok % d.C;
        const bool padding = chunk >= d.N - P && t >= valid_last;
        const bool garbage = padding && rng.chance(padding_garbage);
        const uint64_t base = static_cast<uint64_t>(chunk % P) * static_cast<uint64_t>(d.stream_offset);
        for (int lane = 0; lane < d.W + d.R; ++lane) {
            const bool write = lane < d.W;
            const int idx = write ? kIdx : qIdx, val = write ? kVal : qVal;
            const size_t i = static_cast<size_t>(tok * (write ? d.W : d.R) + (write ? lane : lane - d.W));
            const bool wild = garbage || rng.chance(out_of_range);
            store_id(c, idx, i,
                     wild ? edge_id(base, d, rng.next()) : static_cast<int64_t>(base + rng.next() % used_keys));
            float v = std::ldexp(rng.unit(), static_cast<int>(rng.next() % 40) - 20);
            if (garbage || rng.chance(edge_values)) v = kEdgeValues[rng.next() % count_of(kEdgeValues)];
            store_value(c, val, i, v, rng.chance(4) ? &rng : nullptr);
        }
        for (int64_t lane = 0; lane < d.gate_width; ++lane) {
            float g = -3.0f * std::fabs(rng.unit());
            if (garbage || rng.chance(edge_gates)) g = kEdgeGates[rng.next() % count_of(kEdgeGates)];
            std::memcpy(c.arrays[gGate].data() + static_cast<size_t>(tok * d.gate_width + lane) * 4, &g, 4);
        }
        const float beta = garbage ? kNaN : std::fabs(rng.unit());
        std::memcpy(c.arrays[bBeta].data() + static_cast<size_t>(tok) * 4, &beta, 4);
    }
}

// Per-stream lengths for a runnable case, from the bytes after its steps (a case of older
// bytes keeps its meaning where they run out there; trailing bytes may give it lengths): each stream's length 0, 1, a multiple of
// C, the whole stream or any length between, now and then one outside 0..steps * C; the
// dtype int32 or int64, now and then one the library refuses.
void fill_lengths(Case& c, Bytes& b) {
    const sdm_p1_desc& d = c.desc;
    // A byte of 192 or more gives lengths: bytes past the end (zeros) give none.
    if (d.num_parallel < 1 || d.N % d.num_parallel != 0 || b.u8() < 192) return;
    const int64_t streams = d.num_parallel, most = d.N / d.num_parallel * d.C;
    const uint8_t kind = b.u8();
    c.lengths_dtype = kind % 16 == 15 ? SDM_P1_DTYPE_FLOAT32 : kind % 2 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    const size_t bytes = c.lengths_dtype == SDM_P1_DTYPE_INT64 ? 8 : 4;
    c.arrays[kLengths].assign(static_cast<size_t>(streams) * bytes, 0);
    for (int64_t s = 0; s < streams; ++s) {
        const uint8_t r = b.u8();
        int64_t len;
        switch (r % 8) {
            case 0:
                len = 0;
                break;
            case 1:
                len = 1;
                break;
            case 2:
                len = most;
                break;
            case 3:
                len = (r / 8) % (most / d.C + 1) * d.C;
                break;
            case 4:
                len = r % 32 == 4 ? -1 : r % 32 == 12 ? most + 1 : r / 8 % (most + 1);
                break;
            default:
                len = b.u8() % (most + 1);
                break;
        }
        if (bytes == 4) {
            const int32_t v = static_cast<int32_t>(len);
            std::memcpy(c.arrays[kLengths].data() + s * 4, &v, 4);
        } else {
            std::memcpy(c.arrays[kLengths].data() + s * 8, &len, 8);
        }
    }
}

StructForm struct_form(Bytes& b) { return b.chance(16) ? static_cast<StructForm>(b.u8() % 4) : StructForm::Plain; }

// The fields without an upstream gradient, each of which a call may give one (refused).
constexpr int kNotDifferentiable[] = {
    SDM_P1_FIELD_IS_LAST, SDM_P1_FIELD_IS_ONLY, SDM_P1_FIELD_PAYLOAD, SDM_P1_FIELD_POS_K,   SDM_P1_FIELD_POS_Q,
    SDM_P1_FIELD_Q_LAST,  SDM_P1_FIELD_Q_ONLY,  SDM_P1_FIELD_SPAY_K,  SDM_P1_FIELD_SPAY_Q,  SDM_P1_FIELD_SPAY_RANK,
    SDM_P1_FIELD_TILES_K, SDM_P1_FIELD_TILES_Q, SDM_P1_FIELD_SEGB_K,  SDM_P1_FIELD_DC_KPOS, SDM_P1_FIELD_DC_BPRE,
    SDM_P1_FIELD_DC_REC,  SDM_P1_FIELD_REPEATS,
};

// Upstream values: ordinary ones and, by a knob, NaN, infinite, huge, subnormal and zeros.
constexpr float kEdgeUpstream[] = {
    kNaN, kInf, -kInf, 3.4028235e38f, -3.4028235e38f, 1e-40f, -1e-45f, 0.0f, -0.0f, 1e30f, 1.1754944e-38f, -1e20f,
};

// The upstream gradient of field f for call `index`: ordinary values, a share `edges` / 256 of
// edge values, and a share `garbage` / 256 of the never-read cells NaN or random bits.
std::vector<uint8_t> upstream_values(const Case& c, int f, int index, int edges, int garbage) {
    const size_t n = upstream_elements(c.desc, f), bytes = upstream_element_bytes(c.desc, f);
    std::vector<uint8_t> out(n * bytes);
    Rng rng{c.seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(f + 1)) ^ static_cast<uint64_t>(index) << 56};
    const bool lengths_valid = valid_tokens(c, 0) >= 0;
    for (size_t i = 0; i < n; ++i) {
        float v = std::ldexp(rng.unit(), static_cast<int>(rng.next() % 17) - 8);
        const bool unread = lengths_valid && garbage > 0 && unread_upstream(c, f, i);
        if (rng.chance(edges) || (unread && rng.chance(garbage)))
            v = kEdgeUpstream[rng.next() % count_of(kEdgeUpstream)];
        uint8_t* p = out.data() + i * bytes;
        if (bytes == 2) {
            const bool raw = unread ? rng.chance(garbage) : rng.chance(edges / 4);
            const uint16_t bits = raw ? static_cast<uint16_t>(rng.next()) : to_bf16(v);
            std::memcpy(p, &bits, 2);
        } else if (unread && rng.chance(garbage / 2)) {
            const uint32_t bits = static_cast<uint32_t>(rng.next());
            std::memcpy(p, &bits, 4);
        } else {
            std::memcpy(p, &v, 4);
        }
    }
    return out;
}

// The backward section: the plans' backward and grad_dtype and the calls (see fuzz_case.h).
// Zero bytes (past the end) give no backward; after the first byte, zero bytes give the
// plainest call: the forward's payload, every upstream gradient and every input gradient.
void decode_backward(Case& c, Bytes& b) {
    sdm_p1_desc& d = c.desc;
    const uint8_t on = b.u8();
    if (on < 64) return;
    const int32_t odd_backward[] = {0, SDM_P1_UNSET, 2, INT32_MIN};   // 2 and INT32_MIN: refused
    d.backward = on % 16 == 15 ? odd_backward[b.u8() % 4] : 1;
    const int32_t value_dtype = d.value_dtype;
    const int32_t odd_grad[] = {SDM_P1_DTYPE_INT32, 7, SDM_P1_DTYPE_INT8, INT32_MIN};
    switch (b.u8() % 8) {
        case 0:
        case 1:
            d.grad_dtype = 0;
            break;
        case 2:
            d.grad_dtype = SDM_P1_UNSET;
            break;
        case 3:
        case 4:
            d.grad_dtype = SDM_P1_DTYPE_FLOAT32;
            break;
        case 5:
            d.grad_dtype = value_dtype;
            break;
        case 6:
            d.grad_dtype = SDM_P1_DTYPE_BFLOAT16;   // refused unless the values are bfloat16
            break;
        default:
            d.grad_dtype = odd_grad[b.u8() % 4];
            break;
    }
    if (!c.runnable) return;   // created (or refused), never executed
    const int calls = 1 + b.u8() % 3;
    for (int k = 0; k < calls; ++k) {
        BackwardCall call{};
        const uint8_t mode = b.u8() % 8;
        call.payload = mode < 3   ? PayloadMode::Forward
                       : mode < 5 ? PayloadMode::Null
                       : mode < 7 ? PayloadMode::Corrupt
                                  : PayloadMode::Stale;
        if (call.payload == PayloadMode::Corrupt) {
            call.corruption = static_cast<Corruption>(b.u8() % static_cast<uint8_t>(Corruption::Count));
            call.corrupt_arg = b.u32();
        }
        const uint8_t misuse = b.u8();
        call.misuse = misuse >= 216
                          ? static_cast<BackwardMisuse>(1 + misuse % (static_cast<uint8_t>(BackwardMisuse::Count) - 1))
                          : BackwardMisuse::None;
        const uint8_t count = b.u8();
        call.count = count >= 232 ? count % SDM_P1_FIELD_COUNT : SDM_P1_FIELD_COUNT;
        const uint8_t nondiff = b.u8();
        call.nondiff_field = nondiff >= 224 ? kNotDifferentiable[nondiff % count_of(kNotDifferentiable)] : -1;
        const uint32_t upstream = ~(b.u8() | static_cast<uint32_t>(b.u8()) << 8);   // bit per differentiable field
        const uint8_t requested = b.u8();
        call.requested = ~requested & 15u;
        call.misaligned = requested >= 240 ? 1u << (requested % 4) : 0u;
        call.out_form = struct_form(b);
        const uint8_t flags = b.u8();
        call.check_unread = (flags & 1u) == 0;
        call.twice = (flags & 2u) == 0;
        const int edges = b.u8() / 4, garbage = b.u8();
        int bit = 0;
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!differentiable(f)) continue;
            if ((upstream >> bit++ & 1u) != 0) call.up[f] = upstream_values(c, f, k, edges, garbage);
        }
        if (call.nondiff_field >= 0) {
            // Room for the field's view, so that a library reading it reads nothing out of bounds.
            call.up[call.nondiff_field].assign(static_cast<size_t>(d.N * d.C * (d.W + d.R)) * 16 + 64, 0);
        }
        c.backward.push_back(std::move(call));
    }
}

}   // namespace

uint32_t Bytes::u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8()) << (8 * i);
    return v;
}

uint64_t Bytes::u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }

Case decode_case(const uint8_t* data, size_t size) {
    Bytes b(data, size);
    Case c{};
    const sdm_p1_desc initialized = SDM_P1_DESC_INITIALIZER;
    c.desc = initialized;
    sdm_p1_desc& d = c.desc;
    // A quarter of the cases probe the limits: then each field may take an edge value.
    const bool probe = b.chance(64);
    auto maybe_edge = [&](int64_t usual) { return probe && b.chance(64) ? edge(b) : usual; };

    d.N = maybe_edge(1 + b.u8() % 8);
    d.C = maybe_edge(b.chance(24) ? 1 + b.u8() : 1 + b.u8() % 16);
    d.W = maybe_edge(b.chance(16) ? 1 + b.u8() % 64 : 1 + b.u8() % 6);
    d.R = maybe_edge(b.chance(16) ? 1 + b.u8() % 64 : 1 + b.u8() % 6);
    const int64_t n_for_p = d.N >= 1 && d.N <= 256 ? d.N : 1;
    switch (b.u8() % 4) {
        case 0:
            d.num_parallel = 1;
            break;
        case 1:
            d.num_parallel = n_for_p;
            break;
        case 2:
            d.num_parallel = n_for_p % 2 == 0 ? 2 : 1;
            break;
        default:
            d.num_parallel = 1 + b.u8() % n_for_p;
            break;   // may not divide N
    }
    d.num_parallel = maybe_edge(d.num_parallel);
    d.num_keys = maybe_edge(b.chance(32) ? 1 + b.u32() % (1u << 20) : 1 + b.u8() % 40);
    switch (b.u8() % 4) {
        case 0:
            d.stream_offset = d.num_keys;
            break;
        case 1:
            d.stream_offset = static_cast<int64_t>(static_cast<uint64_t>(d.num_keys) + b.u8());
            break;
        case 2:
            d.stream_offset = 0;
            break;
        default:
            d.stream_offset = b.u32();
            break;
    }
    d.stream_offset = maybe_edge(d.stream_offset);
    const int64_t c_for_valid = d.C >= 1 && d.C <= 256 ? d.C : 1;
    d.valid_last = maybe_edge(b.chance(64) ? SDM_P1_UNSET : 1 + b.u8() % c_for_valid);
    d.index_dtype = static_cast<int32_t>(maybe_edge(b.u8() % 2 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32));
    d.value_dtype = static_cast<int32_t>(maybe_edge(b.u8() % 2 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32));
    d.gate_width = maybe_edge(b.u8() % 2 ? d.W : 1);
    d.need_read_groups = static_cast<int32_t>(maybe_edge(static_cast<int32_t>(b.u8() % 3) - 1));
    switch (b.u8() % 5) {
        case 0:
            d.det_fields = SDM_P1_UNSET;
            break;
        case 1:
            d.det_fields = SDM_P1_DET_SHIPPED;
            break;
        case 2:
            d.det_fields = SDM_P1_DET_ALL;
            break;
        case 3:
            d.det_fields = (b.u8() | b.u8() << 8) & SDM_P1_DET_ALL;
            break;
        default:
            d.det_fields = probe ? static_cast<int64_t>(b.u64()) : SDM_P1_DET_ALL;
            break;   // undefined bits
    }
    switch (b.u8() % 3) {
        case 0:
            d.rec_tile = SDM_P1_UNSET;
            break;
        case 1:
            d.rec_tile = 0;
            break;
        default:
            d.rec_tile = 1 + b.u8() % 64;
            break;
    }
    d.rec_tile = maybe_edge(d.rec_tile);
    const int32_t backends[] = {SDM_P1_BACKEND_AUTO, SDM_P1_BACKEND_CPU, SDM_P1_BACKEND_CUDA, 7};
    d.backend = probe && b.chance(32) ? backends[b.u8() % 4] : SDM_P1_BACKEND_CPU;
    d.device = static_cast<int32_t>(maybe_edge(b.chance(128) ? SDM_P1_UNSET : b.u8() % 3));
    d.output_mode = static_cast<int32_t>(maybe_edge(b.u8() % 2));
    if (probe && b.chance(8)) d.magic = b.u32();
    if (probe && b.chance(8)) d.version = b.u32();
    c.threads = static_cast<int32_t>(maybe_edge(2 + b.u8() % 7));

    c.runnable = shape_runnable(d);
    switch (b.u8() % 4) {
        case 0:
        case 1:
            c.allocator = c.runnable ? AllocatorKind::Default : AllocatorKind::Capped;
            break;
        case 2:
            c.allocator = AllocatorKind::Capped;
            break;
        default:
            c.allocator = !probe          ? AllocatorKind::Capped
                          : b.chance(128) ? AllocatorKind::HalfSet
                                          : AllocatorKind::Misaligned;
            break;
    }
    c.fail_allocation = b.chance(32) ? 1 + b.u8() % 3 : 0;
    c.desc_form = struct_form(b);
    c.inputs_form = struct_form(b);
    c.null_inputs = b.chance(16) ? 1u << (b.u8() % kInputs) : 0u;
    c.misaligned_inputs = b.chance(12) ? 1u << (b.u8() % kInputs) : 0u;
    c.seed = b.u64();
    if (c.runnable) fill_arrays(c, b);
    const int steps = 1 + b.u8() % 12;
    for (int s = 0; s < steps; ++s) {
        const Op op = static_cast<Op>(b.u8() % static_cast<uint8_t>(Op::Count));
        c.steps.push_back(Step{op, b.u32()});
    }
    if (c.runnable) fill_lengths(c, b);
    decode_backward(c, b);
    return c;
}

void poke(Case& c, uint32_t arg) {
    const int input = static_cast<int>(arg % kInputs);
    const size_t n = elements(c, input);
    if (n == 0) return;
    const size_t i = (arg >> 3) % n;
    const uint32_t kind = arg >> 24;
    if (input == kIdx || input == qIdx) {
        const int64_t P = c.desc.num_parallel >= 1 ? c.desc.num_parallel : 1;
        const int64_t per_token = input == kIdx ? c.desc.W : c.desc.R;
        const int64_t chunk = static_cast<int64_t>(i) / per_token / c.desc.C;
        const uint64_t base = static_cast<uint64_t>(chunk % P) * static_cast<uint64_t>(c.desc.stream_offset);
        store_id(c, input, i, edge_id(base, c.desc, kind));
    } else if (input == gGate) {
        const float g = kEdgeGates[kind % count_of(kEdgeGates)];
        std::memcpy(c.arrays[gGate].data() + i * 4, &g, 4);
    } else {
        store_value(c, input, i, kEdgeValues[kind % count_of(kEdgeValues)], nullptr);
    }
}

bool differentiable(int f) {
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
        case SDM_P1_FIELD_LOG_K:
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_REX:
        case SDM_P1_FIELD_CPE:
        case SDM_P1_FIELD_K_EFF:
        case SDM_P1_FIELD_Q_W:
        case SDM_P1_FIELD_KREC:
        case SDM_P1_FIELD_KSPA:
        case SDM_P1_FIELD_QREC:
        case SDM_P1_FIELD_QREC8:
            return true;
        default:
            return false;
    }
}

size_t upstream_elements(const sdm_p1_desc& d, int f) {
    const size_t tokens = static_cast<size_t>(d.N * d.C);
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK:
            return tokens * static_cast<size_t>(d.C);
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_Q_W:
        case SDM_P1_FIELD_QREC:
        case SDM_P1_FIELD_QREC8:
            return tokens * static_cast<size_t>(d.R);
        case SDM_P1_FIELD_KREC:
            return 2 * tokens * static_cast<size_t>(d.W);
        case SDM_P1_FIELD_LOG_K:
        case SDM_P1_FIELD_REX:
        case SDM_P1_FIELD_CPE:
        case SDM_P1_FIELD_K_EFF:
        case SDM_P1_FIELD_KSPA:
            return tokens * static_cast<size_t>(d.W);
        default:
            return 0;
    }
}

size_t upstream_element_bytes(const sdm_p1_desc& d, int f) {
    const bool value_typed = f == SDM_P1_FIELD_CPE || f == SDM_P1_FIELD_K_EFF || f == SDM_P1_FIELD_Q_W;
    return value_typed ? value_bytes(d) : 4;
}

int64_t valid_tokens(const Case& c, int64_t chunk) {
    const sdm_p1_desc& d = c.desc;
    const int64_t P = d.num_parallel;
    if (P < 1 || P > d.N || d.N % P != 0) return -1;   // (the plan is refused)
    const std::vector<uint8_t>& lengths = c.arrays[kLengths];
    if (lengths.empty()) {
        const int64_t last = d.valid_last == SDM_P1_UNSET ? d.C : d.valid_last;
        if (last < 1 || last > d.C) return -1;
        return chunk >= d.N - P ? last : d.C;
    }
    if (c.lengths_dtype != SDM_P1_DTYPE_INT32 && c.lengths_dtype != SDM_P1_DTYPE_INT64) return -1;
    const int64_t most = d.N / P * d.C;
    int64_t mine = 0;
    for (int64_t s = 0; s < P; ++s) {
        int64_t len;
        if (c.lengths_dtype == SDM_P1_DTYPE_INT64) {
            std::memcpy(&len, lengths.data() + s * 8, 8);
        } else {
            int32_t narrow;
            std::memcpy(&narrow, lengths.data() + s * 4, 4);
            len = narrow;
        }
        if (len < 0 || len > most) return -1;
        if (s == chunk % P) mine = len;
    }
    return std::min(std::max(mine - chunk / P * d.C, int64_t{0}), d.C);
}

bool unread_upstream(const Case& c, int f, size_t i) {
    const sdm_p1_desc& d = c.desc;
    const int64_t C = d.C, W = d.W, R = d.R, e = static_cast<int64_t>(i);
    switch (f) {
        case SDM_P1_FIELD_A:
        case SDM_P1_FIELD_QK: {
            const int64_t tv = valid_tokens(c, e / (C * C)), row = e / C % C, col = e % C;
            return row >= tv || col >= tv || (f == SDM_P1_FIELD_A ? col >= row : col > row);
        }
        case SDM_P1_FIELD_LOG_Q:
        case SDM_P1_FIELD_Q_W:
            return e / R % C >= valid_tokens(c, e / (C * R));
        case SDM_P1_FIELD_QREC:
        case SDM_P1_FIELD_QREC8:   // by Q-row index: the padding entries sort last
            return e % (C * R) >= valid_tokens(c, e / (C * R)) * R;
        case SDM_P1_FIELD_KREC:
            return e / 2 % (C * W) >= valid_tokens(c, e / 2 / (C * W)) * W;
        case SDM_P1_FIELD_KSPA:
            return e % (C * W) >= valid_tokens(c, e / (C * W)) * W;
        default:   // log_k, rex, cpe, k_eff: [N, C, W]
            return e / W % C >= valid_tokens(c, e / (C * W));
    }
}

namespace {

constexpr uint32_t kLaneBits = 0xFFu, kReadBit = 1u << 8, kPaddingBit = 1u << 17, kHeadBit = 1u << 31;

int word_token(uint32_t w) { return static_cast<int>(w >> 9 & 0xFFu); }

}   // namespace

void corrupt_payload(const Case& c, const BackwardCall& call, int64_t row, std::vector<int32_t>& payload) {
    const sdm_p1_desc& d = c.desc;
    const int64_t n = d.C * (d.W + d.R);
    const uint32_t arg = call.corrupt_arg;
    const int64_t chunk = static_cast<int64_t>(arg % static_cast<uint32_t>(d.N));
    int64_t p1 = (arg >> 4 & 0xFFFu) % n, p2 = (arg >> 16 & 0xFFFu) % n;
    if (p1 == p2) p2 = (p1 + 1) % n;
    if ((arg >> 28 & 3u) == 0) p1 = 0;   // the chunk's first word: its head bit, a swap with it
    int32_t* w = payload.data() + chunk * row;
    uint32_t u = static_cast<uint32_t>(w[p1]);
    switch (call.corruption) {
        case Corruption::Swap:
            std::swap(w[p1], w[p2]);
            return;
        case Corruption::Duplicate:
            w[p2] = w[p1];
            return;
        case Corruption::OutOfRange: {
            const uint32_t lanes = static_cast<uint32_t>((u & kReadBit) != 0u ? d.R : d.W);
            if ((arg >> 30 & 1u) != 0 && d.C < 256) {
                u = (u & ~(0xFFu << 9)) | static_cast<uint32_t>(d.C + (arg >> 31) * (255 - d.C)) << 9;
            } else {
                u = (u & ~kLaneBits) | (lanes + (arg >> 31) * (255 - lanes));
            }
            break;
        }
        case Corruption::PaddingBit:
            u ^= kPaddingBit;
            break;
        case Corruption::HeadBit:
            u ^= kHeadBit;
            break;
        case Corruption::Unread:
            // Bits 18-30 of every word of the chunk, and every word past n in every chunk.
            for (int64_t r = 0; r < n; ++r)
                w[r] = static_cast<int32_t>(static_cast<uint32_t>(w[r]) ^ (arg & 0x7FFC0000u));
            for (int64_t k = 0; k < d.N; ++k) {
                for (int64_t r = n; r < row; ++r)
                    payload[static_cast<size_t>(k * row + r)] ^= static_cast<int32_t>(arg | 1u);
            }
            return;
        case Corruption::Misaligned:
        case Corruption::Count:
            return;
    }
    w[p1] = static_cast<int32_t>(u);
}

std::string payload_violation(const Case& c, const int32_t* payload, int64_t row, bool ids) {
    const sdm_p1_desc& d = c.desc;
    const int W = static_cast<int>(d.W), R = static_cast<int>(d.R), WR = W + R;
    const int64_t n = d.C * WR;
    std::vector<bool> seen(static_cast<size_t>(n));
    for (int64_t chunk = 0; chunk < d.N; ++chunk) {
        const int64_t tv = valid_tokens(c, chunk);
        std::fill(seen.begin(), seen.end(), false);
        // With the ids: each word's (slot, entry) above the previous word's (a padding entry's
        // slot above every valid one's), and a valid entry's head bit exactly where the slot
        // differs from the previous word's; after the rule below passes for the whole chunk.
        std::string order;
        int64_t slot_before = 0, entry_before = -1;
        for (int64_t r = 0; r < n; ++r) {
            const uint32_t w = static_cast<uint32_t>(payload[chunk * row + r]);
            const int t = word_token(w), lane = static_cast<int>(w & kLaneBits);
            const bool read = (w & kReadBit) != 0u, padding = (w & kPaddingBit) != 0u;
            const int64_t entry = static_cast<int64_t>(t) * WR + (read ? W + lane : lane);
            bool bad = t >= d.C || lane >= (read ? R : W);             // no entry of the chunk
            bad = bad || padding != (t >= tv);                         // the padding bit
            bad = bad || seen[static_cast<size_t>(entry)];             // named twice
            bad = bad || (padding && r < tv * WR);                     // padding before a valid entry
            bad = bad || (r == 0 && tv > 0 && (w & kHeadBit) == 0u);   // no group head first
            if (bad) return "payload[" + std::to_string(chunk) + ", " + std::to_string(r) + "]";
            seen[static_cast<size_t>(entry)] = true;
            if (!ids || !order.empty()) continue;
            int64_t slot = std::numeric_limits<int64_t>::max();
            if (!padding) {
                const int64_t tok = chunk * d.C + t;
                const int64_t id = read ? load_id(c, qIdx, static_cast<size_t>(tok * R + lane))
                                        : load_id(c, kIdx, static_cast<size_t>(tok * W + lane));
                slot = id - (chunk % d.num_parallel) * d.stream_offset;   // in range: the forward passed
            }
            const bool after = r == 0 || slot > slot_before || (slot == slot_before && entry > entry_before);
            const bool starts = r == 0 || slot != slot_before;
            if (!after || (!padding && ((w & kHeadBit) != 0u) != starts)) {
                order = "payload[" + std::to_string(chunk) + ", " + std::to_string(r) + "]";
            }
            slot_before = slot;
            entry_before = entry;
        }
        if (!order.empty()) return order;
    }
    return "";
}

sdm_p1_inputs inputs_at(const Case& c, const uint8_t* const* bases) {
    const void* p[kInputs];
    for (int i = 0; i < kInputs; ++i) {
        const bool absent = c.arrays[i].empty() || (c.null_inputs >> i & 1u) != 0;
        p[i] = absent ? nullptr : bases[i] + ((c.misaligned_inputs >> i & 1u) != 0 ? 1 : 0);
    }
    sdm_p1_inputs in = SDM_P1_INPUTS_INITIALIZER;
    in.k_idx = p[kIdx];
    in.q_idx = p[qIdx];
    in.k_val = p[kVal];
    in.q_val = p[qVal];
    in.g = static_cast<const float*>(p[gGate]);
    in.beta = static_cast<const float*>(p[bBeta]);
    if (!c.arrays[kLengths].empty()) {
        in.stream_lengths = bases[kLengths];
        in.stream_lengths_dtype = c.lengths_dtype;
    }
    return in;
}

bool ids_given(const Case& c) {
    const auto present = [&](int i) { return !c.arrays[i].empty() && (c.null_inputs >> i & 1u) == 0; };
    return present(kIdx) || present(qIdx);
}

sdm_p1_inputs host_inputs(const Case& c) {
    const uint8_t* bases[kArrays];
    for (int i = 0; i < kArrays; ++i) bases[i] = c.arrays[i].data();
    return inputs_at(c, bases);
}

namespace {

// struct_size and the newer bytes of a buffer whose first member is the library's struct;
// `oldest_size`: the struct's 1.0 layout (sdm_p1_inputs has grown since: 1.2's lengths).
template <typename Buffer>
void apply_form(Buffer& buf, uint32_t* struct_size, size_t library_size, size_t oldest_size, StructForm form) {
    switch (form) {
        case StructForm::Plain:
            *struct_size = static_cast<uint32_t>(library_size);
            break;
        case StructForm::Newer:
            *struct_size = sizeof buf;
            break;
        case StructForm::NewerSet:
            *struct_size = sizeof buf;
            buf.newer[1] = 1;
            break;
        case StructForm::TooShort:
            *struct_size = static_cast<uint32_t>(oldest_size - 8);
            break;
    }
}

}   // namespace

DescBuffer sized_desc(const sdm_p1_desc& desc, StructForm form) {
    DescBuffer buf{};
    buf.desc = desc;
    // The 1.0 layout ends with the allocator (1.3 appended backward and grad_dtype).
    apply_form(buf, &buf.desc.struct_size, sizeof buf.desc, offsetof(sdm_p1_desc, allocator) + sizeof(sdm_p1_allocator),
               form);
    return buf;
}

InputsBuffer sized_inputs(const sdm_p1_inputs& in, StructForm form) {
    InputsBuffer buf{};
    buf.in = in;
    apply_form(buf, &buf.in.struct_size, sizeof buf.in, offsetof(sdm_p1_inputs, stream_lengths), form);
    return buf;
}

InputGradsBuffer sized_input_grads(const sdm_p1_input_grads& out, StructForm form) {
    InputGradsBuffer buf{};
    buf.out = out;
    // Its oldest layout is 1.3's, the whole struct of this header.
    apply_form(buf, &buf.out.struct_size, sizeof buf.out, offsetof(sdm_p1_input_grads, beta) + sizeof(float*), form);
    return buf;
}

}   // namespace fuzz
