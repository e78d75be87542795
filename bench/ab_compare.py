"""Two builds of libsdmp1 timed against each other in one run: phase1_bench of each, alternated
round by round on the same shapes, then one markdown table of the rows both timed.

    python3 bench/ab_compare.py A B [--rounds K] [--out DIR] -- PHASE1_BENCH_ARGS...

A and B: build folders (their bench/phase1_bench and libsdmp1.so.1) or folders holding
phase1_bench and libsdmp1.so.1 side by side (copies carried to a GPU machine); each program
runs with its own folder first on LD_LIBRARY_PATH, so it loads its own library. The arguments
after -- go to every run as they are (e.g. `--backend cuda --reps 30 --fields 952 S1 S6 S8`);
each run also gets `--json DIR/<a|b>_<round>.json` (DIR: --out, else a temporary folder that
is removed). Rounds (default 2) run A then B, then A then B again, so that a drift of the
machine (clocks, another tenant) falls on both.

The table: a row per (shape, fields, varlen) both timed, with each side's median ms over
its rounds' medians, the spread of those (max / min - 1: a difference between A and B below
it is noise), B / A, and each side's fraction of the copy bandwidth measured in its own runs.
A run that fails stops the comparison with its output (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def program(folder: Path) -> Path:
    """The folder's phase1_bench: bench/phase1_bench of a build, else phase1_bench beside."""
    for candidate in (folder / "bench" / "phase1_bench", folder / "phase1_bench"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"ab_compare: no phase1_bench in {folder} (nor in its bench/)")


def run(folder: Path, args: list[str], json_path: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(folder), env.get("LD_LIBRARY_PATH", "")]))
    command = [str(program(folder)), *args, "--json", str(json_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"ab_compare: {' '.join(command)} exited with {done.returncode}")
    with open(json_path) as f:
        return json.load(f)


def row_key(row: dict[str, Any]) -> tuple[str, str, bool]:
    """A row's shape (a custom one by its numbers), fields and varlen."""
    shape = row["shape"]
    if shape == "custom":
        shape = ",".join(str(row[k]) for k in ("N", "C", "W", "R", "num_keys", "streams"))
    return shape, str(row["det_fields"]), bool(row.get("varlen", False))


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """The markdown table of the rows both sides timed, in A's first run's order."""
    def by_key(side: str) -> dict[tuple[str, str, bool], list[dict[str, Any]]]:
        rows: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
        for result in runs[side]:
            for row in result["shapes"]:
                rows.setdefault(row_key(row), []).append(row)
        return rows

    a, b = by_key("a"), by_key("b")
    lines = ["| shape | fields | A ms | A spread | B ms | B spread | B / A | A of copy | B of copy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in a:
        if key not in b:
            continue
        cells = []
        for rows in (a[key], b[key]):
            ms = [r["median_ms"] for r in rows]
            cells.append((statistics.median(ms), max(ms) / min(ms) - 1.0,
                          statistics.median(r["fraction_of_copy"] for r in rows)))
        (ams, aspread, acopy), (bms, bspread, bcopy) = cells
        shape, fields, varlen = key
        lines.append(f"| {shape} | {fields}{' varlen' if varlen else ''} | {ams:.4f} | {aspread:.1%} | "
                     f"{bms:.4f} | {bspread:.1%} | {bms / ams:.3f} | {acopy:.3f} | {bcopy:.3f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--" in argv:
        cut = argv.index("--")
        own, bench_args = argv[:cut], argv[cut + 1:]
    else:
        own, bench_args = argv, []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args(own)
    if opts.rounds < 1:
        parser.error("--rounds must be at least 1")
    if "--json" in bench_args:
        parser.error("--json is the comparison's own (one file a run in --out)")
    with tempfile.TemporaryDirectory() as scratch:
        out = opts.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        runs: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        for r in range(opts.rounds):
            for side, folder in (("a", opts.a), ("b", opts.b)):
                runs[side].append(run(folder.resolve(), bench_args, out / f"{side}_{r + 1}.json"))
    copy = {side: statistics.median(x["copy_GBps"] for x in runs[side]) for side in runs}
    print(f"A: {opts.a} (copy {copy['a']:.1f} GB/s); B: {opts.b} (copy {copy['b']:.1f} GB/s); "
          f"{opts.rounds} rounds, A then B; device {runs['a'][0].get('device', '?')}")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
