import os
import sys

import torch

# Without a GPU, the Triton kernels run in Triton's interpreter (set before softfp8 is imported:
# see DESIGN.md §6); with one, they run for real (TRITON_INTERPRET=1 can still force it).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

assert sys.byteorder == "little", "softfp8 packs codes little-endian"


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: identical float32 bit patterns, or both NaN."""
    a, b = a.to(torch.float32), b.to(torch.float32)
    return (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.double(), ref.double()
    return ((y - ref).norm() / ref.norm()).item()


def triton_backend_or_skip():
    """softfp8's Triton backend, for a test module of its kernels, or the whole module skipped:
    no Triton here, or no GPU and no interpreter (TRITON_INTERPRET unset, e.g. forced to 0)."""
    backend = pytest.importorskip("softfp8.backends.triton")
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and not backend.INTERPRET:
        pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)
    return backend


@pytest.fixture
def flush_denormals():
    """FTZ/DAZ on for the test's duration (x86 with SSE3; skip where torch can't set it)."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU can't flush denormals")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@pytest.fixture(autouse=True)
def _launch_settings_from_the_environment():
    """Each test reads the launch settings' defaults from the environment as it then is (they
    are read once a process otherwise: `softfp8._settings`), and leaves none behind."""
    from softfp8 import _settings

    _settings._DEFAULT.clear()
    yield
    _settings._DEFAULT.clear()
