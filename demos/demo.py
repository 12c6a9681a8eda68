"""softfp8 in one minute: quantize a layer to every format, run it, check it, print the errors."""
from __future__ import annotations

import torch

import softfp8


def main() -> None:
    torch.manual_seed(0)
    n, k = 4096, 4096
    weight = torch.randn(n, k) * 0.02
    x = torch.randn(1, k)
    exact = x.double() @ weight.double().T
    print(f"layer {n}x{k}, batch 1; error against the unquantized fp32 layer:")
    for fmt in softfp8.Format:
        packed = softfp8.quantize(weight, fmt)
        y = softfp8.linear(x, packed)
        oracle = x.double() @ softfp8.dequantize(packed).double().T
        parity = ((y.double() - oracle).norm() / oracle.norm()).item()
        err = ((y.double() - exact).norm() / exact.norm()).item()
        print(f"  {fmt.value:6s} {packed.nbytes / (n * k * 2):5.1%} of fp16 bytes   "
              f"quantization error {err:6.2%}   parity with dequantize-matmul {parity:.1e}")


if __name__ == "__main__":
    main()
