"""What the subcommands share: model flags, loading, input lines, progress bars, flag checks."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._files import split_lines

__all__ = ["add_model_args", "load", "read_lines", "split_lines", "bar", "at_least"]


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--dtype``, ``--device``, ``--progress``."""
    p.add_argument("--model", default="antiberty", help="'antiberty', a model directory or a cached HF id")
    p.add_argument("--dtype", default=None, help="float32 (default, exact) or bfloat16 (faster, approximate)")
    p.add_argument("--device", default=None, help="cpu (default) or cuda")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: on for 8 or more sequences)",
    )


def load(args: argparse.Namespace) -> Any:
    """The model the flags name."""
    from ..models.loading import load_mlm

    return load_mlm(args.model, device=args.device, dtype=args.dtype)


def read_lines(source: str) -> list[str]:
    """Non-blank lines of a UTF-8 file, or of stdin for ``-``; a clear error otherwise.

    Lines end at ``\\n`` only (a ``\\r`` before it is dropped): a vertical tab or U+2028 inside a
    line stays in it. A tab is refused, since the output is tab-separated (and a ``\\r`` inside
    a line, by :func:`split_lines`).
    """
    lines = split_lines(source, "one sequence per line")
    if not lines:
        raise ValueError(f"no sequences in {'stdin' if source == '-' else repr(source)}")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"line {i} is blank; give one sequence per line")
        if "\t" in line:
            raise ValueError(f"line {i} holds a tab, which the tab-separated output cannot; remove it")
    return lines


def bar(total: int, args: argparse.Namespace, unit: str) -> Any:
    """A tqdm bar on stderr, shown per ``--progress`` (default: for 8 or more items)."""
    from tqdm.auto import tqdm

    show = args.progress if args.progress is not None else total >= 8
    return tqdm(total=total, unit=f" {unit}", disable=not show, file=sys.stderr, dynamic_ncols=True)


def at_least(value: int | None, flag: str, minimum: int) -> None:
    """``--flag must be >= minimum`` unless the flag is unset or large enough."""
    if value is not None and value < minimum:
        raise ValueError(f"--{flag} must be >= {minimum}, got {value}")
