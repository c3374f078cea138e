"""The API reference's pages, written from the packages' ``__all__`` as Sphinx starts (before it looks for its sources).

Each public name gets one page, under the first package of :data:`PACKAGES` that exports it (the
top level first: ``mlm_ppl.MaskedLM``, not ``mlm_ppl.models.MaskedLM`` as well); a package's page
lists its own names and says which of them are documented higher up. A name added to an
``__all__`` gets its page at the next build; ``tests/test_docs.py`` checks that every one has.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.ext import intersphinx
from sphinx.pycode import ModuleAnalyzer

CONSTANTS = (str, int, float, tuple, dict, frozenset)

PACKAGES = {
    "mlm_ppl": "The top level: load a model, score, sample, resume, diagnose.",
    "mlm_ppl.models": "What is sampled: the masked-LM engine, energies, targets, the Pyro distribution, gaps.",
    "mlm_ppl.models.constraints": "Constrained generation: rules, weighted experts, liabilities, spec files.",
    "mlm_ppl.models.pairs": "Explicit joints over two positions (Torroba Hennigen & Kim 2023).",
    "mlm_ppl.inference": "How states move: the kernels, batched chains, exact enumeration, Pyro kernels, Ray.",
    "mlm_ppl.inference.exact": "Exact enumeration: every state of a tiny target, transition matrices, exact laws.",
    "mlm_ppl.diagnostics": "ArviZ InferenceData, summaries and verdicts, loops, deep states, plots.",
    "mlm_ppl.jobs": "The front door: a sampling job from Python, a TOML file or the flags.",
    "mlm_ppl.designs": "The best distinct designs of a finished run or batch.",
    "mlm_ppl.evaluation": "Metrics of pair joints and of generations; the pairs run; germlines.",
    "mlm_ppl.settings": "A sampling run's settings, one typed, frozen record.",
    "mlm_ppl.campaign": "Runs and batches in run directories (the machinery behind the front door).",
    "mlm_ppl.rundir": "Run directories: owner, lock, atomic files, checkpoint format, outputs.",
    "mlm_ppl.data": "Germline sequences from anarci, an example heavy chain.",
    "mlm_ppl.testing": "Tiny random models with real tokenizers; table targets with exact laws.",
}


def public_names() -> dict[str, list[tuple[str, str | None]]]:
    """For each package, its ``__all__`` as ``(name, where)``: ``where`` the package whose page
    documents the object, None where it is this one."""
    seen: dict[int, str] = {}
    for package in PACKAGES:  # the objects under their own names first: an alias links to them
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if getattr(obj, "__name__", name) == name and not isinstance(obj, CONSTANTS):
                seen.setdefault(id(obj), package)
    out: dict[str, list[tuple[str, str | None]]] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        rows = []
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):  # a subpackage re-exported by name: its own page
                rows.append((name, obj.__name__ if obj.__name__ in PACKAGES else None))
                continue
            key = id(obj)
            own = getattr(obj, "__name__", name)  # a type alias (``A | B``) has none: documented as itself
            if isinstance(obj, CONSTANTS) or seen.get(key, package) == package and own == name:
                rows.append((name, None))
            elif key in seen:
                rows.append((name, seen[key]))
            else:  # an alias whose own name no package exports
                raise RuntimeError(f"{package}.{name} is {own} under another name: export it as itself")
        out[package] = rows
    return out


def constant_doc(package: str, name: str) -> str:
    """The docstring written under a constant's assignment (``NAME = ...`` then a string), looked
    up in ``package``'s modules, then in the rest of mlm_ppl; a RuntimeError where there is none
    (the build fails: every public constant says what it is)."""
    modules = sorted(m for m in sys.modules if m == package or m.startswith(package + "."))
    modules += sorted(m for m in sys.modules if m.startswith("mlm_ppl.") and m not in modules)
    for module in modules:
        try:
            analyzer = ModuleAnalyzer.for_module(module)
            analyzer.analyze()
        except Exception:  # a module with no source (a namespace, a compiled one)
            continue
        doc = analyzer.attr_docs.get(("", name))
        if doc:
            return "\n".join(doc).strip()
    raise RuntimeError(f"{package}.{name} has no docstring: write one under its assignment")


def _constant(package: str, name: str) -> list[str]:
    value = repr(getattr(importlib.import_module(package), name))
    if len(value) > 100:
        value = value[:96] + " ..."
    lines = [f".. py:data:: {name}", f"   :value: {value}", ""]
    return lines + ["   " + line if line else "" for line in constant_doc(package, name).splitlines()] + [""]


def _elsewhere(module: object, name: str, where: str) -> str:
    obj = getattr(module, name)
    if inspect.ismodule(obj):
        return f"- ``{name}``: :doc:`{where}`"
    own = getattr(obj, "__name__", name)
    alias = "" if own == name else f" (the same class as ``{own}``)"
    return f"- ``{name}``{alias}: :py:obj:`{where}.{own}`"


def _page(package: str, rows: list[tuple[str, str | None]]) -> str:
    title = f"``{package}``"
    module = importlib.import_module(package)
    constants = [n for n, where in rows if where is None and isinstance(getattr(module, n), CONSTANTS)]
    own = [name for name, where in rows if where is None and name not in constants]
    lines = [title, "=" * len(title), "", f".. automodule:: {package}", "   :no-members:", "", PACKAGES[package], ""]
    lines += [".. currentmodule:: " + package, "", ".. autosummary::", "   :toctree: generated", ""]
    lines += [f"   {name}" for name in own]
    if constants:
        lines += ["", "Constants", "---------", ""]
        for name in constants:
            lines += _constant(package, name)
    elsewhere = [(name, where) for name, where in rows if where is not None]
    if elsewhere:
        lines += ["", "Also exported here, documented once under the first package that exports them:", ""]
        lines += [_elsewhere(importlib.import_module(package), name, where) for name, where in elsewhere]
    return "\n".join(lines) + "\n"


def write_pages(app: Sphinx, config: object) -> None:
    directory = Path(app.srcdir) / "api"
    directory.mkdir(exist_ok=True)
    pages = public_names()
    for package, rows in pages.items():
        text = _page(package, rows)
        path = directory / f"{package}.rst"
        if not path.exists() or path.read_text() != text:  # unchanged pages keep their time: no rebuild
            path.write_text(text)
    # a name gone from an __all__ leaves no page behind (an orphan page is a warning: an error here)
    expected = {f"{package}.{name}" for package, rows in pages.items() for name, where in rows if where is None}
    for stale in directory.glob("*.rst"):
        if stale.stem != "index" and stale.stem not in pages:
            stale.unlink()
    for stale in (directory / "generated").glob("*.rst"):
        if stale.stem not in expected:
            stale.unlink()
    index = ["API reference", "=============", ""]
    index += ["Every public name of the package, one page each, by the package that exports it.", ""]
    index += [".. toctree::", "   :maxdepth: 1", ""] + [f"   {package}" for package in pages]
    text = "\n".join(index) + "\n"
    path = directory / "index.rst"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


@functools.cache
def other_paths() -> dict[str, str]:
    """Every other path of a documented object, mapped to the path its page documents it under.

    The other paths are the object's defining module's (``mlm_ppl.models.target.Target``, which
    signatures and docstrings name), each package's re-export (``mlm_ppl.inference.MetropolisHastings``
    for ``mlm_ppl.MetropolisHastings``), and its bare name where no other public object has it.
    """
    out: dict[str, str] = {}
    bare: dict[str, set[str]] = {}
    for package, rows in public_names().items():
        module = importlib.import_module(package)
        for name, where in rows:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or isinstance(obj, CONSTANTS):
                continue
            own = getattr(obj, "__name__", name)
            public = f"{where or package}.{own}"
            if where is not None:
                out.setdefault(f"{package}.{name}", public)
            defining = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', own)}"
            out.setdefault(defining, public)
            bare.setdefault(own, set()).add(public)
    for name, publics in bare.items():
        if len(publics) == 1:
            out.setdefault(name, publics.pop())
    return out


WORDS = {
    "callable": "collections.abc.Callable",
    "mapping": "collections.abc.Mapping",
    "sequence": "collections.abc.Sequence",
    "iterable": "collections.abc.Iterable",
    "iterator": "collections.abc.Iterator",
    "path": "pathlib.Path",
    "Path": "pathlib.Path",
    "Tensor": "torch.Tensor",
    "np.ndarray": "numpy.ndarray",
    "array": "numpy.ndarray",
}
"""The words NumPy-style types use (``sequence of str``, ``path``), and the objects they stand for."""


def _public_path(target: str) -> str | None:
    """``target`` (an object or a member of one) under the path the reference documents it, or None."""
    if target in WORDS:
        return WORDS[target]
    paths = other_paths()
    head, rest = target, ""
    while head:
        if head in paths:
            return paths[head] + rest
        head, dot, tail = head.rpartition(".")
        rest = dot + tail + rest if head else rest
    return None


def documented_bases(app: Sphinx, name: str, obj: object, options: object, bases: list) -> None:
    """Sphinx's ``autodoc-process-bases``: a class page names the bases a reader can look up (the
    documented ones, and other projects'), not private helpers nor ``Generic[...]``."""

    def shown(base: object) -> bool:
        module = getattr(base, "__module__", "") or ""
        if not module.startswith("mlm_ppl"):
            return module != "typing"
        return _public_path(f"{module}.{getattr(base, '__qualname__', '')}") is not None

    bases[:] = [base for base in bases if shown(base)]


def resolve_other_path(app: Sphinx, env, node, contnode):
    """Sphinx's ``missing-reference``: a Python reference to an object by another of its paths
    resolves to the object's page (a reference nothing documents stays missing: an error)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
        return contnode  # a private name (a base's or a descriptor's type) has no page: shown as text
    bare = target.strip("()'")  # "tuple of (int, str)" gives "(int" and "str)"; a quoted annotation "'Run'"
    public = _public_path(bare) or bare
    if public == target:
        return None
    domain = env.get_domain("py")
    found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], public, node, contnode)
    if found is None:  # another project's object (``sequence``: collections.abc.Sequence)
        moved = node.deepcopy()
        moved["reftarget"] = public
        found = intersphinx.missing_reference(app, env, moved, contnode)
    return found


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", write_pages)
    app.connect("missing-reference", resolve_other_path)
    app.connect("autodoc-process-bases", documented_bases)
    return {"parallel_read_safe": True}
