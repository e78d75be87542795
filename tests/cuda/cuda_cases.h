// Test cases for tests/cuda/test_cuda.cpp: a case descriptor, seeded random inputs built from it
// (the case families of bindings/python/tests/test_reference.py), and the descriptor the
// library gets. Host code only; nothing here touches CUDA.
#ifndef SDM_P1_TESTS_CUDA_CASES_H
#define SDM_P1_TESTS_CUDA_CASES_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sdm/phase1.h"
#include "../splitmix64.h"

namespace cuda_test {

// ---- random numbers: splitmix64, the same sequence on every platform ---------------------

class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next() { return splitmix64(&s_); }
    // Uniform in [0, n), n >= 1.
    int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
    // Uniform in [lo, hi).
    double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double normal() {   // Box-Muller; good enough for test data
        const double u = uniform(0x1.0p-53, 1.0), v = uniform(0.0, 1.0);
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }
    template <typename T, size_t K>
    T pick(const T (&a)[K]) {
        return a[below(static_cast<int64_t>(K))];
    }

private:
    uint64_t s_;
};

inline uint64_t mix_seed(uint64_t a, uint64_t b) {
    Rng r(a * 0x100000001B3ull ^ b);
    return r.next();
}

inline uint64_t name_seed(const std::string& s) {
    uint64_t h = 1469598103934665603ull;   // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// ---- the case descriptor ------------------------------------------------------------------

// How K slot ids are drawn (stream-relative): distinct per token from [0, num_keys); random
// (repeats within a token allowed); distinct per token from a per-chunk pool of `pool` keys;
// likewise from the `pool` highest keys; distinct per token by a Zipf law of exponent `zipf`
// over the keys (rank r with probability proportional to r^-zipf, ranks mapped to slots by a
// random permutation fixed per case: a few popular slots, as trained memories have).
enum class Keys { Distinct, Random, Pool, Top, Zipf };
// How Q slot ids are drawn: `qhit` of them from the chunk's K ids, the rest uniform; by the
// K ids' Zipf law, distinct per token; from the K ids of the token and the three before it
// (reads that follow recent writes); all on the stream's slot 0.
enum class Reads { Hit, Zipf, Recent, Slot0 };
// MixedChunks: every third chunk (c % 3 == 1) has Mixed gates (log-cumsums of the wide form,
// left to the wide-log kernel), the others Normal ones: both kernels' chunks in one execute.
enum class Gates {
    Zero,
    Tiny,
    Strong,
    Normal,
    Signed,
    Positive,
    Extreme,
    ExtremeSigned,
    Subnormal,
    Mixed,
    Logsigmoid,
    MixedChunks
};
// NonFinite: normal values, with NaN, +-inf, 0 and 1e30 among them (an eighth each).
enum class Values { Normal, Mixed, One, Wide, NonFinite };
// Chunks shaped for the lean kernel's limits (kernels/lean/), stream-relative ids otherwise
// distinct in the chunk (K and Q alike), with `lean_param`:
//   Crowd: lean_param distinct slots in one bucket of the lean sort (its keys: the chunk's
//     first K entries), no other key in that bucket (kLeanBucketLimit = 16 is the limit);
//   Pairs: lean_param slots written by exactly two tokens (2 * lean_param grouped entries;
//     the chunk's limit is n / 4 where shared memory allows);
//   Shared: the first lean_param tokens write the same W slots (token k's unit of a then has
//     k * W pair terms; the limit is 64 a unit), their first reads read them too;
//   Repeats: every token writes its lane-0 slot again on lane 1 (a repeat) and its lane-2
//     slot is the previous token's lane-0 slot; its first read reads its lane-0 slot;
//   HotChunks: every third chunk (c % 3 == 1) has every token write the same W slots (a
//     bucket past the limit: the general kernel's), the others distinct slots;
//   Group: the even chunks' first lean_param write entries (token by token, every lane, so
//     a token repeats the slot) on one slot: a group of exactly lean_param entries (the lean
//     backward's limits: kSmallGroup = 32 entries a lane each, hot_max a warp), the odd
//     chunks distinct slots.
//   Column: one slot for lean_param entries of distinct tokens, token by token: each token's
//     lane-0 write, then its reads on every lane as far as needed (a group of exactly
//     lean_param entries: no write repeats its token's slot; reads of one token repeat it).
enum class Lean { None, Crowd, Pairs, Shared, Repeats, HotChunks, Group, Column };

constexpr int64_t kRecordBits = SDM_P1_DET_KREC | SDM_P1_DET_QREC | SDM_P1_DET_QREC8;
// What the Python binding asks for when beta is given and det_fields is not.
constexpr int64_t kShippedWithRecords =
    SDM_P1_DET_SHIPPED | SDM_P1_DET_KREC | SDM_P1_DET_KSPA | SDM_P1_DET_QREC | SDM_P1_DET_TILES;

struct CaseSpec {
    std::string name;
    int64_t N = 2, C = 16, W = 4, R = 4, P = 1;
    int64_t num_keys = 64;
    int64_t stream_offset = -1;   // -1: num_keys + 17 with several streams, else 0
    int64_t valid_last = -1;      // -1: C
    bool idx64 = false;
    bool bf16 = false;
    bool per_write = false;   // gates [N, C, W] instead of [N, C, 1]
    Keys keys = Keys::Pool;
    int64_t pool = 0;    // 0: max(W, C * W / 4)
    double qhit = 0.7;   // share of Q ids drawn from the chunk's K ids (Reads::Hit)
    double zipf = 1.1;   // the exponent of Keys::Zipf and Reads::Zipf
    Reads reads = Reads::Hit;
    Lean lean = Lean::None;
    int64_t lean_param = 0;
    Gates gates = Gates::Normal;
    Values values = Values::Normal;
    bool read_groups = true;
    int64_t det = SDM_P1_UNSET;   // SDM_P1_UNSET: the library's default (SDM_P1_DET_SHIPPED)
    int64_t rec_tile = 0;
    uint64_t seed = 1;
    // Per-stream lengths (sdm_p1_inputs.stream_lengths, as int64 or int32); empty: the
    // valid_last rule.
    std::vector<int64_t> lengths;
    bool lengths64 = false;
    // The plan may run the backward (sdm_p1_desc.backward), with float32 value gradients
    // where grad_f32 (else the value dtype).
    bool backward = false;
    bool grad_f32 = false;

    int64_t offset() const {
        if (stream_offset >= 0) return stream_offset;
        return P > 1 ? num_keys + 17 : 0;
    }
    int64_t last_valid() const { return valid_last > 0 ? valid_last : C; }
    int64_t gate_width() const { return per_write ? W : 1; }
    int64_t det_resolved() const { return det == SDM_P1_UNSET ? SDM_P1_DET_SHIPPED : det; }
    bool needs_beta() const { return (det_resolved() & SDM_P1_DET_KSPA) != 0; }
    // The records hold absolute ids in 32 bits; only then may they be requested.
    bool records_fit() const { return (P - 1) * offset() + num_keys - 1 <= INT32_MAX; }
    int64_t tokens() const { return N * C; }
    int64_t steps() const { return N / P; }
    // Valid tokens of chunk c: by its stream's length (clamped: out-of-range lengths are bad
    // data, whose outputs are not compared), else the valid_last rule.
    int64_t chunk_valid(int64_t c) const {
        if (lengths.empty()) return c >= N - P ? last_valid() : C;
        const int64_t v = lengths[static_cast<size_t>(c % P)] - c / P * C;
        return v < 0 ? 0 : v > C ? C : v;
    }

    // Chainable setters, so the case lists read as one line per case.
    CaseSpec& streams(int64_t p, int64_t offset = -1) {
        P = p;
        stream_offset = offset;
        return *this;
    }
    CaseSpec& valid(int64_t v) {
        valid_last = v;
        return *this;
    }
    CaseSpec& ids64() {
        idx64 = true;
        return *this;
    }
    CaseSpec& bfloat16() {
        bf16 = true;
        return *this;
    }
    CaseSpec& gates_per_write() {
        per_write = true;
        return *this;
    }
    CaseSpec& key_mode(Keys k, int64_t pool_size = 0) {
        keys = k;
        pool = pool_size;
        return *this;
    }
    CaseSpec& hits(double q) {
        qhit = q;
        return *this;
    }
    CaseSpec& skewed(double exponent) {
        keys = Keys::Zipf;
        reads = Reads::Zipf;
        zipf = exponent;
        return *this;
    }
    CaseSpec& read_mode(Reads r) {
        reads = r;
        return *this;
    }
    CaseSpec& lean_chunks(Lean l, int64_t param = 0) {
        lean = l;
        lean_param = param;
        return *this;
    }
    CaseSpec& gate_kind(Gates g) {
        gates = g;
        return *this;
    }
    CaseSpec& value_kind(Values v) {
        values = v;
        return *this;
    }
    CaseSpec& fields(int64_t d) {
        det = d;
        return *this;
    }
    CaseSpec& no_read_groups() {
        read_groups = false;
        return *this;
    }
    CaseSpec& tile(int64_t L) {
        rec_tile = L;
        return *this;
    }
    CaseSpec& stream_lengths(std::vector<int64_t> l, bool as_int64 = false) {
        lengths = std::move(l);
        lengths64 = as_int64;
        return *this;
    }
};

inline CaseSpec spec(const std::string& name, int64_t N, int64_t C, int64_t W, int64_t R, int64_t num_keys) {
    CaseSpec s;
    s.name = name;
    s.N = N;
    s.C = C;
    s.W = W;
    s.R = R;
    s.num_keys = num_keys;
    return s;
}

// Drops the record bits where the ids do not fit them (the library would refuse the plan).
inline CaseSpec fit_records(CaseSpec s) {
    if (!s.records_fit() && s.det != SDM_P1_UNSET) s.det &= ~kRecordBits;
    return s;
}

inline sdm_p1_desc make_desc(const CaseSpec& s, int32_t backend, int32_t mode = SDM_P1_OUTPUTS_PLAN) {
    sdm_p1_desc d = SDM_P1_DESC_INITIALIZER;
    d.N = s.N;
    d.C = s.C;
    d.W = s.W;
    d.R = s.R;
    d.num_parallel = s.P;
    d.stream_offset = s.offset();
    d.num_keys = s.num_keys;
    d.valid_last = s.last_valid();
    d.index_dtype = s.idx64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
    d.value_dtype = s.bf16 ? SDM_P1_DTYPE_BFLOAT16 : SDM_P1_DTYPE_FLOAT32;
    d.gate_width = s.gate_width();
    d.need_read_groups = s.read_groups ? 1 : 0;
    d.det_fields = s.det;
    d.rec_tile = s.rec_tile;
    d.backend = backend;
    d.num_threads = 0;   // CPU: every hardware thread (the bits never depend on it)
    d.output_mode = mode;
    d.backward = s.backward ? 1 : 0;
    d.grad_dtype = s.grad_f32 ? SDM_P1_DTYPE_FLOAT32 : 0;
    return d;
}

// " len=i32{3,0,16}" for a case with per-stream lengths (the first 8), else "".
inline std::string describe_lengths(const CaseSpec& s) {
    if (s.lengths.empty()) return "";
    std::string out = s.lengths64 ? " len=i64{" : " len=i32{";
    for (size_t i = 0; i < s.lengths.size() && i < 8; ++i) out += (i ? "," : "") + std::to_string(s.lengths[i]);
    return out + (s.lengths.size() > 8 ? ",...}" : "}");
}

inline std::string describe(const CaseSpec& s) {
    char b[320];
    std::snprintf(b, sizeof b,
                  "%s [N=%lld C=%lld W=%lld R=%lld P=%lld keys=%lld off=%lld vl=%lld %s %s g%s "
                  "det=%lld rg=%d L=%lld seed=%llu]",
                  s.name.c_str(), (long long)s.N, (long long)s.C, (long long)s.W, (long long)s.R, (long long)s.P,
                  (long long)s.num_keys, (long long)s.offset(), (long long)s.last_valid(), s.idx64 ? "i64" : "i32",
                  s.bf16 ? "bf16" : "f32", s.per_write ? "W" : "1", (long long)s.det, s.read_groups ? 1 : 0,
                  (long long)s.rec_tile, (unsigned long long)s.seed);
    return b + describe_lengths(s);
}

// ---- inputs -------------------------------------------------------------------------------

inline uint16_t bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7FC0;
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);   // nearest even
}

