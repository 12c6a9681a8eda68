"""Kernel.MMA_GEMV's shared-memory ring (`_mma`'s RING): each thread copies its own weights,
scale bytes and x of a loop step into its own slot with `cp.async` RING - 1 steps ahead and
reads them back with `ld.shared` when the step comes.

Why: the FP4 loop holds one step of registers ahead (123 registers a thread: 4 warps a
scheduler), so a warp has at most one step's 2 KB of weights in flight and, with ptxas placing
the next step's loads after the mma that frees their registers, often none (Nsight Compute:
occupancy- and latency-bound, half the issue slots empty; docs/decisions.md).
Bytes in flight in shared memory cost no registers. Each thread reads back only what it copied
itself, so `cp.async.wait_group` alone orders the copies and the reads (no barrier).

A stage is 9 pieces of 16 bytes a thread (SLOT_BYTES), each piece laid thread after thread
(piece p of thread i at p * 16 * threads + 16 i: a warp's copy or read of a piece is 512
contiguous bytes): pieces 0..3 the 4 rows' codes, 4..7 x (FP4: 64 bytes, 32 codes' worth;
8-bit: the first two), 8 the rows' scale words (FP4; the 4-byte word that holds each row's
scale byte(s), the byte offset inside it being the same every step). (The first layout, each
thread's 144 bytes together, ran 7x slower: Nsight Compute showed the warps stalled on a full
MIO queue; docs/decisions.md.)
Copies that fall outside the rows, the K range or x's row copy no bytes and fill zeros
(src-size 0), so a step past the end adds nothing.
"""
import triton
import triton.language as tl

from ._const import Const
from ._mma_loads import _x_pieces
from ._mma_table import MMA_RING_PROGRAM_SLOTS, MMA_RING_SLOT_BYTES

SLOT_BYTES = Const(MMA_RING_SLOT_BYTES)
X_PIECE = 4  # pieces 0..3: the rows' codes; 4..7: x; 8: the 4 rows' scale words
SCALE_PIECE = 8


def _decl_asm(nbytes: int) -> str:
    """The ring's declaration (once a kernel; a second would be a duplicate symbol at ptxas)
    and this program's base address in the shared window."""
    return f"""{{
    .shared .align 16 .b8 softfp8_ring[{nbytes}];
    mov.u32 $0, softfp8_ring;
    }}"""


def _copy(dst: str, src: str, size: int, bit: int, mask: str, level: str = "cg") -> list:
    """cp.async of `size` bytes where bit `bit` of `mask` is set, else zeros (src-size 0:
    nothing read). level: "cg" (L2 only: the weights, read once) or "ca" (through L1)."""
    return [f"and.b32 v, {mask}, {1 << bit};", "setp.ne.b32 p, v, 0;",
            f"selp.b32 n, {size}, 0, p;",
            f"cp.async.{level}.shared.global [{dst}], [{src}], {size}, n;"]


def _piece(dst: str, slot: str, stride: str, piece: int, extra: int = 0) -> str:
    """dst = this thread's address of `piece` (+ extra bytes): piece * stride past its slot."""
    return f"mad.lo.u32 {dst}, {stride}, {piece}, {slot};" + (
        f" add.u32 {dst}, {dst}, {extra};" if extra else "")


def _issue_weights_asm(fp4: bool) -> str:
    """$1: the slot; $2..$5: the 4 rows' code addresses; FP4: $6..$9 their scale-byte
    addresses (aligned down to the word here), mask $10 (bit q: row q inside), the piece
    stride $11; 8-bit: mask $6, stride $7. No commit."""
    lines = [".reg .pred p;", ".reg .b32 v, n, d;", ".reg .b64 a;"]
    mask, stride = ("$10", "$11") if fp4 else ("$6", "$7")
    for q in range(4):
        lines += [_piece("d", "$1", stride, q)] + _copy("d", f"${2 + q}", 16, q, mask)
        if fp4:
            lines += [f"and.b64 a, ${6 + q}, -4;", _piece("d", "$1", stride, SCALE_PIECE, 4 * q)]
            lines += _copy("d", "a", 4, q, mask, "ca")  # .cg copies 16 bytes only
    return "{\n" + "\n".join(lines + ["mov.b32 $0, 0;"]) + "\n}"


def _issue_weights_whole_asm() -> str:
    """8-bit, every row and step inside (`_mma`'s WHOLE): $1: the slot; $2..$5: the 4 rows'
    code addresses; $6: the piece stride. No predicate, no commit."""
    lines = [".reg .b32 d;"]
    for q in range(4):
        lines += [_piece("d", "$1", "$6", q), f"cp.async.cg.shared.global [d], [${2 + q}], 16;"]
    return "{\n" + "\n".join(lines + ["mov.b32 $0, 0;"]) + "\n}"


