"""Makes `import sdm_phase1` work from the source tree without installing the package (with
SDMP1_TEST_INSTALLED=1 the tests run against the installed copy instead: CI's wheel run), and
the modules of examples/ importable."""

import os
import sys

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("SDMP1_TEST_INSTALLED") != "1" and _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)
# The examples' modules (sdm_recurrence: the recurrence the library exists for) are imported by
# tests, installed package or not.
_EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(_PYTHON_DIR)), "examples")
if _EXAMPLES_DIR not in sys.path:
    sys.path.insert(0, _EXAMPLES_DIR)

# JAX (GPU tests) would otherwise take most of the GPU's memory at its first use.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
