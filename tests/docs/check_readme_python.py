"""The README's Python program runs as written: the fenced block after the line
    <!-- runs: python -->
in README.md is run, unchanged, by the Python running this check, against the library given
(the build's libsdmp1.so, SDMP1_LIBRARY) with the source tree's package (bindings/python on
PYTHONPATH). It must exit 0. Exits 77 (meson's "skipped") where this Python cannot import
numpy and cffi, which the package needs.

    python3 tests/docs/check_readme_python.py REPOSITORY_ROOT LIBRARY
"""

import importlib.util
import os
import re
import subprocess
import sys

from doc_check import report

PROGRAM = re.compile(r"^<!-- runs: python -->\n```python\n(.*?)^```$", re.M | re.S)


def main():
    root, library = sys.argv[1], sys.argv[2]
    if any(importlib.util.find_spec(m) is None for m in ("numpy", "cffi")):
        print(f"SKIPPED: {sys.executable} cannot import numpy and cffi")
        return 77
    with open(os.path.join(root, "README.md")) as f:
        programs = PROGRAM.findall(f.read())
    if len(programs) != 1:
        return report([f"README.md shows {len(programs)} programs marked <!-- runs: python -->, "
                       "not one"], "the README's Python program:", "")
    paths = [os.path.join(root, "bindings", "python")] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, SDMP1_LIBRARY=library, PYTHONPATH=os.pathsep.join(paths))
    r = subprocess.run([sys.executable, "-c", programs[0]], env=env, capture_output=True, text=True,
                       timeout=120)
    problems = [] if r.returncode == 0 else [
        f"it exited {r.returncode}:\n{r.stdout}{r.stderr}"]
    return report(problems, "the README's Python program:",
                  f"the README's Python program ran ({len(programs[0].splitlines())} lines): "
                  + r.stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