def _issue_x_whole_asm(pieces: int) -> str:
    """As `_issue_x_asm` where every piece lies inside ($3: the piece stride), then the commit."""
    lines = [".reg .b32 d;"]
    for v in range(pieces):
        lines += [_piece("d", "$1", "$3", X_PIECE + v),
                  f"cp.async.ca.shared.global [d], [$2+{16 * v}], 16;" if v else
                  "cp.async.ca.shared.global [d], [$2], 16;"]
    return "{\n" + "\n".join(lines + ["cp.async.commit_group;", "mov.b32 $0, 0;"]) + "\n}"


def _issue_x_asm(pieces: int) -> str:
    """$1: the slot; $2: x's address; $3: bit v set where x's 16 bytes v lie inside; $4: the
    piece stride; then the commit that closes this step's group."""
    lines = [".reg .pred p;", ".reg .b32 v, n, d;"]
    for v in range(pieces):
        lines += [_piece("d", "$1", "$4", X_PIECE + v)]
        # through L1: every warp of every SM reads the same x, and .cg sent each copy to the
        # same few L2 lines (measured 5x slower than x by registers, which L1 serves)
        lines += _copy("d", f"$2+{16 * v}" if v else "$2", 16, v, "$3", "ca")
    return "{\n" + "\n".join(lines + ["cp.async.commit_group;", "mov.b32 $0, 0;"]) + "\n}"


def _read_asm(stages: int, fp4: bool) -> str:
    """Wait for this step's group (the RING - 1 later ones may fly), then $0..$19: rows q's 4
    words at $4q.., their scale bits at $16 + q (FP4: the word shifted right by byte
    (`$21` >> 8q) & 0xFF and masked to `$22` bits, 16 for NVFP4's two E4M3 bytes, 8 for
    MXFP4's E8M0; 8-bit: 0), from slot $20 (piece stride $23)."""
    lines = [".reg .b32 sh, d;", f"cp.async.wait_group {stages - 1};"]
    for q in range(4):
        regs = ", ".join(f"${4 * q + j}" for j in range(4))
        lines += [_piece("d", "$20", "$23", q), f"ld.shared.v4.u32 {{{regs}}}, [d];"]
    if fp4:
        lines += [_piece("d", "$20", "$23", SCALE_PIECE),
                  "ld.shared.v4.u32 {$16, $17, $18, $19}, [d];"]
        for q in range(4):
            lines += [f"bfe.u32 sh, $21, {8 * q}, 8;", f"bfe.u32 ${16 + q}, ${16 + q}, sh, $22;"]
    else:
        lines += [f"mov.b32 ${16 + q}, 0;" for q in range(4)]
    return "{\n" + "\n".join(lines) + "\n}"


def _read_x_asm(pieces: int) -> str:
    """$0..$15: x's words of this step from slot $16, piece stride $17 (8-bit: the first 8;
    the rest 0)."""
    lines = [".reg .b32 d;"]
    for v in range(4):
        regs = ", ".join(f"${4 * v + j}" for j in range(4))
        lines += ([_piece("d", "$16", "$17", X_PIECE + v), f"ld.shared.v4.u32 {{{regs}}}, [d];"]
                  if v < pieces else [" ".join(f"mov.b32 ${4 * v + j}, 0;" for j in range(4))])
    return "{\n" + "\n".join(lines) + "\n}"


_DECL = {p: Const(_decl_asm(p * 32 * MMA_RING_SLOT_BYTES)) for p in MMA_RING_PROGRAM_SLOTS}
_DECL_2 = _DECL[2]
_DECL_3 = _DECL[3]
_DECL_4 = _DECL[4]
_DECL_6 = _DECL[6]
_DECL_8 = _DECL[8]
_ISSUE_W_FP4 = Const(_issue_weights_asm(True))
_ISSUE_W_FP8 = Const(_issue_weights_asm(False))
_ISSUE_W_FP8_WHOLE = Const(_issue_weights_whole_asm())
_ISSUE_X_FP8_WHOLE = Const(_issue_x_whole_asm(2))
_ISSUE_X_FP4 = Const(_issue_x_asm(4))
_ISSUE_X_FP8 = Const(_issue_x_asm(2))
_READ_FP4_2 = Const(_read_asm(2, True))
_READ_FP4_3 = Const(_read_asm(3, True))
_READ_FP4_4 = Const(_read_asm(4, True))
_READ_FP4_6 = Const(_read_asm(6, True))
_READ_FP4_8 = Const(_read_asm(8, True))
_READ_FP8_2 = Const(_read_asm(2, False))
_READ_FP8_3 = Const(_read_asm(3, False))
_READ_FP8_4 = Const(_read_asm(4, False))
_READ_FP8_6 = Const(_read_asm(6, False))
_READ_FP8_8 = Const(_read_asm(8, False))
_READ_X_FP4 = Const(_read_x_asm(4))
_READ_X_FP8 = Const(_read_x_asm(2))
_COMMIT = Const("{\ncp.async.commit_group;\nmov.b32 $0, 0;\n}")
_WAIT_ALL = Const("{\ncp.async.wait_all;\nmov.b32 $0, 0;\n}")


