"""phase1_bench --save-inputs writes the inputs it times, as documented, and bench/compare_spec.py
reads them with the benchmark's JSON.

    python3 tests/check_bench_inputs.py PHASE1_BENCH REPOSITORY_ROOT

Runs `phase1_bench --backend cpu --reps 1 --json ... --save-inputs DIR` on a small custom
shape (16,16,8,8,64,2: 2 streams, 64 keys), S8, S8split and S6recent, then checks each
DIR/<shape>.npz with NumPy:
- its arrays and their dtypes and shapes (k_idx, q_idx int32; k_val, q_val uint16 bf16 bits;
  g float32 [N, C, 1]; the int64 scalars num_parallel, stream_offset, num_keys, valid_last);
- every id in its chunk's stream (chunk n: stream n % num_parallel, ids in
  [stream * stream_offset, + num_keys)), distinct within a token (K and Q each), values in
  [-1, 1], gates negative and above logsigmoid(-2);
- the bytes against an independent regeneration here of the benchmark's documented random
  stream (splitmix64 from seed 42, the Zipf laws' permutations, per token K ids, Q ids, K values,
  Q values, gate, beta): every token of the custom shape, the first 64 of the others;
- S8's most written slot is its most read one (one Zipf ranking), S8split's are not (two);
- every read of S6recent is a slot that its token or one of the 3 tokens before it in the
  chunk wrote.
Then bench/compare_spec.py on the JSON and the folder, with a stand-in for time_spec.py that
prints its lines (2.5 ms a file) but fails on S8.npz: the table has one row a shape, the JSON's
median ms, S8's spec column "-", the others' lead 2.5 / median. Exits 77 (meson's "skipped")
where this Python cannot import numpy.
"""

from __future__ import annotations

import bisect
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
from typing import Any

MASK = (1 << 64) - 1
CUSTOM = "16,16,8,8,64,2"
# name: N, C, W, R, num_keys, streams, Zipf exponent (0: uniform ids), split (two rankings)
SHAPES: dict[str, tuple[int, int, int, int, int, int, float, bool]] = {
    "custom": (16, 16, 8, 8, 64, 2, 0.0, False),
    "S8": (128, 128, 64, 64, 262144, 2, 1.1, False),
    "S8split": (128, 128, 64, 64, 262144, 2, 1.1, True),
    "S6recent": (128, 128, 64, 64, 262144, 2, 0.0, False),
}
# Shapes whose reads follow recent writes: each a slot of its token's or the RECENT_TOKENS - 1
# tokens' before it in the chunk.
RECENT = {"S6recent"}
RECENT_TOKENS = 4
SCALARS = ("num_parallel", "stream_offset", "num_keys", "valid_last")


class Rng:
    """The benchmark's splitmix64 stream."""

    def __init__(self, seed: int) -> None:
        self.state = seed

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)


class Zipf:
    """Rank r (from 1) with probability proportional to r^-s, mapped to slot perm[r - 1]."""

    def __init__(self, n: int, s: float, rng: Rng) -> None:
        total, cdf = 0.0, []
        for r in range(n):
            total += float(r + 1) ** -s
            cdf.append(total)
        self.cdf = [c / total for c in cdf]
        self.perm = list(range(n))
        for r in range(n - 1, 0, -1):
            k = rng.next() % (r + 1)
            self.perm[r], self.perm[k] = self.perm[k], self.perm[r]

    def draw(self, rng: Rng) -> int:
        return self.perm[min(bisect.bisect_left(self.cdf, rng.uniform()), len(self.perm) - 1)]


