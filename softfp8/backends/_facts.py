"""Facts about one packed weight that depend on its tensors alone -- whether its E4M3 codes hold a
NaN, DEQUANT's row ranges (triton/_dequant) -- computed once and kept until a tensor of the
weight is replaced or written in place. Shared by the Triton and Numba backends.
"""
from __future__ import annotations

import weakref
from concurrent.futures import ThreadPoolExecutor

import torch

from ..formats import Format, PackedWeight

# id(words tensor) -> (weak reference to it, {fact: (stamp, value)}), the stamp each tensor
# (weakly) and its version. A plain dict by id: torch's WeakIdKeyDictionary makes a weak
# reference for every lookup (2.9 us of a 5 us E4M3 check on a Zen 3 core, on each call); the
# reference kept here tells a live tensor from a new one at a reused id, and its callback drops
# the entry when the tensor goes.
_FACTS: dict = {}


def facts_of(words: torch.Tensor, create: bool = False) -> dict | None:
    """The dict of facts kept for this words tensor (made empty if `create`), dropped when the
    tensor goes. `known_fact` / `remember_fact` stamp their entries with the weight's tensors and
    versions; a caller keeping an entry of its own under its own key checks it its own way
    (the numba backend's GEMV plan, on every call)."""
    key = id(words)
    entry = _FACTS.get(key)
    if entry is not None and entry[0]() is words:
        return entry[1]
    if not create:
        return None

    def drop(ref, key=key):
        if _FACTS.get(key, (None,))[0] is ref:
            del _FACTS[key]

    facts: dict = {}
    _FACTS[key] = (weakref.ref(words, drop), facts)
    return facts


def version_of(t: torch.Tensor) -> int:
    """t's version counter (bumped by every in-place write). An inference tensor (made under
    torch.inference_mode) has none: 0, since outside inference mode it can't be written in
    place (inside, such writes go unseen: facts then last until the tensor is replaced)."""
    try:
        return t._version
    except RuntimeError:
        return 0


def _weight_tensors(packed: PackedWeight) -> tuple:
    return tuple(t for t in (packed.words, packed.scales, packed.global_scale) if t is not None)


def known_fact(packed: PackedWeight, fact) -> tuple | None:
    """(value,) remembered for `fact` of this weight, or None: never computed, or one of its
    tensors replaced or written in place since (identity and version counter)."""
    facts = facts_of(packed.words)
    entry = None if facts is None else facts.get(fact)
    if entry is None:
        return None
    stamp, value = entry
    now = _weight_tensors(packed)
    if len(now) != len(stamp):
        return None
    for (ref, version), t in zip(stamp, now):  # a loop: all() over a generator costs ~1 us
        if ref() is not t or version_of(t) != version:
            return None
    return (value,)


def remember_fact(packed: PackedWeight, fact, value) -> None:
    stamp = tuple((weakref.ref(t), version_of(t)) for t in _weight_tensors(packed))
    facts_of(packed.words, create=True)[fact] = (stamp, value)


def made_apart(device: torch.device, make):
    """make() for a tensor that outlives the call that needs it (a weight's fact, split-K's
    counters), on a thread of its own for a CUDA device. Why: torch's CUDA-graph trees run a
    compiled function's warm-up with every allocation of the calling thread sent to the graph's
    private pool, and refuse to record while a tensor made there outlives the warm-up
    (`RuntimeError: Detected N tensor(s) in the cudagraph pool not tracked as outputs`); a
    thread of its own allocates outside that pool (the device's default stream does not).
    make() synchronises before it returns whatever the caller reads on another stream."""
    if device.type != "cuda":
        return make()

    def on_device():
        with torch.cuda.device(device):
            return make()

    with ThreadPoolExecutor(max_workers=1) as apart:
        return apart.submit(on_device).result()


CHECK_CHUNK_BYTES = 1 << 25
"""The checks below read a weight's tensors this many bytes of rows at a time: their
temporaries (a mask the size of what they read, several for `mx_row_exponents`) stay bounded
on the first call of a large weight (a 1 GB E4M3 head took 2 GB of them in one piece)."""


