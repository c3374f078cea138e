"""The notebooks in docs/notebooks run in smoke mode (MLM_PPL_SMOKE=1: small sizes)."""

import runpy
import warnings
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "docs" / "notebooks").glob("*.py"))


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if "quickstart" in p.name else p for p in NOTEBOOKS],
    ids=[p.stem for p in NOTEBOOKS],
)
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MLM_PPL_SMOKE", "1")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # arviz's import notice
        runpy.run_path(str(path), run_name="__main__")


def test_all_four_notebooks_exist():
    assert [p.stem for p in NOTEBOOKS] == [
        "01_quickstart",
        "02_mh_vs_pseudo_gibbs",
        "03_diagnosing_chains",
        "04_constraints",
    ]
