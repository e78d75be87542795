"""A batch of sequences of different lengths through Phase 1 (CPU backend) and the chunked
recurrence, checked against the token-by-token recurrence of each sequence run alone.

Four sequences of 61, 9, 32 and 1 tokens, held batch-major and padded to T = 61 ([B, T, H, W]
with H = 2 heads), become one stream per (sequence, head) through sdm_phase1.to_chunks: 8
streams of 4 chunks of 16 tokens with per-stream lengths, so every chunk past a sequence's end
is wholly padding. One Phase-1 call computes every chunk; the chunked recurrence of
sdm_phase1.recurrence (the WY form, from the per-entry fields and from the records) then
runs on it. Each (sequence, head) alone, its tokens only, goes through the token-by-token
delta rule; the two must agree up to the rounding of Phase 1's float32 outputs.
Run from the source tree after building:
PYTHONPATH=bindings/python python3 examples/phase1_varlen.py
"""

import numpy as np
import sdm_phase1 as p1
from sdm_phase1 import recurrence as rec

LENGTHS = np.array([61, 9, 32, 1], np.int32)
B, T, H, W, R, C, D, KEYS = len(LENGTHS), int(LENGTHS.max()), 2, 4, 3, 16, 8, 64

rng = np.random.default_rng(0)
# Batch-major inputs; W distinct slots per token and head, reads mostly of written slots.
k_idx = np.argsort(rng.random((B, T, H, KEYS)), axis=-1)[..., :W].astype(np.int32)
q_idx = np.where(rng.random((B, T, H, R)) < 0.7, k_idx[..., rng.integers(0, W, R)],
                 rng.integers(0, KEYS, (B, T, H, R))).astype(np.int32)
k_val = rng.standard_normal((B, T, H, W)).astype(np.float32)
k_val /= np.linalg.norm(k_val, axis=-1, keepdims=True)   # unit writes: a contractive delta rule
q_val = rng.standard_normal((B, T, H, R)).astype(np.float32)
g = -rng.exponential(0.1, (B, T, H)).astype(np.float32)  # per-token log-gates
beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
v = rng.standard_normal((B, T, H, D))
M0 = rng.standard_normal((B * H, KEYS, D))               # each stream's start memory

ch = p1.to_chunks(k_idx, q_idx, k_val, q_val, g, chunk_size=C, beta=beta, lengths=LENGTHS,
                  stream_offset=KEYS)
P, N = ch.num_parallel, ch.layout.N
out = p1.phase1_forward(ch.k_idx, ch.q_idx, ch.k_val, ch.q_val, ch.g, num_parallel=P,
                        stream_offset=KEYS, num_keys=KEYS, valid_last=C, beta=ch.beta,
                        stream_lengths=ch.stream_lengths)
chunk_len = rec.chunk_lengths(N, C, P, stream_lengths=ch.stream_lengths)
v_c = p1.chunk_tokens(v, ch.layout)
kw = dict(num_parallel=P, stream_offset=KEYS, lengths=chunk_len)
o_fields, M_fields = rec.chunked(out, ch.k_idx, ch.q_idx, ch.k_val, ch.beta, v_c, M0, **kw)
o_records, M_records = rec.chunked(out, ch.k_idx, ch.q_idx, ch.k_val, ch.beta, v_c, M0,
                                   use_records=True, **kw)
o_fields, o_records = p1.from_chunks(o_fields, ch.layout), p1.from_chunks(o_records, ch.layout)

print(f"sdm_phase1 {p1.__version__}: B = {B} sequences of lengths {LENGTHS.tolist()}, H = {H} heads")
print(f"  -> {P} streams of {ch.layout.steps} chunks of {C} tokens (N = {N}), "
      f"{int((chunk_len == 0).sum())} chunks wholly padding")
worst = 0.0
for b in range(B):
    n = int(LENGTHS[b])
    for h in range(H):
        s = b * H + h
        # This sequence and head alone: one stream, its n tokens in ceil(n / C) chunks.
        steps = -(-n // C)

        def alone(x):
            y = np.zeros((steps * C,) + x.shape[3:], x.dtype)
            y[:n] = x[b, :n, h]
            return y.reshape((steps, C) + x.shape[3:])

        o_ref, M_ref = rec.token_by_token(
            alone(k_idx), alone(q_idx), alone(k_val), alone(q_val), alone(g[..., None]),
            alone(beta), alone(v), M0[s:s + 1], num_parallel=1, stream_offset=0,
            lengths=rec.chunk_lengths(steps, C, 1, stream_lengths=[n]))
        o_ref = o_ref.reshape(steps * C, D)[:n]
        errors = [rec.relative_error(o_fields[b, :n, h], o_ref),
                  rec.relative_error(o_records[b, :n, h], o_ref),
                  rec.relative_error(M_fields[s], M_ref[0]),
                  rec.relative_error(M_records[s], M_ref[0])]
        assert not o_fields[b, n:, h].any(), "outputs past the sequence's end must be zero"
        worst = max(worst, *errors)
        if h == 0:
            print(f"  sequence {b} ({n:2d} tokens): relative error of o {errors[0]:.2e} (fields), "
                  f"{errors[1]:.2e} (records); of the final memory {errors[2]:.2e}")
print(f"largest relative error against each sequence alone, token by token: {worst:.2e}")
assert worst < 1e-5, f"the chunked recurrence differs by {worst:.3g}"
