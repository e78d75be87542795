"""The CPU backward (sdm_p1_execute_backward) against the float64 reference VJP.

The library's gradients are held to backward_reference.vjp_f64 (docs/backward.md, Testing):
within 4 float32 ulps of the reference plus 2^-40 times the sum of the magnitudes of the
element's terms (vjp_f64(..., magnitudes=True)); bfloat16 gradients within one bfloat16 ulp of
the float32-rounded reference (plus the same magnitude term). The forward runs through
sdm_phase1 for its payload (the backward's sort); the backward is called through the package's
cffi declarations (sdm_phase1._c), made from the header.

Upstream cells the backward never reads (a at j >= i, qk at j > i, padding rows, columns,
entries and record rows) hold NaN, as do padding tokens' inputs (make_case): a read of any
gives a NaN gradient and fails the bound. Output buffers start as NaN, so each requested
gradient must be written whole. Run with pytest -s to see the largest error in bound units.
"""

from __future__ import annotations

import backward_reference as br
import numpy as np
import pytest
import reference as ref
from error_report import merge_error_report
from test_backward_reference import CASES, make_case

p1 = pytest.importorskip("sdm_phase1")

# The package's declarations, made from the header (sdm_phase1._c), carry the 1.3 functions.
from sdm_phase1._c import ffi, lib  # noqa: E402

INT64, FLOAT32, BFLOAT16 = lib.SDM_P1_DTYPE_INT64, lib.SDM_P1_DTYPE_FLOAT32, lib.SDM_P1_DTYPE_BFLOAT16
BACKEND_CPU, FIELD_COUNT = lib.SDM_P1_BACKEND_CPU, lib.SDM_P1_FIELD_COUNT
INVALID_INPUT = lib.SDM_P1_ERROR_INVALID_INPUT
FIELD_ID = {"a": 0, "qk": 1, "log_k": 2, "log_q": 3, "rex": 4, "cpe": 5, "k_eff": 8, "q_w": 9,
            "krec": 18, "kspa": 19, "qrec": 20, "qrec8": 27}
VALUE_TYPED = ("cpe", "k_eff", "q_w")

WORST: dict = {}   # check -> largest error in units of the bound


@pytest.fixture(scope="module", autouse=True)
def _error_summary():
    yield
    print("\n[test_backward_cpu] largest error in units of the bound:")
    for k, v in sorted(WORST.items()):
        print(f"  {k:30s} {v:.3g}")
    merge_error_report("test_backward_cpu", {k: {"max_error_in_bounds": v} for k, v in sorted(WORST.items())})


class BackwardError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status = status


def _ptr(ctype, arr, keep):
    if arr is None:
        return ffi.NULL
    arr = np.ascontiguousarray(arr)
    keep.append(arr)
    return ffi.cast(ctype, arr.ctypes.data)


def is_bf16(case):
    return case["k_val"].dtype == np.uint16


def forward_payload(case):
    kw = case["kw"]
    out = p1.phase1_forward(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"],
                            num_parallel=kw["num_parallel"], stream_offset=kw["stream_offset"],
                            num_keys=kw["num_keys"], valid_last=kw["valid_last"],
                            stream_lengths=kw["stream_lengths"], det_fields=0)
    return np.array(out.payload)


