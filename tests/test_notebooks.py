"""The notebooks. Each source ``docs/notebooks/NN_name.py`` (a jupytext percent script) executes
on a real Jupyter kernel through nbclient in smoke mode (``MLM_PPL_SMOKE=1``: small sizes), and
its committed ``NN_name.ipynb`` is that same source, executed at full size with its outputs."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).parent.parent / "docs" / "notebooks"
_spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS / "execute.py")
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

SOURCES = build.sources()
ANTIBERTY = ("01_quickstart", "04_constraints", "05_assay_model")  # load the real model: marked slow (still run in CI)
WITH_FIGURES = ("02_mh_vs_pseudo_gibbs", "03_diagnosing_chains", "04_constraints", "05_assay_model")


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _params(paths):
    return [
        pytest.param(p, marks=pytest.mark.slow, id=p.stem) if p.stem in ANTIBERTY else pytest.param(p, id=p.stem)
        for p in paths
    ]


@pytest.mark.parametrize("path", _params(SOURCES))
def test_notebook_executes_on_a_jupyter_kernel_in_smoke_mode(path):
    nb = build.execute(build.load(path), smoke=True)  # raises CellExecutionError at a failing cell
    cells = _code_cells(nb)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("path", _params(SOURCES))
def test_the_committed_notebook_is_its_source_executed_at_full_size(path):
    built_path = path.with_suffix(".ipynb")
    assert built_path.exists(), f"{built_path.name} is missing: run `make notebooks`"
    built = nbformat.read(built_path, as_version=4)
    assert build.cells(built) == build.cells(build.load(path)), f"{built_path.name} is stale: run `make notebooks`"
    assert built.metadata.get("mlm_ppl") == {"smoke": False}, "built in smoke mode"
    cells = _code_cells(built)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), "not executed top to bottom"
    outputs = [o for c in cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if "Traceback" in o.get("text", "")]
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert bool(figures) == (path.stem in WITH_FIGURES)


def test_the_five_notebooks_exist():
    assert [p.stem for p in SOURCES] == [
        "01_quickstart",
        "02_mh_vs_pseudo_gibbs",
        "03_diagnosing_chains",
        "04_constraints",
        "05_assay_model",
    ]