@triton.jit
def _ring_base(tid, STAGES: tl.constexpr, WARPS: tl.constexpr):
    """This thread's slot of stage 0: its 16 bytes of piece 0 (piece p: + p * 32 * WARPS * 16;
    stage s: + s * 32 * WARPS * SLOT_BYTES)."""
    P: tl.constexpr = STAGES * WARPS
    tl.static_assert(P == 2 or P == 3 or P == 4 or P == 6 or P == 8,
                     "RING: stages * warps in (2, 3, 4, 6, 8)")
    # the declaration for this many slots, picked as a constexpr and issued by one call
    if P == 2:
        DECL: tl.constexpr = _DECL_2
    elif P == 3:
        DECL: tl.constexpr = _DECL_3
    elif P == 4:
        DECL: tl.constexpr = _DECL_4
    elif P == 6:
        DECL: tl.constexpr = _DECL_6
    else:
        DECL: tl.constexpr = _DECL_8
    base = tl.inline_asm_elementwise(DECL, "=r,r", [tid], tl.int32, is_pure=False, pack=1)
    return base + tid * 16


@triton.jit
def _ring_shifts(s_ptr, row, N, RB, SB, off, RS: tl.constexpr, FMT: tl.constexpr):
    """The bit offset of each row's scale byte(s) inside its aligned word, byte q for row
    row + RS * q: the same every step (a step moves the scale address by a multiple of 4)."""
    HB: tl.constexpr = 8 if FMT == "nvfp4" else 16
    sh = tl.zeros_like(row)
    for q in tl.static_range(4):
        r = tl.minimum(row + q * RS, N - 1).to(tl.int64)
        lo = ((s_ptr + r * SB + off // HB).to(tl.int64) & 3).to(tl.int32)
        sh = sh | ((lo * 8) << (8 * q))
    return sh


@triton.jit
def _ring_rows_in(row, N, RS: tl.constexpr):
    """Bit q set where row row + RS * q is inside (the weights' copy mask, before the step's)."""
    return ((row < N).to(tl.int32) | ((row + RS < N).to(tl.int32) << 1)
            | ((row + 2 * RS < N).to(tl.int32) << 2) | ((row + 3 * RS < N).to(tl.int32) << 3))


@triton.jit
def _ring_issue_weights(slot, stride, w_ptr, s_ptr, row, rows_in, RB, SB, off, kb_hi,
                        RS: tl.constexpr, FMT: tl.constexpr, WHOLE: tl.constexpr = False):
    """The 4 rows' 16 bytes at `off` (FP4: and their scale words) into `slot`, where the row
    (`rows_in`, `_ring_rows_in`) and the step are inside, else zeros. WHOLE (8-bit, `_mma`'s
    WHOLE: every row and this step inside): without predicates. No commit."""
    HB: tl.constexpr = 8 if FMT == "nvfp4" else 16
    r0 = row.to(tl.int64)
    r1 = (row + RS).to(tl.int64)
    r2 = (row + 2 * RS).to(tl.int64)
    r3 = (row + 3 * RS).to(tl.int64)
    if WHOLE:
        tl.static_assert(FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128", "WHOLE: 8-bit")
        tl.inline_asm_elementwise(
            _ISSUE_W_FP8_WHOLE, "=r,r,l,l,l,l,r",
            [slot, w_ptr + r0 * RB + off, w_ptr + r1 * RB + off, w_ptr + r2 * RB + off,
             w_ptr + r3 * RB + off, stride],
            tl.int32, is_pure=False, pack=1)
    elif FMT == "nvfp4" or FMT == "mxfp4":
        mask = tl.where(off < kb_hi, rows_in, 0)
        sb = off // HB
        tl.inline_asm_elementwise(
            _ISSUE_W_FP4, "=r,r,l,l,l,l,l,l,l,l,r,r",
            [slot, w_ptr + r0 * RB + off, w_ptr + r1 * RB + off, w_ptr + r2 * RB + off,
             w_ptr + r3 * RB + off, s_ptr + r0 * SB + sb, s_ptr + r1 * SB + sb,
             s_ptr + r2 * SB + sb, s_ptr + r3 * SB + sb, mask, stride],
            tl.int32, is_pure=False, pack=1)
    else:
        mask = tl.where(off < kb_hi, rows_in, 0)
        tl.inline_asm_elementwise(
            _ISSUE_W_FP8, "=r,r,l,l,l,l,r,r",
            [slot, w_ptr + r0 * RB + off, w_ptr + r1 * RB + off, w_ptr + r2 * RB + off,
             w_ptr + r3 * RB + off, mask, stride],
            tl.int32, is_pure=False, pack=1)


@triton.jit
def _ring_issue_x(slot, stride, x_row, off, kb_hi, K, in_m, FP8: tl.constexpr,
                  WHOLE: tl.constexpr = False):
    """x of the step at byte `off` (the pieces `_mma_loads._x_step` loads), then this step's
    commit. WHOLE (8-bit, every piece inside): without predicates."""
    if WHOLE:
        tl.static_assert(FP8, "WHOLE: 8-bit")
        tl.inline_asm_elementwise(_ISSUE_X_FP8_WHOLE, "=r,r,l,r", [slot, x_row + off, stride],
                                  tl.int32, is_pure=False, pack=1)
    else:
        k0, bits = _x_pieces(off, kb_hi, K, in_m, FP8)
        if FP8:
            tl.inline_asm_elementwise(_ISSUE_X_FP8, "=r,r,l,r,r",
                                      [slot, x_row + k0, bits, stride],
                                      tl.int32, is_pure=False, pack=1)
        else:
            tl.inline_asm_elementwise(_ISSUE_X_FP4, "=r,r,l,r,r",
                                      [slot, x_row + k0, bits, stride],
                                      tl.int32, is_pure=False, pack=1)


@triton.jit
def _ring_read(slot, stride, shifts, STAGES: tl.constexpr, FMT: tl.constexpr):
    """(4 rows' (4 words, scale), x's 16 words) of the step in `slot`, once it has landed."""
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
    C: tl.constexpr = "=r," * 20 + "r,r,r,r"
    width = tl.full(slot.shape, 16 if FMT == "nvfp4" else 8, tl.int32)
    a = [slot, shifts, width, stride]
    # the block for this stage count (its cp.async.wait_group takes an immediate)
    if STAGES == 2:
        READ: tl.constexpr = _READ_FP8_2 if FP8 else _READ_FP4_2
    elif STAGES == 3:
        READ: tl.constexpr = _READ_FP8_3 if FP8 else _READ_FP4_3
    elif STAGES == 4:
        READ: tl.constexpr = _READ_FP8_4 if FP8 else _READ_FP4_4
    elif STAGES == 6:
        READ: tl.constexpr = _READ_FP8_6 if FP8 else _READ_FP4_6
    else:
        READ: tl.constexpr = _READ_FP8_8 if FP8 else _READ_FP4_8
    o = tl.inline_asm_elementwise(READ, C, a, (tl.int32,) * 20, is_pure=False, pack=1)
    CX: tl.constexpr = "=r," * 16 + "r,r"
    if FP8:
        xw = tl.inline_asm_elementwise(_READ_X_FP8, CX, [slot, stride], (tl.int32,) * 16,
                                       is_pure=False, pack=1)
    else:
        xw = tl.inline_asm_elementwise(_READ_X_FP4, CX, [slot, stride], (tl.int32,) * 16,
                                       is_pure=False, pack=1)
    rows = ((o[0], o[1], o[2], o[3], o[16]), (o[4], o[5], o[6], o[7], o[17]),
            (o[8], o[9], o[10], o[11], o[18]), (o[12], o[13], o[14], o[15], o[19]))
    return rows, xw


@triton.jit
def _ring_commit(tid):
    """Close a step's group without x (x by registers: diagnostics)."""
    return tl.inline_asm_elementwise(_COMMIT, "=r,r", [tid], tl.int32, is_pure=False, pack=1)


@triton.jit
def _ring_drain(tid):
    """Let no copy outlive the loop (the steps past the end copy zeros into the ring)."""
    return tl.inline_asm_elementwise(_WAIT_ALL, "=r,r", [tid], tl.int32, is_pure=False, pack=1)
