"""Counts, for chunks of skewed slot popularity shaped as the benchmark's S7 and S8 (and their
Zipf variants), what the hot-group work of the pair sums is made of: the pair terms a chunk
has, the exps the kernels take today (one a run; a token writes a slot once here, so one a
term), the exps left where a term whose exact argument G_e - G_f was already computed in its
group reuses it, and the largest group's share of a chunk's terms. A model on the host, for
planning the hot-group kernels (docs/performance.md, "hot groups"); it runs nothing of the
library.

    python3 bench/hot_groups_model.py [CHUNKS]
"""

from __future__ import annotations

import sys

import numpy as np


def zipf_ids(rng, cdf, perm, tokens, lanes):
    """[tokens, lanes] slot ids, distinct within a token, ranks by the Zipf law's cdf mapped to
    slots by perm (the benchmark's inputs)."""
    out = np.empty((tokens, lanes), np.int64)
    for t in range(tokens):
        row: list[int] = []
        while len(row) < lanes:
            for slot in perm[np.minimum(np.searchsorted(cdf, rng.random(2 * lanes)), len(perm) - 1)]:
                if len(row) < lanes and int(slot) not in row:
                    row.append(int(slot))
        out[t] = row
    return out


def chunk_counts(rng, cdf, perm, C, W, R):
    """(terms, exps with reuse, largest group's terms) of one chunk, per-token gates."""
    k, q = zipf_ids(rng, cdf, perm, C, W), zipf_ids(rng, cdf, perm, C, R)
    gates = -np.log1p(np.exp(-rng.uniform(-2.0, 8.0, C)))  # logsigmoid, negative
    groups: dict[int, list[tuple[int, int]]] = {}
    for t in range(C):
        for slot in k[t]:
            groups.setdefault(int(slot), []).append((t, 0))
        for slot in q[t]:
            groups.setdefault(int(slot), []).append((t, 1))
    terms = reused = largest = 0
    for entries in groups.values():
        entries.sort()  # token order, a token's write before its read
        log, writes, seen, group_terms = 0.0, [], set(), 0
        for t, is_read in entries:
            if not is_read:
                log += gates[t]
            for t_f, log_f in writes:
                if is_read or t_f != t:  # a write pairs with other tokens' writes only
                    group_terms += 1
                    seen.add((log, log_f))  # exp(log - log_f): one per exact argument
            if not is_read:
                writes.append((t, log))
        terms += group_terms
        reused += len(seen)
        largest = max(largest, group_terms)
    return terms, reused, largest


def main() -> None:
    chunks = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shapes = [("S8", 128, 64, 64, 262144), ("S7", 64, 32, 32, 65536)]
    for name, C, W, R, keys in shapes:
        for s in (0.8, 1.1, 1.5):
            rng = np.random.default_rng(1)
            p = np.arange(1, keys + 1, dtype=np.float64) ** -s
            cdf = np.cumsum(p / p.sum())
            perm = rng.permutation(keys)
            counts = np.array([chunk_counts(rng, cdf, perm, C, W, R) for _ in range(chunks)], np.float64)
            terms, reused, largest = counts.sum(axis=0)
            n = C * (W + R)
            print(f"{name} Zipf {s}: {terms / chunks:.0f} terms a chunk of {n} entries "
                  f"({terms / chunks / n:.2f} an entry); exps with reuse {reused / terms:.3f} of today's; "
                  f"largest group {largest / terms:.3f} of the terms")


if __name__ == "__main__":
    main()