// The arrays exactly as the library reads them (index and value dtypes applied).
struct Encoded {
    std::vector<unsigned char> k_idx, q_idx, k_val, q_val, g, beta;
    std::vector<unsigned char> lengths;   // empty: no stream_lengths
    int32_t lengths_dtype = 0;
};

// Inputs in wide types; encode() gives the library's view. Tests mutate these (bad data).
struct HostInputs {
    bool idx64 = false, bf16 = false;
    std::vector<int64_t> k_ids, q_ids;
    std::vector<float> k_val, q_val, g, beta;
    std::vector<int64_t> lengths;   // empty: the valid_last rule
    bool lengths64 = false;

    Encoded encode() const {
        Encoded e;
        e.k_idx = encode_ids(k_ids);
        e.q_idx = encode_ids(q_ids);
        e.k_val = encode_values(k_val);
        e.q_val = encode_values(q_val);
        e.g = raw(g);
        e.beta = raw(beta);
        if (!lengths.empty()) {
            e.lengths = lengths64 ? raw(lengths) : raw(std::vector<int32_t>(lengths.begin(), lengths.end()));
            e.lengths_dtype = lengths64 ? SDM_P1_DTYPE_INT64 : SDM_P1_DTYPE_INT32;
        }
        return e;
    }

private:
    template <typename T>
    static std::vector<unsigned char> raw(const std::vector<T>& v) {
        std::vector<unsigned char> out(v.size() * sizeof(T));
        if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
        return out;
    }
    std::vector<unsigned char> encode_ids(const std::vector<int64_t>& ids) const {
        if (idx64) return raw(ids);
        std::vector<int32_t> v(ids.begin(), ids.end());   // the tests keep int32 ids in range
        return raw(v);
    }
    std::vector<unsigned char> encode_values(const std::vector<float>& vals) const {
        if (!bf16) return raw(vals);
        std::vector<uint16_t> v(vals.size());
        for (size_t i = 0; i < vals.size(); ++i) v[i] = bf16_bits(vals[i]);
        return raw(v);
    }
};

