"""The command-line reference page (``cli.md``), written from ``mlm-ppl``'s own parser before
Sphinx reads the sources: each subcommand's ``--help``, as the terminal prints it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sphinx.application import Sphinx

INTRO = """# Command line

`mlm-ppl COMMAND --help` prints each of these; this page is generated from the same parser at
every build. A job file (`mlm-ppl sample job.toml`) takes the same keys as the flags, and
`mlm_ppl.sample` the same keyword arguments ([](sampling.md), "Running a sampling job").
Every expected failure is one line on stderr and exit status 2, before any work.
"""


def cli_page() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: one width for the page
    from mlm_ppl.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = [INTRO, "```text", parser.format_help().rstrip(), "```", ""]
    for name, command in sub.choices.items():
        parts += [f"## `mlm-ppl {name}`", "", "```text", command.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def write_page(app: Sphinx, config: object) -> None:
    path = Path(app.srcdir) / "cli.md"
    text = cli_page()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", write_page)
    return {"parallel_read_safe": True}
