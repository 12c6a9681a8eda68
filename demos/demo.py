"""softfp8 in one run: what this machine can do, proof the decode is exact, a GEMV per format on
the backend auto picks here, and a receipt of it all in receipts/receipt.json.

    python demos/demo.py                     # CUDA if there is a GPU, else CPU
    python demos/demo.py --device cpu --shape 1024,1024 --out /tmp/receipts

Exit status 1 if any decode is not bit-exact or any GEMV misses its parity bound.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import torch

# Run from a checkout: import the softfp8 beside this script rather than another installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import softfp8  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402
from softfp8 import Format, dispatch  # noqa: E402
from softfp8.capability import probe  # noqa: E402
from softfp8.probe import as_text  # noqa: E402
from softfp8.decode import (E2M1_TO_FLOAT32, decode_e2m1_to_f32,  # noqa: E402
                            decode_e4m3_to_f32, decode_e5m2_to_f32, decode_e8m0)
from softfp8.quantize import pack_codes  # noqa: E402

PARITY_BOUND = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
_SCALE_ONE = {Format.NVFP4: 0x38, Format.MXFP4: 127}  # E4M3 1.0, E8M0 2^0


def probe_report():
    """The probe's report and the text `python -m softfp8.probe` prints for it (the probe never
    raises: a sub-probe that fails is in the report as unknown, with its reason)."""
    report = probe()
    return report, as_text(report)


def all_codes_packed(fmt: Format, device: torch.device) -> tuple[softfp8.PackedWeight, torch.Tensor]:
    """A weight whose N rows are every code of `fmt` (K = 1, unit scales), and those codes."""
    codes = torch.arange(256 if fmt.value.startswith("e") else 16, dtype=torch.int32)
    n = codes.numel()
    words = pack_codes(codes.to(torch.uint8).view(n, 1), fmt).to(device)
    scales = global_scale = None
    if fmt is Format.E4M3:
        scales = torch.ones(n, device=device)
    elif fmt in _SCALE_ONE:
        blocks = softfp8.formats.padded_k(1, fmt) // softfp8.formats.SPECS[fmt].block
        scales = torch.full((n, blocks), _SCALE_ONE[fmt], dtype=torch.uint8, device=device)
        if fmt is Format.NVFP4:
            global_scale = torch.ones((), device=device)
    return softfp8.PackedWeight(fmt, (n, 1), words, scales, global_scale), codes


def expected_values(fmt: Format, codes: torch.Tensor) -> torch.Tensor:
    """torch's own decode of each code (its float8 casts; the E2M1 table)."""
    if fmt is Format.E5M2:
        return codes.to(torch.uint8).view(torch.float8_e5m2).float()
    if fmt is Format.E4M3:
        return codes.to(torch.uint8).view(torch.float8_e4m3fn).float()
    return E2M1_TO_FLOAT32[codes.long()]


def same_values(a: torch.Tensor, b: torch.Tensor, *, signed_zero: bool = True) -> bool:
    a, b = a.float().cpu(), b.float().cpu()
    nan = torch.isnan(a) & torch.isnan(b)
    if signed_zero:
        equal = a.view(torch.int32) == b.view(torch.int32)
    else:
        equal = a == b
    return bool((equal | nan).all())


def check_decoders(device: torch.device, backend_of: dict) -> list[dict]:
    """Every code through the reference decoders (bits) and through the auto backend's GEMV."""
    results = []
    decoders = {Format.E5M2: decode_e5m2_to_f32, Format.E4M3: decode_e4m3_to_f32,
                Format.NVFP4: decode_e2m1_to_f32, Format.MXFP4: decode_e2m1_to_f32}
    for fmt, decode in decoders.items():
        packed, codes = all_codes_packed(fmt, device)
        want = expected_values(fmt, codes)
        reference_ok = same_values(decode(codes.to(device)), want)
        # y = 1 * w + 0: exact, except that an fp32 accumulator started at +0 turns -0 into +0,
        # so the GEMV check compares values (NaN as NaN) rather than the sign of zero.
        y = softfp8.linear(torch.ones(1, 1, device=device), packed)[0]
        results.append({"format": fmt.value, "codes": codes.numel(), "backend": backend_of[fmt],
                        "reference_decoder_bit_exact": reference_ok,
                        "gemv_decode_exact": same_values(y, want, signed_zero=False)})
    e8m0 = torch.arange(256, dtype=torch.int32)
    if hasattr(torch, "float8_e8m0fnu"):
        want = e8m0.to(torch.uint8).view(torch.float8_e8m0fnu).float()
        results.append({"format": "e8m0 (scales)", "codes": 256, "backend": "reference",
                        "reference_decoder_bit_exact": same_values(decode_e8m0(e8m0.to(device)), want),
                        "gemv_decode_exact": None})
    return results


