"""Command line: one module per subcommand, each flags -> library call -> print.

``mlm-ppl sample``     sample the masked positions of a template; a resumable run directory.
``mlm-ppl diagnose``   print the summary of a run and redraw its plots.
``mlm-ppl designs``    the best distinct designs of a run or batch directory, TSV out.
``mlm-ppl score``      energies of sequences read from a file or stdin, TSV out.
``mlm-ppl germlines``  score real germline genes against shuffled controls.
``mlm-ppl pairs``      derived pair joints (naive, MRF, MRF-logit, HCB, AG) evaluated on held-out pairs.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

from . import designs, diagnose, germlines, pairs, sample, score

__all__ = ["main", "build_parser"]

_COMMANDS = {
    "score": score,
    "sample": sample,
    "diagnose": diagnose,
    "designs": designs,
    "germlines": germlines,
    "pairs": pairs,
}


def build_parser() -> argparse.ArgumentParser:
    """The ``mlm-ppl`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="mlm-ppl", description="Masked language models as probabilistic models: scoring and sampling."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mlm-ppl`` console script; returns the exit status.

    Every expected failure (a bad argument or file, a damaged model or checkpoint, a full or
    read-only disk, a lock held by another process, memory that runs out) is one line on stderr
    and exit status 2. Anything else is a bug: its traceback, a request to report it, status 1.
    """
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():  # the library's own warnings as one line each, as its notes are
            warnings.showwarning = functools.partial(_show_warning, args.command, warnings.showwarning)
            return _COMMANDS[args.command].run(args, sys.stdout)
    except BrokenPipeError:  # the reader went away (`mlm-ppl diagnose DIR | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush of stdout does not fail again
        return 141
    except KeyboardInterrupt:
        print(f"mlm-ppl {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, MemoryError, ModuleNotFoundError) as err:
        print(f"mlm-ppl {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        if _out_of_memory(err):
            print(
                f"mlm-ppl {args.command}: error: out of memory ({_one_line(err)}); use fewer chains or draws",
                file=sys.stderr,
            )
            return 2
        return _bug(args.command)
    except Exception:
        return _bug(args.command)


def _show_warning(command: str, show: Any, message: Any, category: type, *args: Any, **kwargs: Any) -> None:
    """A warning of mlm-ppl's own (a LongRunWarning, a TruncatedProposalWarning) as one line on stderr;
    any other as Python shows it."""
    if category.__module__.split(".")[0] == "mlm_ppl":
        print(f"mlm-ppl {command}: warning: {' '.join(str(message).split())}", file=sys.stderr)
    else:
        show(message, category, *args, **kwargs)


def _one_line(err: BaseException) -> str:
    """The error as one printable line: an OSError as what happened and to which file (no ``[Errno 28]``),
    a control character (an ANSI escape in a file name or a record) shown escaped, never sent to the terminal."""
    if isinstance(err, OSError) and err.strerror and type(err).__str__ is OSError.__str__:
        text = err.strerror + (f": {err.filename!r}" if err.filename is not None else "")
    else:
        text = " ".join(str(err).split()) or type(err).__name__
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        text += " (the disk is full: free space and rerun; a run resumes from its last checkpoint with --resume)"
    return text


def _out_of_memory(err: RuntimeError) -> bool:
    import torch

    return isinstance(err, torch.OutOfMemoryError) or "can't allocate memory" in str(err)


def _bug(command: str) -> int:
    traceback.print_exc()
    print(
        f"mlm-ppl {command}: this is a bug in mlm-ppl, not in your input; please report it with the command "
        "line and the traceback above",
        file=sys.stderr,
    )
    return 1
