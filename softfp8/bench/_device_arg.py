"""`--device` as every softfp8-bench subcommand reads it (the GEMV ones in `cli`, the user-path
ones in `user_path`): auto, cpu, cuda or cuda:N; anything else, or CUDA where there is none,
exits naming the value."""
from __future__ import annotations

import torch


def _device(text: str) -> torch.device:
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device={text}: CUDA is not available on this machine")
    if device.type not in ("cpu", "cuda"):
        raise SystemExit(f"--device={text}: expected cpu, cuda, cuda:N or auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
