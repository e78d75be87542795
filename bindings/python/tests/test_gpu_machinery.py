"""The device path's framework-independent machinery (sdm_phase1._core.plan_cache), driven
with the CPU backend on host memory so that it runs in CI without a GPU: plans created through
the allocator hook (cffi callbacks), executes with raw pointers into caller buffers and into one
carved block, the plan cache (hits, per-stream plans, eviction, pinning, moving a plan to a
capturing stream), the data check and synchronize()."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import sdm_phase1 as p1
from gpu_support import cpu_result, split
from sdm_phase1._c import lib
from sdm_phase1._core import plan_cache
from sdm_phase1._core.dtypes import NUMPY as DTYPES
from sdm_phase1._core.types import Phase1
from test_reference import make_case

CPU = lib.SDM_P1_BACKEND_CPU


class HostWorkspace(plan_cache.Workspace):
    """Host memory standing in for a framework's allocator."""

    def __init__(self, log):
        self.blocks = {}
        self.log = log

    def alloc(self, nbytes, stream):
        buf = np.empty(nbytes + 256, np.uint8)
        ptr = (buf.ctypes.data + 255) // 256 * 256
        self.blocks[ptr] = buf
        self.log.append(("alloc", nbytes, stream))
        return ptr

    def free(self, ptr):
        del self.blocks[ptr]
        self.log.append(("free", ptr))

    def sync(self):
        self.log.append(("sync",))


class FailingWorkspace(HostWorkspace):
    def alloc(self, nbytes, stream):
        raise MemoryError("no memory for the test")


def options_of(inputs, opts, det_fields=p1.DET_SHIPPED | p1.DET_RECORDS, rg=True, tile=0):
    N, C, W = inputs["k_idx"].shape
    index = lib.SDM_P1_DTYPE_INT32 if inputs["k_idx"].dtype == np.int32 else lib.SDM_P1_DTYPE_INT64
    value = lib.SDM_P1_DTYPE_FLOAT32 if inputs["k_val"].dtype == np.float32 else lib.SDM_P1_DTYPE_BFLOAT16
    return (N, C, W, inputs["q_idx"].shape[2], opts["num_parallel"], opts["stream_offset"],
            opts["num_keys"], opts["valid_last"], index, value, inputs["g"].shape[2], rg, det_fields,
            tile)


def run(plan, inputs):
    outs = [np.empty(shape, DTYPES[dt]) for _, shape, dt in plan.fields]
    beta = inputs["beta"]
    plan.execute(*(inputs[n].ctypes.data for n in ("k_idx", "q_idx", "k_val", "q_val", "g")),
                 0 if beta is None else beta.ctypes.data, [o.ctypes.data for o in outs])
    fields = [None] * 29
    for (f, _, _), o in zip(plan.fields, outs):
        fields[f] = o
    return fields


@pytest.fixture
def fresh_cache(monkeypatch):
    # An empty cache of the test's own: plans pinned by other tests' CUDA graphs (never
    # destroyed) stay in theirs.
    monkeypatch.setattr(plan_cache._cache, "plans", OrderedDict())
    yield
    p1.clear_plan_cache()


def test_execute_through_the_allocator_hook(fresh_cache):
    case = make_case(1, N=4, C=16, W=4, R=3, P=2, num_keys=32, valid_last=9, vals="bf16")
    inputs, opts = split(case)
    log = []
    key = options_of(inputs, opts)
    plan = plan_cache.get_plan("host", 0, 0, key, lambda: HostWorkspace(log), backend=CPU)
    assert [e[0] for e in log] == ["alloc"] and log[0][2] == 0  # the library's stream: NULL
    assert [f for f, _, _ in plan.fields][-1] == 28  # repeats last
    got = run(plan, inputs)
    want = cpu_result(inputs, opts, det_fields=key[12])
    for f, name in enumerate(Phase1._fields):
        if got[f] is not None:
            assert got[f].tobytes() == want[f].tobytes(), name
    assert plan.pending
    p1.synchronize()
    assert not plan.pending and log[-1] == ("sync",)
    info = p1.plan_cache_info()
    assert info["created"] >= 1
    assert [k[0] for k in plan_cache._cache.plans].count("host") == 1  # and cpu_result's NumPy plan
    p1.clear_plan_cache()
    assert log[-1][0] == "free" and p1.plan_cache_info()["plans"] == 0


