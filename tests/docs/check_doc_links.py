"""Every link of the documentation to a file or folder of the repository resolves.

Reads README.md, CHANGELOG.md, docs/*.md and bindings/*/README.md; a Markdown link
[text](target) whose target is not a URL (http:, https:, mailto:) must name an existing path,
relative to the page, and an anchor (#section) into a Markdown page must be one of its
headings, as a code host makes them (lower case, punctuation dropped, spaces as dashes).

    python3 tests/docs/check_doc_links.py [REPOSITORY_ROOT]
"""

import glob
import os
import re
import sys

from doc_check import report, repository_root

# [text](target) and [text](target "title"); images too. Code spans are removed first, so
# that `a[i](j)` in code is not taken for a link.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def pages(root):
    names = ["README.md", "CHANGELOG.md"] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))) \
        + sorted(glob.glob(os.path.join(root, "bindings", "*", "README.md")))
    return [os.path.join(root, n) for n in names]


def anchors(page):
    """The anchors of a Markdown page's headings."""
    with open(page) as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    heads = re.findall(r"^#+\s+(.*?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def broken_links(page):
    with open(page) as f:
        text = CODE.sub("", f.read())
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(page), name)) if name else page
        if not os.path.exists(path):
            yield target
        elif anchor and path.endswith(".md") and anchor not in anchors(path):
            yield target + " (no such heading)"


def main():
    root = repository_root()
    bad, checked = [], 0
    for page in pages(root):
        if not os.path.exists(page):
            bad.append(f"{os.path.relpath(page, root)}: the page itself is missing")
            continue
        checked += 1
        bad += [f"{os.path.relpath(page, root)}: {t}" for t in broken_links(page)]
    return report(bad, "links to files or headings that do not exist:",
                  f"documentation links: {checked} pages, every link to a repository file resolves")


if __name__ == "__main__":
    sys.exit(main())