def _row_chunks(t: torch.Tensor):
    """`t` [N, ...] in slices of whole rows, about CHECK_CHUNK_BYTES each."""
    row_bytes = max(1, t[:1].numel() * t.element_size())
    step = max(1, CHECK_CHUNK_BYTES // row_bytes)
    for r in range(0, t.shape[0], step):
        yield r, t[r:r + step]


_NAN_CODES = {Format.E4M3: (0x7F, 0x7F), Format.E4M3_B128: (0x7F, 0x7F),
              Format.NVFP4: (0x7F, 0x7F), Format.MXFP4: (0xFF, 0xFF)}
"""(mask, NaN) of the codes a NaN check reads: E4M3's and E4M3_B128's weight codes, NVFP4's E4M3
block scales, MXFP4's E8M0 block scales; a code c is NaN where c & mask == NaN."""


def codes_nan_free(packed: PackedWeight) -> bool:
    """Whether a weight holds no NaN code where its decode has a NaN fix: E4M3's codes (0x7F,
    0xFF), NVFP4's E4M3 block scales, MXFP4's E8M0 block scales (0xFF). Its decoders can then
    leave the fix out (PTX: two of six instructions an E4M3 pair; the FP4 MMA tile 8 / 12 of
    ~400 a step; Numba's AVX2 E4M3 loop: 16 of 36; every other code decodes to the same bits).
    Checked once per weight and kept until its tensors are written in place (`known_fact`);
    False, so the fix stays, for E5M2 (no fix) and when the check can't run now (during CUDA
    graph capture, before any eager call has checked it)."""
    if packed.fmt not in _NAN_CODES:
        return False
    known = known_fact(packed, "nan free")
    if known is not None:
        return known[0]
    codes = packed.words if packed.fmt in (Format.E4M3, Format.E4M3_B128) else packed.scales
    if codes.is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    mask, nan = _NAN_CODES[packed.fmt]
    found = torch.zeros((), dtype=torch.bool, device=codes.device)
    for _, part in _row_chunks(codes.view(torch.uint8)):
        found |= ((part & mask) == nan).any()
    free = not bool(found)  # one sync for all the chunks
    remember_fact(packed, "nan free", free)
    return free


MX_ROW_E_SPAN = 23
"""How far (in powers of two) below its row's exponent a nonzero MXFP4 block may lie for
`mx_row_exponents`: e2m1 * 2^(e - E) is then an fp16 multiple of 2^-24, exact."""


def mx_row_exponents(packed: PackedWeight) -> torch.Tensor | None:
    """MXFP4: each row's exponent E, the largest scale code among its blocks with a nonzero
    code (int32 [N], on the weight's device; 0 for a row of zeros), where every nonzero block
    of every row lies at most 2^MX_ROW_E_SPAN below its row's E and no scale is NaN; else
    None. With it the MMA GEMV scales each block against its row (`_mma` ROW_E) rather than
    against a shared exponent of four blocks found every step. Computed once per weight, like
    `codes_nan_free`; None for other formats and when the check can't run now (during CUDA
    graph capture, before any eager call has checked it)."""
    if packed.fmt is not Format.MXFP4:
        return None
    known = known_fact(packed, "mx row exponents")
    if known is not None:
        return known[0]
    if packed.scales.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    if not codes_nan_free(packed):  # a NaN scale (that check is kept too)
        remember_fact(packed, "mx row exponents", None)
        return None
    if packed.scales.is_cuda:  # the thread below reads the weight on another stream
        torch.cuda.current_stream(packed.scales.device).synchronize()
    value = made_apart(packed.scales.device, lambda: _row_exponents(packed))
    remember_fact(packed, "mx row exponents", value)
    return value


def _row_exponents(packed: PackedWeight) -> torch.Tensor | None:
    n, nb = packed.scales.shape
    words = packed.words.view(torch.uint8).reshape(n, nb, 16)  # a block's 16 bytes a row
    e = torch.empty(n, dtype=torch.int32, device=words.device)
    bad = torch.zeros((), dtype=torch.bool, device=words.device)
    for r, part in _row_chunks(words):
        scales = packed.scales[r:r + part.shape[0]].to(torch.int32)
        nonzero = (part.view(torch.int64) != 0).any(dim=2)
        rows_e = torch.where(nonzero, scales, 0).amax(dim=1)
        e[r:r + part.shape[0]] = rows_e
        bad |= ((scales < rows_e[:, None] - MX_ROW_E_SPAN) & nonzero).any()
    return None if bool(bad) else e  # bool(): the thread's stream is done with e


def prepare(packed: PackedWeight) -> None:
    """Compute now the facts a kernel asks of this weight on its first call (`codes_nan_free`,
    `mx_row_exponents`), so that no call pays for them (a layer is built, moved or loaded;
    `softfp8.Linear` calls this). Nothing on the meta device or during a CUDA graph capture."""
    device = packed.words.device
    if device.type == "meta" or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        return
    codes_nan_free(packed)
    mx_row_exponents(packed)
