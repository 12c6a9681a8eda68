"""`Const`: the kernels' module-level `tl.constexpr` values, cheap for Triton to re-check.

Why: on every launch `JITFunction.run` compares each global that a kernel and the jit functions
it calls use with a deep copy taken when it compiled (a changed global is an error), and
`tl.constexpr`'s `!=` wraps both sides in new constexpr objects (~0.8 us a comparison on a
3 GHz core; the MMA GEMV uses 17 such globals, mostly its PTX text). A deep copy of a str or
int is the object itself, so `Const` answers "unchanged" by identity first and falls back to
constexpr's comparison otherwise.
"""
import triton.language as tl


class Const(tl.constexpr):
    def __ne__(self, other):
        if isinstance(other, tl.constexpr) and other.value is self.value:
            return False
        return super().__ne__(other)
