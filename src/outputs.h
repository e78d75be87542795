// The outputs of a plan: which fields it computes, their dtypes and shapes.
#ifndef SDM_P1_OUTPUTS_H
#define SDM_P1_OUTPUTS_H

#include <array>
#include <string>

#include "options.h"
#include "../canon/phase1_shared.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

using OutputViews = std::array<sdm_p1_tensor, SDM_P1_FIELD_COUNT>;

// Every field's view (data NULL): requested or not, dtype, shape and bytes.
OutputViews describe_outputs(const Options& opt);

// How messages name the upstream gradient of field f, whose name is `field`: "grads[19] (kspa)".
std::string upstream_label(int f, const char* field);

// Typed view of an array of buffers indexed by sdm_p1_field.
OutputBuffers output_buffers(void* const* by_field);

}   // namespace sdm_p1

#endif   // SDM_P1_OUTPUTS_H
