"""Split-K reduced by each tile's last program (`_splitk`, `_kernels._reduce_last`) against the
reduce kernel it replaces: the same bits, counters back at zero, counters never shared by
launches that could overlap. On CPU the kernels run in Triton's interpreter (conftest.py)."""
import threading
import time

import pytest
import torch
from conftest import triton_backend_or_skip

import softfp8
from softfp8.formats import Format

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, run  # noqa: E402
from softfp8.backends.triton import _splitk  # noqa: E402

HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"
ENV = triton_backend.SPLITK_REDUCE_ENV


def _both(x, packed, bias, cfg, monkeypatch):
    """(y by the last programs, y by splitk_reduce_kernel), and the device's counters after."""
    with softfp8.launch_settings(splitk_reduce="last"):
        last = run(x, packed, bias, cfg)
        again = run(x, packed, bias, cfg)  # counters left nonzero would change this one
    with softfp8.launch_settings(splitk_reduce="kernel"):
        kernel = run(x, packed, bias, cfg)
    pool = _splitk._POOLS[(x.device.type, x.device.index)]
    assert torch.equal(last, again)
    return last, kernel, pool.counters


def _case(fmt, n, k, m, dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt).to(DEVICE)
    x = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(DEVICE)
    return x, packed, bias


def test_a_reduce_setting_typo_raises_where_triton_does_not_run(monkeypatch):
    """SOFTFP8_SPLITK_REDUCE, read by split launches, is checked on any layer call
    (`_env.check_environment`): a typo raises naming the valid values."""
    monkeypatch.setenv(ENV, "later")
    softfp8.dispatch.clear_cache()
    packed = softfp8.quantize(torch.randn(8, 32), "e5m2")
    with pytest.raises(ValueError, match=f"{ENV}='later' is not valid; expected one of 'last', "
                                         "'kernel'"):
        softfp8.linear(torch.randn(1, 32), packed, backend="torch")


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("cfg, m", [(LaunchConfig(Kernel.GEMV, 2, 16, 64, split_k=3), 2),
                                    (LaunchConfig(Kernel.SMALL_M, 16, 32, 32, split_k=4), 19)],
                         ids=["gemv", "dot"])
def test_last_program_reduce_gives_the_reduce_kernels_bits(fmt, cfg, m, monkeypatch):
    x, packed, bias = _case(fmt, 37, 300, m, torch.float32)
    last, kernel, counters = _both(x, packed, bias, cfg, monkeypatch)
    assert torch.equal(last, kernel)
    assert not counters.any()


def test_setting_refuses_an_unknown_value(monkeypatch):
    with pytest.raises(ValueError, match="splitk_reduce='atomics'.*'last', 'kernel'"):
        softfp8.launch_settings(splitk_reduce="atomics").__enter__()
    monkeypatch.setenv(ENV, "atomics")  # the default's variable
    with pytest.raises(ValueError, match=f"{ENV}='atomics'.*'last', 'kernel'"):
        softfp8._settings.reload_environment()
    monkeypatch.setenv(ENV, " Kernel ")
    softfp8._settings.reload_environment()
    assert not _splitk.last_program_reduces()
    monkeypatch.delenv(ENV)
    softfp8._settings.reload_environment()
    assert _splitk.last_program_reduces()


