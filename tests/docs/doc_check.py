"""What the documentation checks (check_doc_*.py) share: the repository they read and how they
report, one line per problem and exit status 1, or a summary line and 0."""

import os
import sys


def repository_root():
    """The root given on the command line, else the one this file lies in."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def report(problems, heading, summary):
    """Prints the problems under their heading, or the summary; the exit status."""
    if problems:
        print(heading + "\n  " + "\n  ".join(problems))
        return 1
    print(summary)
    return 0
