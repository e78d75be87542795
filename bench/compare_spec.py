#!/usr/bin/env python3
"""libsdmp1 beside the spec's own Phase-1 kernels, on the same inputs: one markdown table.

On the device machine (nvcc, torch), from the repository root, after a CUDA build:

    build/bench/phase1_bench --backend cuda --json build/peer/bench.json \\
        --save-inputs build/peer S1 S2 S3 S4 S5 S6 S7 S8 S7split S8split
    python3 bench/compare_spec.py build/peer/bench.json build/peer

The benchmark's --json gives libsdmp1's rows, its --save-inputs the inputs those rows timed
(DIR/<shape>.npz); this script runs the spec's timer, time_spec.py (default
../shared/peer/time_spec.py beside the repository; --time-spec to name another), on the files
of the JSON's shapes with the Python running it, and prints the table on stdout:

    | shape | libsdmp1 ms | of copy | spec ms | lead |

libsdmp1 ms: the JSON's "median_ms" of the shape's default row (default det_fields, full
length; CUDA events, median of --reps, 20 unless given); of copy: that row's
"fraction_of_copy" (input + output bytes per second over the device-to-device copy's);
spec ms: time_spec.py's median of 20 (CUDA events, after 3 warm-ups); lead: spec ms /
libsdmp1 ms (above 1: libsdmp1 is faster). A shape without its .npz, or on which the spec's
kernels fail (time_spec.py's error goes to stderr), shows "-" (a failure before any file was
timed, such as the extension's build, ends the runs). time_spec.py's own output is
echoed on stderr as it comes; its first run builds the spec's extension (3-4 minutes; set
SDMSEED_BUILD to a folder kept between runs to build it once). --spec-output PATH reads
time_spec.py's output from a file saved earlier instead of running it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TIME_SPEC = os.path.join(REPO, "..", "shared", "peer", "time_spec.py")

# time_spec.py's line a file: "<file name>: spec kernels <ms> ms (peak <MB> MB)".
SPEC_LINE = re.compile(r"^(?P<file>.+?)\.npz: spec kernels (?P<ms>[0-9.]+) ms \(peak [0-9.]+ MB\)\s*$")


def libsdmp1_rows(path: str) -> list[dict[str, Any]]:
    """The JSON's default rows (default det_fields, not varlen), in the run's order."""
    with open(path) as f:
        run = json.load(f)
    return [r for r in run["shapes"] if r["det_fields"] == "default" and not r.get("varlen", False)]


def parse_spec_output(text: str) -> dict[str, float]:
    """Shape name (the file name less .npz) to the spec's median ms, from time_spec.py's output."""
    found = (SPEC_LINE.match(line) for line in text.splitlines())
    return {m["file"]: float(m["ms"]) for m in found if m is not None}


def run_time_spec(time_spec: str, files: list[str]) -> dict[str, float]:
    """time_spec.py on the files (in order, one process): where it fails after timing some, the
    first file without a line is left out and the rest run in a new process; where it fails
    before timing any (its extension's build, say), it is not run again."""
    times: dict[str, float] = {}
    todo = list(files)
    while todo:
        p = subprocess.Popen([sys.executable, time_spec] + todo, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        for line in p.stdout:
            sys.stderr.write(line)
            times.update(parse_spec_output(line))
        rc = p.wait()
        left = [f for f in todo if os.path.basename(f)[: -len(".npz")] not in times]
        if rc == 0 or not left:
            break
        if len(left) == len(todo):
            print(f"compare_spec: time_spec.py exited {rc} before timing any file", file=sys.stderr)
            break
        print(f"compare_spec: time_spec.py exited {rc} on {left[0]}; going on without it", file=sys.stderr)
        todo = left[1:]
    return times


def table(rows: list[dict[str, Any]], spec: dict[str, float]) -> str:
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    lines = ["| shape | libsdmp1 ms | of copy | spec ms | lead |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ms, spec_ms = r["median_ms"], spec.get(r["shape"])
        lead = spec_ms / ms if spec_ms is not None and ms else None
        lines.append(f"| {r['shape']} | {num(ms, '.4f')} | {num(r['fraction_of_copy'], '.3f')} | "
                     f"{num(spec_ms, '.4f')} | {num(lead, '.2f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="phase1_bench --json output")
    ap.add_argument("inputs", help="the folder phase1_bench --save-inputs wrote")
    ap.add_argument("--time-spec", default=DEFAULT_TIME_SPEC, help="the spec's timer (default: %(default)s)")
    ap.add_argument("--spec-output", help="time_spec.py's saved output, read instead of running it")
    args = ap.parse_args(argv)
    rows = libsdmp1_rows(args.json)
    if args.spec_output is not None:
        with open(args.spec_output) as f:
            spec = parse_spec_output(f.read())
    else:
        files = [os.path.join(args.inputs, r["shape"] + ".npz") for r in rows]
        missing = [f for f in files if not os.path.isfile(f)]
        for f in missing:
            print(f"compare_spec: no {f}", file=sys.stderr)
        present = [f for f in files if f not in missing]
        spec = run_time_spec(args.time_spec, present) if present else {}
    print(table(rows, spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