def test_counters_one_region_a_stream_none_under_capture(monkeypatch):
    monkeypatch.setattr(_splitk, "_POOLS", {})
    dev = torch.device("cpu")
    stream, capturing = [1], [True]
    monkeypatch.setattr(_splitk, "_stream", lambda d: stream[0])
    monkeypatch.setattr(_splitk, "_capturing", lambda d: capturing[0])
    assert _splitk.counters(dev, 8) is None  # graphs keep the reduce kernel (measured faster)
    assert not _splitk._POOLS  # and make no pool: its zeroing would be captured
    capturing[0] = False
    a = _splitk.counters(dev, 8)
    assert a is not None and a.shape == (8,) and not a.any()
    assert _splitk.counters(dev, 5).data_ptr() == a.data_ptr()  # one stream: one region
    stream[0] = 2
    b = _splitk.counters(dev, 8)
    assert b.data_ptr() == a.data_ptr() + 4 * _splitk.REGION
    assert _splitk.counters(dev, _splitk.REGION + 1) is None
    for s in range(3, _splitk.STREAM_REGIONS + 1):
        stream[0] = s
        assert _splitk.counters(dev, 1) is not None
    stream[0] = _splitk.STREAM_REGIONS + 1
    assert _splitk.counters(dev, 1) is None  # regions used up: the reduce kernel
    stream[0] = 2
    assert _splitk.counters(dev, 3).data_ptr() == b.data_ptr()


def test_counters_of_threads_racing_for_regions_never_overlap(monkeypatch):
    """Streams first seen at once (threads) get one region each, and one pool between them."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_splitk, "_POOLS", {})
    made = []

    class SlowPool(_splitk._Pool):  # a wide window for a second thread to make a pool too
        def __init__(self, device):
            time.sleep(0.05)
            super().__init__(device)
            made.append(self)

    monkeypatch.setattr(_splitk, "_Pool", SlowPool)
    barrier = threading.Barrier(8)

    def first_use(_):
        barrier.wait()  # all eight ask at once
        return _splitk.counters(torch.device("cpu"), 100).data_ptr()

    with ThreadPoolExecutor(8) as pool:
        starts = sorted(pool.map(first_use, range(8)))
    assert len(made) == 1
    assert all(b - a >= 4 * _splitk.REGION for a, b in zip(starts, starts[1:])), starts


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", list(Format))
def test_gpu_mma_gemv_last_program_reduce_gives_the_reduce_kernels_bits(fmt, monkeypatch):
    info = triton_backend.device_info(torch.device("cuda"))
    if not triton_backend.mma_gemv_runs(4096, 1, fmt, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    rows = triton_backend.mma_rows
    wide = triton_backend.MMA_WIDE_M
    for m, cfg in [(1, LaunchConfig(Kernel.MMA_GEMV, 1, rows(1, 4, 2), 128, 2, 4, 0)),
                   (1, LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 3, 4, 2)),
                   (3, LaunchConfig(Kernel.MMA_GEMV, 4, rows(4, 2, 2), 128, 4, 2, 0, depth=2)),
                   (12, LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 2, 4, 0)),  # two groups
                   (16, LaunchConfig(Kernel.MMA_GEMV, wide, rows(8, 4, 2), 128, 2, 4, 0))]:
        x, packed, bias = _case(fmt, 1000, 4104, m, torch.float16, seed=m)
        last, kernel, counters = _both(x, packed, bias, cfg, monkeypatch)
        assert torch.equal(last, kernel), (m, cfg)
        assert not counters.any(), (m, cfg)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_gpu_split_launches_in_graphs_match_eager(monkeypatch):
    """Graphs of a split linear (the reduce kernel: no counters under capture) replay the
    bits of eager launches reduced by their last programs, with the eager counters in use on
    the warm-up stream and when no pool exists yet."""
    x, packed, bias = _case(Format.NVFP4, 4096, 4096, 1, torch.float16)
    cfg = LaunchConfig(Kernel.MMA_GEMV, 1, triton_backend.mma_rows(1, 4, 2), 128, 2, 4, 0)
    monkeypatch.setenv(ENV, "last")
    expect = run(x, packed, bias, cfg)
    for pool_before in (True, False):
        if not pool_before:
            monkeypatch.setattr(_splitk, "_POOLS", {})
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            if pool_before:
                run(x, packed, bias, cfg)  # warm-up on a side stream, as torch's docs do
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = run(x, packed, bias, cfg)
        assert bool(_splitk._POOLS) == pool_before
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, expect), pool_before
