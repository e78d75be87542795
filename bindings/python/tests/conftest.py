"""Makes `import sdm_phase1` work from the source tree without installing the package (with
SDMP1_TEST_INSTALLED=1 the tests run against the installed copy instead: CI's wheel run)."""

import os
import sys

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("SDMP1_TEST_INSTALLED") != "1" and _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)

# JAX (GPU tests) would otherwise take most of the GPU's memory at its first use.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
