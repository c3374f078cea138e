"""The documentation site as the docs tests read it: built once per session with warnings as
errors (``make docs``' command), into a temporary folder, unless ``MLM_PPL_DOCS_HTML`` names a
site already built (CI's ``make docs`` output)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def build_site(out: Path) -> Path:
    """Build the site into ``out`` with ``-W --keep-going``; a warning fails the caller's test."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")
    pytest.importorskip("myst_nb", reason="the docs extra is not installed: pip install -e '.[docs]'")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's folder (``index.html`` at its top)."""
    given = os.environ.get("MLM_PPL_DOCS_HTML")
    if given:
        path = Path(given)
        assert (path / "index.html").is_file(), f"MLM_PPL_DOCS_HTML={given} holds no built site"
        return path
    return build_site(tmp_path_factory.mktemp("site") / "html")
