"""The Examples sections of the package's docstrings run as written (issue 48): each docstring's
``>>>`` lines are one test, run by :mod:`doctest` in its module's namespace on tiny models
(:mod:`mlm_ppl.testing`), with ``...`` standing for elided output and whitespace normalised."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import mlm_ppl

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names = ["mlm_ppl"]
    for info in pkgutil.walk_packages(mlm_ppl.__path__, prefix="mlm_ppl."):
        if ".cli.__main__" not in info.name:
            names.append(info.name)
    return sorted(names)


def _examples() -> dict[str, doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: dict[str, doctest.DocTest] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            if test.examples and test.name not in found:  # an object re-exported is found once, under its module
                found[test.name] = test
    return found


EXAMPLES = _examples()


@pytest.mark.slow  # a tiny model each: about a second apiece
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_docstring_example_runs_as_written(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes a run directory writes it here
    test = EXAMPLES[name]
    test.globs = dict(test.globs)  # each example in a fresh copy of its module's namespace
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    result = runner.run(test, out=out.append, clear_globs=True)
    assert result.failed == 0, "".join(out)


def test_the_examples_are_found():
    """The finder sees the package's examples (a renamed module or a finder that found nothing
    would make the test above vacuous)."""
    assert "mlm_ppl.models.loading.load_mlm" in EXAMPLES