inline float gate_value(Gates kind, Rng& rng) {
    static const float tiny[] = {-1e-9f, 1e-9f, -2.0611537e-09f, -1e-12f, -3.5e-10f};
    static const float subnormal[] = {1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f, -1e-39f, -1e-38f, -0.25f, 0.0f};
    static const double extreme[] = {4.0e6, 4194303.5, 20.0, 1.0, 1e-9, 0x1.0p-72, 1.7 * 0x1.0p-60};
    static const double scale[] = {1.0, 0.75, 0.5};
    switch (kind) {
        case Gates::Zero:
            return 0.0f;
        case Gates::Tiny:
            return rng.pick(tiny);
        case Gates::Strong:
            return rng.below(4) == 0 ? -20.0f : static_cast<float>(-rng.uniform(10, 20));
        case Gates::Normal:
            return static_cast<float>(-rng.uniform(0.0, 0.5));
        case Gates::Signed:
            return static_cast<float>(rng.uniform(-1.0, 1.0));
        case Gates::Positive:
            return static_cast<float>(rng.uniform(0.0, 0.5));
        case Gates::Extreme:
            return static_cast<float>(-rng.pick(extreme) * rng.pick(scale));
        case Gates::ExtremeSigned:
            return static_cast<float>((rng.below(2) ? 1.0 : -1.0) * rng.pick(extreme) * rng.pick(scale));
        case Gates::Subnormal:
            return rng.pick(subnormal);
        case Gates::Mixed:
            switch (rng.below(6)) {
                case 0:
                    return 0.0f;
                case 1:
                    return rng.pick(tiny);
                case 2:
                    return static_cast<float>(-rng.uniform(0.0, 0.1));
                case 3:
                    return static_cast<float>(-rng.uniform(0.0, 3.0));
                case 4:
                    return -20.0f;
                default:
                    return static_cast<float>(-rng.uniform(10.0, 20.0));
            }
        case Gates::Logsigmoid: {
            const double x = rng.uniform(-2.0, 8.0);
            return static_cast<float>(-std::log1p(std::exp(-x)));
        }
        case Gates::MixedChunks:
            break;   // a kind per chunk: make_inputs asks for Mixed or Normal
    }
    return 0.0f;
}

