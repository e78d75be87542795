// Errors inside the library: host code throws sdm_p1::Error; the API boundary (api.cpp)
// catches it, stores its message as the calling thread's last error and returns its status.
#ifndef SDM_P1_ERRORS_H
#define SDM_P1_ERRORS_H

#include <sstream>
#include <stdexcept>
#include <string>

#include "sdm/phase1.h"

namespace sdm_p1 {

class Error : public std::runtime_error {
public:
    Error(sdm_p1_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    sdm_p1_status status() const { return status_; }

private:
    sdm_p1_status status_;
};

// Builds a message from streamable parts: fail(SDM_P1_ERROR_..., "C=", C, " is ...").
template <typename... Parts>
[[noreturn]] void fail(sdm_p1_status status, const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    throw Error(status, os.str());
}

// The calling thread's last error message (the one global the header documents).
void set_last_error(const std::string& message);
const char* last_error();

}   // namespace sdm_p1

#endif   // SDM_P1_ERRORS_H
