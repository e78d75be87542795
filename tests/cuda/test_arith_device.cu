// The canonical arithmetic of canon/phase1_shared.h computed on the GPU and on the host from the
// same random operands must agree bit for bit: the property the CUDA backend's bitwise
// equality with the CPU backend rests on. Exits 77 (a skip for meson) where no GPU is present.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../../canon/phase1_shared.h"

using namespace sdm_p1;

namespace {

// One sample's operands and the bits of every canonical function of them.
struct Operands {
    Fix x;   // a log value (fixed point)
    Fix y;   // another, for differences
    float gate;
    float v, w;   // values
    float beta;
    int64_t cv;   // a value in the compact form cv * 2^(cs - 96)
    int32_t cs;
    uint32_t num, den;   // a division (Divider): num < 2^31, 1 <= den < 2^31
};

struct Results {
    uint32_t to_f32;
    uint64_t to_f64;
    uint64_t exp_x;
    uint32_t gate_ok;
    Fix gate_fix;
    uint32_t scaled;
    uint32_t kspa;
    uint64_t pair;
    uint32_t bf16;
    uint32_t lowest_bit, magnitude_bits;   // of x (x non-zero for the first)
    Fix compact;                           // x >> its lowest bit, shifted back up
    // compact_to_f32, compact_to_f64 and exp_compact of (cv, cs), and fix_to_f32, fix_to_f64
    // and exp_fix of fix_shift_up(cv, cs): they must agree.
    uint32_t compact_f32, via_fix_f32;
    uint64_t compact_f64, via_fix_f64, compact_exp, via_fix_exp;
    uint32_t quotient, remainder;   // num / den, num % den by make_divider(den)
};

SDM_HD uint64_t bits64(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

SDM_HD Results evaluate(const Operands& o) {
    Results r{};
    r.to_f32 = f32_bits(fix_to_f32(o.x));
    r.to_f64 = bits64(fix_to_f64(o.x));
    const double e = exp_fix(o.x);
    r.exp_x = bits64(e);
    r.gate_ok = gate_to_fix(o.gate, &r.gate_fix) ? 1u : 0u;
    r.scaled = f32_bits(scaled_f32(o.v, e));
    r.kspa = f32_bits(neg_beta_scaled_f32(o.beta, o.v, e));
    r.pair = bits64(pair_term_add(pair_term_add(0.0, o.v, o.w, o.x, o.y), o.w, o.v, o.y, o.x));
    r.bf16 = bf16_from_f32(f32_from_bits(r.scaled));
    r.magnitude_bits = static_cast<uint32_t>(fix_magnitude_bits(o.x));
    if (!fix_is_zero(o.x)) {
        const int s = fix_lowest_bit(o.x);
        r.lowest_bit = static_cast<uint32_t>(s);
        r.compact = fix_shift_up(fix_shift_down(o.x, s), s);   // x only where x >> s fits 64 bits
    }
    r.compact_f32 = f32_bits(compact_to_f32(o.cv, o.cs));
    r.compact_f64 = bits64(compact_to_f64(o.cv, o.cs));
    r.compact_exp = bits64(exp_compact(o.cv, o.cs));
    const Fix cx = fix_shift_up(static_cast<uint64_t>(o.cv), o.cs);
    r.via_fix_f32 = f32_bits(fix_to_f32(cx));
    r.via_fix_f64 = bits64(fix_to_f64(cx));
    r.via_fix_exp = bits64(exp_fix(cx));
    const Divider d = make_divider(o.den);
    r.quotient = d.div(o.num);
    r.remainder = d.mod(o.num);
    return r;
}

__global__ void evaluate_all(const Operands* in, Results* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = evaluate(in[i]);
}

Fix random_log(std::mt19937_64& rng) {
    // |x| up to 2^31 (the fixed-point range) in most samples, small and exactly 0 in others.
    const int kind = static_cast<int>(rng() % 8);
    if (kind == 0) return fix_zero();
    const int bits = kind < 4 ? 104 : 127 - static_cast<int>(rng() % 60);
    const uint64_t hi = bits > 64 ? (rng() >> (128 - bits)) : 0u;
    const uint64_t lo = bits >= 64 ? rng() : (rng() >> (64 - bits));
    const Fix mag{lo, hi};
    return (rng() & 1) ? fix_neg(mag) : mag;
}

float random_float(std::mt19937_64& rng, int lo_exp, int hi_exp) {
    std::uniform_real_distribution<double> m(1.0, 2.0);
    const int span = hi_exp - lo_exp + 1;
    const float f = static_cast<float>(std::ldexp(m(rng), lo_exp + static_cast<int>(rng() % span)));
    return (rng() & 1) ? -f : f;
}

}   // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    constexpr int kSamples = 1 << 20;
    std::mt19937_64 rng(2026);
    std::vector<Operands> in(kSamples);
    for (Operands& o : in) {
        o.x = random_log(rng);
        o.y = random_log(rng);
        o.gate = (rng() % 16 == 0) ? f32_from_bits(static_cast<uint32_t>(rng())) : random_float(rng, -100, 24);
        o.v = random_float(rng, -140, 120);
        o.w = random_float(rng, -60, 60);
        o.beta = random_float(rng, -10, 2);
        // Compact values of 0 to 63 bits, as the kernels keep log-cumsums (|value| < 2^31).
        const int cbits = static_cast<int>(rng() % 64);
        o.cs = static_cast<int32_t>(rng() % static_cast<uint64_t>(128 - std::max(cbits, 1)));
        o.cv = cbits == 0 ? 0 : static_cast<int64_t>(rng() >> (64 - cbits));
        if (rng() & 1) o.cv = -o.cv;
        o.num = static_cast<uint32_t>(rng() >> 33);
        o.den = 1u + static_cast<uint32_t>(rng() >> (33 + rng() % 31));
    }
    Operands* d_in = nullptr;
    Results* d_out = nullptr;
    if (cudaMalloc(&d_in, sizeof(Operands) * kSamples) != cudaSuccess ||
        cudaMalloc(&d_out, sizeof(Results) * kSamples) != cudaSuccess) {
        std::printf("cudaMalloc failed\n");
        return 1;
    }
    cudaMemcpy(d_in, in.data(), sizeof(Operands) * kSamples, cudaMemcpyHostToDevice);
    evaluate_all<<<(kSamples + 255) / 256, 256>>>(d_in, d_out, kSamples);
    std::vector<Results> dev(kSamples);
    const cudaError_t err = cudaMemcpy(dev.data(), d_out, sizeof(Results) * kSamples, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
        std::printf("kernel failed: %s\n", cudaGetErrorString(err));
        return 1;
    }
    cudaFree(d_in);
    cudaFree(d_out);

