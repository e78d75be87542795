#!/usr/bin/env python3
"""Writes seed inputs of tests/fuzz/corpus that reach the backward (C API 1.3).

Each seed is the byte string fuzz_case.cpp's decode_case reads for an explicit case: the
bytes below follow its reads one by one on the path of an ordinary (not probing) case, so a
change to the decoder's order of reads needs the same change here. A `chance(k)` read is
written as 0 (true) or 255 (false). The files are named backward-<name>, so that running
this again replaces them:

    python3 tests/fuzz/make_backward_seeds.py tests/fuzz/corpus
"""

import os
import struct
import sys

# Op (fuzz_case.h): the steps after the plans are created.
EXECUTE, POKE, RECREATE, MISUSE, DESC_ROUND_TRIP, DROP_BUFFER = range(6)
# PayloadMode, Corruption and BackwardMisuse, as their numbers in decode_backward.
FORWARD, NULL, CORRUPT, STALE = 0, 3, 5, 7
SWAP, DUPLICATE, OUT_OF_RANGE, PADDING_BIT, HEAD_BIT, UNREAD, MISALIGNED = range(7)
(
    NULL_PLAN,
    NULL_INPUTS,
    NULL_OUT,
    BAD_COUNT,
    NULL_GRADS,
    MISALIGNED_UPSTREAM,
    OUT_RESERVED,
    DROP_BETA,
    INPUTS_RESERVED,
) = range(1, 10)
# grad_dtype choices (decode_backward's switch): the value dtype by default, float32, refused.
GRAD_DEFAULT, GRAD_UNSET, GRAD_F32, GRAD_VALUE, GRAD_BF16 = 0, 2, 3, 5, 6
# Fields (sdm_p1_field) with a special role in a call.
KSPA, PAYLOAD, REPEATS = 19, 10, 28
NOT_DIFFERENTIABLE = [6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 21, 22, 23, 24, 25, 26, 28]


class Seed:
    def __init__(self):
        self.b = bytearray()

    def u8(self, v):
        assert 0 <= v < 256
        self.b.append(v)

    def chance(self, yes):
        self.u8(0 if yes else 255)

    def u32(self, v):
        self.b += struct.pack("<I", v)

    def u64(self, v):
        self.b += struct.pack("<Q", v)


