"""Build the notebooks: each jupytext percent script ``docs/notebooks/NN_name.py`` (the source)
becomes ``NN_name.ipynb``, executed on a real Jupyter kernel (nbclient + ipykernel) with its
outputs and figures.

    python docs/notebooks/execute.py        # every notebook, full size (``make notebooks``)
    python docs/notebooks/execute.py 05     # those whose name starts with 05

The test suite executes the same sources in smoke mode (``MLM_PPL_SMOKE=1``) and checks that
each committed ``.ipynb`` holds the current source, ran without error at full size, and kept
its outputs (tests/test_notebooks.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}


def sources() -> list[Path]:
    """The notebook sources, in order."""
    return sorted(p for p in HERE.glob("[0-9][0-9]_*.py"))


def load(path: Path) -> nbformat.NotebookNode:
    """The notebook of a percent script, outputs empty."""
    nb = jupytext.read(path)
    nb.metadata = {"kernelspec": KERNEL, "jupytext": {"formats": "ipynb,py:percent"}}
    return nb


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """What must match between a source and its built notebook: each cell's type and text."""
    return [(c.cell_type, c.source) for c in nb.cells]


def execute(nb: nbformat.NotebookNode, *, smoke: bool, timeout: int = 3600) -> nbformat.NotebookNode:
    """Run every cell on a fresh python3 kernel, in a scratch directory; raises
    ``nbclient.exceptions.CellExecutionError`` at the first cell that fails."""
    env = os.environ.copy()
    env["MLM_PPL_SMOKE"] = "1" if smoke else "0"
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's paths without its deprecation warning
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    with tempfile.TemporaryDirectory() as scratch:
        client = NotebookClient(
            nb,
            kernel_name="python3",
            timeout=timeout,
            record_timing=False,
            resources={"metadata": {"path": scratch}},
        )
        client.execute(env=env)
    nb.metadata["mlm_ppl"] = {"smoke": smoke}
    return nb


def main(argv: list[str]) -> int:
    wanted = [p for p in sources() if not argv or any(p.name.startswith(a) for a in argv)]
    if not wanted:
        print(f"no notebook source matches {argv}; they are {[p.name for p in sources()]}", file=sys.stderr)
        return 2
    for path in wanted:
        start = time.perf_counter()
        print(f"{path.name}: executing ...", flush=True)
        nb = execute(load(path), smoke=False)
        out = path.with_suffix(".ipynb")
        nbformat.write(nb, out)
        print(f"{path.name}: wrote {out.name} in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
