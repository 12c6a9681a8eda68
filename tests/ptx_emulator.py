"""A small emulator for the straight-line PTX that Kernel.MMA_GEMV's asm blocks hold (_mma_ptx),
so CI (no GPU) can run the real asm text: one warp, 32 lanes in lockstep, because `mma.sync`
and `shfl.sync` combine the lanes' registers.

It knows the instructions those blocks use and nothing else (an unknown one raises), with the
semantics of the PTX ISA: `prmt` (default mode), `lop3`, integer and bit ops on .b32/.u32/.s32,
fp16x2 `mul.rn`/`fma.rn` (rounded once, through float64, which holds the exact results),
`cvt.rn.f16x2.f32`, `fma.rn.f32`, `setp`/`selp`, `shfl.sync.bfly`, and
`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` with the fragment layout of the PTX ISA
(A: a0,a1 row g, a2,a3 row g+8, a4..a7 the same rows at k + 8; B: b0,b1 k = 2t, 2t+1, b2,b3
k + 8, column g; C/D: c0,c1 row g, c2,c3 row g+8, columns 2t, 2t+1; g = lane / 4, t = lane % 4),
summing each mma in float64 and rounding to float32 once. With a `Memory`, also the shared-
memory ring's blocks (_mma_ring): `cp.async` (copied at once: the emulator has no time, so
commit and wait are no-ops), `ld.shared.v4.u32`, `bfe.u32`, `and.b64` on 64-bit addresses.
"""
from __future__ import annotations

import re

import numpy as np

MASK = 0xFFFFFFFF
MASK64 = (1 << 64) - 1


def _predicated_off(pred: str | None, r: dict) -> bool:
    """Whether a lane skips an instruction guarded by `pred` (`@p` or `@!p`; None: no guard)."""
    return pred is not None and bool(r[pred.lstrip("@!")]) == pred.startswith("@!")


class Memory:
    """Global memory as byte arrays at base addresses (`place`), and one shared-memory window."""

    def __init__(self, shared_bytes: int):
        self.shared = np.zeros(shared_bytes, np.uint8)
        self.blocks = []  # (base, bytes)

    def place(self, base: int, data: np.ndarray) -> int:
        self.blocks.append((base, np.asarray(data, np.uint8).ravel()))
        return base

    def read_global(self, addr: int, n: int) -> np.ndarray:
        for base, data in self.blocks:
            if base <= addr and addr + n <= base + data.size:
                return data[addr - base:addr - base + n]
        raise IndexError(f"ptx_emulator: global read of {n} bytes at {addr:#x} outside memory")


def _f16x2(v: int) -> tuple[np.float16, np.float16]:
    return (np.array([v & 0xFFFF], np.uint16).view(np.float16)[0],
            np.array([v >> 16], np.uint16).view(np.float16)[0])


def _pack16(lo, hi) -> int:
    lo = int(np.array([lo], np.float16).view(np.uint16)[0])
    hi = int(np.array([hi], np.float16).view(np.uint16)[0])
    return lo | (hi << 16)


def _f32(v: int) -> float:
    return float(np.array([v & MASK], np.uint32).view(np.float32)[0])


def _bits(f: float) -> int:
    return int(np.array([f], np.float32).view(np.uint32)[0])


def _s32(v: int) -> int:
    v &= MASK
    return v - (1 << 32) if v >> 31 else v


