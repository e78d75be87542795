// The bit layouts of the packed outputs (payload words, packed positions, sorted-row elements) and
// the shape limits they imply.
// Part of the canon shared by host and device code (canon/phase1_shared.h says what it is).
#ifndef SDM_P1_CANON_BIT_LAYOUTS_H
#define SDM_P1_CANON_BIT_LAYOUTS_H

#include "host_device.h"

namespace sdm_p1 {

// Bit layouts

// Sorted payload word of an entry (spec: p1_keys_zw_kernel / p1_scan_kernel).
constexpr uint32_t kLaneMask = 0xFFu;   // bits 0-7: lane (write or read column)
constexpr uint32_t kIsQ = 1u << 8;      // bit 8: a read (Q) entry
constexpr int kTokenShift = 9;          // bits 9-16: token in the chunk
constexpr uint32_t kTokenMask = 0xFFu;
constexpr uint32_t kInvalid = 1u << 17;   // bit 17: padding entry
constexpr uint32_t kLastK = 1u << 30;     // bit 30: last valid write of its group
constexpr uint32_t kHead = 1u << 31;      // bit 31: first entry of its group
// Sorted rows are padded to a multiple of this many entries; the padding holds kTailPayload.
constexpr int kRowAlign = 16;
constexpr uint32_t kTailPayload = kInvalid | kHead;

// Packed positions (pos_k / pos_q).
constexpr int kPosBits = 17;
constexpr uint32_t kPosMask = (1u << kPosBits) - 1u;
constexpr int kPosAfterShift = kPosBits;
constexpr int kPosSizeShift = kPosBits + 7;
constexpr uint32_t kPosCountMax = 127u;

// Elements of the sorted write / read rows (spay_k / spay_q, records' first word).
constexpr uint32_t kSortedEntryMask = 0x3FFFFu;
constexpr int kSortedDistShift = 18;
constexpr uint32_t kSortedDistMax = 4095u;
constexpr uint32_t kSortedLast = kLastK;
constexpr uint32_t kSortedFirst = kHead;

// Limits.
constexpr int kMaxC = 256;
constexpr int kMaxLanes = 256;
constexpr int kMaxRowEntries = 1 << 17;   // C * (W + R)
constexpr int kMaxRecTile = 1 << 20;
// Gates must be finite with |g| < 2^kGateMaxExp: 256 of them then sum below 2^30 and every
// difference of two sums fits the 31 integer bits of the fixed-point format.
constexpr int kGateMaxExp = 22;

SDM_HD uint32_t payload_word(int token, int lane, bool is_q, bool valid) {
    return static_cast<uint32_t>(token) << kTokenShift | (is_q ? kIsQ : 0u) | static_cast<uint32_t>(lane) |
           (valid ? 0u : kInvalid);
}

// The token of a payload word.
SDM_HD int payload_token(uint32_t p) { return static_cast<int>((p >> kTokenShift) & kTokenMask); }

SDM_HD int32_t pack_position(uint32_t pos, uint32_t before, uint32_t after, bool valid) {
    if (!valid) return static_cast<int32_t>(pos);
    const uint32_t after_sat = after < kPosCountMax ? after : kPosCountMax;
    const uint32_t size = before + 1u + after;
    const uint32_t size_sat = size < kPosCountMax ? size : kPosCountMax;
    return static_cast<int32_t>(pos | after_sat << kPosAfterShift | size_sat << kPosSizeShift);
}

// The element of an entry in its kind's sorted row; before / after count the entry's peers.
SDM_HD int32_t sorted_element(uint32_t payload, uint32_t before, uint32_t after, bool valid) {
    uint32_t e = payload & kSortedEntryMask;
    if (!valid) return static_cast<int32_t>(e | kSortedFirst | kSortedLast);
    e |= (before < kSortedDistMax ? before : kSortedDistMax) << kSortedDistShift;
    if (before == 0u) e |= kSortedFirst;
    if (after == 0u) e |= kSortedLast;
    return static_cast<int32_t>(e);
}

// A tile index (tiles_k, tiles_q) of a kind's row of n entries, at row index j, the first of
// its tile: j where its entry starts its group (first), else the row index past its group
// (its `after` peers later; n at most).
SDM_HD int32_t tile_start(bool first, int64_t j, uint32_t after, int64_t n) {
    const int64_t next = j + after + 1;
    return static_cast<int32_t>(first ? j : (next < n ? next : n));
}

}   // namespace sdm_p1

#endif   // SDM_P1_CANON_BIT_LAYOUTS_H
