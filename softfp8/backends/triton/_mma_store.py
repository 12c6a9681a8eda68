"""Kernel.MMA_GEMV's epilogue: a warp's mma sums -> y (or a K-split's part in ws).

Each output row's terms (its row scale, NVFP4's tensor scale, its bias) are loaded by `_row_terms`
before any store: on the shared-memory ring, and for MXFP4 on its rows' exponents without a bias,
at the program's start (they arrive while the loop runs), elsewhere right after the loop (FP4's
loop holds ~128 registers). Loaded beside the stores, each load came after the previous row's store
in program order, and ptxas keeps a global load behind a global store it cannot prove apart (y and
the scales may alias for all it knows), so a program's four row-scale loads and the shuffle
reductions waiting on them ran one after another at the end of every program (SASS, sm_90: E4M3 at
M = 1; Nsight Compute had 20% of E4M3's warp samples after the loop). Measured on the H200: the
llama2-7b token E4M3 1.726 -> 1.621 ms, NVFP4 1.590 -> 1.56 (docs/decisions.md).
tests/test_triton_compile.py checks the SASS for a load after a store.
"""
import triton
import triton.language as tl


@triton.jit
def _row_e_factor(e_ptr, rows, N):
    """2^(E - 127) in fp32 of each row's exponent E (`_mma` ROW_E: E8M0 0 is 2^-127, a
    subnormal; the rows' E are never 255)."""
    e = tl.load(e_ptr + rows, mask=rows < N, other=127)
    return tl.where(e == 0, 0x00400000, e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _row_terms(rows, g, s_ptr, b_ptr, N, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
               PARTIAL: tl.constexpr, g_ptr, ROW_E: tl.constexpr = False):
    """(row scale, tensor scale g, bias) of `rows`, as `_store_rows` applies them: ones and
    zeros where the launch has none, or where a K-split part is stored (the reduction applies
    them). g: the tensor scale, loaded once a program (`_program_terms`); ROW_E: each row's
    2^(E - 127) from g_ptr instead, which K-split parts take too (the reduction has no E)."""
    inside = rows < N
    s = tl.full(rows.shape, 1.0, tl.float32)
    b = tl.full(rows.shape, 0.0, tl.float32)
    if ROW_E:
        g = _row_e_factor(g_ptr, rows, N)
    if not PARTIAL:
        if HAS_SCALE:
            s = tl.load(s_ptr + rows, mask=inside, other=1.0)
        if HAS_BIAS:
            b = tl.load(b_ptr + rows, mask=inside, other=0.0).to(tl.float32)
    return s, g, b


@triton.jit
def _store_rows(v, rows, cols, terms, y_ptr, ws_ptr, pid_k, M, N, FMT: tl.constexpr,
                HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                ROW_E: tl.constexpr = False):
    """v (sums of rows x cols) -> y, finished with `terms` (`_row_terms` of these rows), or
    -> ws unfinished (PARTIAL; ROW_E: in units of 1 all the same). The same operations in the
    same order as when each row's terms were loaded here."""
    mask = (rows < N) & (cols < M)
    if FMT == "nvfp4" or FMT == "e4m3" or FMT == "e4m3_b128":
        v = v * 256.0  # the E4M3 codes or block scales were read as value * 2^-8
    if ROW_E:
        v = v * terms[1]  # 2^(E - 127)
    if PARTIAL:
        tl.store(ws_ptr + (pid_k * M + cols).to(tl.int64) * N + rows, v, mask=mask)
    else:
        if HAS_SCALE:
            v = v * terms[0]
        if FMT == "nvfp4":
            v = v * terms[1]
        if HAS_BIAS:
            v = v + terms[2]
        tl.store(y_ptr + cols.to(tl.int64) * N + rows, v.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _tile_rows(row0):
    """The tile mapping's rows of a tile's sums c0, c1 (c2, c3: + 8), every warp the same."""
    return row0 + tl.arange(0, 32) // 4


@triton.jit
def _store_tile(c0, c1, c2, c3, top, low, row0, m0, y_ptr, ws_ptr, pid_k, M, N,
                FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                PARTIAL: tl.constexpr, WARPS: tl.constexpr, ROW_E: tl.constexpr = False):
    """The tile mapping's sums of one 16-row tile: the warps' sums added; `top` / `low` the
    terms of rows `_tile_rows(row0)` and + 8."""
    lanes = tl.arange(0, 32)
    rows = _tile_rows(row0)
    cols = m0 + 2 * (lanes % 4)
    c0 = tl.sum(tl.reshape(c0, (WARPS, 32)), axis=0)
    c1 = tl.sum(tl.reshape(c1, (WARPS, 32)), axis=0)
    c2 = tl.sum(tl.reshape(c2, (WARPS, 32)), axis=0)
    c3 = tl.sum(tl.reshape(c3, (WARPS, 32)), axis=0)
    _store_rows(c0, rows, cols, top, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                PARTIAL, ROW_E)
    _store_rows(c1, rows, cols + 1, top, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                PARTIAL, ROW_E)
    _store_rows(c2, rows + 8, cols, low, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                PARTIAL, ROW_E)
    _store_rows(c3, rows + 8, cols + 1, low, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                HAS_BIAS, PARTIAL, ROW_E)


@triton.jit
def _runs_rows(row0, WARPS: tl.constexpr, MP: tl.constexpr, WARP_ROWS: tl.constexpr):
    """The run mapping's rows of a tile's top sums (`_store_runs`; the low ones: + MP), in the
    shape its stores take: [32 * WARPS] with one row a lane (MP = 8), else [WARPS, MP, 1]."""
    C: tl.constexpr = 8 // MP
    if C == 1:
        lanes = tl.arange(0, 32 * WARPS)
        rows = row0 + WARP_ROWS * (lanes // 32) + lanes % 32 // 4
    else:
        rows = (row0 + WARP_ROWS * tl.arange(0, WARPS)[:, None, None]
                + tl.arange(0, MP)[None, :, None])
    return rows


@triton.jit
def _program_terms(row0, s_ptr, g_ptr, b_ptr, N, FMT: tl.constexpr, HAS_SCALE: tl.constexpr,
                   HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, WARPS: tl.constexpr,
                   RUNS: tl.constexpr, TILES: tl.constexpr, ROW_E: tl.constexpr = False):
    """`_row_terms` of every row the program at row0 stores, by tile, its top rows and its low
    ones (+ MP; the tile mapping: + 8): (a, a low, b, b low, c, .., d low); c and d repeat a
    and b unless TILES = 4."""
    if RUNS > 0:
        MP: tl.constexpr = RUNS
        rows = _runs_rows(row0, WARPS, MP, 2 * MP * TILES)
    else:
        MP: tl.constexpr = 8
        rows = _tile_rows(row0)
    g = tl.full(rows.shape, 1.0, tl.float32)
    if FMT == "nvfp4" and not PARTIAL:
        g = g * tl.load(g_ptr)
    ta = _row_terms(rows, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL, g_ptr, ROW_E)
    la = _row_terms(rows + MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
    tb = _row_terms(rows + 2 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
    lb = _row_terms(rows + 3 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
    tc, lc, td, ld = ta, la, tb, lb
    if TILES == 4:
        tc = _row_terms(rows + 4 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
        lc = _row_terms(rows + 5 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
        td = _row_terms(rows + 6 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
        ld = _row_terms(rows + 7 * MP, g, s_ptr, b_ptr, N, HAS_SCALE, HAS_BIAS, PARTIAL,
                    g_ptr, ROW_E)
    return ta, la, tb, lb, tc, lc, td, ld


@triton.jit
def _store_runs(c, top, low, row0, m0, y_ptr, ws_ptr, pid_k, M, N, FMT: tl.constexpr,
                HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                WARPS: tl.constexpr, MP: tl.constexpr, WARP_ROWS: tl.constexpr,
                ROW_E: tl.constexpr = False):
    """The run mapping's sums of one tile (rows `_runs_rows(row0)`, their terms `top`, and
    + MP, `low`): lane (g, t) holds D[g][2t + s] in c[s] and D[g + 8][2t + s] in c[2 + s].
    A's row i is weight row i // C (i < 8; MP + (i - 8) // C below) restricted to K-chunk
    i % C, B's column j is x row j // C's chunk j % C (C = 8 // MP): D[i][j] counts where the
    chunks agree, and the C chunks' entries of one (x row, weight row) add up to its dot.
    M = 1 (C = 8): the diagonal D[g][g]. m0: the first x row of this program's group."""
    C: tl.constexpr = 8 // MP
    NT: tl.constexpr = 32 * WARPS
    lane = tl.arange(0, NT) % 32
    g = lane // 4
    t = lane % 4
    rows = _runs_rows(row0, WARPS, MP, WARP_ROWS)
    if C == 1:  # every entry counts, none to add: D[i][j] is y[j][row i]
        cols = m0 + 2 * t
        _store_rows(c[0], rows, cols, top, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                    PARTIAL, ROW_E)
        _store_rows(c[1], rows, cols + 1, top, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, ROW_E)
        _store_rows(c[2], rows + 8, cols, low, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, ROW_E)
        _store_rows(c[3], rows + 8, cols + 1, low, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, ROW_E)
    else:
        # column 2t + s is chunk 2 (t % (C/2)) + s of x row t // (C/2): one s (or none) agrees
        ok0 = (2 * t) % C == g % C
        ok1 = (2 * t + 1) % C == g % C
        hi = tl.where(ok0, c[0], 0.0) + tl.where(ok1, c[1], 0.0)
        lo = tl.where(ok0, c[2], 0.0) + tl.where(ok1, c[3], 0.0)
        # lane = 4 (C q + chunk) + (C / 2) m + t % (C / 2): add over chunk and t % (C / 2)
        hi = tl.sum(tl.sum(tl.reshape(hi, (WARPS, MP, C, MP, C // 2)), axis=4), axis=2)
        lo = tl.sum(tl.sum(tl.reshape(lo, (WARPS, MP, C, MP, C // 2)), axis=4), axis=2)
        cols = m0 + tl.arange(0, MP)[None, None, :]
        _store_rows(hi, rows, cols, top, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                    PARTIAL, ROW_E)
        _store_rows(lo, rows + MP, cols, low, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, ROW_E)


@triton.jit
def _store_runs_program(a, b, c, d, av, bv, terms, pid_n, m0, pid_k, y_ptr, ws_ptr, M, N,
                        FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                        PARTIAL: tl.constexpr, WARPS: tl.constexpr, MP: tl.constexpr,
                        WARP_ROWS: tl.constexpr, PROG_ROWS: tl.constexpr, TILES: tl.constexpr,
                        WIDE: tl.constexpr, ROW_E: tl.constexpr):
    """Every tile of a run-mapping program (`_mma`'s ring and register kernels): a, b (and c, d
    at 4 tiles a warp; av, bv the x rows 8..15 of WIDE), their rows' `terms`."""
    ta, la, tb, lb, tc, lc, td, ld = terms
    row0 = pid_n * PROG_ROWS
    _store_runs(a, ta, la, row0, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
    _store_runs(b, tb, lb, row0 + 2 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
    if WIDE:
        _store_runs(av, ta, la, row0, m0 + 8, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
        _store_runs(bv, tb, lb, row0 + 2 * MP, m0 + 8, y_ptr, ws_ptr, pid_k, M, N, FMT,
                    HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
    if TILES == 4:
        _store_runs(c, tc, lc, row0 + 4 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
        _store_runs(d, td, ld, row0 + 6 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)


@triton.jit
def _store_tile_program(a, b, av, bv, terms, pid_n, m0, pid_k, y_ptr, ws_ptr, M, N,
                        FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                        PARTIAL: tl.constexpr, WARPS: tl.constexpr, ROWS: tl.constexpr,
                        WIDE: tl.constexpr, ROW_E: tl.constexpr):
    """Both tiles of a tile-mapping program (`_mma.mma_tile_kernel`)."""
    ta, la, tb, lb, tc, lc, td, ld = terms
    row0 = pid_n * ROWS
    _store_tile(a[0], a[1], a[2], a[3], ta, la, row0, m0, y_ptr, ws_ptr, pid_k, M, N, FMT,
                HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
    _store_tile(b[0], b[1], b[2], b[3], tb, lb, row0 + 16, m0, y_ptr, ws_ptr, pid_k, M, N,
                FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
    if WIDE:
        _store_tile(av[0], av[1], av[2], av[3], ta, la, row0, m0 + 8, y_ptr, ws_ptr, pid_k, M,
                    N, FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
        _store_tile(bv[0], bv[1], bv[2], bv[3], tb, lb, row0 + 16, m0 + 8, y_ptr, ws_ptr,
                    pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
