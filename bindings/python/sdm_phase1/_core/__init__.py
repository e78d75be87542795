"""The framework-free core, over the C library of ``_c`` and NumPy only: the result type,
errors, constants, dtype table and bfloat16 bits (types, errors, constants, dtypes, bf16); the
checks of options and inputs and the outputs' shapes (options, checks, fields); the host arrays,
:class:`Plan` and its backward (arrays, plan, backward); the plan cache that every framework's
calls share (plan_cache); and the entry points ``phase1_forward`` and ``phase1_backward``
(forward, phase1_backward), which send framework tensors to ``_frameworks``."""
