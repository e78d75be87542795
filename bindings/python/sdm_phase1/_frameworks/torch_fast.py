"""The compiled fast path of the eager PyTorch forward, ``sdm_phase1._torch_fast``
(bindings/python/torch_fast/, C++ on PyTorch's C++ API), where it was built: Meson builds it
where the configured Python imports torch (``pip install --no-build-isolation .`` in an
environment with torch, or a build folder configured with such a Python); pip's isolated
build has no torch and leaves it out. Without it everything runs in Python, as before.

The Python path keeps plan creation, every check and every error: once its long way has run a
forward call without grad on a plan, :func:`register` enters the plan in the extension under
the call's key (the arguments as given: each tensor's shape, dtype and device, the options, the
current stream). A later call with that key runs in one C++ call (:data:`forward`): the lookup,
the output block from the caching allocator, ``sdm_p1_execute`` under the plan's lock, the
outputs carved as :class:`torch_impl._PlanData` carves them; it returns ``(data, outputs)``, or
None for anything else (no such key, a non-contiguous input, a capture, check on a GPU, a plan
busy in another thread or refused by the library), and Python then takes its long way. A call
with grad goes through Python's lookup and autograd Function, whose forward runs the plan it
found through the extension (:data:`run_plan`: the block, the execute, the carve). The
autograd formula's library call likewise (:data:`backward`): Python finds the backward plan
(per stream, as before), the extension allocates the gradients and runs
``sdm_p1_execute_backward`` on it, or returns None and Python runs it. Plans that the plan
cache destroys or moves to another stream are unregistered first
(``plan_cache.add_release_hook``).

``SDMP1_TORCH_FAST=0`` in the environment (read at import) or :func:`set_enabled` (False)
turns it off: the Python path alone, as without the extension (the tests compare the two).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from .._c import ffi, lib, library_path
from .._core import plan_cache

__all__ = ["ENV_VAR", "forward", "run_plan", "backward", "register", "set_enabled", "available",
           "LOAD_ERROR"]

#: The environment variable that turns the extension off ("0").
ENV_VAR = "SDMP1_TORCH_FAST"
_NAME = "sdm_phase1._torch_fast"

#: Why the extension was not used where it was found: it failed to load, or was built against
#: another torch (else None).
LOAD_ERROR: Optional[BaseException] = None


def _find() -> Optional[Any]:
    """The extension, where it was built against the torch imported (PyTorch's C++ API has no
    stable ABI across releases): the package's own (a wheel, an editable install), else the
    one beside the loaded libsdmp1.so (a build folder, for the package run from a source
    tree)."""
    global LOAD_ERROR
    module = _load()
    built = getattr(module, "TORCH_VERSION", None)
    if module is not None and built != torch.__version__:
        LOAD_ERROR = ImportError(f"{module.__file__} was built against torch {built}, not the "
                                 f"torch {torch.__version__} imported: rebuild it")
        return None
    return module


def _load() -> Optional[Any]:
    global LOAD_ERROR
    try:
        from .. import _torch_fast  # type: ignore[attr-defined]

        return _torch_fast
    except ImportError:
        pass
    folder = Path(library_path).parent if os.path.sep in str(library_path) else None
    if folder is None:
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_torch_fast{suffix}"
        if path.is_file():
            try:
                loader = importlib.machinery.ExtensionFileLoader(_NAME, str(path))
                spec = importlib.util.spec_from_file_location(_NAME, str(path), loader=loader)
                assert spec is not None
                module = importlib.util.module_from_spec(spec)
                loader.exec_module(module)
            except (ImportError, OSError) as e:  # built against another torch, say
                LOAD_ERROR = e
                return None
            sys.modules[_NAME] = module
            return module
    return None


_ext = None if os.environ.get(ENV_VAR, "1") == "0" else _find()
if _ext is not None:
    _ext.set_library(int(ffi.cast("uintptr_t", lib.sdm_p1_execute)),
                     int(ffi.cast("uintptr_t", lib.sdm_p1_execute_backward)), plan_cache.note_hit)
    plan_cache.add_release_hook(_ext.unregister_plan)

#: The extension's forward (see the module), or None: the Python path alone.
forward = None if _ext is None else _ext.forward
#: The extension's run of a forward plan that Python found (the autograd Function's forward
#: and the long way), or None.
run_plan = None if _ext is None else _ext.run_plan
#: The extension's backward (the autograd formula's library call), or None.
backward = None if _ext is None else _ext.backward


def available() -> bool:
    """Whether the extension was built and loaded (whatever :func:`set_enabled` says)."""
    return _ext is not None


def set_enabled(enabled: bool) -> bool:
    """Turns the extension on or off (where it is available); returns the previous state.
    Off, no call uses it and nothing is registered: the Python path alone."""
    global forward, run_plan, backward
    was = forward is not None
    forward = _ext.forward if enabled and _ext is not None else None
    run_plan = _ext.run_plan if enabled and _ext is not None else None
    backward = _ext.backward if enabled and _ext is not None else None
    if not enabled and _ext is not None:
        _ext.clear()
    return was


def register(plan: plan_cache.CachedPlan, k_idx, q_idx, k_val, q_val, g, beta, stream_lengths,
             num_parallel, stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
             det_fields, check) -> None:
    """Enters ``plan``, which the long way has just run a forward call on without grad, under
    that call's key (the arguments as given). Harmless twice; a no-op where the extension is
    off, the plan was destroyed, or the call has no key (the extension says)."""
    if forward is None or _ext is None or not plan.address:
        return
    data = plan.extra
    _ext.register_plan(k_idx, q_idx, k_val, q_val, g, beta, stream_lengths, num_parallel,
                       stream_offset, num_keys, valid_last, need_read_groups, rec_tile,
                       det_fields, check, plan, plan.address,
                       plan.lock, data, plan.workspace is not None, plan.stream,
                       data.fast_layout, data.fast_outputs, data.block_bytes)
