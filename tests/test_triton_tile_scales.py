"""The Triton kernels on E4M3_B128 (E4M3 codes, one fp32 scale per 128 x 128 tile) against the
reference backend: every kernel path the launch table or a caller can reach, on shapes whose
tiles are partial along N and K and whose steps cross tile edges, with splits along K; the
launch table's choices for the format, and the settings its kernels refuse.

On CPU these run in Triton's interpreter (conftest.py); every code of the format through each
kernel's decode is test_triton.py's `test_every_code_decodes_exactly` and the dequant slab tests
(test_triton_dequant.py).
"""
import pytest
import torch
from conftest import rel_err, triton_backend_or_skip

import softfp8
from softfp8.backends import reference
from softfp8.formats import Format

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, launch_config, run  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
B128 = Format.E4M3_B128
H100 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
T4 = triton_backend.DeviceInfo(sm_count=40, capability=(7, 5), interpreter=False)


def tolerance(dtype):
    return 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps


def case(n, k, m, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + n * 31 + k * 7 + m)
    # rows of very different sizes, so that a wrong tile's scale shows
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-6, 6, (n, 1), generator=g))
    packed = softfp8.quantize(w, B128).to(DEVICE)
    x = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(DEVICE)
    return packed, x, bias


# (kernel, block_m, block_n, block_k, split): steps of one tile and of several, steps within a
# tile (block_k 32, 64), splits that start mid-row
CONFIGS = [
    (Kernel.GEMV, 4, 16, 64, 1), (Kernel.GEMV, 4, 32, 256, 1), (Kernel.GEMV, 4, 8, 128, 3),
    (Kernel.GEMV, 4, 16, 512, 2),
    (Kernel.SMALL_M, 16, 32, 128, 1), (Kernel.SMALL_M, 16, 64, 64, 3),
    (Kernel.TILED, 32, 32, 32, 2),
    (Kernel.DEQUANT, 1, 64, 512, 1), (Kernel.DEQUANT, 1, 96, 128, 1),
]


@pytest.mark.parametrize("kernel, bm, bn, bk, split", CONFIGS,
                         ids=lambda v: v.value if isinstance(v, Kernel) else str(v))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_every_kernel_matches_reference(kernel, bm, bn, bk, split, dtype):
    m = {Kernel.GEMV: 3, Kernel.SMALL_M: 5, Kernel.TILED: 33, Kernel.DEQUANT: 7}[kernel]
    packed, x, bias = case(259, 389, m, dtype)  # 3 x 4 tiles, the last ones partial
    y = run(x, packed, bias, LaunchConfig(kernel, bm, bn, bk, split))
    assert y.dtype == dtype and y.shape == (m, 259)
    assert rel_err(y, reference.matmul(x, packed, bias)) <= tolerance(dtype)


@pytest.mark.parametrize("n, k, m", [(1, 1, 1), (3, 17, 2), (130, 4097, 1), (257, 300, 16),
                                     (129, 131, 40)])
def test_the_launch_tables_choice_matches_reference(n, k, m):
    packed, x, bias = case(n, k, m, torch.float32)
    y = triton_backend.matmul(x, packed, bias)
    assert rel_err(y, reference.matmul(x, packed, bias)) <= 1e-5


def test_one_wrong_tile_scale_shows():
    """A check that the parity tests can fail: one tile's scale changed moves only its outputs."""
    packed, x, bias = case(259, 389, 1, torch.float32)
    y = run(x, packed, bias, LaunchConfig(Kernel.GEMV, 1, 16, 256))
    packed.scales[1, 2] *= 2  # rows 128..255, codes 256..383
    y2 = run(x, packed, bias, LaunchConfig(Kernel.GEMV, 1, 16, 256))
    moved = (y2 != y)[0].cpu()
    assert moved[128:256].all() and not moved[:128].any() and not moved[256:].any()
    assert rel_err(y2, reference.matmul(x, packed, bias)) <= 1e-5


def test_launch_table_keeps_dot_steps_within_a_tile_and_takes_e4m3s_mma_gemv():
    """E4M3_B128 takes E4M3's Kernel.MMA_GEMV launches (`MMA_FP8_FORMATS`; the plans alike:
    test_plan.py), and E4M3's kernel elsewhere with its dot steps inside one tile."""
    for info in (H100, T4):
        for n, k, m in [(4096, 4096, 1), (12288, 4096, 1), (128256, 4096, 1), (4096, 4096, 3),
                        (28672, 4096, 8), (6144, 4096, 8), (4096, 14336, 16), (4096, 4096, 64),
                        (4096, 4096, 2048)]:
            cfg = launch_config(n, k, m, B128, info, torch.float16)
            e4m3 = launch_config(n, k, m, Format.E4M3, info, torch.float16)
            assert triton_backend.uses_mma_gemv(n, k, m, B128, info, torch.float16) == (
                e4m3.kernel is Kernel.MMA_GEMV), (n, k, m, cfg)
            if e4m3.kernel is Kernel.MMA_GEMV:
                assert cfg == e4m3, (n, k, m, cfg)
            elif cfg.kernel in (Kernel.SMALL_M, Kernel.TILED):
                assert 128 % cfg.block_k == 0, (n, k, m, cfg)
            else:
                assert cfg.block_k % 128 == 0, (n, k, m, cfg)
            if e4m3.kernel is not Kernel.MMA_GEMV:  # where E4M3 has no MMA GEMV: its kernel
                assert cfg.kernel is e4m3.kernel and cfg.block_n == e4m3.block_n, (n, k, m)
    assert launch_config(4096, 4096, 1, B128, H100, torch.float16).kernel is Kernel.MMA_GEMV


@pytest.mark.parametrize("cfg", [LaunchConfig(Kernel.SMALL_M, 16, 32, 256),
                                 LaunchConfig(Kernel.TILED, 32, 32, 96),
                                 LaunchConfig(Kernel.GEMV, 1, 16, 96),
                                 LaunchConfig(Kernel.MMA_GEMV, 8, 32, 32)], ids=str)
def test_settings_the_kernels_cannot_run_are_refused(cfg):
    packed, x, _ = case(130, 260, 1, torch.float16)
    with pytest.raises(ValueError, match=r"cfg: e4m3_b128 runs on .*got LaunchConfig"):
        run(x, packed, None, cfg)
