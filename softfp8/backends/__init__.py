"""Backends. Each module here exposes the same two names, and nothing else is asked of it:

    NEEDS: dispatch.Needs
        what it requires of the machine, as data (formats, device types, capability, packages).
    matmul(x, packed, bias, *, e2m1) -> Tensor
        x: [M, K] contiguous, float32/float16/bfloat16, on packed's device; bias: [N] or None;
        e2m1: dispatch.E2M1Decode.INJECT or .SELECT (already resolved; ignored by 8-bit formats).
        Returns y = x @ W.T + bias, [M, N], in x's dtype, accumulated in float32.

Modules are imported only when a backend is asked for, so a missing optional package (triton,
numba) costs nothing until then.
"""
