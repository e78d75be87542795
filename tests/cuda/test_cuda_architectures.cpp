// CUDA's binary compatibility rules as the library applies them at plan creation
// (src/cuda/architectures.h): device descriptors against lists of built architectures, each
// answer worked out from the rules (SASS runs within its major version from its minor one up;
// PTX on its capability and every later one; an 'a' suffix on its own capability only).
#include <string>

#include "../src/cuda/architectures.h"
#include "test_util.h"

using sdm_p1::cuda::ComputeCapability;
using sdm_p1::cuda::no_kernels_message;
using sdm_p1::cuda::runs_on;

namespace {

const std::string kRelease = "sm_80 sm_90 sm_100 compute_100";   // gpu_arch=release

void test_sass_within_its_major_version() {
    CHECK(runs_on("sm_90", {9, 0}));
    CHECK(!runs_on("sm_90", {8, 0}));   // an A100 and a build for the H100 only
    CHECK(!runs_on("sm_90", {8, 9}));
    CHECK(!runs_on("sm_90", {10, 0}));   // no SASS across major versions
    CHECK(runs_on("sm_80", {8, 6}));     // sm_86 runs sm_80 code
    CHECK(runs_on("sm_80", {8, 9}));
    CHECK(!runs_on("sm_86", {8, 0}));
    CHECK(runs_on("sm_100", {10, 3}));
    CHECK(!runs_on("sm_100", {12, 0}));
}

void test_ptx_for_later_capabilities() {
    CHECK(runs_on("compute_90", {9, 0}));
    CHECK(runs_on("compute_90", {12, 0}));
    CHECK(!runs_on("compute_90", {8, 9}));
    CHECK(runs_on(kRelease, {12, 0}));   // the release build's PTX serves later GPUs
    CHECK(runs_on(kRelease, {8, 0}) && runs_on(kRelease, {8, 6}) && runs_on(kRelease, {9, 0}));
    CHECK(runs_on(kRelease, {10, 0}) && runs_on(kRelease, {11, 0}));
    CHECK(!runs_on(kRelease, {7, 5}));
}

void test_arch_specific_and_malformed_names() {
    CHECK(runs_on("sm_90a", {9, 0}));
    CHECK(!runs_on("sm_90a", {9, 1}));
    CHECK(!runs_on("compute_90a", {10, 0}));
    CHECK(runs_on("sm_100f", {10, 3}));
    CHECK(!runs_on("", {9, 0}));
    CHECK(!runs_on("90 sm_ sm_9 compute_x90 sm_90q", {9, 0}));   // none of these is a name
    CHECK(runs_on("  sm_80   sm_90 ", {9, 0}));
}

void test_message_names_device_and_build() {
    const std::string m = no_kernels_message(1, ComputeCapability{8, 0}, "sm_90");
    CHECK_MSG(m.find("device 1 is sm_80") != std::string::npos, m.c_str());
    CHECK_MSG(m.find("compute capability 8.0") != std::string::npos, m.c_str());
    CHECK_MSG(m.find("kernels for sm_90 only") != std::string::npos, m.c_str());
    CHECK_MSG(m.find("-Dgpu_arch=80") != std::string::npos, m.c_str());
    const std::string none = no_kernels_message(0, ComputeCapability{9, 0}, "");
    CHECK_MSG(none.find("no architecture") != std::string::npos, none.c_str());
}

}   // namespace

int main() {
    RUN(test_sass_within_its_major_version);
    RUN(test_ptx_for_later_capabilities);
    RUN(test_arch_specific_and_malformed_names);
    RUN(test_message_names_device_and_build);
    return test_summary();
}
