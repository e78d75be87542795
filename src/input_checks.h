// The checks of an execute's inputs that sdm_p1_execute and sdm_p1_execute_backward share:
// the caller's sdm_p1_inputs read by the struct-size rule, its pointers present and aligned,
// the stream lengths' dtype; the result as the typed InputRecord both backends read.
#ifndef SDM_P1_INPUT_CHECKS_H
#define SDM_P1_INPUT_CHECKS_H

#include <cstddef>

#include "input_record.h"
#include "options.h"
#include "sdm/phase1.h"

namespace sdm_p1 {

// What an execute needs of the inputs besides k_val, q_val and g (always needed).
struct InputNeeds {
    enum Ids {
        kIds,         // k_idx and q_idx needed
        kIdsIfGiven   // both or neither (the backward given a payload, which they are checked against)
    };
    Ids ids;
    const char* beta_reason;   // non-null: beta is needed, for this reason (the message's)
};

// The caller's inputs, checked for the C function `who`; the record's output buffers are left
// empty. Throws INVALID_ARGUMENT naming the field. Pointers not needed are not kept (null).
InputRecord checked_inputs(const char* who, const Options& o, const sdm_p1_inputs* caller, const InputNeeds& needs);

// Throws INVALID_ARGUMENT unless p is non-null and a multiple of `align`: "<who>: <kind><name>
// is NULL" or "... is not aligned to its element size (<align> bytes)".
void require_pointer(const char* who, const char* kind, const char* name, const void* p, size_t align);

}   // namespace sdm_p1

#endif   // SDM_P1_INPUT_CHECKS_H
