"""The checks of ``sdm_layer``'s own arguments (beta, v, memory) against Phase 1's shapes,
shared by the NumPy layer (:mod:`sdm_phase1.recurrence`) and the PyTorch one
(:mod:`sdm_phase1.torch_recurrence`), so both raise the same errors. Phase 1's inputs are
checked by ``phase1_forward``; these run first, so a layer call that would compute a
wrong-shaped result is refused before anything runs."""

from __future__ import annotations

from typing import Optional, Tuple

from .checks import check_rank

__all__ = ["check_layer_shapes", "missing_beta"]


def missing_beta(N: int, C: int) -> TypeError:
    """The error for ``beta=None``: the layer's delta rule needs a write strength per token."""
    return TypeError(
        f"beta is None: sdm_layer needs beta, [N, C] = ({N}, {C}) float32 write strengths (the "
        "delta rule's u = beta * (v - pred)); pass ones for the plain delta rule"
    )


def check_layer_shapes(k_idx: Tuple[int, ...], beta: Optional[Tuple[int, ...]],
                       v: Tuple[int, ...], memory: Tuple[int, ...], num_parallel: int,
                       num_keys: int) -> int:
    """Checks the shapes of beta [N, C], v [N, C, D] and memory [num_parallel, num_keys, D]
    against k_idx's [N, C, W] (``beta`` None: beta was not given, a TypeError). Returns D.
    ValueError naming the argument and the shape it must have otherwise."""
    check_rank("k_idx", k_idx)
    N, C = k_idx[0], k_idx[1]
    if beta is None:
        raise missing_beta(N, C)

    def need(name: str, shape: Tuple[int, ...], ok: bool, want: str) -> None:
        if not ok:
            raise ValueError(f"{name} has shape {tuple(shape)}: it must be {want}")

    agree = f"(k_idx has shape {tuple(k_idx)})"
    need("beta", beta, tuple(beta) == (N, C), f"[N, C] = ({N}, {C}) {agree}")
    need("v", v, len(v) == 3 and tuple(v[:2]) == (N, C), f"[N, C, D] = ({N}, {C}, D) {agree}")
    D = v[2]
    need("memory", memory, tuple(memory) == (num_parallel, num_keys, D),
         f"[num_parallel, num_keys, D] = ({num_parallel}, {num_keys}, {D}) (D: v's last dimension)")
    return D