def case(
    N=2,
    C=4,
    W=2,
    R=2,
    parallel=1,
    keys=3,
    valid_last=None,
    bf16=False,
    idx64=False,
    per_write_gates=True,
    det_all=True,
    caller_outputs=False,
    threads=3,
    seed=0x5EED,
    steps=((EXECUTE, 0), (POKE, 0x00000123), (EXECUTE, 0)),
    lengths=None,
    lengths_kind=0,
    backward=True,
    forward_only=False,
    grad=GRAD_DEFAULT,
    calls=(),
):
    """The bytes of one case: N <= 8, C <= 16, W and R <= 6, threads <= 8, keys <= 40."""
    s = Seed()
    s.u8(255)  # not a probe
    s.u8(N - 1)
    s.chance(False)
    s.u8(C - 1)  # C = 1 + b % 16
    s.chance(False)
    s.u8(W - 1)
    s.chance(False)
    s.u8(R - 1)
    if parallel == 1:
        s.u8(0)
    elif parallel == N:
        s.u8(1)
    else:
        s.u8(3)  # 1 + b % N
        s.u8(parallel - 1)
    s.chance(False)
    s.u8(keys - 1)  # num_keys = 1 + b % 40
    s.u8(0)  # stream_offset = num_keys
    if valid_last is None:
        s.chance(True)  # SDM_P1_UNSET
    else:
        s.chance(False)
        s.u8(valid_last - 1)
    s.u8(1 if idx64 else 0)
    s.u8(1 if bf16 else 0)
    s.u8(1 if per_write_gates else 0)
    s.u8(2)  # need_read_groups = 1
    s.u8(2 if det_all else 1)  # SDM_P1_DET_ALL or SDM_P1_DET_SHIPPED
    s.u8(0)  # rec_tile unset
    s.chance(True)  # device unset
    s.u8(1 if caller_outputs else 0)
    s.u8(threads - 2)
    s.u8(0)  # the library's allocator
    s.chance(False)  # no failing allocation
    s.chance(False)  # desc: plain struct
    s.chance(False)  # inputs: plain struct
    s.chance(False)  # no NULL input
    s.chance(False)  # no misaligned input
    s.u64(seed)
    for knob in (0, 0, 0, 0):  # no ids out of range, no edge gates or values, no padding garbage
        s.u8(knob)
    s.u8(len(steps) - 1)
    for op, arg in steps:
        s.u8(op)
        s.u32(arg)
    if N % parallel == 0:
        if lengths is None:
            s.u8(0)
        else:
            s.u8(255)
            s.u8(lengths_kind)  # 0: int32, 1: int64, 15: float32 (refused)
            for length in lengths:
                s.u8(5)  # any length: the next byte modulo steps * C + 1
                s.u8(length)
    if not backward:
        s.u8(0)
        return bytes(s.b)
    s.u8(79 if forward_only else 64)  # 79 % 16 == 15: an odd backward value follows
    if forward_only:
        s.u8(0)  # backward = 0: a forward-only plan
    s.u8(grad)
    s.u8(len(calls) - 1)
    for c in calls:
        s.u8(c.get("payload", FORWARD))
        if c.get("payload", FORWARD) == CORRUPT:
            s.u8(c["corruption"])
            s.u32(c.get("arg", 0x00213140))
        misuse = c.get("misuse", 0)
        s.u8(0 if misuse == 0 else 216 + misuse - 1)  # 1 + b % 9
        count = c.get("count", 29)
        s.u8(0 if count == 29 else 232 + count)  # b % 29
        nondiff = c.get("nondiff", -1)
        s.u8(0 if nondiff < 0 else 224 + (NOT_DIFFERENTIABLE.index(nondiff) - 224) % 17)  # b % 17
        upstream = c.get("upstream", 0xFFF)  # bit per differentiable field, in field order
        s.u8(~upstream & 255)
        s.u8(~upstream >> 8 & 255)
        requested = c.get("requested", 15)  # k_val, q_val, g, beta
        misaligned = c.get("misaligned", -1)  # 240 + m: all but m requested, m misaligned
        s.u8(~requested & 15 if misaligned < 0 else 240 + misaligned)
        s.chance(False)  # out: plain struct
        s.u8(0)  # check the never-read cells and run twice
        s.u8(c.get("edges", 0))
        s.u8(c.get("garbage", 0))
    return bytes(s.b)


