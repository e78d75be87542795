// A plan's options: the descriptor validated field by field, every "unset" resolved.
#ifndef SDM_P1_OPTIONS_H
#define SDM_P1_OPTIONS_H

#include <cstdint>

#include "sdm/phase1.h"

namespace sdm_p1 {

struct Options {
    int64_t N;
    int C, W, R;
    int64_t P;   // num_parallel
    int64_t stream_offset;
    int64_t num_keys;
    int valid_last;
    bool idx64;       // int64 ids (else int32)
    bool bf16;        // bfloat16 values (else float32)
    int gate_width;   // 1 or W
    bool read_groups;
    uint32_t det_fields;      // SDM_P1_DET_* bits
    int rec_tile;             // L, 1..2^20 (128 when tiles are not requested)
    sdm_p1_backend backend;   // CPU or CUDA (never AUTO)
    int device;
    int num_threads;   // CPU workers, >= 1
    sdm_p1_output_mode output_mode;
    sdm_p1_allocator allocator;
    bool backward;    // the plan may run execute_backward
    bool grad_bf16;   // k_val / q_val gradients in bfloat16 (else float32)

    int n() const { return C * (W + R); }   // entries per chunk
    int row() const;                        // n rounded up to kRowAlign
    bool has(uint32_t det_bit) const { return (det_fields & det_bit) != 0u; }
};

// Validates the descriptor and resolves its unset fields; throws Error naming the field.
Options resolve_options(const sdm_p1_desc* desc);

// Writes the resolved options to a caller's descriptor (sdm_p1_plan_desc): as many bytes as
// its struct_size says it has room for (by the header's struct-size rule), with struct_size
// set to the bytes written.
void report_options(const Options& opt, sdm_p1_desc* out);

}   // namespace sdm_p1

#endif   // SDM_P1_OPTIONS_H