def regenerate(name: str, tokens: int) -> dict[str, Any]:
    """The first `tokens` tokens' inputs of a shape, drawn as the benchmark documents."""
    import numpy as np

    N, C, W, R, keys, P, s, split = SHAPES[name]
    rng = Rng(42)
    law = Zipf(keys, s, rng) if s else None
    read_law = Zipf(keys, s, rng) if split else law
    out: dict[str, list[Any]] = {"k_idx": [], "q_idx": [], "k_val": [], "q_val": [], "g": []}

    def token_ids(lanes: int, base: int, zipf: Zipf | None) -> list[int]:
        # distinct within the token where the keys allow, else each drawn as it comes
        got: list[int] = []
        for _ in range(lanes):
            while True:
                i = zipf.draw(rng) if zipf is not None else rng.next() % keys
                if keys < lanes or base + i not in got:
                    break
            got.append(base + i)
        return got

    def bf16(v: float) -> int:
        u = int(np.float32(v).view(np.uint32))
        return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFFFFFF) >> 16

    def recent_ids(tok: int) -> list[int]:
        # drawn from the recent tokens' writes, distinct; uniform draws fill what they lack
        first = max(tok - RECENT_TOKENS + 1, tok - tok % C)
        writes = [i for t in range(first, tok + 1) for i in out["k_idx"][t]]
        got: list[int] = []
        for _ in range(64 * R):
            if len(got) == R:
                break
            i = writes[rng.next() % len(writes)]
            if i not in got:
                got.append(i)
        while len(got) < R:
            got.append((tok // C % P) * keys + rng.next() % keys)
        return got

    for tok in range(tokens):
        base = (tok // C % P) * keys
        out["k_idx"].append(token_ids(W, base, law))
        out["q_idx"].append(recent_ids(tok) if name in RECENT else token_ids(R, base, read_law))
        out["k_val"].append([bf16(2.0 * rng.uniform() - 1.0) for _ in range(W)])
        out["q_val"].append([bf16(2.0 * rng.uniform() - 1.0) for _ in range(R)])
        x = -2.0 + 10.0 * rng.uniform()
        out["g"].append([-math.log1p(math.exp(-x))])
        rng.uniform()  # beta
    dtypes = {"k_idx": np.int32, "q_idx": np.int32, "k_val": np.uint16, "q_val": np.uint16, "g": np.float32}
    return {k: np.array(v, dtype=dtypes[k]) for k, v in out.items()}


def check_file(path: str, name: str) -> list[str]:
    """The problems of one saved file (none: it is as documented and regenerated)."""
    import numpy as np

    N, C, W, R, keys, P, s, split = SHAPES[name]
    problems: list[str] = []
    with np.load(path) as z:
        a = {k: z[k] for k in z.files}
    want: dict[str, tuple[Any, tuple[int, ...]]] = {
        "k_idx": (np.int32, (N, C, W)), "q_idx": (np.int32, (N, C, R)), "k_val": (np.uint16, (N, C, W)),
        "q_val": (np.uint16, (N, C, R)), "g": (np.float32, (N, C, 1))}
    want.update({k: (np.int64, ()) for k in SCALARS})
    if sorted(a) != sorted(want):
        return [f"{name}: arrays {sorted(a)}, not {sorted(want)}"]
    for k, (dtype, shape) in want.items():
        if a[k].dtype != dtype or a[k].shape != shape:
            problems.append(f"{name}: {k} is {a[k].dtype} {a[k].shape}, not {np.dtype(dtype)} {shape}")
    if problems:
        return problems
    scalars = {k: int(a[k]) for k in SCALARS}
    if scalars != {"num_parallel": P, "stream_offset": keys, "num_keys": keys, "valid_last": C}:
        problems.append(f"{name}: scalars {scalars}")
    stream = (np.arange(N) % P).reshape(N, 1, 1) * keys
    for k in ("k_idx", "q_idx"):
        rel = a[k].astype(np.int64) - stream
        if rel.min() < 0 or rel.max() >= keys:
            problems.append(f"{name}: {k} has ids outside their chunk's stream")
        ordered = np.sort(a[k], axis=2)
        if (ordered[:, :, 1:] == ordered[:, :, :-1]).any():
            problems.append(f"{name}: {k} repeats a slot within a token")
    for k in ("k_val", "q_val"):
        v = (a[k].astype(np.uint32) << 16).view(np.float32)
        if not (np.abs(v) <= 1.0).all():
            problems.append(f"{name}: {k} has values outside [-1, 1]")
    if not ((a["g"] < 0) & (a["g"] > -math.log1p(math.exp(2.0)))).all():
        problems.append(f"{name}: gates outside (logsigmoid(-2), 0)")
    tokens = N * C if name == "custom" else 64
    again = regenerate(name, tokens)
    for k, v in again.items():
        if not np.array_equal(a[k].reshape(N * C, -1)[:tokens], v):
            problems.append(f"{name}: {k} of the first {tokens} tokens differs from the regeneration")
    if s:
        top_write = np.bincount(a["k_idx"][0::P].ravel()).argmax()
        top_read = np.bincount(a["q_idx"][0::P].ravel()).argmax()
        if (top_write != top_read) != split:
            problems.append(f"{name}: stream 0's most written slot {top_write}, most read {top_read}: "
                            f"{'one ranking' if split else 'two rankings'}?")
    if name in RECENT:
        for t in range(C):
            recent = a["k_idx"][:, max(0, t - RECENT_TOKENS + 1) : t + 1].reshape(N, -1)
            if not all(np.isin(a["q_idx"][n, t], recent[n]).all() for n in range(N)):
                problems.append(f"{name}: token {t} reads a slot its last {RECENT_TOKENS} tokens never wrote")
                break
    return problems


STAND_IN = """import os, sys
for path in sys.argv[1:]:
    if os.path.basename(path) == "S8.npz":
        sys.exit(3)
    print(f"{os.path.basename(path)}: spec kernels 2.5000 ms (peak 1 MB)", flush=True)
"""


def check_compare(root: str, json_path: str, inputs: str, tmp: str) -> list[str]:
    """bench/compare_spec.py's table with a stand-in timer that fails on S8."""
    import json

    stand_in = os.path.join(tmp, "time_spec.py")
    with open(stand_in, "w") as f:
        f.write(STAND_IN)
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "compare_spec.py"), json_path, inputs,
                        "--time-spec", stand_in], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return [f"compare_spec.py exited {r.returncode}:\n{r.stdout}{r.stderr}"]
    with open(json_path) as f:
        lib = {row["shape"]: row for row in json.load(f)["shapes"]}
    rows = [line.strip("|").split("|") for line in r.stdout.splitlines()[2:]]
    got = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}
    want = {}
    for name in SHAPES:
        spec = "-" if name == "S8" else "2.5000"
        lead = "-" if name == "S8" else f"{2.5 / lib[name]['median_ms']:.2f}"
        want[name] = [f"{lib[name]['median_ms']:.4f}", f"{lib[name]['fraction_of_copy']:.3f}", spec, lead]
    if got != want or len(rows) != len(SHAPES):
        return [f"compare_spec.py's table:\n{r.stdout}\nnot rows {want}\n{r.stderr}"]
    return []


def main() -> int:
    if importlib.util.find_spec("numpy") is None:
        print(f"SKIPPED: {sys.executable} cannot import numpy")
        return 77
    bench, root = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        inputs, json_path = os.path.join(tmp, "inputs"), os.path.join(tmp, "bench.json")
        cmd = [bench, "--backend", "cpu", "--reps", "1", "--threads", "1", "--json", json_path,
               "--save-inputs", inputs, CUSTOM, "S8", "S8split", "S6recent"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
            return 1
        problems = []
        for name in SHAPES:
            path = os.path.join(inputs, name + ".npz")
            problems += check_file(path, name) if os.path.isfile(path) else [f"no {path}"]
        problems += check_compare(root, json_path, inputs, tmp)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"the saved inputs of {', '.join(SHAPES)} are as documented and regenerated; compare_spec.py's "
          "table is right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
