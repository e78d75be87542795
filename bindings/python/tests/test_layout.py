"""sdm_phase1.layout (to_chunks, from_chunks) on NumPy arrays: against loops that place each
token by hand, round trips, packed batches (cu_seqlens) and Phase 1 of a layout's chunks
against each sequence run alone."""

import numpy as np
import pytest
import sdm_phase1 as p1
from sdm_phase1.layout import chunk_tokens, from_chunks, to_chunks


def batch(seed, B, T, H, W, R, num_keys, gate_width=1):
    rng = np.random.default_rng(seed)
    k = rng.integers(0, num_keys, (B, T, H, W)).astype(np.int32)
    q = rng.integers(0, num_keys, (B, T, H, R)).astype(np.int32)
    kv = rng.standard_normal((B, T, H, W)).astype(np.float32)
    qv = rng.standard_normal((B, T, H, R)).astype(np.float32)
    shape = (B, T, H) if gate_width == 1 else (B, T, H, W)
    g = -rng.uniform(0, 0.5, shape).astype(np.float32)
    beta = rng.uniform(0, 1, (B, T, H)).astype(np.float32)
    return k, q, kv, qv, g, beta


def loop_chunks(x, lengths, C):
    """The chunks of batch-major x [B, T, H, ...] by loops: chunk step * P + b * H + h, token
    t is x[b, step * C + t, h] while that is within the sequence's length, else 0."""
    B, T, H = x.shape[:3]
    steps = -(-T // C)
    P = B * H
    out = np.zeros((steps * P, C) + x.shape[3:], x.dtype)
    for b in range(B):
        for h in range(H):
            for step in range(steps):
                for t in range(C):
                    pos = step * C + t
                    if pos < lengths[b]:
                        out[step * P + b * H + h, t] = x[b, pos, h]
    return out


@pytest.mark.parametrize("T,C", [(10, 4), (8, 4), (1, 3), (17, 16)])
def test_batch_major_against_loops(T, C):
    B, H, W, R = 3, 2, 3, 2
    k, q, kv, qv, g, beta = batch(1, B, T, H, W, R, 50)
    lengths = np.array([T, max(T - 3, 0), 1], np.int64)
    ch = to_chunks(k, q, kv, qv, g, chunk_size=C, beta=beta, lengths=lengths)
    assert ch.num_parallel == B * H and ch.layout.steps == -(-T // C)
    np.testing.assert_array_equal(ch.k_idx, loop_chunks(k, lengths, C))
    np.testing.assert_array_equal(ch.q_idx, loop_chunks(q, lengths, C))
    np.testing.assert_array_equal(ch.k_val, loop_chunks(kv, lengths, C))
    np.testing.assert_array_equal(ch.q_val, loop_chunks(qv, lengths, C))
    np.testing.assert_array_equal(ch.g, loop_chunks(g[..., None], lengths, C))
    np.testing.assert_array_equal(ch.beta, loop_chunks(beta, lengths, C))
    np.testing.assert_array_equal(ch.stream_lengths, np.repeat(lengths, H))
    for a in ch[:6]:
        assert a.flags.c_contiguous
    v = np.random.default_rng(9).standard_normal((B, T, H, 5))
    np.testing.assert_array_equal(chunk_tokens(v, ch.layout), loop_chunks(v, lengths, C))
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunk_tokens(v[:, 1:], ch.layout)
    # Round trip: the valid tokens come back; the others are zeros.
    back = from_chunks(ch.k_val, ch.layout)
    assert back.shape == kv.shape
    valid = np.arange(T)[None, :] < lengths[:, None]
    np.testing.assert_array_equal(back[valid], kv[valid])
    assert not back[~valid].any()


def test_full_lengths_stream_offset_and_per_write_gates():
    B, T, H, W, R, C = 2, 8, 3, 4, 2, 4
    k, q, kv, qv, g, _ = batch(2, B, T, H, W, R, 30, gate_width=W)
    ch = to_chunks(k, q, kv, qv, g, chunk_size=C, stream_offset=1000)
    full = np.full(B, T)
    P = B * H
    base = (np.arange(ch.layout.N) % P * 1000)[:, None, None]
    np.testing.assert_array_equal(ch.k_idx, loop_chunks(k, full, C) + base)
    np.testing.assert_array_equal(ch.q_idx, loop_chunks(q, full, C) + base)
    assert ch.k_idx.dtype == np.int32 and ch.g.shape == (ch.layout.N, C, W)
    np.testing.assert_array_equal(ch.stream_lengths, np.full(P, T))
    assert ch.beta is None
    np.testing.assert_array_equal(from_chunks(ch.g, ch.layout), g)


def test_packed_against_batch_major():
    """A packed batch gives the chunks of the same sequences held batch-major, and
    from_chunks gives the packed tokens back."""
    H, W, R, C = 2, 3, 2, 4
    lengths = np.array([5, 0, 9, 1])
    cu = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    B, T = len(lengths), int(lengths.max())
    k, q, kv, qv, g, beta = batch(3, B, T, H, W, R, 40)
    valid = np.arange(T)[None, :] < lengths[:, None]
    packed = [x[valid] for x in (k, q, kv, qv, g, beta)]
    pk = to_chunks(*packed[:5], chunk_size=C, beta=packed[5], cu_seqlens=cu)
    pk_max = to_chunks(*packed[:5], chunk_size=C, beta=packed[5], cu_seqlens=cu, max_len=T)
    bm = to_chunks(k, q, kv, qv, g, chunk_size=C, beta=beta, lengths=lengths.astype(np.int32))
    for a, b, c in zip(pk[:7], bm[:7], pk_max[:7]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, b)
    assert pk.stream_lengths.dtype == np.int32
    np.testing.assert_array_equal(from_chunks(pk.q_val, pk.layout), packed[3])
    np.testing.assert_array_equal(from_chunks(pk.g, pk.layout)[..., 0], packed[4])


def test_layout_errors():
    k, q, kv, qv, g, _ = batch(4, 2, 4, 1, 2, 2, 10)
    with pytest.raises(ValueError, match="chunk_size"):
        to_chunks(k, q, kv, qv, g, chunk_size=0)
    with pytest.raises(ValueError, match=r"\[B, T, H, W\]"):
        to_chunks(k[0], q, kv, qv, g, chunk_size=2)
    with pytest.raises(ValueError, match="not the layout of k_idx"):
        to_chunks(k, q, kv, qv[0], g, chunk_size=2)
    with pytest.raises(ValueError, match="max_len is for packed"):
        to_chunks(k, q, kv, qv, g, chunk_size=2, max_len=4)
    ch = to_chunks(k, q, kv, qv, g, chunk_size=2)
    with pytest.raises(ValueError, match="from_chunks"):
        from_chunks(ch.k_val[1:], ch.layout)


def test_lengths_past_their_sequence_are_refused():
    """Batch-major lengths lie in 0..T: T is accepted (and placed as the loops place it), T + 1
    and -1 are refused naming the sequence, as Python lists too."""
    B, T, H, W, R, C = 3, 10, 2, 3, 2, 4
    k, q, kv, qv, g, _ = batch(6, B, T, H, W, R, 40)
    at_limit = np.array([T, 0, 7])
    ch = to_chunks(k, q, kv, qv, g, chunk_size=C, lengths=at_limit)
    np.testing.assert_array_equal(ch.k_val, loop_chunks(kv, at_limit, C))
    for bad, b in (([T, 0, T + 1], 2), ([T, -1, 7], 1)):
        for lengths in (np.array(bad, np.int32), bad):
            with pytest.raises(ValueError) as e:
                to_chunks(k, q, kv, qv, g, chunk_size=C, lengths=lengths)
            assert str(e.value) == (f"lengths[{b}] = {bad[b]}: sequence {b} has T = {T} tokens in the "
                                    f"batch, so its length must be in 0..{T}")
    with pytest.raises(ValueError, match=r"lengths must be a 1-D array of B = 3 lengths, got shape \(4,\)"):
        to_chunks(k, q, kv, qv, g, chunk_size=C, lengths=np.array([1, 2, 3, 4]))


def test_cu_seqlens_past_the_tokens_are_refused():
    """Packed sequences end at most at total_T: ending there is accepted, one token past it (or
    10**6, which would make about 250,000 steps a stream of 4 tokens) is refused naming the sequence,
    with or without max_len; so are sequences out of order or longer than max_len."""
    H, W, R, C = 2, 3, 2, 4
    k, q, kv, qv, g, _ = batch(7, 1, 14, H, W, R, 40)
    packed = [x[0] for x in (k, q, kv, qv, g)]  # [total_T = 14, H, ...]
    ch = to_chunks(*packed, chunk_size=C, cu_seqlens=np.array([0, 5, 5, 14]))
    assert ch.layout.steps == 3  # the longest sequence: 9 tokens
    np.testing.assert_array_equal(ch.stream_lengths, np.repeat([5, 0, 9], H))
    np.testing.assert_array_equal(from_chunks(ch.k_val, ch.layout), packed[2])
    for end in (15, 10**6):
        for max_len in (None, 9):
            with pytest.raises(ValueError) as e:
                to_chunks(*packed, chunk_size=C, cu_seqlens=np.array([0, 5, 5, end]), max_len=max_len)
            assert str(e.value) == (f"cu_seqlens[2:4] = [5, {end}]: sequence 2 (length {end - 5}) must lie "
                                    "within the 14 packed tokens of k_idx (0 <= cu_seqlens[2] <= "
                                    "cu_seqlens[3] <= total_T = 14)")
    with pytest.raises(ValueError, match=r"cu_seqlens\[1:3\] = \[6, 5\]: sequence 1 \(length -1\)"):
        to_chunks(*packed, chunk_size=C, cu_seqlens=[0, 6, 5, 14])
    assert to_chunks(*packed, chunk_size=C, cu_seqlens=[0, 5, 5, 14], max_len=9).layout.steps == 3
    with pytest.raises(ValueError) as e:
        to_chunks(*packed, chunk_size=C, cu_seqlens=[0, 5, 5, 14], max_len=8)
    assert str(e.value) == "sequence 2 has 9 tokens (cu_seqlens[2:4] = [5, 14]), more than max_len = 8"


def test_phase1_of_a_batch_equals_each_sequence_alone():
    """Phase 1 of a batch of sequences of different lengths, through to_chunks, equals per
    sequence and head that of the sequence run alone (one stream, valid_last its last
    chunk's tokens): the per-token fields token by token, a and the payload chunk by chunk."""
    B, T, H, W, R, C, keys = 3, 11, 2, 3, 3, 4, 12
    k, q, kv, qv, g, beta = batch(5, B, T, H, W, R, keys)
    lengths = np.array([11, 4, 6])
    ch = to_chunks(k, q, kv, qv, g, chunk_size=C, beta=beta, lengths=lengths, stream_offset=keys)
    out = p1.phase1_forward(ch.k_idx, ch.q_idx, ch.k_val, ch.q_val, ch.g, num_parallel=ch.num_parallel,
                            stream_offset=keys, num_keys=keys, beta=ch.beta,
                            stream_lengths=ch.stream_lengths, det_fields=p1.DET_SHIPPED | p1.DET_KREC)
    per_token = {name: from_chunks(getattr(out, name), ch.layout)
                 for name in ("log_k", "log_q", "rex", "k_eff", "q_w", "pos_k", "pos_q", "is_last")}
    steps, P = ch.layout.steps, ch.num_parallel
    for b in range(B):
        n = int(lengths[b])
        s_chunks = -(-n // C)
        pad = s_chunks * C - n
        for h in range(H):
            def alone(x):
                y = np.concatenate([x[b, :n, h], np.zeros((pad,) + x.shape[3:], x.dtype)])
                return y.reshape((s_chunks, C) + x.shape[3:])
            gb = alone(g[..., None])
            one = p1.phase1_forward(alone(k), alone(q), alone(kv), alone(qv), gb, num_parallel=1,
                                    stream_offset=0, num_keys=keys, valid_last=n - (s_chunks - 1) * C,
                                    beta=alone(beta), det_fields=p1.DET_SHIPPED | p1.DET_KREC)
            for name, got in per_token.items():
                want = getattr(one, name).reshape((s_chunks * C,) + got.shape[3:])[:n]
                np.testing.assert_array_equal(got[b, :n, h], want, err_msg=f"{name} b={b} h={h}")
            s = b * H + h
            for step in range(steps):
                c = step * P + s
                if step < s_chunks:
                    np.testing.assert_array_equal(out.a[c], one.a[step])
                    np.testing.assert_array_equal(out.payload[c], one.payload[step])
                else:  # wholly padding
                    assert not out.a[c].any() and not out.k_eff[c].any()
