import os
import sys
import zlib

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


def pytest_collection_modifyitems(config, items):
    """A run of whole folders (the README's `python -m pytest -q`) leaves the tests marked slow
    out; naming a file or a test, or any -m, runs what it selects. CI (.ci/run) runs the plain
    command, then -m slow."""
    _keep_the_shard(config, items)
    if config.option.markexpr or not all(os.path.isdir(str(a).split("::")[0]) for a in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def _keep_the_shard(config, items):
    """With SOFTFP8_TEST_SHARD=I/N, only shard I of N (1 <= I <= N) runs: the tests whose id's
    CRC-32 is I - 1 modulo N, so that N runs of one selection, I = 1..N, run each test once
    (the GPU suite no longer fits one call on a lent machine: `gpu_user_path.sh gpu`)."""
    spec = os.environ.get("SOFTFP8_TEST_SHARD")
    if not spec:
        return
    try:
        i, n = (int(v) for v in spec.split("/"))
        assert 1 <= i <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"SOFTFP8_TEST_SHARD={spec!r}: expected I/N with 1 <= I <= N, "
                                "e.g. 1/2") from None
    shard = {item.nodeid: zlib.crc32(item.nodeid.encode()) % n + 1 for item in items}
    other = [item for item in items if shard[item.nodeid] != i]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [item for item in items if shard[item.nodeid] == i]


@pytest.fixture
def flush_denormals():
    """FTZ/DAZ on for the test's duration (x86 with SSE3; skip where torch can't set it)."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU can't flush denormals")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def diagonal(xs, ys):
    """pytest params for every pair (x, y) of two parameter lists: the pairs of a diagonal, which
    take each x and each y at least once, in a plain run; the rest of the cross product marked
    slow (`-m slow`, which CI runs). For pairs whose two halves test separate code (an
    architecture's layer names, a format's packing), where the full product adds run time, not
    coverage, to the run people make after each edit."""
    xs, ys = list(xs), list(ys)
    plain = {(i % len(xs), i % len(ys)) for i in range(max(len(xs), len(ys)))}
    return [pytest.param(x, y, id=f"{x}-{y}", marks=() if (i, j) in plain else pytest.mark.slow)
            for i, x in enumerate(xs) for j, y in enumerate(ys)]


@pytest.fixture(autouse=True)
def _launch_settings_from_the_environment():
    """Each test reads the settings' defaults (SOFTFP8_BACKEND, SOFTFP8_PDL, ...) from the
    environment as it then is, at its first call (they are read once a process otherwise:
    `softfp8._settings`; a test that changes a variable after that calls reload_environment),
    starts outside any launch_settings block, and leaves neither behind."""
    from softfp8 import _settings

    _settings._DEFAULT.clear()
    outside = _settings._OVERRIDE.set(None)
    yield
    _settings._OVERRIDE.reset(outside)
    _settings._DEFAULT.clear()


def pytest_runtest_logreport(report):
    """With SOFTFP8_TEST_TIMES=FILE, each test's phases (setup, call, teardown) and seconds are
    appended to FILE as they end, a line each: a run cut short (the GPU suite on a lent machine,
    `benchmarks/gpu_user_path.sh gpu`) still says where its time went."""
    path = os.environ.get("SOFTFP8_TEST_TIMES")
    if path and "PYTEST_XDIST_WORKER" not in os.environ:  # xdist's controller gets every report
        with open(path, "a") as f:
            f.write(f"{report.duration:.2f} {report.when} {report.outcome} {report.nodeid}\n")