def prmt(a: int, b: int, c: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = src[sel & 7]
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0x00
        out |= byte << (8 * i)
    return out


def lop3(a: int, b: int, c: int, lut: int) -> int:
    """Bit i of the result is bit (a_i b_i c_i) of `lut` (a = 0xF0, b = 0xCC, c = 0xAA)."""
    out = 0
    for idx in range(8):
        if (lut >> idx) & 1:
            out |= ((a if idx & 4 else ~a) & (b if idx & 2 else ~b) & (c if idx & 1 else ~c))
    return out & MASK


_IMM = re.compile(r"^(0f[0-9a-fA-F]{8}|0x[0-9a-fA-F]+|-?\d+)$")


class Warp:
    """Run one asm block on 32 lanes. `operands[lane]` is the list of $i values (ints: the 32-bit
    pattern; outputs may start at anything); returns the operands after the block."""

    def __init__(self, asm: str, memory: Memory | None = None):
        self.memory = memory
        body = asm.strip()
        assert body.startswith("{") and body.endswith("}"), "expected one { ... } block"
        self.lines = [ln.strip().rstrip(";").strip() for ln in body[1:-1].replace(";", ";\n")
                      .splitlines()]
        self.lines = [ln for ln in self.lines if ln and not ln.startswith(".reg")]

    def run(self, operands: list[list[int]]) -> list[list[int]]:
        regs = [dict() for _ in range(32)]
        for lane in range(32):
            for i, v in enumerate(operands[lane]):
                regs[lane][f"${i}"] = v & (MASK if v < 0 else MASK64)  # 'l' operands: 64 bits
        with np.errstate(over="ignore", invalid="ignore"):  # fp16 inf/NaN are part of the PTX
            for line in self.lines:
                self._step(line, regs)
        return [[regs[lane][f"${i}"] for i in range(len(operands[lane]))] for lane in range(32)]

    @staticmethod
    def _val(regs: dict, tok: str) -> int:
        tok = tok.strip()
        if _IMM.match(tok):
            if tok.startswith("0f"):
                return int(tok[2:], 16)
            return int(tok, 0) & MASK
        return regs[tok]

    def _step(self, line: str, regs: list[dict]) -> None:
        pred = None
        if line.startswith("@"):
            pred, line = line.split(None, 1)
        op, _, rest = line.partition(" ")
        if op.startswith("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
            return self._mma(rest, regs)
        if op.startswith("cp.async.") or op.startswith("ld.shared."):
            return self._memory_op(op, rest, regs, pred)
        args = [a.strip() for a in rest.split(",")]
        if op == "shfl.sync.bfly.b32":
            src = [self._val(regs[lane], args[1]) for lane in range(32)]
            for lane in range(32):
                regs[lane][args[0]] = src[lane ^ self._val(regs[lane], args[2])]
            return
        for lane in range(32):
            r = regs[lane]
            if _predicated_off(pred, r):
                continue
            v = [self._val(r, a) for a in args[1:]] if not op.startswith("setp") else None
            d = args[0]
            if op in ("mov.b32", "mov.f32", "mov.u32"):
                r[d] = v[0]
            elif op == "and.b32":
                r[d] = v[0] & v[1]
            elif op == "or.b32":
                r[d] = v[0] | v[1]
            elif op == "xor.b32":
                r[d] = v[0] ^ v[1]
            elif op == "shl.b32":
                r[d] = (v[0] << v[1]) & MASK if v[1] < 32 else 0
            elif op == "shr.b32":
                r[d] = v[0] >> v[1] if v[1] < 32 else 0
            elif op == "prmt.b32":
                r[d] = prmt(*v)
            elif op == "lop3.b32":
                r[d] = lop3(*v)
            elif op == "mul.hi.u32":
                r[d] = (v[0] * v[1]) >> 32
            elif op == "mad.lo.u32":
                r[d] = (v[0] * v[1] + v[2]) & MASK
            elif op == "mul.lo.u32":
                r[d] = (v[0] * v[1]) & MASK
            elif op in ("add.s32", "add.u32"):
                r[d] = (v[0] + v[1]) & MASK
            elif op == "and.b64":  # an immediate is 64 bits wide here
                imm = args[2].strip()
                r[d] = v[0] & (int(imm, 0) & MASK64 if _IMM.match(imm) else v[1]) & MASK64
            elif op == "bfe.u32":  # PTX: pos and len taken mod 256, bits past 31 are zero
                pos, length = v[1] & 0xFF, v[2] & 0xFF
                r[d] = (v[0] >> pos) & ((1 << length) - 1) if pos < 32 else 0
            elif op == "sub.s32":
                r[d] = (v[0] - v[1]) & MASK
            elif op == "max.u32":
                r[d] = max(v[0], v[1])
            elif op == "max.s32":
                r[d] = max(_s32(v[0]), _s32(v[1])) & MASK
            elif op == "min.s32":
                r[d] = min(_s32(v[0]), _s32(v[1])) & MASK
            elif op == "selp.b32":
                r[d] = v[0] if r[args[3]] else v[1]
            elif op.startswith("setp."):
                self._setp(op, args, r)
            elif op == "mul.rn.f16x2":
                (a0, a1), (b0, b1) = _f16x2(v[0]), _f16x2(v[1])
                r[d] = _pack16(np.float16(float(a0) * float(b0)), np.float16(float(a1) * float(b1)))
            elif op == "fma.rn.f16x2":
                (a0, a1), (b0, b1), (c0, c1) = _f16x2(v[0]), _f16x2(v[1]), _f16x2(v[2])
                r[d] = _pack16(np.float16(float(a0) * float(b0) + float(c0)),
                               np.float16(float(a1) * float(b1) + float(c1)))
            elif op == "cvt.rn.f16x2.f32":  # d.hi = a, d.lo = b
                r[d] = _pack16(np.float16(_f32(v[1])), np.float16(_f32(v[0])))
            elif op == "fma.rn.f32":
                r[d] = _bits(np.float32(_f32(v[0]) * _f32(v[1]) + _f32(v[2])))
            else:
                raise NotImplementedError(f"ptx_emulator: {op}")

    def _address(self, r: dict, tok: str) -> int:
        """[reg], [reg+imm] or [reg-imm]."""
        m = re.fullmatch(r"\[\s*([$\w]+)\s*(?:([+-])\s*(\d+))?\s*\]", tok.strip())
        base = r[m.group(1)]
        off = int(m.group(3) or 0)
        return base - off if m.group(2) == "-" else base + off

    def _memory_op(self, op: str, rest: str, regs: list, pred: str | None) -> None:
        if op in ("cp.async.commit_group", "cp.async.wait_all") or op.startswith(
                "cp.async.wait_group"):
            return
        mem = self.memory
        assert mem is not None, "ptx_emulator: memory instructions need a Memory"
        for lane in range(32):
            r = regs[lane]
            if _predicated_off(pred, r):
                continue
            if op.startswith("ld.shared.v4.u32"):
                dst, _, src = rest.partition("}")
                names = [x.strip() for x in dst.strip(" {").split(",")]
                a = self._address(r, src.strip(" ,"))
                assert a % 16 == 0, f"ptx_emulator: ld.shared.v4 at {a} not 16-byte aligned"
                words = mem.shared[a:a + 16].view(np.uint32)
                for name, w in zip(names, words):
                    r[name] = int(w)
            elif op in ("cp.async.cg.shared.global", "cp.async.ca.shared.global"):
                dst, src, size, n = [x.strip() for x in rest.split(",")]
                a, b = self._address(r, dst), self._address(r, src)
                size, n = int(size), self._val(r, n)
                assert size in ((16,) if op.startswith("cp.async.cg") else (4, 8, 16)), op
                assert a % size == 0 and b % size == 0, f"ptx_emulator: misaligned {op}"
                mem.shared[a:a + size] = 0
                if n:
                    mem.shared[a:a + n] = mem.read_global(b, n)
            else:
                raise NotImplementedError(f"ptx_emulator: {op}")

    def _setp(self, op: str, args: list, r: dict) -> None:
        parts = op.split(".")  # setp.CMP[.BOOL].TYPE
        cmp, boolop = parts[1], parts[2] if len(parts) == 4 else None
        a, b = self._val(r, args[1]), self._val(r, args[2])
        res = {"eq": a == b, "ne": a != b}[cmp]
        if boolop == "or":
            res = res or bool(r[args[3]])
        r[args[0]] = res

    def _mma(self, rest: str, regs: list[dict]) -> None:
        groups = re.findall(r"\{([^}]*)\}", rest)
        d, a, b, c = ([x.strip() for x in grp.split(",")] for grp in groups)
        A = np.zeros((16, 16))
        B = np.zeros((16, 8))
        C = np.zeros((16, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            r = regs[lane]
            av = [_f16x2(self._val(r, x)) for x in a]
            bv = [_f16x2(self._val(r, x)) for x in b]
            cv = [_f32(self._val(r, x)) for x in c]
            for i, (row, k) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8),
                                          (g + 8, 2 * t + 8))):
                A[row, k], A[row, k + 1] = float(av[i][0]), float(av[i][1])
            for i, k in enumerate((2 * t, 2 * t + 8)):
                B[k, g], B[k + 1, g] = float(bv[i][0]), float(bv[i][1])
            for i, (row, col) in enumerate(((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t),
                                            (g + 8, 2 * t + 1))):
                C[row, col] = cv[i]
        with np.errstate(invalid="ignore", over="ignore"):
            D = A @ B + C
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i, (row, col) in enumerate(((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t),
                                            (g + 8, 2 * t + 1))):
                regs[lane][d[i]] = _bits(np.float32(D[row, col]))
