// The kernels' instantiations by name: the table kernels/instantiations.txt generates
// (generate_instantiations.py writes a translation unit a group and kernel_groups.cpp), in
// which the policy's choices are found at plan creation. Plain C++ (no CUDA headers).
#ifndef SDM_P1_KERNELS_KERNEL_TABLE_H
#define SDM_P1_KERNELS_KERNEL_TABLE_H

#include <string>
#include <vector>

namespace sdm_p1 {
namespace cuda {

// One instantiation: its name as listed (", " between the template arguments) and its
// address, the one a launch and cudaFuncGetAttributes take.
struct KernelEntry {
    const char* name;
    const void* address;
};

// The instantiations of one group (one translation unit).
struct KernelGroup {
    const KernelEntry* entries;
    int count;
};

// Every group, in the list's order (kernel_groups.cpp, generated).
std::vector<KernelGroup> kernel_groups();

// The address of the instantiation named `name`; null where the list has none of that name.
const void* kernel_address(const std::string& name);

}   // namespace cuda
}   // namespace sdm_p1

#endif   // SDM_P1_KERNELS_KERNEL_TABLE_H
