"""Numba's on-disk cache of the CPU kernels, made to notice an edit to any kernel module.

Numba keeps a compiled function with a stamp of the file that defines it (its modification time,
size and, in numba 0.68, a hash of its bytes) and reuses it while that holds. The kernels here
are built from several files: a GEMV of `_fp8_rows` inlines decoders of `_decode`
and emits IR written in `_ir` (`prefetch`, `rows_totals`), so an edit to one of those left
the other files' cached GEMVs as they were: the old code runs, silently (a changed
`_ir.PREFETCH_LOCALITY` left the FP8 GEMV on prefetcht0 from the cache; numba's own
tracking of other files, numba PR #8396, is not merged). A checkout that pulls a fix to a
decoder would keep the old decoder the same way. So every cached kernel of this package carries,
beside numba's stamp of its own file, a fingerprint of all of them
(`kernel_sources_fingerprint`): any change to any kernel module compiles them all afresh once.

How: numba finds where a function's cache lives, and how fresh it is, through a list of locator
classes (`numba.core.caching.CacheImpl._locator_classes`); `install` puts `KernelSourcesLocator`
first, which answers only for this package's kernel files and defers to numba's own locators for
the place. `NUMBA_CACHE_LOCATOR_CLASSES`, where a user sets it, replaces that list (theirs then).
"""
from __future__ import annotations

import functools
import hashlib
import pathlib

_KERNELS = pathlib.Path(__file__).resolve().parent
_PATTERN = "_*.py"  # the package's modules but __init__ (which compiles nothing)


@functools.lru_cache(maxsize=None)
def kernel_sources_fingerprint() -> str:
    """A hash of the name and bytes of every kernel module (backends/numba/_*.py), read once a
    process (~0.1 ms)."""
    digest = hashlib.sha256()
    for path in sorted(_KERNELS.glob(_PATTERN)):
        if path.name == "__init__.py":
            continue
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _is_kernel_file(py_file: str) -> bool:
    path = pathlib.Path(py_file).resolve()  # as _KERNELS: a symlinked install path matches too
    return path.parent == _KERNELS and path.match(_PATTERN) and path.name != "__init__.py"


class KernelSourcesLocator:
    """Numba's locator for a kernel module's function, with the fingerprint of every kernel
    module added to its freshness stamp; every other method is the wrapped locator's."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_source_stamp(self):
        return (self._inner.get_source_stamp(), kernel_sources_fingerprint())

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _is_kernel_file(py_file):
            return None
        for other in _numba_locators():
            if other is cls:
                continue
            inner = other.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


def _cache_impl():
    from numba.core import caching

    return getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba < 0.61: private


def _numba_locators() -> list:
    return _cache_impl()._locator_classes


def install() -> None:
    """Put KernelSourcesLocator first in numba's locator list (once; before the kernel modules'
    `cache=True` functions are defined, which look their locator up there)."""
    classes = _numba_locators()
    if KernelSourcesLocator not in classes:
        classes.insert(0, KernelSourcesLocator)