SEEDS = {
    "f32-forward-payload": case(calls=[{}]),
    "bf16-null-payload-lengths": case(
        N=4,
        C=3,
        W=3,
        R=1,
        parallel=2,
        bf16=True,
        lengths=(5, 2),
        calls=[{"payload": NULL}, {"payload": FORWARD}],
        steps=((EXECUTE, 0), (EXECUTE, 0)),
    ),
    "bf16-grad-f32-per-token-gates": case(
        N=3, C=5, W=3, R=2, bf16=True, per_write_gates=False, grad=GRAD_F32, valid_last=3, calls=[{}]
    ),
    "corrupt-swap-duplicate-head": case(
        N=2,
        C=6,
        W=2,
        R=1,
        keys=2,
        calls=[
            {"payload": CORRUPT, "corruption": SWAP, "arg": 0x10213140},
            {"payload": CORRUPT, "corruption": DUPLICATE},
            {"payload": CORRUPT, "corruption": HEAD_BIT, "arg": 0x00000000},
        ],
        steps=((EXECUTE, 0), (EXECUTE, 0), (EXECUTE, 0)),
    ),
    "corrupt-range-padding-unread": case(
        N=2,
        C=4,
        W=3,
        R=2,
        valid_last=2,
        calls=[
            {"payload": CORRUPT, "corruption": OUT_OF_RANGE, "arg": 0x40213141},
            {"payload": CORRUPT, "corruption": PADDING_BIT, "arg": 0x10213141},
            {"payload": CORRUPT, "corruption": UNREAD, "arg": 0x12345678},
        ],
        steps=((EXECUTE, 0), (EXECUTE, 0), (EXECUTE, 0)),
    ),
    "misaligned-stale-null": case(
        calls=[
            {"payload": CORRUPT, "corruption": MISALIGNED},
            {"payload": STALE},
            {"payload": NULL, "requested": 0b0101},
        ],
        steps=((EXECUTE, 0), (POKE, 0x00000011), (EXECUTE, 0), (POKE, 0x01000112), (EXECUTE, 0)),
    ),
    "not-differentiable-and-beta": case(
        calls=[
            {"nondiff": PAYLOAD},
            {"misuse": DROP_BETA},
            {"nondiff": REPEATS, "count": 20, "upstream": 0x0FF},
        ],
        steps=((EXECUTE, 0), (EXECUTE, 0), (EXECUTE, 0)),
    ),
    "misuse-arguments": case(
        calls=[{"misuse": NULL_OUT}, {"misuse": BAD_COUNT}, {"misuse": MISALIGNED_UPSTREAM}],
        steps=((EXECUTE, 0), (EXECUTE, 0), (EXECUTE, 0)),
    ),
    "edge-upstream-garbage": case(
        N=2,
        C=8,
        W=1,
        R=1,
        keys=2,
        per_write_gates=False,
        valid_last=5,
        calls=[{"edges": 160, "garbage": 255}, {"payload": NULL, "edges": 255, "garbage": 128}],
        steps=((EXECUTE, 0), (EXECUTE, 0)),
    ),
    "lengths-empty-stream": case(
        N=4,
        C=2,
        W=2,
        R=2,
        parallel=4,
        caller_outputs=True,
        lengths=(2, 0, 1, 2),
        calls=[{"payload": FORWARD}, {"payload": CORRUPT, "corruption": SWAP, "arg": 0x20213141}],
        steps=((EXECUTE, 0), (EXECUTE, 0)),
    ),
    "padding-first-reserved": case(
        N=2,
        C=4,
        W=2,
        R=1,
        valid_last=2,
        calls=[
            {"payload": CORRUPT, "corruption": SWAP, "arg": 0x10080031},  # chunk 1: words 3 and 8
            {"misuse": OUT_RESERVED},
            {"misuse": INPUTS_RESERVED, "payload": NULL},
        ],
        steps=((EXECUTE, 0), (EXECUTE, 0), (EXECUTE, 0)),
    ),
    "padding-bit-on-padding-lengths-dtype": case(
        N=2,
        C=4,
        W=3,
        R=2,
        parallel=2,
        lengths=(4, 2),
        lengths_kind=1,
        calls=[
            {"payload": CORRUPT, "corruption": PADDING_BIT, "arg": 0x100200F1},  # chunk 1, word 15: padding
            {"payload": NULL, "upstream": 0x003},
        ],
        steps=((EXECUTE, 0), (EXECUTE, 0)),
    ),
    "lengths-float32-refused": case(lengths=(3,), lengths_kind=15, calls=[{}]),
    "no-upstream": case(calls=[{"upstream": 0}, {"upstream": 1 << 9, "requested": 0b1000}]),
    "forward-only-plan": case(forward_only=True, calls=[{}]),
    # grad_dtype is ignored without backward (a forward-only plan was refused for it before).
    "forward-only-grad-dtype-ignored": case(forward_only=True, grad=GRAD_BF16, calls=[{}]),
    "grad-dtype-refused": case(grad=GRAD_BF16, calls=[{}]),
    "misaligned-grad": case(calls=[{"misaligned": 2}]),
    "long-groups-threads": case(
        N=8,
        C=8,
        W=6,
        R=2,
        keys=1,
        threads=8,
        parallel=2,
        calls=[{}, {"payload": NULL}],
        steps=((EXECUTE, 0),) * 2,
    ),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    for name, data in SEEDS.items():
        with open(os.path.join(out, "backward-" + name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds written to {out}")


if __name__ == "__main__":
    main()
