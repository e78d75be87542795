// The wide-log kernels (phase1_kernel.cuh), for the chunks whose log-cumsums need the wide
// form: a translation unit of their own, compiled in parallel with phase1.cu.
#include "phase1_kernel.cuh"

namespace sdm_p1 {
namespace cuda {

KernelFn wide_log_kernel(const LaunchConfig& c) {
    return c.sorted_rows ? kernel_of<true, true>(c) : kernel_of<false, true>(c);
}

}   // namespace cuda
}   // namespace sdm_p1
