"""A whole Sparse Delta Memory layer forward on a small batch: sdm_phase1.sdm_layer (Phase 1 from
libsdmp1, then the chunked recurrence of docs/design.md, sdm_phase1.recurrence), checked
against the token-by-token delta rule; in NumPy on the CPU backend, and in PyTorch on a GPU
(sdm_phase1.torch_recurrence) where torch, a CUDA device and a libsdmp1 with the CUDA backend
are present.

The layer, for hidden states x [B, T, d_model] (each sequence one stream of the memory):
    each token writes the W slots of its largest routing scores x W_k (distinct slots), with
    unit-norm weights (a softmax over those scores, normalized), and reads the R slots of its
    largest scores x W_q, weighted by their softmax;
    log-gate g = logsigmoid(x w_g + 4) (per token, near 0: the memory keeps most of a slot),
    beta = sigmoid(x w_b), value v = x W_v;
    o = the delta rule's reads (sdm_phase1.recurrence says what it computes), y = x + o W_o.
Prints the relative error of o, of the final memory and of y against the token-by-token
recurrence, and fails where it exceeds 1e-5.

    SDMP1_LIBRARY=build/libsdmp1.so PYTHONPATH=bindings/python python3 examples/sdm_layer.py
"""

from __future__ import annotations

import sys

import numpy as np
import sdm_phase1 as p1
from sdm_phase1 import recurrence as rec

B, T, D_MODEL = 2, 100, 16    # two sequences of 100 tokens
C, W, R, D = 32, 4, 4, 8       # chunks of 32 tokens; 4 writes, 4 reads, values of 8
KEYS = 256                     # slots of each sequence's memory
TOLERANCE = 1e-5


def parameters(rng):
    """The layer's weights (random: this example shows the computation, not a trained model)."""
    return dict(W_k=rng.standard_normal((D_MODEL, KEYS)), W_q=rng.standard_normal((D_MODEL, KEYS)),
                w_g=rng.standard_normal(D_MODEL) / np.sqrt(D_MODEL),
                w_b=rng.standard_normal(D_MODEL) / np.sqrt(D_MODEL),
                W_v=rng.standard_normal((D_MODEL, D)) / np.sqrt(D_MODEL),
                W_o=rng.standard_normal((D, D_MODEL)) / np.sqrt(D))


def route(scores, lanes):
    """The `lanes` largest scores' slots (distinct) and their softmax weights."""
    slots = np.argsort(-scores, axis=-1)[..., :lanes]
    top = np.take_along_axis(scores, slots, axis=-1)
    weights = np.exp(top - top.max(axis=-1, keepdims=True))
    return slots, weights / weights.sum(axis=-1, keepdims=True)


def to_chunks(a, steps):
    """[B, T, ...] -> time-major chunks [steps * B, C, ...]: chunk step * B + b is sequence b's
    tokens step * C .. step * C + C - 1, the last chunk zero-padded (padding is never read)."""
    pad = np.zeros((B, steps * C - T) + a.shape[2:], a.dtype)
    a = np.concatenate([a, pad], axis=1).reshape((B, steps, C) + a.shape[2:])
    return np.swapaxes(a, 0, 1).reshape((steps * B, C) + a.shape[3:])


def from_chunks(a, steps):
    """Time-major chunks [steps * B, C, ...] -> [B, T, ...]."""
    a = np.swapaxes(a.reshape((steps, B, C) + a.shape[2:]), 0, 1)
    return a.reshape((B, steps * C) + a.shape[3:])[:, :T]


