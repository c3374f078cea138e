"""The package's shape, read from its imports: layers point one way, no circles, no private names
across modules; and no module over 400 lines of code (a file that long holds several jobs: split it
along them; its docstrings, comments and blank lines do not count, so documenting a module never
forces a split). A new back-reference fails here, not in a reader's head."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mlm_ppl"

# What each part of the package may import (besides itself). models/ describes targets,
# inference/ moves states, diagnostics/evaluation/rundir present results (campaign asks diagnostics
# whether a run has converged, --until-converged), designs picks from finished runs, jobs/ is the
# front door (what a job is, and running it), cli/ maps flags.
ALLOWED = {
    "_checks": set(),
    "_files": set(),
    "data": set(),
    "models": {"_checks", "_files"},
    "inference": {"_checks", "models"},
    "testing": {"_checks", "models"},
    "settings": {"_checks", "models", "inference"},
    "diagnostics": {"_checks", "_files", "models", "inference"},
    "rundir": {"_checks", "_files", "models", "inference", "settings", "diagnostics"},
    "campaign": {"_checks", "_files", "models", "inference", "settings", "diagnostics", "rundir"},
    "evaluation": {"_checks", "_files", "data", "models", "inference", "diagnostics", "rundir"},
    "designs": {"_checks", "_files", "models", "settings", "diagnostics", "rundir", "campaign"},
    "jobs": {"_checks", "_files", "models", "inference", "settings", "diagnostics", "rundir", "campaign", "designs"},
    "cli": {
        "jobs",
        "_checks",
        "_files",
        "data",
        "models",
        "inference",
        "settings",
        "diagnostics",
        "rundir",
        "campaign",
        "evaluation",
        "designs",
    },
}
ALLOWED[""] = set(ALLOWED) - {""}  # the package's __init__ may import every part

# No exceptions: every import, at module level or inside a function (lazy), follows the layers.


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _graph(src: Path) -> dict[str, list]:
    """Every module of the package under ``src`` and its internal imports."""
    modules = {_module_name(p, src): p for p in src.rglob("*.py")}
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list:
    """``(target module, imported name, lazy)`` for every internal import outside TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "mlm_ppl":
                    for alias in child.names:
                        sub = f"{target}.{alias.name}"
                        out.append((sub if sub in modules else target, alias.name, lazy))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "mlm_ppl":
                        out.append((alias.name, None, lazy))
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_violations(graph: dict[str, list]) -> list[str]:
    bad = []
    for source, found in graph.items():
        for target, _, lazy in found:
            a, b = _part(source), _part(target)
            if a != b and b not in ALLOWED.get(a, set()):
                bad.append(f"{source} -> {target}" + (" (lazy)" if lazy else ""))
    return bad


def _cycle(graph: dict[str, list]) -> list[str]:
    """One import cycle (module names, first repeated at the end), or [] when there is none.
    Lazy imports count: a cycle closed inside a function is still a cycle."""
    edges = {s: {t for t, _, _ in found if t in graph and t != s} for s, found in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def _private_names(graph: dict[str, list]) -> list[str]:
    return [
        f"{s} imports {t}.{n}"
        for s, found in graph.items()
        for t, n, _ in found
        if n and n.startswith("_") and not n.startswith("__") and t != s
    ]


@pytest.fixture(scope="module")
def graph():
    return _graph(SRC)


def test_layers_point_one_way(graph):
    bad = _layer_violations(graph)
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_models_import_nothing_from_inference_not_even_lazily(graph):
    back = [
        (s, t, lazy)
        for s, found in graph.items()
        for t, _, lazy in found
        if _part(s) == "models" and _part(t) == "inference"
    ]
    assert back == [], back


def test_no_import_cycles(graph):
    cycle = _cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_no_private_names_across_modules(graph):
    bad = _private_names(graph)
    assert not bad, "\n".join(bad)


MAX_LINES = 400


def _code_lines(text: str) -> int:
    """Lines of code in a module's ``text``: not blank, not a comment, not inside a docstring (a
    module's, class's or function's, or the string under an assignment that documents it)."""
    tree = ast.parse(text)
    docs: set[int] = set()

    def is_string(node) -> bool:
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and is_string(body[0]):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
        for before, after in zip(body, body[1:]):
            if isinstance(before, (ast.Assign, ast.AnnAssign)) and is_string(after):
                docs.update(range(after.lineno, after.end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in docs
    )


def _long_modules(src: Path) -> list[str]:
    """Modules of the package under ``src`` with more than :data:`MAX_LINES` lines of code."""
    lengths = {p.relative_to(src.parent).as_posix(): _code_lines(p.read_text()) for p in src.rglob("*.py")}
    return sorted(f"{name}: {n} lines of code" for name, n in lengths.items() if n > MAX_LINES)


def test_no_module_over_400_lines_of_code():
    long = _long_modules(SRC)
    assert not long, "modules over 400 lines of code (split them along their jobs):\n" + "\n".join(long)


def test_the_checks_see_a_back_reference_a_cycle_a_private_name_and_a_long_module(tmp_path):
    """The checks above have power: a planted back-reference (module-level and lazy), cycle,
    private import and 401-line module are found, and a 400-line one passes, however long its
    docstrings and comments."""
    pkg = tmp_path / "mlm_ppl"
    for sub in ("models", "inference"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text("from ..inference.b import thing\n")
    (pkg / "inference" / "b.py").write_text("def f():\n    from ..models.a import _hidden\n")
    (pkg / "models" / "c.py").write_text("def g():\n    from ..inference import b\n")
    planted = _graph(pkg)
    assert sorted(_layer_violations(planted)) == [
        "mlm_ppl.models.a -> mlm_ppl.inference.b",
        "mlm_ppl.models.c -> mlm_ppl.inference.b (lazy)",
    ]
    assert _cycle(planted) in (
        ["mlm_ppl.inference.b", "mlm_ppl.models.a", "mlm_ppl.inference.b"],
        ["mlm_ppl.models.a", "mlm_ppl.inference.b", "mlm_ppl.models.a"],
    )
    assert _private_names(planted) == ["mlm_ppl.inference.b imports mlm_ppl.models.a._hidden"]
    (pkg / "models" / "long.py").write_text("x = 1\n" * 401)
    documented = '"""A module."""\n' + "# a comment\n\n" * 50 + 'def f():\n    """Say\n\n    more.\n    """\n'
    documented += 'X = 1\n"""What X is,\nover two lines."""\n' + "x = 1\n" * 398
    (pkg / "models" / "fits.py").write_text(documented)  # 400 lines of code in 507
    assert _long_modules(pkg) == ["mlm_ppl/models/long.py: 401 lines of code"]
