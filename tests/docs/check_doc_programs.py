"""The complete programs shown on the binding pages are the example files CI runs.

On docs/c.md, docs/python.md and docs/rust.md a program is a line
    <!-- program: ../examples/NAME -->
followed by a fenced code block, which must equal that file (relative to the page), byte for
byte; each of those pages must show at least one. Other pages of docs/ may show programs too.

    python3 tests/docs/check_doc_programs.py [REPOSITORY_ROOT]
"""

import glob
import os
import re
import sys

from doc_check import report, repository_root

BINDING_PAGES = ("c.md", "python.md", "rust.md")
PROGRAM = re.compile(r"^<!-- program: (\S+) -->\n```[^\n]*\n(.*?)^```$", re.M | re.S)


def main():
    root = repository_root()
    errors, shown = [], []
    for page in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        with open(page) as f:
            text = f.read()
        name = os.path.basename(page)
        programs = PROGRAM.findall(text)
        if text.count("<!-- program:") != len(programs):
            errors.append(f"docs/{name}: a program marker not followed by a fenced code block")
        if name in BINDING_PAGES and not programs:
            errors.append(f"docs/{name}: shows no program")
        for target, block in programs:
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            if not os.path.exists(path):
                errors.append(f"docs/{name}: {target} does not exist")
                continue
            with open(path) as f:
                if f.read() != block:
                    errors.append(f"docs/{name}: the program differs from {target}")
            shown.append(f"docs/{name} = {os.path.relpath(path, root)}")
    for name in BINDING_PAGES:
        if not os.path.exists(os.path.join(root, "docs", name)):
            errors.append(f"docs/{name} is missing")
    return report(errors, "the documentation's programs:",
                  "programs on the pages equal their files: " + ", ".join(shown))


if __name__ == "__main__":
    sys.exit(main())