inline float value(Values kind, Rng& rng) {
    switch (kind) {
        case Values::Normal:
            return static_cast<float>(rng.normal());
        case Values::Mixed:
            return static_cast<float>((rng.below(2) ? 1.0 : -1.0) * std::pow(10.0, rng.uniform(-3, 3)));
        case Values::One:
            return 1.0f;
        case Values::Wide:   // from float32 subnormals to 2^40
            return static_cast<float>((rng.below(2) ? 1.0 : -1.0) *
                                      std::ldexp(rng.uniform(1, 2), static_cast<int>(rng.below(170)) - 130));
        case Values::NonFinite:
            switch (rng.below(8)) {
                case 0:
                    return std::numeric_limits<float>::quiet_NaN();
                case 1:
                    return std::numeric_limits<float>::infinity();
                case 2:
                    return -std::numeric_limits<float>::infinity();
                case 3:
                    return 0.0f;
                case 4:
                    return 1e30f;
                default:
                    return static_cast<float>(rng.normal());
            }
    }
    return 0.0f;
}

// k distinct integers of [lo, lo + span), in random order.
inline std::vector<int64_t> distinct_sample(Rng& rng, int64_t lo, int64_t span, int64_t k) {
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(k));
    if (span <= 4 * k) {   // a partial shuffle of the whole range
        std::vector<int64_t> all(static_cast<size_t>(span));
        for (int64_t i = 0; i < span; ++i) all[static_cast<size_t>(i)] = lo + i;
        for (int64_t i = 0; i < k; ++i) {
            std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(i + rng.below(span - i))]);
            out.push_back(all[static_cast<size_t>(i)]);
        }
        return out;
    }
    while (static_cast<int64_t>(out.size()) < k) {
        const int64_t x = lo + rng.below(span);
        if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    }
    return out;
}

