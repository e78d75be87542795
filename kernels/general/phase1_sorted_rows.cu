// The main kernels that write the row fields in a pass of their own, in sorted order
// (KernelShape::sorted_rows): a translation unit of their own, compiled in parallel with
// phase1.cu.
#include "phase1_kernel.cuh"

namespace sdm_p1 {
namespace cuda {

KernelFn sorted_rows_kernel(const LaunchConfig& c) { return kernel_of<true, false>(c); }

}   // namespace cuda
}   // namespace sdm_p1