def time_call(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of `fn()` after warm-up: softfp8-bench's timer (CUDA events on a GPU; on a
    CPU fewer samples once its time budget is spent, since the reference takes seconds a call)."""
    return measure([fn], device, warmup=1, reps=repeats, graph=False).seconds


def gemv_per_format(device: torch.device, n: int, k: int, dtype: torch.dtype,
                    repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(n, k, generator=g) * 0.02).to(device)
    x = torch.randn(1, k, generator=g).to(device=device, dtype=dtype)
    exact = x.double() @ weight.double().T
    w_act = weight.to(dtype)
    rows = [{"format": f"{dtype}".replace("torch.", "") + " F.linear", "backend": "torch",
             "bytes": w_act.numel() * w_act.element_size(),
             "seconds": time_call(lambda: torch.nn.functional.linear(x, w_act), device, repeats),
             "error_vs_fp32_layer": None, "parity_vs_reference": None}]
    for fmt in Format:
        packed = softfp8.quantize(weight, fmt)
        choice = dispatch.select(fmt, 1, device)
        y = softfp8.linear(x, packed)
        oracle = x.double() @ softfp8.dequantize(packed).double().T
        rows.append({
            "format": fmt.value, "backend": choice.backend.value, "e2m1": choice.e2m1.value,
            "bytes": packed.nbytes,
            "seconds": time_call(lambda: softfp8.linear(x, packed), device, repeats),
            "error_vs_fp32_layer": ((y.double() - exact).norm() / exact.norm()).item(),
            "parity_vs_reference": ((y.double() - oracle).norm() / oracle.norm()).item()})
    return rows


def versions(report) -> dict:
    """The versions the probe recorded, and transformers' (the end-to-end path uses it)."""
    try:
        import transformers
        found = transformers.__version__
    except ImportError:
        found = None
    return {**report.to_dict()["versions"], "transformers": found}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="4096,4096", help="N,K of the GEMV (default 4096,4096)")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                        help="activation dtype (default: float16 on a GPU, float32 on a CPU)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default="receipts", help="folder for receipt.json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    n, k = (int(v) for v in args.shape.split(","))
    dtype = getattr(torch, args.dtype or ("float16" if device.type == "cuda" else "float32"))
    report, report_text = probe_report()
    print("== probe\n" + report_text)

    backend_of = {}
    for fmt in Format:
        choice = dispatch.select(fmt, 1, device)
        backend_of[fmt] = choice.backend.value
        print(f"   {fmt.value:6s} M=1 on {device}: {choice.backend.value} "
              f"(e2m1 {choice.e2m1.value}; {choice.reason})")

    print("== every code, decoded")
    decode = check_decoders(device, backend_of)
    for row in decode:
        print(f"   {row['format']:14s} {row['codes']:3d} codes  reference decoder bit-exact: "
              f"{row['reference_decoder_bit_exact']}   through {row['backend']} GEMV: "
              f"{row['gemv_decode_exact']}")

    print(f"== GEMV {n}x{k}, batch 1, {dtype} activations, on {device}")
    gemv = gemv_per_format(device, n, k, dtype, args.repeats)
    base = gemv[0]["seconds"]
    for row in gemv:
        err = row["error_vs_fp32_layer"]
        extra = "" if err is None else (f"  error {err:6.2%}  parity {row['parity_vs_reference']:.1e}")
        print(f"   {row['format']:18s} {row['backend']:7s} {row['bytes'] / 2**20:7.2f} MiB  "
              f"{row['seconds'] * 1e6:9.1f} us  x{base / row['seconds']:5.2f}{extra}")

    bound = PARITY_BOUND[dtype]
    ok = all(r["reference_decoder_bit_exact"] and r["gemv_decode_exact"] is not False
             for r in decode) and all(r["parity_vs_reference"] is None
                                      or r["parity_vs_reference"] <= bound for r in gemv)
    receipt = {
        "what": "softfp8 demo", "ok": ok, "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]) if argv is None else
                   " ".join(["demos/demo.py", *argv]),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "device": str(device), "gpu": torch.cuda.get_device_name(device)
                    if device.type == "cuda" else None, "threads": torch.get_num_threads()},
        "versions": versions(report), "probe": report.to_dict(), "probe_text": report_text,
        "backend_per_layer": {f.value: b for f, b in backend_of.items()},
        "decode": decode, "parity_bound": bound,
        "gemv": {"shape": [n, k], "activation_dtype": str(dtype), "timing": "median seconds",
                 "rows": gemv},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    print(f"== {'OK' if ok else 'FAILED'}; receipt written to {out / 'receipt.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