    const char* names[] = {"fix_to_f32",       "fix_to_f64",          "exp_fix",       "gate_to_fix",
                           "scaled_f32",       "neg_beta_scaled_f32", "pair_term_add", "bf16_from_f32",
                           "fix compact form", "compact conversions", "Divider"};
    long mismatches[11] = {};
    for (int i = 0; i < kSamples; ++i) {
        const Results h = evaluate(in[i]);
        const Results& d = dev[i];
        mismatches[0] += h.to_f32 != d.to_f32;
        mismatches[1] += h.to_f64 != d.to_f64;
        mismatches[2] += h.exp_x != d.exp_x;
        mismatches[3] += h.gate_ok != d.gate_ok || h.gate_fix.lo != d.gate_fix.lo || h.gate_fix.hi != d.gate_fix.hi;
        mismatches[4] += h.scaled != d.scaled;
        mismatches[5] += h.kspa != d.kspa;
        mismatches[6] += h.pair != d.pair;
        mismatches[7] += h.bf16 != d.bf16;
        mismatches[8] += h.lowest_bit != d.lowest_bit || h.magnitude_bits != d.magnitude_bits ||
                         h.compact.lo != d.compact.lo || h.compact.hi != d.compact.hi;
        // The device's compact conversions against the host's 128-bit path.
        mismatches[9] += d.compact_f32 != h.via_fix_f32 || d.compact_f64 != h.via_fix_f64 ||
                         d.compact_exp != h.via_fix_exp || h.compact_f32 != h.via_fix_f32 ||
                         h.compact_f64 != h.via_fix_f64 || h.compact_exp != h.via_fix_exp;
        mismatches[10] += d.quotient != in[i].num / in[i].den || d.remainder != in[i].num % in[i].den;
    }
    long total = 0;
    for (int f = 0; f < 11; ++f) {
        std::printf("%-20s %ld of %d samples differ\n", names[f], mismatches[f], kSamples);
        total += mismatches[f];
    }
    std::printf("%s\n", total == 0 ? "host and device agree bit for bit" : "MISMATCH");
    return total == 0 ? 0 : 1;
}