// Slots by a Zipf law over [0, num_keys): rank r (from 1) with probability proportional to
// r^-s, rank r being slot perm[r - 1] for a random permutation drawn once.
class ZipfSlots {
public:
    ZipfSlots(int64_t num_keys, double s, Rng& rng) : cdf_(static_cast<size_t>(num_keys)), perm_(cdf_.size()) {
        double total = 0.0;
        for (size_t r = 0; r < cdf_.size(); ++r) cdf_[r] = total += std::pow(static_cast<double>(r + 1), -s);
        for (double& c : cdf_) c /= total;
        for (size_t r = 0; r < perm_.size(); ++r) perm_[r] = static_cast<int64_t>(r);
        for (size_t r = perm_.size(); r > 1; --r)
            std::swap(perm_[r - 1], perm_[static_cast<size_t>(rng.below(static_cast<int64_t>(r)))]);
    }
    int64_t draw(Rng& rng) const {
        const size_t r =
            static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), rng.uniform(0, 1)) - cdf_.begin());
        return perm_[std::min(r, perm_.size() - 1)];
    }
    // k distinct slots (k <= num_keys), redrawing repeats.
    std::vector<int64_t> draw_distinct(Rng& rng, int64_t k) const {
        std::vector<int64_t> out;
        while (static_cast<int64_t>(out.size()) < k) {
            const int64_t x = draw(rng);
            if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
        }
        return out;
    }

private:
    std::vector<double> cdf_;
    std::vector<int64_t> perm_;
};

