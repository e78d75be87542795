#include "errors.h"

namespace sdm_p1 {

namespace {
// Per thread, as the header documents; "" until the first failure.
thread_local std::string t_last_error;
}   // namespace

void set_last_error(const std::string& message) { t_last_error = message; }

const char* last_error() { return t_last_error.c_str(); }

}   // namespace sdm_p1