def layer_inputs(x, w):
    """Phase 1's inputs and v, as time-major chunks, and the chunking's facts."""
    steps = -(-T // C)
    k_slots, k_w = route(x @ w["W_k"], W)
    q_slots, q_w = route(x @ w["W_q"], R)
    k_w /= np.linalg.norm(k_w, axis=-1, keepdims=True)   # unit-norm writes: beta < 1 contracts
    g = -np.logaddexp(0.0, -(x @ w["w_g"] + 4.0))[..., None]   # logsigmoid, [B, T, 1]
    beta = 1.0 / (1.0 + np.exp(-(x @ w["w_b"])))
    stream = np.arange(B)[:, None, None] * KEYS               # sequence b owns [b * KEYS, ...)
    chunks = dict(k_idx=to_chunks((k_slots + stream).astype(np.int32), steps),
                  q_idx=to_chunks((q_slots + stream).astype(np.int32), steps),
                  k_val=to_chunks(k_w.astype(np.float32), steps),
                  q_val=to_chunks(q_w.astype(np.float32), steps),
                  g=to_chunks(g.astype(np.float32), steps),
                  beta=to_chunks(beta.astype(np.float32), steps))
    v = to_chunks(x @ w["W_v"], steps)
    valid_last = T - (steps - 1) * C
    return chunks, v, steps, valid_last


def phase1(chunks, valid_last):
    return p1.phase1_forward(chunks["k_idx"], chunks["q_idx"], chunks["k_val"], chunks["q_val"],
                             chunks["g"], num_parallel=B, stream_offset=KEYS, num_keys=KEYS,
                             valid_last=valid_last, beta=chunks["beta"])


def report(label, o, M, y, want):
    o_ref, M_ref, y_ref = want
    errors = {"o": rec.relative_error(o, o_ref), "memory": rec.relative_error(M, M_ref),
              "y": rec.relative_error(y, y_ref)}
    print(f"{label}: relative error against the token-by-token recurrence: "
          + ", ".join(f"{k} {e:.2e}" for k, e in errors.items()))
    return max(errors.values()) <= TOLERANCE


def layer(chunks, v, M0, valid_last):
    """sdm_phase1.sdm_layer on the chunks (NumPy arrays or torch tensors): (o, final memory)."""
    return p1.sdm_layer(chunks["k_idx"], chunks["q_idx"], chunks["k_val"], chunks["q_val"],
                        chunks["g"], chunks["beta"], v, M0, num_parallel=B, stream_offset=KEYS,
                        num_keys=KEYS, valid_last=valid_last)


def run_torch(chunks, v, M0, valid_last, w, x, out_cpu, want):
    """Phase 1 on CUDA tensors, bit for bit the CPU backend's, then the layer (the PyTorch
    recurrence) on the GPU; None where there is no GPU to run on."""
    try:
        import torch
    except ImportError:
        print("PyTorch on a GPU: skipped (torch is not installed)")
        return None
    if not torch.cuda.is_available() or not p1.cuda_device_count():
        print("PyTorch on a GPU: skipped (needs a CUDA device and a libsdmp1 with the CUDA backend)")
        return None
    dev = torch.device("cuda")
    tc = {k: torch.from_numpy(a).to(dev) for k, a in chunks.items()}
    with torch.no_grad():
        out = phase1(tc, valid_last)
        torch.cuda.synchronize()
        differ = [f for f in out._fields if getattr(out, f) is not None and getattr(out_cpu, f) is not None
                  and not np.array_equal(getattr(out, f).cpu().numpy(), getattr(out_cpu, f))]
        print(f"PyTorch on {torch.cuda.get_device_name(dev)}: Phase 1 outputs equal to the CPU "
              f"backend's bit for bit: {'yes' if not differ else 'no: ' + ', '.join(differ)}")
        o, M = layer(tc, torch.from_numpy(v).to(dev), torch.from_numpy(M0).to(dev), valid_last)
        o, M = o.cpu().numpy(), M.cpu().numpy()
    y = x + from_chunks(o, o.shape[0] // B) @ w["W_o"]
    return report("PyTorch, CUDA backend", o, M, y, want) and not differ


def main() -> int:
    rng = np.random.default_rng(23)
    w = parameters(rng)
    x = rng.standard_normal((B, T, D_MODEL))
    chunks, v, steps, valid_last = layer_inputs(x, w)
    M0 = np.zeros((B, KEYS, D))
    lengths = rec.chunk_lengths(steps * B, C, B, valid_last=valid_last)
    args = dict(num_parallel=B, stream_offset=KEYS, lengths=lengths)
    print(f"sdm_layer: B={B} sequences of T={T} tokens as {steps * B} chunks of C={C} "
          f"(last {valid_last} valid), W={W} writes, R={R} reads, D={D}, {KEYS} slots a sequence")

    o_ref, M_ref = rec.token_by_token(chunks["k_idx"], chunks["q_idx"], chunks["k_val"], chunks["q_val"],
                                      chunks["g"], chunks["beta"], v, M0, **args)
    want = (o_ref, M_ref, x + from_chunks(o_ref, steps) @ w["W_o"])

    o, M = layer(chunks, v, M0, valid_last)
    ok = report("NumPy, CPU backend", o, M, x + from_chunks(o, steps) @ w["W_o"], want)
    gpu_ok = run_torch(chunks, v, M0, valid_last, w, x, phase1(chunks, valid_last), want)
    if not ok or gpu_ok is False:
        print(f"sdm_layer: an error above exceeds {TOLERANCE:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
