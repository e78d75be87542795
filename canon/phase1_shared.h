// Definitions shared by the host (CPU backend, plan code) and device (CUDA kernels) code:
// the bit layouts of the packed outputs and the canonical arithmetic. Every output bit that
// both backends produce is defined by a function here, so the two cannot drift apart.
//
// Canonical arithmetic (see docs/design.md):
//  * Gates are rounded once to a signed 128-bit fixed-point number with 96 fraction bits
//    (Q31.96). Every float32 gate of magnitude 2^-73 .. 2^22 is held exactly; smaller ones are
//    rounded to a multiple of 2^-96 (an absolute error below 2^-97). Sums and differences of
//    these are exact, so every log-cumsum is the same in every summation order, and
//    log_k / log_q / rex are the float32 nearest to the exact sum of the gates they cover.
//  * exp is taken of the exact fixed-point value (converted to double with one rounding) by
//    exp_double below: a fixed sequence of IEEE double operations, each rounded to nearest.
//  * Scaled values (k_eff, q_w, records, kspa) are formed in double (the value times the
//    exponential; products of two floats are exact in double) and rounded once to float32;
//    bfloat16 outputs are that float32 rounded to nearest even bfloat16.
//  * Each cell of a / qk is a double sum, in the canonical order documented at pair_term_add,
//    of exact products times exp, each added by one fused multiply-add; rounded once to float.
//  * The backward's sums (canon/backward_terms.h) are double sums in the order of
//    docs/backward.md, each gradient rounded once to float32 (then bfloat16 where asked).
// Host code is compiled with -ffp-contract=off; device code calls the _rn intrinsics, so no
// compiler may fuse or reorder these operations.
#ifndef SDM_P1_PHASE1_SHARED_H
#define SDM_P1_PHASE1_SHARED_H

// The canon in its parts, each usable alone.
#include "host_device.h"
#include "bit_layouts.h"
#include "divider.h"
#include "ieee.h"
#include "fixed_point.h"
#include "exp.h"
#include "pair_terms.h"
#include "elements.h"
#include "output_buffers.h"
#include "entry_outputs.h"
#include "chunk_arrays.h"
#include "backward_buffers.h"
#include "backward_terms.h"

#endif   // SDM_P1_PHASE1_SHARED_H
