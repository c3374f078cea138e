"""The ``mlm-ppl`` console script's entry point, outside the package.

Importing :mod:`mlm_ppl` imports torch, transformers and Pyro, which takes seconds; a Ctrl-C in
them would otherwise end in Python's traceback, before :func:`mlm_ppl.cli.main` (which says
``interrupted`` in one line at any later moment) has started. Here it is one line too.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Import the command line and run it; Ctrl-C while it imports: one line, exit status 130."""
    try:
        from mlm_ppl.cli import main as run
    except KeyboardInterrupt:
        print("mlm-ppl: interrupted while starting", file=sys.stderr)
        return 130
    return run()