// K ids of one chunk, stream-relative, [C * W].
inline std::vector<int64_t> chunk_keys(const CaseSpec& s, Rng& rng, const ZipfSlots* zipf) {
    const int64_t C = s.C, W = s.W;
    std::vector<int64_t> keys(static_cast<size_t>(C * W));
    if (s.keys == Keys::Random || s.num_keys < W) {
        for (int64_t& k : keys) k = rng.below(s.num_keys);
        return keys;
    }
    if (s.keys == Keys::Zipf) {
        for (int64_t t = 0; t < C; ++t) {
            const std::vector<int64_t> d = zipf->draw_distinct(rng, W);
            std::copy(d.begin(), d.end(), keys.begin() + t * W);
        }
        return keys;
    }
    std::vector<int64_t> src;
    if (s.keys != Keys::Distinct) {
        const int64_t pool = s.pool > 0 ? s.pool : std::max(W, C * W / 4);
        const int64_t m = std::max(W, std::min(pool, s.num_keys));
        src =
            s.keys == Keys::Pool ? distinct_sample(rng, 0, s.num_keys, m) : distinct_sample(rng, s.num_keys - m, m, m);
    }
    for (int64_t t = 0; t < C; ++t) {
        if (src.empty()) {
            const std::vector<int64_t> d = distinct_sample(rng, 0, s.num_keys, W);
            std::copy(d.begin(), d.end(), keys.begin() + t * W);
        } else {
            const std::vector<int64_t> d = distinct_sample(rng, 0, static_cast<int64_t>(src.size()), W);
            for (int64_t w = 0; w < W; ++w)
                keys[static_cast<size_t>(t * W + w)] = src[static_cast<size_t>(d[static_cast<size_t>(w)])];
        }
    }
    return keys;
}

// Q ids of one chunk, stream-relative, [C * R], for its K ids `keys`.
inline std::vector<int64_t> chunk_reads(const CaseSpec& s, Rng& rng, const std::vector<int64_t>& keys,
                                        const ZipfSlots* zipf) {
    const int64_t C = s.C, W = s.W, R = s.R;
    std::vector<int64_t> q(static_cast<size_t>(C * R));
    for (int64_t t = 0; t < C; ++t) {
        if (s.reads == Reads::Zipf && R <= s.num_keys) {
            const std::vector<int64_t> d = zipf->draw_distinct(rng, R);
            std::copy(d.begin(), d.end(), q.begin() + t * R);
            continue;
        }
        for (int64_t j = 0; j < R; ++j) {
            int64_t& x = q[static_cast<size_t>(t * R + j)];
            switch (s.reads) {
                case Reads::Slot0:
                    x = 0;
                    break;
                case Reads::Recent: {
                    const int64_t from = std::max<int64_t>(0, t - 3);
                    x = keys[static_cast<size_t>((from + rng.below(t - from + 1)) * W + rng.below(W))];
                    break;
                }
                case Reads::Zipf:
                    x = zipf->draw(rng);
                    break;   // fewer keys than lanes
                case Reads::Hit:
                    x = rng.uniform(0, 1) < s.qhit
                            ? keys[static_cast<size_t>(rng.below(static_cast<int64_t>(keys.size())))]
                            : rng.below(s.num_keys);
                    break;
            }
        }
    }
    return q;
}

// The slots a bucket of the lean kernel's sort spans (kernels/policy/kernel_policy.cu: 16 buckets a
// thread, the block the smallest power of two from 64 with 16 keys a thread).
inline int64_t lean_bucket_slots(const CaseSpec& s) {
    const int64_t n = s.C * (s.W + s.R);
    int64_t threads = 64;
    while (threads * 16 < n) threads *= 2;
    int slot_bits = 0, bucket_bits = 0;
    while ((int64_t{1} << slot_bits) < s.num_keys) ++slot_bits;
    while ((int64_t{1} << bucket_bits) < 16 * threads) ++bucket_bits;
    return slot_bits > bucket_bits ? int64_t{1} << (slot_bits - bucket_bits) : 1;
}

