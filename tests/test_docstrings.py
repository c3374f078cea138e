"""Every public function, class, method and property says what it is in NumPy's format (issue 48):
a one-line summary, a Parameters entry for each argument, Returns (or Yields) where it returns a
value, Raises where its body raises, and an Examples section for each name of the top level.
``numpydoc``'s own validator reads the docstrings; the Raises rule is read from the source.

The examples themselves run in ``tests/test_doctests.py``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest
from numpydoc.validate import validate

import mlm_ppl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from api_pages import CONSTANTS, public_names  # noqa: E402

# numpydoc's codes held here: no docstring, no summary or one over a line, one not ending in a
# period, an unknown or misordered section, an argument undocumented, unknown, out of order or
# without a description, no Returns/Yields where the body returns/yields a value, a return
# without a description. (Types are in the signatures; See Also and extended summaries are
# welcome, not required.)
CODES = {"GL08", "SS01", "SS03", "SS06", "GL06", "GL07", "PR01", "PR02", "PR03", "PR07", "RT01", "RT03", "YD01"}


@cache
def _public() -> dict[str, object]:
    """The objects the API reference documents (each once, under its public path), and the public
    methods and properties their classes define themselves."""
    out: dict[str, object] = {}
    for package, rows in public_names().items():
        module = importlib.import_module(package)
        for name, where in rows:
            obj = getattr(module, name)
            if where is not None or isinstance(obj, CONSTANTS) or inspect.ismodule(obj):
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            out[f"{package}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if inspect.isfunction(value) or isinstance(value, property):
                        out[f"{package}.{name}.{attr}"] = value
    return out


def _raises(obj) -> list[str]:
    """The exceptions the body raises by name (``raise X`` or ``raise X(...)``; not a bare
    re-raise, not in a nested function)."""
    function = obj.fget if isinstance(obj, property) else obj
    if not inspect.isfunction(function):
        return []
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0]
    found: list[str] = []

    def visit(node, top: bool) -> None:
        if not top and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            found.append(ast.unparse(exc))
        for child in ast.iter_child_nodes(node):
            visit(child, False)

    visit(body, True)
    return found


def _problems(qualname: str) -> list[str]:
    obj = _public()[qualname]
    report = validate(qualname)
    problems = [f"{code}: {message}" for code, message in report["errors"] if code in CODES]
    doc = inspect.getdoc(obj) or ""
    raised = _raises(obj)
    if raised and "\nRaises\n------" not in "\n" + doc:
        problems.append(f"raises {', '.join(sorted(set(raised)))} but has no Raises section")
    top = qualname.count(".") == 1 and qualname.split(".")[1] in mlm_ppl.__all__
    if top and "\nExamples\n--------" not in "\n" + doc:
        problems.append("a name of the top level has no Examples section")
    return problems


@pytest.mark.parametrize("qualname", sorted(_public()))
def test_a_public_object_has_a_numpy_docstring(qualname):
    problems = _problems(qualname)
    assert not problems, f"{qualname}:\n  " + "\n  ".join(problems)


def test_the_raises_rule_reads_raise_statements():
    """The rule's own check, on a hand-written case: a direct raise counts; a bare re-raise and a
    raise inside a nested function do not."""

    def f(x):
        if x:
            raise ValueError("x")
        try:
            pass
        except KeyError:
            raise

        def inner():
            raise TypeError

        return inner

    assert _raises(f) == ["ValueError"]


def test_the_validator_sees_what_it_should():
    """numpydoc's codes, on one object known to be documented and one known to lack a Returns
    section (a case made here): the test above would fail on the second."""
    assert not _problems("mlm_ppl.load_mlm")
    report = validate(f"{__name__}._raises")  # documented without NumPy sections
    assert {"PR01", "RT01"} <= {code for code, _ in report["errors"]}