def backward_c(case, grads, *, payload=None, use_ids=True, grad_dtype=0, num_threads=1,
               want=("k_val", "q_val", "g", "beta")):
    """sdm_p1_execute_backward on the case: {input: gradient} for the inputs in `want`
    (k_val / q_val as uint16 bits where the gradient dtype is bfloat16)."""
    N, C, W = case["k_idx"].shape
    R = case["q_idx"].shape[2]
    gw = case["g"].shape[2]
    kw = case["kw"]
    keep = []
    desc = ffi.new("sdm_p1_desc*")
    assert lib.sdm_p1_desc_init(desc, ffi.sizeof("sdm_p1_desc")) == 0
    desc.N, desc.C, desc.W, desc.R = N, C, W, R
    desc.num_parallel, desc.stream_offset, desc.num_keys = (kw["num_parallel"], kw["stream_offset"],
                                                            kw["num_keys"])
    desc.valid_last = kw["valid_last"]
    desc.index_dtype = INT64
    desc.value_dtype = BFLOAT16 if is_bf16(case) else FLOAT32
    desc.gate_width, desc.det_fields, desc.backend = gw, 0, BACKEND_CPU
    desc.num_threads, desc.backward, desc.grad_dtype = num_threads, 1, grad_dtype
    plan = ffi.new("sdm_p1_plan**")
    if lib.sdm_p1_plan_create(plan, desc) != 0:
        raise BackwardError(-1, ffi.string(lib.sdm_p1_last_error()).decode())
    try:
        inputs = ffi.new("sdm_p1_inputs*")
        assert lib.sdm_p1_inputs_init(inputs, ffi.sizeof("sdm_p1_inputs")) == 0
        if use_ids:
            inputs.k_idx = _ptr("void*", case["k_idx"].astype(np.int64), keep)
            inputs.q_idx = _ptr("void*", case["q_idx"].astype(np.int64), keep)
        inputs.k_val = _ptr("void*", case["k_val"], keep)
        inputs.q_val = _ptr("void*", case["q_val"], keep)
        inputs.g = _ptr("float*", case["g"], keep)
        inputs.beta = _ptr("float*", case["beta"], keep)
        if kw["stream_lengths"] is not None:
            inputs.stream_lengths = _ptr("void*", np.asarray(kw["stream_lengths"], np.int64), keep)
            inputs.stream_lengths_dtype = INT64
        up = ffi.new("void*[]", FIELD_COUNT)
        for name, u in grads.items():
            if u is not None:
                up[FIELD_ID[name]] = _ptr("void*", u, keep)
        bf16_grads = is_bf16(case) and grad_dtype != FLOAT32
        vdt = np.uint16 if bf16_grads else np.float32
        res = {"k_val": np.full((N, C, W), 0x7FA5 if bf16_grads else np.nan).astype(vdt),
               "q_val": np.full((N, C, R), 0x7FA5 if bf16_grads else np.nan).astype(vdt),
               "g": np.full((N, C, gw), np.nan, np.float32), "beta": np.full((N, C), np.nan, np.float32)}
        out = ffi.new("sdm_p1_input_grads*")
        out.struct_size = ffi.sizeof("sdm_p1_input_grads")
        for name in want:
            setattr(out, name, ffi.cast("float*" if name in ("g", "beta") else "void*",
                                        res[name].ctypes.data))
        pay = _ptr("int32_t*", payload, keep)
        status = lib.sdm_p1_execute_backward(plan[0], inputs, pay, up, FIELD_COUNT, out, ffi.NULL)
        if status != 0:
            raise BackwardError(status, ffi.string(lib.sdm_p1_last_error()).decode())
        return {name: res[name] for name in want}
    finally:
        lib.sdm_p1_plan_destroy(plan[0])


def upstream(case, rng, fields=br.DIFFERENTIABLE):
    """Random float32 upstream gradients of `fields` (value-typed ones in the value dtype), NaN
    in every cell the backward never reads."""
    N, C, W = case["k_idx"].shape
    R = case["q_idx"].shape[2]
    kw = case["kw"]
    valid = ref.chunk_valid_counts(N, C, kw["num_parallel"], kw["valid_last"], kw["stream_lengths"])
    out = {}
    for f in fields:
        if f == "kspa" and case["beta"] is None:
            continue
        u = rng.standard_normal(br.field_shape(f, N, C, W, R)).astype(np.float32)
        if f in ("a", "qk"):
            i, j = np.indices((C, C))
            u[:, (j >= i) if f == "a" else (j > i)] = np.nan
        for c, tv in enumerate(valid):
            if f in ("a", "qk"):
                u[c, tv:, :] = np.nan
                u[c, :, tv:] = np.nan
            elif f in ("krec", "kspa"):
                u[c, tv * W:] = np.nan
            elif f in ("qrec", "qrec8"):
                u[c, tv * R:] = np.nan
            else:
                u[c, tv:] = np.nan
        if f in VALUE_TYPED and is_bf16(case):
            u = ref.f64_to_bf16_bits(u)
        out[f] = u
    return out


def check_against_reference(check, case, grads, got, *, bf16_grads=False):
    """Each gradient in `got` within the bound of the reference; records the worst ratio."""
    want = br.vjp_f64(case["k_idx"], case["q_idx"], case["k_val"], case["q_val"], case["g"], grads,
                      case["beta"], **case["kw"], magnitudes=True)
    for name, arr in got.items():
        ref64, mag = want[name], want[name + "_abs"]
        ref32 = ref64.astype(np.float32)
        if bf16_grads and name in ("k_val", "q_val"):
            value = ref.bf16_to_f64(arr)
            bound = np.spacing(np.abs(ref32)).astype(np.float64) * 2.0 ** 16 + 2.0 ** -40 * mag
            err = np.abs(value - ref32.astype(np.float64))
        else:
            value = arr.astype(np.float64)
            bound = 4.0 * np.spacing(np.abs(ref32)).astype(np.float64) + 2.0 ** -40 * mag
            err = np.abs(value - ref64)
        assert np.all(np.isfinite(value)), f"{check}: {name} not finite (a cell never read was read?)"
        ratio = float(np.max(err / bound)) if err.size else 0.0
        key = f"{check} ({'bfloat16' if bf16_grads and name in ('k_val', 'q_val') else 'float32'})"
        WORST[key] = max(WORST.get(key, 0.0), ratio)
        assert ratio <= 1.0, f"{check}: {name} off by {ratio:.3g} bounds"


