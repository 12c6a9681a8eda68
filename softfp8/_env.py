"""Reading softfp8's environment settings on every eager layer call, cheaply.

Dispatch's cache key and the Triton backend's launch plan hold the values of the SOFTFP8_*
variables, so a changed setting takes effect on the next call; that means reading them on
every call. `os.environ.get` encodes the name and decodes the value each time (~1 us a read on
a 2-core Zen 3, seven reads a Triton call). `raw_reader` encodes the name once and reads the
mapping `os.environ` itself keeps (`os.environ[...] = ...`, `del`, `putenv` through
`os.environ`, pytest's monkeypatch all update it; a bare `os.putenv` reaches neither).
The value comes back as `os.environ` stores it (bytes on POSIX), fit for a cache key; whoever
parses a setting still reads it with `os.environ.get`.
"""
from __future__ import annotations

import os
from typing import Callable


def raw_reader(name: str) -> Callable[[], object]:
    """A function returning `name`'s value as stored by `os.environ` (None when unset)."""
    data = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and callable(encodekey):  # CPython's os._Environ
        key = encodekey(name)
        get = data.get
        return lambda: get(key)
    return lambda: os.environ.get(name)  # another os.environ: the plain read
