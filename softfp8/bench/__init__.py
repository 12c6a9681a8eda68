"""`python -m softfp8.bench` (console script `softfp8-bench`): the measuring instrument.

Subcommands bandwidth, shapes, token, small-m and prefill; each prints a table and writes a JSON
receipt. Run `softfp8-bench --help` for the definitions (bytes moved, the bandwidth model and its
coefficient, how time is taken). Importing this package measures nothing.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .cli import main as cli_main

    return cli_main(argv)


__all__ = ["main"]
