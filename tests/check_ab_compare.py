"""bench/ab_compare.py times two builds against each other as documented.

    python3 tests/check_ab_compare.py PHASE1_BENCH REPOSITORY_ROOT

Builds two folders as a GPU machine gets them (phase1_bench and libsdmp1.so.1 side by side,
copies of this build's), runs the comparison on the CPU backend over two custom shapes for
two rounds with --out, then checks: a JSON file a side and round; the table has one row a
shape, named by its numbers; each side's ms is the median of its rounds' medians in those
files, its spread their max / min - 1, B / A their ratio; each program loaded the library of
its own folder (a third folder whose library is missing fails with the loader's message and
exit 1); and a folder without phase1_bench is refused by name.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES = ["2,16,4,4,1024", "4,16,8,8,64,2"]


def fail(message: str) -> None:
    print(f"FAIL {message}")
    sys.exit(1)


def main() -> None:
    bench, root = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    library = bench.parent.parent / "libsdmp1.so.1"
    script = root / "bench" / "ab_compare.py"
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for side in ("a", "b"):
            (t / side).mkdir()
            shutil.copy(bench, t / side / "phase1_bench")
            shutil.copy(library, t / side / "libsdmp1.so.1")
        out = t / "out"
        command = [sys.executable, str(script), str(t / "a"), str(t / "b"), "--rounds", "2",
                   "--out", str(out), "--", "--backend", "cpu", "--reps", "3", *SHAPES]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"exit {done.returncode}: {done.stdout}{done.stderr}")
        files = sorted(p.name for p in out.iterdir())
        if files != ["a_1.json", "a_2.json", "b_1.json", "b_2.json"]:
            fail(f"files in --out: {files}")
        runs = {side: [json.loads((out / f"{side}_{r}.json").read_text()) for r in (1, 2)] for side in "ab"}
        rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
        if len(rows) != 2:
            fail(f"table rows: {rows}")
        for shape, line in zip(SHAPES, rows):
            cells = [c.strip() for c in line.strip("|").split("|")]
            want_name = shape if shape.count(",") == 5 else shape + ",1"
            if cells[0] != want_name or cells[1] != "default":
                fail(f"row {cells[:2]} for {shape}")
            stats = {}
            for side in "ab":
                ms = [next(r["median_ms"] for r in run["shapes"] if r["C"] == int(shape.split(",")[1])
                           and r["N"] == int(shape.split(",")[0])) for run in runs[side]]
                stats[side] = (statistics.median(ms), max(ms) / min(ms) - 1.0)
            (ams, aspread), (bms, bspread) = stats["a"], stats["b"]
            if cells[2] != f"{ams:.4f}" or cells[3] != f"{aspread:.1%}" or cells[4] != f"{bms:.4f}":
                fail(f"row {cells} against the files' A {ams} ({aspread}), B {bms}")
            if cells[5] != f"{bspread:.1%}" or cells[6] != f"{bms / ams:.3f}":
                fail(f"row {cells}: B spread {bspread}, B / A {bms / ams}")
        # Each program takes its own folder's library: without one, the loader says so.
        (t / "c").mkdir()
        shutil.copy(bench, t / "c" / "phase1_bench")
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        done = subprocess.run([sys.executable, str(script), str(t / "a"), str(t / "c"), "--rounds", "1", "--",
                               "--backend", "cpu", SHAPES[0]], capture_output=True, text=True, env=env)
        if done.returncode != 1 or "libsdmp1.so.1" not in done.stderr:
            fail(f"a folder without its library: exit {done.returncode}, {done.stderr[-300:]}")
        done = subprocess.run([sys.executable, str(script), str(t / "a"), str(t), "--", "--backend", "cpu"],
                              capture_output=True, text=True)
        if done.returncode == 0 or f"no phase1_bench in {t}" not in done.stderr:
            fail(f"a folder without phase1_bench: exit {done.returncode}, {done.stderr[-300:]}")
    print("ok: ab_compare's table is its runs' medians, each build with its own library")


if __name__ == "__main__":
    main()
