"""``python -m sdm_phase1``: the loaded library, where its C declarations came from, its
backends, the CUDA architectures its kernels were built for and the GPUs it sees."""

from __future__ import annotations

import importlib.util
import sys
from typing import List, Optional


def _gpu_names(count: int) -> Optional[List[str]]:
    """GPU names through torch or CuPy where one is installed (torch is imported only here)."""
    try:
        if importlib.util.find_spec("torch") is not None:
            import torch

            if torch.cuda.is_available():
                return [torch.cuda.get_device_name(i) for i in range(count)]
        if importlib.util.find_spec("cupy") is not None:
            import cupy

            names = []
            for i in range(count):
                name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
                names.append(name.decode() if isinstance(name, bytes) else str(name))
            return names
    except Exception:  # names are a convenience: the count below stands without them
        return None
    return None


def main() -> int:
    import sdm_phase1 as p1
    from sdm_phase1._c import CDEF_SOURCE

    print(f"sdm_phase1 {p1.binding_version}: libsdmp1 {p1.__version__} "
          f"(version number {p1.version_number()})")
    print(f"library: {p1.library_path}")
    print(f"declarations: {CDEF_SOURCE}")
    count = p1.cuda_device_count()
    backends = "CPU, CUDA" if count is not None else "CPU (this library was built without CUDA)"
    print(f"backends: {backends}")
    if count is None:
        return 0
    archs = p1.cuda_architectures()
    print(f"CUDA architectures: {' '.join(archs) if archs else 'not reported (libsdmp1 older than 1.2)'}")
    if count == 0:
        print("GPUs: none seen (no NVIDIA driver or no device)")
        return 0
    names = _gpu_names(count)
    print(f"GPUs: {count}")
    for i in range(count):
        print(f"  {i}: {names[i] if names and i < len(names) else 'CUDA device'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
