// The layouts of a chunk's stage arrays that both backends must give the same bits: the sort
// keys and the walker masks (docs/design.md, "The stages", lists every array of the stages;
// src/cpu/chunk.h: ChunkScratch and kernels/common/chunk_context.cuh: ChunkArrays hold them).
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_CHUNK_ARRAYS_H
#define SDM_P1_CANON_CHUNK_ARRAYS_H

#include "bit_layouts.h"
#include "host_device.h"

namespace sdm_p1 {

// Bits of a positive int (bit_width(64) = 7).
SDM_HD int bit_width(uint64_t v) {
    int b = 0;
    for (; v != 0u; v >>= 1) ++b;
    return b;
}

// Sort keys (stage "load and check" makes them, stage "sort" orders them): entry e with slot
// s (its id - the stream's first id) has the key s << entry_bits | e, so the keys are distinct
// and their order is the stable order by slot. A padding entry takes the largest slot the
// key's bits hold, which sorts it last all the same: its index is above every valid entry's.
// entry_bits: bits of an entry index (entries run to n - 1, n = C * (W + R)).
SDM_HD int sort_entry_bits(int n) {
    const int b = bit_width(static_cast<uint64_t>(n - 1));
    return b > 1 ? b : 1;
}

// Id `id`'s slot in the stream whose slot ids start at `base`, as unsigned: one of the
// stream's slots exactly when below num_keys (an id below base wraps past num_keys, as every
// plan has base + num_keys <= 2^63: src/options.cpp), so one compare checks both ends.
SDM_HD uint64_t slot_of_id(int64_t id, int64_t base) { return static_cast<uint64_t>(id) - static_cast<uint64_t>(base); }

// Significant bits of a sort key: the entry bits and the slot bits (slots run to num_keys - 1;
// one bit less where num_keys is a power of two).
SDM_HD int sort_key_bits(int n, int64_t num_keys) {
    return sort_entry_bits(n) + bit_width(static_cast<uint64_t>(num_keys - 1));
}

// Whether the entry with payload p is a walker of stage "pair sums": a valid entry with an
// earlier entry in its slot group.
SDM_HD bool is_walker(uint32_t p) { return (p & (kInvalid | kHead)) == 0u; }

// Walker masks (stage "records" marks, stage "pair sums" reads): per token, a bit a write
// lane, then a bit a read lane, set where the entry is a walker, in 32-bit words.
// Words of a lane mask over `lanes` lanes.
SDM_HD int mask_words(int lanes) { return (lanes + 31) / 32; }

// Index of the first walker-mask word of token t's write (or read) lanes.
SDM_HD int walk_mask_base(int W, int R, int t, bool is_q) {
    return t * (mask_words(W) + mask_words(R)) + (is_q ? mask_words(W) : 0);
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_CHUNK_ARRAYS_H
