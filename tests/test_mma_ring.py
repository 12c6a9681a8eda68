"""The shared-memory ring's PTX (`_mma_ring`) on the PTX emulator (CI has no GPU): each lane's
copies of a step (codes of 4 rows, their scale words, x) land where its reads find them, for two
stages at once, with switched-off copies reading back as zeros and each scale taken from its
byte offset inside the aligned word. The GPU tests (test_mma_gemv.py, `ring`) run the kernel.
"""
import numpy as np
import pytest
from ptx_emulator import Memory, Warp

R = pytest.importorskip("softfp8.backends.triton._mma_ring")
MMA_RING_STAGES = pytest.importorskip("softfp8.backends.triton._mma_table").MMA_RING_STAGES

NT = 32  # one warp: the piece stride is NT * 16 bytes
STRIDE = NT * 16
STAGE = NT * R.MMA_RING_SLOT_BYTES
W_BASE, S_BASE, X_BASE = 0x7F0000010000, 0x7F0000200000, 0x7F0000300000


def _step(rng, mem, stage, fmt):
    """Global bytes of one step for each lane at fresh addresses, and what the reads must give:
    (operands of the two issue blocks per lane, expected rows (4 x (4 words, scale)), x words)."""
    fp4 = fmt in ("nvfp4", "mxfp4")
    pieces = 4 if fp4 else 2
    codes = rng.integers(0, 256, (NT, 4, 16), dtype=np.uint8)
    scales = rng.integers(0, 256, 4 * NT * 8 + 8, dtype=np.uint8)
    x = rng.integers(0, 256, (NT, 64), dtype=np.uint8)
    w0 = mem.place(W_BASE + stage * 0x10000, codes)
    s0 = mem.place(S_BASE + stage * 0x10000, scales)
    x0 = mem.place(X_BASE + stage * 0x10000, x)
    issue_w, issue_x, rows, xs, shifts = [], [], [], [], []
    for lane in range(NT):
        mask = int(rng.integers(0, 16))
        bits = int(rng.integers(0, 1 << pieces))
        slot = stage * STAGE + lane * 16
        code_at = [w0 + (lane * 4 + q) * 16 for q in range(4)]
        # a scale byte anywhere (MXFP4), an even one for NVFP4's pair (its rows are whole blocks
        # of 16 codes, K padded to 32: every row's scale bytes start on an even offset)
        offs = [int(rng.integers(0, 4 * NT * 8)) & (~1 if fmt == "nvfp4" else ~0)
                for _ in range(4)]
        scale_at = [s0 + o for o in offs]
        if fp4:
            issue_w.append([0, slot, *code_at, *scale_at, mask, STRIDE])
        else:
            issue_w.append([0, slot, *code_at, mask, STRIDE])
        issue_x.append([0, slot, x0 + lane * 64, bits, STRIDE])
        width = 16 if fmt == "nvfp4" else 8
        shifts.append(sum(((a & 3) * 8) << (8 * q) for q, a in enumerate(scale_at)))
        lane_rows = []
        for q in range(4):
            on = mask >> q & 1
            words = [int(w) * on for w in codes[lane, q].view(np.uint32)]
            scale = int.from_bytes(scales[offs[q]:offs[q] + width // 8].tobytes(), "little")
            lane_rows.append((*words, scale * on if fp4 else 0))
        rows.append(lane_rows)
        xw = [int(w) * (bits >> (i // 4) & 1) for i, w in enumerate(x[lane].view(np.uint32))]
        xs.append([w if i < 4 * pieces else 0 for i, w in enumerate(xw)])
    return issue_w, issue_x, rows, xs, shifts


@pytest.mark.parametrize("stages", MMA_RING_STAGES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "e5m2", "e4m3"])
def test_ring_reads_back_each_lanes_copies(fmt, stages):
    fp4 = fmt in ("nvfp4", "mxfp4")
    rng = np.random.default_rng(7)
    mem = Memory(2 * STAGE)
    steps = [_step(rng, mem, stage, fmt) for stage in (0, 1)]
    issue_w = Warp(R._issue_weights_asm(fp4), mem)
    issue_x = Warp(R._issue_x_asm(4 if fp4 else 2), mem)
    # both stages copied before either is read, the second first: a copy of stage 0 that ran
    # past its stage's bytes would overwrite stage 1's
    for w_ops, x_ops, *_ in reversed(steps):
        issue_w.run(w_ops)
        issue_x.run(x_ops)
    read = Warp(R._read_asm(stages, fp4), mem)
    read_x = Warp(R._read_x_asm(4 if fp4 else 2), mem)
    width = 16 if fmt == "nvfp4" else 8
    for stage, (_, _, rows, xs, shifts) in enumerate(steps):
        out = read.run([[0] * 20 + [stage * STAGE + lane * 16, shifts[lane], width, STRIDE]
                        for lane in range(NT)])
        got_x = read_x.run([[0] * 16 + [stage * STAGE + lane * 16, STRIDE] for lane in range(NT)])
        for lane in range(NT):
            o = out[lane]
            got = [(*o[4 * q:4 * q + 4], o[16 + q]) for q in range(4)]
            assert got == rows[lane], (stage, lane)
            assert got_x[lane][:16] == xs[lane], (stage, lane)


def test_ring_copies_refuse_misaligned_addresses():
    """The emulator holds cp.async to its alignment rule, so the test above can fail on it."""
    mem = Memory(STAGE)
    mem.place(W_BASE, np.zeros(64, np.uint8))
    with pytest.raises(AssertionError, match="misaligned"):
        Warp(R._issue_weights_asm(False), mem).run(
            [[0, lane * 16, W_BASE + 8, W_BASE, W_BASE, W_BASE, 1, STRIDE] for lane in range(NT)])