// K ids [C * W] then Q ids [C * R] of chunk c of a Lean case (stream-relative).
inline std::pair<std::vector<int64_t>, std::vector<int64_t>> lean_chunk(const CaseSpec& s, int64_t c, Rng& rng) {
    const int64_t C = s.C, W = s.W, R = s.R, nk = C * W, n = C * (W + R);
    std::vector<int64_t> k(static_cast<size_t>(nk)), q(static_cast<size_t>(C * R));
    // Distinct slots for every entry, outside a crowded bucket's range [lo, lo + span).
    const int64_t span = s.lean == Lean::Crowd ? lean_bucket_slots(s) : 0;
    const int64_t lo = span ? rng.below(s.num_keys / span) * span : 0;
    std::vector<int64_t> fresh;
    std::unordered_set<int64_t> taken;
    while (static_cast<int64_t>(fresh.size()) < n) {   // the lean cases have num_keys >= 8 n
        const int64_t x = rng.below(s.num_keys);
        if ((x < lo || x >= lo + span) && taken.insert(x).second) fresh.push_back(x);
    }
    std::copy(fresh.begin(), fresh.begin() + nk, k.begin());
    std::copy(fresh.begin() + nk, fresh.end(), q.begin());
    const auto at = [W](int64_t t, int64_t lane) { return static_cast<size_t>(t * W + lane); };
    switch (s.lean) {
        case Lean::Crowd: {
            const std::vector<int64_t> crowd = distinct_sample(rng, lo, span, std::min(s.lean_param, span));
            for (size_t i = 0; i < crowd.size(); ++i) k[i] = crowd[i];
            break;
        }
        case Lean::Pairs:
            for (int64_t i = 0; i < s.lean_param && i + nk / 2 < nk; ++i)
                k[static_cast<size_t>(i + nk / 2)] = k[static_cast<size_t>(i)];
            break;
        case Lean::Shared:
            for (int64_t t = 1; t < std::min(s.lean_param, C); ++t) {
                const std::vector<int64_t> perm = distinct_sample(rng, 0, W, W);
                for (int64_t lane = 0; lane < W; ++lane) k[at(t, lane)] = k[at(0, perm[static_cast<size_t>(lane)])];
            }
            for (int64_t t = 0; t < std::min(s.lean_param, C); ++t) q[static_cast<size_t>(t * R)] = k[at(0, t % W)];
            break;
        case Lean::Repeats:
            for (int64_t t = 0; t < C; ++t) {
                if (W >= 2) k[at(t, 1)] = k[at(t, 0)];
                if (W >= 3 && t > 0) k[at(t, 2)] = k[at(t - 1, 0)];
                q[static_cast<size_t>(t * R)] = k[at(t, 0)];
            }
            break;
        case Lean::HotChunks:
            if (c % 3 == 1) {
                for (int64_t t = 1; t < C; ++t) {
                    const std::vector<int64_t> perm = distinct_sample(rng, 0, W, W);
                    for (int64_t lane = 0; lane < W; ++lane) k[at(t, lane)] = k[at(0, perm[static_cast<size_t>(lane)])];
                }
            }
            break;
        case Lean::Column: {
            int64_t left = s.lean_param;
            for (int64_t t = 0; t < C && left > 0; ++t) {
                k[at(t, 0)] = fresh[0];
                --left;
                for (int64_t lane = 0; lane < R && left > 0; ++lane, --left)
                    q[static_cast<size_t>(t * R + lane)] = fresh[0];
            }
            break;
        }
        case Lean::Group:
            if (c % 2 == 0) {
                for (int64_t i = 1; i < std::min(s.lean_param, nk); ++i) k[static_cast<size_t>(i)] = k[0];
            }
            break;
        case Lean::None:
            break;
    }
    return {k, q};
}

