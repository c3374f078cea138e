"""The README and the documentation site (issue 48): the README's and the getting-started page's
Python examples run as written (on a tiny model in place of AntiBERTy), their links resolve, the
README holds no dated measurement, the site builds with no warning, and every public name of the
package has its API page."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import mlm_ppl
from mlm_ppl import testing

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


@pytest.fixture(scope="module")
def tiny_directory(tmp_path_factory):
    """A tiny random model with AntiBERTy's vocabulary, saved (a run directory records a model
    it can load again)."""
    return testing.save_tiny(testing.tiny_antibody_bert(seed=0), tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tiny_antiberty(monkeypatch, tiny_directory):
    """``load_mlm("antiberty")`` gives the tiny model: the examples run as written, in seconds,
    without the antibody extra."""
    real = mlm_ppl.load_mlm
    tiny = real(str(tiny_directory))

    def load(name, *args, **kwargs):
        return tiny if name == "antiberty" else real(name, *args, **kwargs)

    monkeypatch.setattr(mlm_ppl, "load_mlm", load)
    return tiny


@pytest.mark.parametrize(
    "path",
    [pytest.param(README, marks=pytest.mark.slow, id="README"), pytest.param(GETTING_STARTED, id="getting-started")],
)  # the README's: about 10 s (a constrained run directory, resumed; Pyro's MCMC)
def test_the_python_examples_run_as_written(path, tiny_antiberty, tmp_path, monkeypatch, capsys):
    blocks = _python_blocks(path)
    assert blocks, f"{path.name} has no Python example"
    monkeypatch.chdir(tmp_path)  # an example that writes a run directory writes it here
    namespace: dict = {"__name__": "__example__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{path.name} example {i + 1}", "exec"), namespace)
        except Exception as err:  # the block's number and its text say which example failed
            raise AssertionError(f"{path.name}, Python example {i + 1} failed: {err!r}\n{block}") from err
    if path == GETTING_STARTED:  # what its comments say the calls return
        assert tuple(namespace["run"].tokens.shape) == (4, 100, 35)
        assert tuple(namespace["mcmc"].get_samples()["loop"].shape) == (50, 35)
        assert "not converged" in str(namespace["run"].summary())


def _links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)  # links in code are not links
    return re.findall(r"\]\(([^)\s]+)\)", text)


PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_every_relative_link_resolves(path):
    missing = []
    for link in _links(path):
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = link.split("#")[0]
        if target and not (path.parent / target).exists():
            missing.append(link)
    assert not missing, f"{path.name} links to files that do not exist: {missing}"


def test_the_constraint_spec_reference_names_every_kind_and_parameter():
    """docs/constraint-spec.md lists every rule kind, expert kind (with each of its parameters) and
    liability the reader accepts: a kind added to the code and not to the page fails here."""
    import inspect

    from mlm_ppl.models.constraints.experts import EXPERT_KINDS
    from mlm_ppl.models.constraints.liabilities import LIABILITIES
    from mlm_ppl.models.constraints.rules import RULE_KINDS

    page = (ROOT / "docs" / "constraint-spec.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", page, flags=re.M)}
    missing = [k for k in [*RULE_KINDS, *EXPERT_KINDS, *LIABILITIES] if k not in rows]
    for kind, factory in EXPERT_KINDS.items():
        params = [p for p in inspect.signature(factory).parameters if p not in ("name", "weight")]
        missing += [f"{kind}.{p}" for p in params if kind in rows and f"`{p}`" not in rows[kind]]
    assert not missing, f"docs/constraint-spec.md does not document: {missing}"


@pytest.mark.slow  # a tiny model saved, loaded and sampled into a run directory: about 5 s
def test_the_run_directory_reference_names_every_file_setting_and_checkpoint_key(tmp_path):
    """docs/run-directory.md names every file a run and a batch write, every key of ``config.json``
    and every key of a checkpoint (read from a real tiny run's)."""
    import dataclasses

    import torch

    from mlm_ppl import campaign, rundir
    from mlm_ppl.settings import RunSettings

    page = (ROOT / "docs" / "run-directory.md").read_text()
    names = [*rundir.OUTPUT_NAMES, rundir.CONFIG, rundir.CHECKPOINT, rundir.MARKER, rundir.LOCK, campaign.BATCH_RECORD]
    names += [f.name for f in dataclasses.fields(RunSettings)]
    cp_dir = tmp_path / "run"
    model = testing.save_tiny(testing.tiny_antibody_bert(seed=0), tmp_path / "model")
    mlm = mlm_ppl.load_mlm(str(model))
    mlm_ppl.sample(mlm, "AC[MASK]DE", kernel="mh", num_chains=2, num_samples=3, out=str(cp_dir))
    names += list(torch.load(cp_dir / rundir.CHECKPOINT, weights_only=True))
    missing = sorted({n for n in names if f"`{n}`" not in page})
    assert not missing, f"docs/run-directory.md does not name: {missing}"


def test_the_readme_holds_no_dated_measurement():
    dated = [line for line in README.read_text().splitlines() if re.search(r"\b20\d\d-\d\d-\d\d\b", line)]
    assert not dated, f"dated lines belong in docs/performance.md: {dated}"


def test_the_readme_says_what_make_installs():
    extras = re.search(r"pip install -q -e '\.\[([a-z,]+)\]'", (ROOT / "Makefile").read_text()).group(1)
    assert f"mlm-ppl[{extras}]" in README.read_text(), f"the Makefile installs mlm-ppl[{extras}]"


def test_the_olga_length_reference_ships_with_the_package():
    from mlm_ppl.models.gaps import LengthReference

    reference = LengthReference.read("human-cdrh3", list(range(8, 21)))  # make lengths' gap
    assert reference.source == "human-cdrh3" and 0.8 < reference.inside < 1  # 85% of human CDR-H3s: 8 to 20
    assert abs(sum(reference.weights.values()) - 1) < 1e-9


@pytest.mark.slow  # builds the site (about a minute)
def test_the_site_builds_without_warnings_and_every_public_name_has_its_page(docs_site):
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from api_pages import CONSTANTS, public_names
    finally:
        sys.path.pop(0)
    import importlib

    missing = []
    for package, rows in public_names().items():
        page = (docs_site / "api" / f"{package}.html").read_text()
        module = importlib.import_module(package)
        for name, where in rows:
            if where is not None:
                continue
            if isinstance(getattr(module, name), CONSTANTS):
                if f'id="{package}.{name}"' not in page:
                    missing.append(f"{package}.{name}")
            elif not (docs_site / "api" / "generated" / f"{package}.{name}.html").is_file():
                missing.append(f"{package}.{name}")
    assert not missing, f"public names without an API page: {missing}"
    for page in ("index.html", "getting-started.html", "cli.html", "notebooks/01_quickstart.html"):
        assert (docs_site / page).is_file(), page
