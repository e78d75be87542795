// The plan behind the opaque sdm_p1_plan handle: resolved options, output views, memory.
#ifndef SDM_P1_PLAN_H
#define SDM_P1_PLAN_H

#include <cstddef>
#include <memory>

#include "backend.h"
#include "memory.h"
#include "options.h"
#include "outputs.h"
#include "sdm/phase1.h"

struct sdm_p1_plan {
    sdm_p1::Options options;
    sdm_p1::OutputViews views;   // data set in SDM_P1_OUTPUTS_PLAN mode
    std::unique_ptr<sdm_p1::Backend> backend;
    sdm_p1::Block outputs;   // every requested output, in one block (plan mode)
    sdm_p1::Block workspace;
    bool executed = false;   // an execute was enqueued (the data check exists)

    sdm_p1_plan() = default;
    sdm_p1_plan(const sdm_p1_plan&) = delete;
    sdm_p1_plan& operator=(const sdm_p1_plan&) = delete;
    // Frees the plan's memory through its backend (CUDA: with the plan's device current).
    ~sdm_p1_plan();
};

namespace sdm_p1 {

// Validates desc and allocates the plan's memory; throws Error.
sdm_p1_plan* create_plan(const sdm_p1_desc* desc);

// Validates the inputs and output buffers, then runs the plan's backend; throws Error.
void execute_plan(sdm_p1_plan& plan, const sdm_p1_inputs* inputs, void* const* outputs, int32_t count, void* stream);

// Validates the backward's arguments, then runs the plan's backend's backward; throws Error.
void execute_backward_plan(sdm_p1_plan& plan, const sdm_p1_inputs* inputs, const int32_t* payload,
                           const void* const* grads, int32_t count, const sdm_p1_input_grads* out, void* stream);

// The data check of the plan's last execute (sdm_p1_execute_status); throws Error.
void check_execute_status(sdm_p1_plan& plan);

}   // namespace sdm_p1

#endif   // SDM_P1_PLAN_H