// Padding tokens (t >= the chunk's valid tokens: valid_last in the last P chunks, or by the
// stream's length) get garbage the library must never read: ids far outside every range,
// NaN / inf values, NaN gates and betas.
inline void fill_padding(const CaseSpec& s, HostInputs& in, Rng& rng) {
    const int64_t big = s.idx64 ? INT64_MAX : INT32_MAX;
    const float nan = std::nanf("");
    for (int64_t c = 0; c < s.N; ++c) {
        for (int64_t t = s.chunk_valid(c); t < s.C; ++t) {
            const int64_t tok = c * s.C + t;
            for (int64_t w = 0; w < s.W; ++w) {
                in.k_ids[static_cast<size_t>(tok * s.W + w)] = big - rng.below(1000);
                in.k_val[static_cast<size_t>(tok * s.W + w)] = nan;
            }
            for (int64_t r = 0; r < s.R; ++r) {
                in.q_ids[static_cast<size_t>(tok * s.R + r)] = -1 - rng.below(1000);
                in.q_val[static_cast<size_t>(tok * s.R + r)] = INFINITY;
            }
            for (int64_t j = 0; j < s.gate_width(); ++j) in.g[static_cast<size_t>(tok * s.gate_width() + j)] = nan;
            in.beta[static_cast<size_t>(tok)] = nan;
        }
    }
}

// Seeded random inputs for a case (the same spec gives the same inputs).
inline HostInputs make_inputs(const CaseSpec& s) {
    Rng rng(s.seed);
    HostInputs in;
    in.idx64 = s.idx64;
    in.bf16 = s.bf16;
    in.lengths = s.lengths;
    in.lengths64 = s.lengths64;
    const size_t nk = static_cast<size_t>(s.tokens() * s.W), nq = static_cast<size_t>(s.tokens() * s.R);
    in.k_ids.resize(nk);
    in.q_ids.resize(nq);
    in.k_val.resize(nk);
    in.q_val.resize(nq);
    in.g.resize(static_cast<size_t>(s.tokens() * s.gate_width()));
    in.beta.resize(static_cast<size_t>(s.tokens()));
    std::unique_ptr<ZipfSlots> zipf;
    if (s.keys == Keys::Zipf || s.reads == Reads::Zipf) zipf = std::make_unique<ZipfSlots>(s.num_keys, s.zipf, rng);
    for (int64_t c = 0; c < s.N; ++c) {
        const int64_t base = (c % s.P) * s.offset();
        if (s.lean != Lean::None) {
            const auto ids = lean_chunk(s, c, rng);
            for (size_t i = 0; i < ids.first.size(); ++i)
                in.k_ids[static_cast<size_t>(c * s.C * s.W) + i] = base + ids.first[i];
            for (size_t i = 0; i < ids.second.size(); ++i)
                in.q_ids[static_cast<size_t>(c * s.C * s.R) + i] = base + ids.second[i];
            continue;
        }
        const std::vector<int64_t> keys = chunk_keys(s, rng, zipf.get());
        for (size_t i = 0; i < keys.size(); ++i) in.k_ids[static_cast<size_t>(c * s.C * s.W) + i] = base + keys[i];
        // Q ids: by default mostly slots the chunk writes, so read groups meet write groups.
        const std::vector<int64_t> reads = chunk_reads(s, rng, keys, zipf.get());
        for (size_t i = 0; i < reads.size(); ++i) in.q_ids[static_cast<size_t>(c * s.C * s.R) + i] = base + reads[i];
    }
    for (float& v : in.k_val) v = value(s.values, rng);
    for (float& v : in.q_val) v = value(s.values, rng);
    const size_t chunk_gates = static_cast<size_t>(s.C * s.gate_width());
    for (size_t i = 0; i < in.g.size(); ++i) {
        const bool mixed_chunk = (i / chunk_gates) % 3 == 1;
        const Gates kind = s.gates != Gates::MixedChunks ? s.gates : mixed_chunk ? Gates::Mixed : Gates::Normal;
        in.g[i] = gate_value(kind, rng);
    }
    for (float& v : in.beta) v = static_cast<float>(rng.uniform(0.05, 1.0));
    fill_padding(s, in, rng);
    return in;
}

}   // namespace cuda_test

#endif   // SDM_P1_TESTS_CUDA_CASES_H
