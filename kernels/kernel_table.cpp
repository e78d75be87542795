// The look-up of an instantiation by name (kernel_table.h).
#include "kernel_table.h"

namespace sdm_p1 {
namespace cuda {

const void* kernel_address(const std::string& name) {
    for (const KernelGroup& g : kernel_groups()) {
        for (int i = 0; i < g.count; ++i) {
            if (name == g.entries[i].name) return g.entries[i].address;
        }
    }
    return nullptr;
}

}   // namespace cuda
}   // namespace sdm_p1
