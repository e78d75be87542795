"""docs/outputs.md and include/sdm/phase1.h list the same output fields, in the same order,
with the same shapes and dtypes (the header is the authority; the page restates it).

    python3 tests/docs/check_doc_outputs.py [REPOSITORY_ROOT]
"""

import os
import re
import sys

from doc_check import report, repository_root

DTYPES = ("float32", "int8", "int32", "int64", "value dtype")


def header_fields(text):
    """(index, name, shape, dtype) per sdm_p1_field, from each value's comment: its shape in
    brackets then its dtype; a field with no shape (dc_rec) gives ("none", "none")."""
    body = text[text.index("typedef enum sdm_p1_field {"):text.index("} sdm_p1_field;")]
    fields = []
    for m in re.finditer(r"/\*(.*?)\*/\s*SDM_P1_FIELD_(\w+) = (\d+),", body, re.S):
        comment = " ".join(m.group(1).replace("\n *", " ").split())
        shape = re.match(r"(\[[^\]]*\])\s+(.*)", comment)
        if shape:
            dtype = next((d for d in DTYPES if shape.group(2).startswith(d)), None)
            if dtype is None:
                raise SystemExit(f"header: no dtype after the shape of {m.group(2)}: {comment[:60]}")
            fields.append((int(m.group(3)), m.group(2).lower(), shape.group(1), dtype))
        else:
            fields.append((int(m.group(3)), m.group(2).lower(), "none", "none"))
    return fields


def page_fields(text):
    """(index, name, shape, dtype) per row of the page's field table."""
    fields = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].isdigit():
            fields.append((int(cells[0]), cells[1].strip("`"), cells[2].strip("`"), cells[3]))
    return fields


def main():
    root = repository_root()
    with open(os.path.join(root, "include", "sdm", "phase1.h")) as f:
        want = header_fields(f.read())
    with open(os.path.join(root, "docs", "outputs.md")) as f:
        got = page_fields(f.read())
    if not want:
        raise SystemExit("header: no sdm_p1_field values found")
    errors = [f"header {w}, page {g}" for w, g in zip(want, got) if w != g]
    if len(want) != len(got):
        errors.append(f"header lists {len(want)} fields, docs/outputs.md {len(got)}")
    return report(errors, "docs/outputs.md differs from include/sdm/phase1.h:",
                  f"docs/outputs.md: the header's {len(want)} fields, shapes and dtypes")


if __name__ == "__main__":
    sys.exit(main())
