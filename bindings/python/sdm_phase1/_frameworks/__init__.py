"""One module per array framework, each imported only when an array of its framework is
passed (each imports its framework): PyTorch (torch_impl; torch_entry chooses between it and
the operator of torch_ops), CuPy (cupy_impl), JAX on a GPU
(jax_impl), and the DLPack capsule reader that the JAX path uses (dlpack). Nothing here is
imported by ``import sdm_phase1``."""
