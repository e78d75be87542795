#include "architectures.h"

#include <cctype>
#include <sstream>

namespace sdm_p1 {
namespace cuda {

namespace {

struct Architecture {
    bool ptx;      // compute_XY (else sm_XY)
    int number;    // XY: 10 * major + minor
    char suffix;   // 'a' (this capability only), 'f' (its family), or 0
};

// Parses "sm_90", "compute_100", "sm_90a"; false for anything else.
bool parse(const std::string& name, Architecture* a) {
    std::string rest;
    if (name.rfind("sm_", 0) == 0) {
        a->ptx = false;
        rest = name.substr(3);
    } else if (name.rfind("compute_", 0) == 0) {
        a->ptx = true;
        rest = name.substr(8);
    } else {
        return false;
    }
    size_t digits = 0;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
    if (digits < 2 || digits > 4) return false;
    a->number = std::stoi(rest.substr(0, digits));
    const std::string suffix = rest.substr(digits);
    if (suffix.empty()) {
        a->suffix = 0;
    } else if (suffix == "a" || suffix == "f") {
        a->suffix = suffix[0];
    } else {
        return false;
    }
    return true;
}

bool runs_on(const Architecture& a, ComputeCapability cc) {
    const int major = a.number / 10, minor = a.number % 10;
    if (a.suffix == 'a') return cc.major == major && cc.minor == minor;
    if (!a.ptx || a.suffix == 'f') return cc.major == major && cc.minor >= minor;
    return cc.major > major || (cc.major == major && cc.minor >= minor);
}

}   // namespace

const char* built_architectures() {
#if defined(SDM_P1_CUDA_ARCHITECTURES)
    return SDM_P1_CUDA_ARCHITECTURES;
#else
    return "";
#endif
}

bool runs_on(const std::string& architectures, ComputeCapability cc) {
    std::istringstream names(architectures);
    std::string name;
    while (names >> name) {
        Architecture a{};
        if (parse(name, &a) && runs_on(a, cc)) return true;
    }
    return false;
}

std::string no_kernels_message(int device, ComputeCapability cc, const std::string& architectures) {
    std::ostringstream os;
    os << "sdm_p1_plan_create: CUDA device " << device << " is sm_" << cc.major << cc.minor << " (compute capability "
       << cc.major << "." << cc.minor << "), but this libsdmp1 has "
       << "kernels for " << (architectures.empty() ? std::string("no architecture") : architectures)
       << " only; rebuild it for that device (Meson option gpu_arch, e.g. -Dgpu_arch=" << cc.major << cc.minor
       << ", or gpu_arch=release)";
    return os.str();
}

}   // namespace cuda
}   // namespace sdm_p1
