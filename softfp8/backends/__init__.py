"""Backends. Each module here exposes the same two names:

    NEEDS: dispatch.Needs
        what it requires of the machine, as data (formats, device types, capability, packages).
    matmul(x, packed, bias, *, e2m1, checked=False) -> Tensor
        x: [M, K] contiguous, float32/float16/bfloat16, on packed's device; bias: [N] or None;
        e2m1: dispatch.E2M1Decode.INJECT or .SELECT (already resolved; ignored by 8-bit formats).
        Returns y = x @ W.T + bias, [M, N], in x's dtype, accumulated in float32.
        checked: the caller (`ops`) has run `_checks.check_linear_args` on these arguments and
        dispatch chose this backend for them (its NEEDS hold), so matmul skips its own checks;
        False (a direct call): it checks them and raises as `check_matrix_args` does.

and may expose, optionally:

    QUANTIZES_ACTIVATIONS: bool
        True if it quantizes x too (native W8A8); SOFTFP8_ACTIVATION_QUANT=forbid (or
        activation_quant="forbid") then keeps auto away from it and refuses an explicit request.
    auto_accepts(fmt, m, device, report) -> str | None
        Asked by auto dispatch after NEEDS and the probe's measurements are satisfied: None if
        auto may use it for `fmt` at this M (a bucket: M up to 16, then powers of two) on
        `device` given the `capability.CapabilityReport`, else the reason in words. The native
        backend must have it (auto uses native only where it is measured to win); others may.

What the probe must have measured for each backend (Triton launches, Numba runs, _scaled_mm
works) is the dispatcher's table `dispatch.PROBED`, not the module's business.

Modules are imported only when a backend is asked for, so a missing optional package (triton,
numba, cupy) costs nothing until then.
"""
