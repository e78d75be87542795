"""A Phase-1 run from NumPy through the Python package sdm_phase1 (CPU backend).

Two streams of three chunks of 32 tokens; each token writes 8 and reads 4 slots of its
stream's 256 slots, with bfloat16 values and per-token log-gates. Prints a few outputs.
Run from the source tree after building: PYTHONPATH=bindings/python python3 examples/phase1_numpy.py
"""

import numpy as np
import sdm_phase1 as p1

N, C, W, R, P, KEYS, OFFSET = 6, 32, 8, 4, 2, 256, 4096

rng = np.random.default_rng(0)
stream_base = (np.arange(N) % P * OFFSET)[:, None, None]
# W distinct slots per token: a random permutation prefix of the stream's slots.
k_idx = np.stack([rng.permutation(KEYS)[:W] for _ in range(N * C)]).reshape(N, C, W) + stream_base
q_idx = rng.integers(0, KEYS, size=(N, C, R)) + stream_base
k_val = p1.bf16_from_float32(rng.standard_normal((N, C, W), dtype=np.float32) / np.sqrt(W))
q_val = p1.bf16_from_float32(rng.standard_normal((N, C, R), dtype=np.float32))
g = -rng.exponential(0.1, size=(N, C, 1)).astype(np.float32)   # log-gates <= 0
beta = rng.uniform(0.1, 1.0, size=(N, C)).astype(np.float32)
repeats = np.zeros(1, dtype=np.int64)

out = p1.phase1_forward(
    k_idx.astype(np.int32), q_idx.astype(np.int32), k_val, q_val, g, repeats,
    num_parallel=P, stream_offset=OFFSET, num_keys=KEYS, valid_last=20, beta=beta)

print(f"sdm_phase1 {p1.__version__} ({p1.library_path})")
present = [name for name, value in out._asdict().items() if value is not None and value.size]
print(f"fields returned: {len(present)} of {len(out)}: {', '.join(present)}")
print(f"a: {np.count_nonzero(out.a)} non-zero cells, max |a| = {np.abs(out.a).max():.4f}")
print(f"qk: {np.count_nonzero(out.qk)} non-zero cells; log_k of chunk 0, token 1: {out.log_k[0, 1]}")
print(f"cpe (bfloat16) of chunk 0, token 0: {p1.bf16_to_float32(out.cpe[0, 0])}")
print(f"slot groups per chunk: {out.segb_k[:, -1]}; repeated writes: {repeats[0]}")