# ---- cases -----------------------------------------------------------------------------------
EXTRA = [
    ("uniform-wide-g1", dict(N=4, C=32, W=4, R=4, num_keys=1 << 20, kmode="distinct")),
    ("hot-long-gw", dict(N=2, C=64, W=4, R=3, num_keys=6, gate="write", valid_last=50)),
    ("streams-4-lengths-gw", dict(N=8, P=4, C=8, W=3, R=2, num_keys=7, stream_offset=10 ** 6,
                                  gate="write", stream_lengths=[16, 0, 9, 3])),
    ("bf16-g1-beta", dict(C=8, W=3, R=2, num_keys=4, vals="bf16", valid_last=6)),
]
ALL_CASES = dict(CASES + EXTRA)


def get_case(cid):
    return make_case(sum(map(ord, cid)), **ALL_CASES[cid])


@pytest.mark.parametrize("cid", list(ALL_CASES))
def test_all_fields_against_reference(cid):
    """Every upstream field at once, sort from the library's payload; the same bits with the
    payload absent (sorted again from the ids) and with 3 threads."""
    case = get_case(cid)
    grads = upstream(case, np.random.default_rng(7))
    payload = forward_payload(case)
    got = backward_c(case, grads, payload=payload, use_ids=False)
    check_against_reference("all-fields", case, grads, got, bf16_grads=is_bf16(case))
    again = backward_c(case, grads, num_threads=3)
    for name in got:
        assert got[name].tobytes() == again[name].tobytes(), name


@pytest.mark.parametrize("field", br.DIFFERENTIABLE)
@pytest.mark.parametrize("cid", ["hot-repeats-g1-pad", "hot-repeats-gw-pad", "streams-3-gw-mixed"])
def test_each_field_alone(cid, field):
    """One upstream field alone reaches the inputs it depends on, within the bound; every other
    input's gradient is exactly +0.0 where it does not depend on the field."""
    case = get_case(cid)
    grads = upstream(case, np.random.default_rng(11), fields=(field,))
    got = backward_c(case, grads, payload=forward_payload(case))
    check_against_reference("field-alone", case, grads, got)
    for name, arr in got.items():
        if name not in br.DEPENDS_ON[field]:
            assert np.all(arr == 0) and not np.any(np.signbit(arr)), f"{field} reached {name}"


@pytest.mark.parametrize("seed", range(4))
def test_null_subsets(seed):
    """Random subsets of upstream fields (the others NULL) against the reference, and of
    requested gradients: each requested one has the bits it has when all are requested."""
    rng = np.random.default_rng(100 + seed)
    case = get_case(["hot-repeats-gw-pad", "one-slot-g1-pad", "stream-lengths-g1", "bf16-g1-beta"][seed])
    fields = [f for f in br.DIFFERENTIABLE if rng.random() < 0.5]
    grads = upstream(case, rng, fields=fields)
    full = backward_c(case, grads)
    check_against_reference("null-subsets", case, grads, full, bf16_grads=is_bf16(case))
    want = tuple(n for n in br.INPUTS if rng.random() < 0.5)
    part = backward_c(case, grads, want=want)
    assert set(part) == set(want)
    for name in want:
        assert part[name].tobytes() == full[name].tobytes(), name


@pytest.mark.parametrize("cid", ["bf16-gw-no-beta", "bf16-g1-beta"])
def test_bf16_gradients_are_the_float32_ones_rounded(cid):
    """grad_dtype FLOAT32 on bfloat16 values: the default bfloat16 gradients are its results
    rounded to nearest even, bit for bit; the float32 ones within the float32 bound."""
    case = get_case(cid)
    grads = upstream(case, np.random.default_rng(5))
    low = backward_c(case, grads)
    high = backward_c(case, grads, grad_dtype=FLOAT32)
    check_against_reference("bf16-as-float32", case, grads, high)
    for name in ("k_val", "q_val"):
        assert low[name].dtype == np.uint16 and high[name].dtype == np.float32
        assert np.array_equal(low[name], ref.f64_to_bf16_bits(high[name])), name
    for name in ("g", "beta"):
        assert low[name].tobytes() == high[name].tobytes(), name


def test_bad_payload_refused_and_nothing_written():
    """A payload that names one entry twice: INVALID_INPUT naming the chunk and position (the C
    test checks every other refusal, and that nothing is written)."""
    case = get_case("hot-repeats-gw-pad")
    payload = forward_payload(case)
    payload[1, 3] = payload[1, 2]
    named_twice = r"payload\[1, 3\] = .* names an entry an earlier word named"
    with pytest.raises(BackwardError, match=named_twice) as e:
        backward_c(case, upstream(case, np.random.default_rng(1)), payload=payload, use_ids=False)
    assert e.value.status == INVALID_INPUT
