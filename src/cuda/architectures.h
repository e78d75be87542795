// The GPU architectures the kernels were built for, and whether a device can run them: CUDA's
// binary compatibility rules applied to the list the build compiled in. Plain C++ (no CUDA
// runtime), so that a unit test checks it against device descriptors on a machine without a GPU.
#ifndef SDM_P1_CUDA_ARCHITECTURES_H
#define SDM_P1_CUDA_ARCHITECTURES_H

#include <string>

namespace sdm_p1 {
namespace cuda {

// A device's compute capability, major.minor (9.0 for an H100 or H200).
struct ComputeCapability {
    int major;
    int minor;
};

// The kernels' architectures this library was built with, as sdm_p1_cuda_architectures
// reports them: "sm_90", "sm_80 sm_90 sm_100 compute_100", ...; "" without the CUDA backend.
const char* built_architectures();

// Whether kernels built for `architectures` (sm_XY / compute_XY names separated by spaces,
// optionally with an 'a' or 'f' suffix) run on a device of capability `cc`: SASS sm_XY on X.Y
// to X.9 (sm_XYa on X.Y only), PTX compute_XY on X.Y and every later capability (compute_XYa on
// X.Y only). Names of another form are ignored.
bool runs_on(const std::string& architectures, ComputeCapability cc);

// The error message for a device that none of `architectures` runs on.
std::string no_kernels_message(int device, ComputeCapability cc, const std::string& architectures);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_CUDA_ARCHITECTURES_H
