"""Trains a tiny model with an SDM layer on a recall task: gradients through Phase 1 (libsdmp1's
backward, via PyTorch autograd) and the chunked recurrence (sdm_phase1.torch_recurrence).

The task: each sequence writes KEYS (key, value) pairs, one token each, then asks for every key
again in a random order; the model must answer each query with the value written for that key
earlier, which only the layer's memory can carry (values are random per sequence).

The model (about 350 parameters): embeddings of keys, values and a query marker -> routing (each
token writes and reads the W memory slots of its key's largest routing scores, softmax weights)
-> the SDM layer (log-gate, beta and value from the token's embedding) -> a linear readout
of the value. Each sequence is one stream of the layer's memory; its tokens form time-major
chunks of C tokens. Prints the loss and the queries' accuracy every few steps; exits 1 unless
the final loss is below half the first (chance: log(VALUES) = 1.39).

Runs on a GPU where torch sees one and libsdmp1 has the CUDA backend (Phase 1's forward and
backward both on the GPU), else on the CPU:

    SDMP1_LIBRARY=build/libsdmp1.so PYTHONPATH=bindings/python python3 examples/train_sdm_layer.py
"""

from __future__ import annotations

import math
import sys
import time

import sdm_phase1 as p1
import torch
from torch import nn

KEYS, VALUES = 8, 4          # keys per sequence, values a key may hold
B, C = 32, 8                 # sequences per batch; tokens per chunk
T = 2 * KEYS                 # KEYS writes, then KEYS queries: two chunks a sequence
SLOTS, W, D, D_MODEL = 16, 2, 8, 8   # memory slots a stream, slots a token, value width, model width
STEPS, LR, PRINT_EVERY = 60, 0.03, 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = nn.Embedding(KEYS, D_MODEL)
        self.value = nn.Embedding(VALUES, D_MODEL)
        self.query = nn.Parameter(torch.randn(D_MODEL) * 0.5)   # marks query tokens
        self.route = nn.Linear(D_MODEL, SLOTS, bias=False)       # key -> slot scores
        self.gate = nn.Linear(D_MODEL, 1)
        self.beta = nn.Linear(D_MODEL, 1)
        self.to_v = nn.Linear(D_MODEL, D, bias=False)
        self.readout = nn.Linear(D, VALUES)
        with torch.no_grad():
            self.gate.bias.fill_(4.0)   # log-gates near 0: the memory keeps what it holds

    def forward(self, keys, values, is_query):
        """keys, values, is_query: [b, T] (any number b of sequences, e.g. a process's share
        of the batch). Returns the value logits [b, T, VALUES]."""
        b = keys.shape[0]
        x = self.key(keys) + torch.where(is_query[..., None], self.query, self.value(values))
        # Routing from the key alone, so a query reads the slots its key's write wrote. The
        # slots (ids) are not differentiable; the weights over them are.
        scores = self.route(self.key(keys))
        top, slots = scores.topk(W, dim=-1)
        weights = torch.softmax(top, dim=-1)
        k_val = weights / weights.norm(dim=-1, keepdim=True)   # unit writes: a contractive rule
        g = nn.functional.logsigmoid(self.gate(x))              # [B, T, 1] per-token log-gate
        beta = torch.sigmoid(self.beta(x))[..., 0]
        v = self.to_v(x)
        stream = torch.arange(b, device=keys.device)[:, None, None] * SLOTS  # sequence i's slots
        ids = (slots + stream).to(torch.int32)
        o, _ = p1.sdm_layer(chunks(ids), chunks(ids), chunks(k_val), chunks(weights), chunks(g),
                            chunks(beta), chunks(v), x.new_zeros(b, SLOTS, D), num_parallel=b,
                            stream_offset=SLOTS, num_keys=SLOTS, valid_last=C)
        return self.readout(unchunk(o, b))


def chunks(a):
    """[b, T, ...] -> time-major chunks [T / C * b, C, ...], contiguous (chunk step * b + i is
    sequence i's tokens step * C .. step * C + C - 1)."""
    b, steps = a.shape[0], T // C
    return a.reshape((b, steps, C) + a.shape[2:]).transpose(0, 1).reshape(
        (steps * b, C) + a.shape[2:]).contiguous()


def unchunk(a, b):
    """The inverse of :func:`chunks` for b sequences."""
    steps = T // C
    return a.reshape((steps, b, C) + a.shape[2:]).transpose(0, 1).reshape((b, T) + a.shape[2:])


def batch(gen, device):
    """Each sequence: every key once with a random value, then every key again as a query."""
    write_keys = torch.argsort(torch.rand(B, KEYS, generator=gen), dim=1)
    values = torch.randint(0, VALUES, (B, KEYS), generator=gen)
    order = torch.argsort(torch.rand(B, KEYS, generator=gen), dim=1)
    query_keys = write_keys.gather(1, order)
    answers = values.gather(1, order)
    keys = torch.cat([write_keys, query_keys], dim=1)
    vals = torch.cat([values, torch.zeros_like(values)], dim=1)
    is_query = torch.arange(T)[None, :].expand(B, T) >= KEYS
    return keys.to(device), vals.to(device), is_query.to(device), answers.to(device)


def main() -> int:
    on_gpu = torch.cuda.is_available() and bool(p1.cuda_device_count())
    device = torch.device("cuda" if on_gpu else "cpu")
    if on_gpu:
        # The recurrence's scatters and gathers: repeatable bits on CUDA (torch_recurrence).
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.set_num_threads(1)  # tensors of a few KiB: more threads only wait on each other
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = Model().to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    print(f"train_sdm_layer: {params} parameters on {device}; {B} sequences of {T} tokens "
          f"({KEYS} writes, {KEYS} queries) a step, chunks of {C}, {SLOTS} slots a sequence; "
          f"chance loss {math.log(VALUES):.3f}")
    start = time.perf_counter()
    losses = []
    for step in range(1, STEPS + 1):
        keys, vals, is_query, answers = batch(gen, device)
        logits = model(keys, vals, is_query)[:, KEYS:]
        loss = nn.functional.cross_entropy(logits.reshape(-1, VALUES), answers.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 1 or step % PRINT_EVERY == 0:
            accuracy = (logits.argmax(-1) == answers).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.4f}  query accuracy {accuracy:.2f}")
    first, final = losses[0], sum(losses[-10:]) / 10
    print(f"first loss {first:.4f}, final loss (mean of the last 10 steps) {final:.4f}, "
          f"{time.perf_counter() - start:.1f} s")
    if not final < 0.5 * first:
        print("train_sdm_layer: the loss did not fall below half its first value")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