def test_cache_per_stream_hits_and_eviction(fresh_cache, monkeypatch):
    case = make_case(2, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    key = options_of(inputs, opts)
    log = []
    make = lambda: HostWorkspace(log)  # noqa: E731
    a = plan_cache.get_plan("host", 0, 0, key, make, backend=CPU)
    before = p1.plan_cache_info()
    assert plan_cache.get_plan("host", 0, 0, key, make, backend=CPU) is a
    assert p1.plan_cache_info()["hits"] == before["hits"] + 1
    b = plan_cache.get_plan("host", 0, 7, key, make, backend=CPU)  # another stream: another plan
    assert b is not a and b.stream == 7
    monkeypatch.setattr(plan_cache, "CACHE_LIMIT", 2)
    a.pinned = True
    other = key[:12] + (p1.DET_SHIPPED, 0)
    c = plan_cache.get_plan("host", 0, 0, other, make, backend=CPU)  # evicts b, the oldest unpinned
    plans = list(plan_cache._cache.plans.values())
    assert a in plans and c in plans and b not in plans and b.handle is None
    p1.clear_plan_cache()
    assert list(plan_cache._cache.plans.values()) == [a]  # pinned plans stay
    a.pinned = False


def test_capture_moves_a_plan_of_another_stream(fresh_cache):
    case = make_case(3, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    key = options_of(inputs, opts)
    log = []
    a = plan_cache.get_plan("host", 0, 5, key, lambda: HostWorkspace(log), backend=CPU)
    created = p1.plan_cache_info()["created"]
    b = plan_cache.get_plan("host", 0, 9, key, lambda: HostWorkspace(log), capturing=True, backend=CPU)
    assert b is a and a.stream == 9 and a.pinned  # moved, not created
    assert p1.plan_cache_info()["created"] == created
    assert plan_cache.get_plan("host", 0, 9, key, None, backend=CPU) is a
    a.pinned = False


def test_allocator_failure_is_reported(fresh_cache):
    case = make_case(4, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    with pytest.raises(p1.Phase1Error) as info:
        plan_cache.get_plan("host", 0, 0, options_of(inputs, opts), lambda: FailingWorkspace([]),
                      backend=CPU)
    assert info.value.status == "SDM_P1_ERROR_OUT_OF_MEMORY"
    assert "no memory for the test" in str(info.value)
    assert isinstance(info.value.__cause__, MemoryError)


def test_refused_options_raise(fresh_cache):
    case = make_case(5, N=2, C=8, W=3, R=2, P=1, num_keys=16)
    inputs, opts = split(case)
    key = options_of(inputs, dict(opts, valid_last=0))
    with pytest.raises(ValueError, match="valid_last"):
        plan_cache.get_plan("host", 0, 0, key, lambda: HostWorkspace([]), backend=CPU)
    assert p1.plan_cache_info()["plans"] == 0



def test_execute_into_one_carved_block(fresh_cache):
    """The layout: every output 256-byte aligned, in field order, without overlap, inside
    block_bytes; executing into one block gives the bits of a buffer per field."""
    case = make_case(6, N=3, C=16, W=5, R=3, P=3, num_keys=32, valid_last=7, vals="bf16")
    inputs, opts = split(case)
    key = options_of(inputs, opts, det_fields=3071)
    plan = plan_cache.get_plan("host", 0, 0, key, lambda: HostWorkspace([]), backend=CPU)
    end = 0
    for (f, shape, dt, offset), (f2, shape2, dt2) in zip(plan.layout, plan.fields):
        assert (f, shape, dt) == (f2, shape2, dt2)
        assert offset % 256 == 0 and offset >= end
        end = offset + int(np.prod(shape)) * DTYPES[dt].itemsize
    assert end <= plan.block_bytes
    want = run(plan, inputs)
    block = np.zeros(plan.block_bytes + 256, np.uint8)
    base = (block.ctypes.data + 255) // 256 * 256
    beta = inputs["beta"]
    plan.execute_block(*(inputs[n].ctypes.data for n in ("k_idx", "q_idx", "k_val", "q_val", "g")),
                       beta.ctypes.data, base)
    start = base - block.ctypes.data
    for f, shape, dt, offset in plan.layout:
        nbytes = int(np.prod(shape)) * DTYPES[dt].itemsize
        got = block[start + offset:start + offset + nbytes].tobytes()
        assert got == want[f].tobytes(), Phase1._fields[f] if f < 28 else "repeats"


def test_reused_structs_keep_no_pointer_of_an_earlier_call(fresh_cache):
    """A cached plan's cffi structs are updated in place: each execute writes every pointer, so
    a beta or an output buffer of the call before is never used again (a plan that needs beta
    refuses a call without it, and each call writes its own block only)."""
    case = make_case(8, N=2, C=16, W=4, R=3, P=1, num_keys=32, valid_last=16)
    inputs, opts = split(case)
    key = options_of(inputs, opts, det_fields=p1.DET_SHIPPED | p1.DET_KSPA)
    plan = plan_cache.get_plan("host", 0, 0, key, lambda: HostWorkspace([]), backend=CPU)
    ptrs = [inputs[n].ctypes.data for n in ("k_idx", "q_idx", "k_val", "q_val", "g")]
    first = np.zeros(plan.block_bytes + 256, np.uint8)
    base = (first.ctypes.data + 255) // 256 * 256
    plan.execute_block(*ptrs, inputs["beta"].ctypes.data, base)
    written = first.copy()
    with pytest.raises(p1.Phase1Error, match="beta"):
        plan.execute_block(*ptrs, 0, base)
    second = np.zeros(plan.block_bytes + 256, np.uint8)
    base2 = (second.ctypes.data + 255) // 256 * 256
    first[:] = 0
    plan.execute_block(*ptrs, inputs["beta"].ctypes.data, base2)
    assert not first.any()  # nothing written into the first call's block
    start, start2 = base - first.ctypes.data, base2 - second.ctypes.data
    n = plan.block_bytes
    assert np.array_equal(written[start:start + n], second[start2:start2 + n])
