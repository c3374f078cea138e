"""Spec files: reading rules and experts from plain data (TOML tables) with errors that name the
source, the entry and the key, and writing a spec back as TOML.

**No code runs from a file without consent.** An expert of kind ``"module:function"`` names Python
code: reading it imports that module and calls that function on every state. From a spec file or a
run's record (``config.json``) that is refused unless the reader consents for this invocation
(:func:`trusting_code`: ``--trust-code`` on the command line, ``trust_code=True`` in
:meth:`~mlm_ppl.models.constraints.ConstraintSpec.from_dict`); the refusal names the code. Built-in
kinds (:data:`~mlm_ppl.models.constraints.EXPERT_KINDS`) are looked up by name and need no consent.
A code expert's record holds the digest of its module's source file (:func:`module_digest`): read
again (a resume), a changed file is refused by name, so a run never relabels its draws with another
function.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ..._files import read_list_file
from ..tokens import TokenCodec
from .experts import EXPERT_KINDS, Expert, module_digest
from .fields import FieldTypeError, FieldValueError, check_name
from .rules import RULE_KINDS, Allowed, ExpertBound, Mutations, Novel, Rule

_TRUST_CODE: ContextVar[bool] = ContextVar("mlm_ppl_trust_code", default=False)


@contextmanager
def trusting_code(trust: bool = True) -> Iterator[None]:
    """Context manager: within the block, spec data may name Python code (``trust``) or may not.

    Spec data read by :meth:`~mlm_ppl.ConstraintSpec.from_dict` (spec files, run records) names
    Python code with an expert of kind ``"module:function"``; outside any block that is refused
    (:func:`code_trusted` is False). On leaving the block the setting it replaced comes back.

    Parameters
    ----------
    trust : bool, optional
        Whether spec data read within the block may name Python code (default True).

    Yields
    ------
    None
        Control to the block, with the consent set.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import code_trusted, trusting_code
    >>> with trusting_code():
    ...     code_trusted()
    True
    >>> with trusting_code(False):
    ...     code_trusted()
    False
    """
    token = _TRUST_CODE.set(bool(trust))
    try:
        yield
    finally:
        _TRUST_CODE.reset(token)


def code_trusted() -> bool:
    """Whether spec data read now may name Python code (:func:`trusting_code`).

    Returns
    -------
    bool
        True within a ``trusting_code()`` block, False outside any block or within
        ``trusting_code(False)``.
    """
    return _TRUST_CODE.get()


class entry_errors:
    """Turn a ValueError/TypeError inside the block into one line naming source, entry and key."""

    def __init__(self, source: str, entry: str, key: str) -> None:
        self.source, self.entry, self.key = source, entry, key

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        if isinstance(err, (ValueError, TypeError)):
            key = getattr(err, "key", self.key)
            message = " ".join(str(err).split())
            raise ValueError(f"{self.source}: {self.entry}, key {key!r}: {message}") from None


def entries(data: Mapping[str, Any], section: str, source: str) -> list[Mapping[str, Any]]:
    found = data.get(section, [])
    if not isinstance(found, list) or not all(isinstance(e, Mapping) for e in found):
        raise ValueError(f"{source}: top level, key {section!r}: must be an array of tables ([[{section}]])")
    return found


def entry_label(section: str, index: int, entry: Mapping[str, Any]) -> str:
    name = entry.get("name")
    return f"{section}[{index}]" + (f" ({name!r})" if isinstance(name, str) else "")


def _require_keys(entry: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    for key in required:
        if key not in entry:
            raise FieldValueError("missing", key)
    for key in entry:
        if key not in required + optional:
            expected = ", ".join(required + optional)
            raise FieldValueError(f"unknown key; expected {expected}", str(key))


def rule_from_dict(entry: Mapping[str, Any], index: int, mlm: TokenCodec | None, source: str) -> Rule:
    label = entry_label("rules", index, entry)
    with entry_errors(source, label, "kind"):
        kind = entry.get("kind")
        if kind not in RULE_KINDS:
            raise FieldValueError(f"kind must be one of {', '.join(map(repr, RULE_KINDS))}, got {kind!r}", "kind")
        rule: Rule
        if kind == "allowed":
            _require_keys(entry, ("kind", "name", "tokens"), ("positions",))
            rule = Allowed(entry["name"], entry["tokens"], entry.get("positions"))
            if mlm is not None:
                rule.token_mask(mlm)
        elif kind == "novel":
            _require_keys(entry, ("kind", "name"), ("loops", "file", "min_distance"))
            if ("loops" in entry) == ("file" in entry):
                raise FieldValueError(
                    "give the loops (loops = [...]) or a file of them (file = PATH), one of the two", "loops"
                )
            loops = entry["loops"] if "loops" in entry else read_loops(entry["file"], source)
            loops = tuple(loops) if isinstance(loops, list) else loops  # a TOML array; Novel refuses the rest
            rule = Novel(entry["name"], loops, entry.get("min_distance", 1))
        elif kind == "expert":
            _require_keys(entry, ("kind", "name", "expert"), ("min", "max"))
            rule = ExpertBound(entry["name"], entry["expert"], entry.get("min"), entry.get("max"))
        elif kind == "mutations":
            _require_keys(entry, ("kind", "name"), ("max_mutations", "min_mutations", "reference"))
            rule = Mutations(
                entry["name"], entry.get("max_mutations"), entry.get("min_mutations", 0), entry.get("reference")
            )
        else:
            _require_keys(entry, ("kind", "name", "pattern"), ())
            rule = RULE_KINDS[kind](entry["name"], entry["pattern"])
    return rule


def read_loops(file: Any, source: str = "<dict>") -> list[str]:
    """The loops of a file, one per line (blank lines and ``#`` comments skipped): a novelty rule's
    ``file``, read relative to the spec file ``source`` when it is one."""
    if not isinstance(file, str) or not file:
        raise FieldTypeError(f"file must be a path, got {file!r}", "file")
    path = Path(file)
    if not path.is_absolute() and os.path.isfile(source):
        path = Path(source).parent / path
    try:
        return read_list_file(path, "loops")
    except ValueError as err:
        raise FieldValueError(str(err), "file") from None


def expert_from_dict(entry: Mapping[str, Any], index: int, source: str) -> Expert:
    label = entry_label("experts", index, entry)
    with entry_errors(source, label, "kind"):
        kind = entry.get("kind")
        if not isinstance(kind, str):
            raise FieldValueError(
                f"kind must be a built-in ({', '.join(EXPERT_KINDS)}) or 'module:function', got {kind!r}", "kind"
            )
        user = ":" in kind
        optional = ("takes", "code_digest") if user else ("code_digest",) if kind == "classifier" else ()
        _require_keys(entry, ("name", "kind"), ("weight", "params") + optional)
        name = check_name(entry["name"], "expert")
        weight = entry.get("weight", 1.0)
        params = entry.get("params", {})
        if not isinstance(params, Mapping):
            raise FieldValueError(f"params must be a table, got {type(params).__name__}", "params")
        if user:
            if not code_trusted():
                raise FieldValueError(
                    f"names Python code ({kind!r}): reading it would import that module and run that function, "
                    "which a spec file or a run's record does only with your consent. If you trust this file, give "
                    "--trust-code (trust_code=True in Python); otherwise use a built-in expert "
                    f"({', '.join(EXPERT_KINDS)}), or build the Expert in Python with the function itself",
                    "kind",
                )
            digest = module_digest(kind.partition(":")[0])  # before the import: changed code does not run
            recorded = entry.get("code_digest")
            if recorded is not None and recorded not in (digest, module_digest(kind.partition(":")[0], legacy=True)):
                raise FieldValueError(
                    f"the code of {kind!r} changed since this was recorded: the .py files of its module's directory "
                    "(or package) now have "
                    f"digest {digest}, the record has {recorded}. A resumed run would score its next draws with "
                    "another function than its first; restore the module's file, or start a new run",
                    "code_digest",
                )
            function = _import_function(kind, params)
            takes = entry.get("takes", "sequences")
            return Expert(name, function, weight, takes, kind=kind, params=params, code_digest=digest)
        if kind not in EXPERT_KINDS:
            raise FieldValueError(
                f"unknown expert kind {kind!r}; built-ins are {', '.join(EXPERT_KINDS)}, or give 'module:function'",
                "kind",
            )
        factory = EXPERT_KINDS[kind]
        signature = inspect.signature(factory)
        accepted = [p for p in signature.parameters if p not in ("name", "weight")]
        for key in params:
            if key not in accepted:
                expected = ", ".join(accepted)
                raise FieldValueError(f"unknown parameter of {kind!r}; expected {expected}", f"params.{key}")
        for p, spec in signature.parameters.items():
            if p not in ("name", "weight") and spec.default is inspect.Parameter.empty and p not in params:
                raise FieldValueError(f"missing (required by {kind!r})", f"params.{p}")
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise FieldTypeError(f"weight must be a number, got {type(weight).__name__} {weight!r}", "weight")
        expert = factory(name=name, weight=weight, **params)
        recorded = entry.get("code_digest")
        if recorded is not None and recorded != expert.code_digest:  # a classifier's files
            raise FieldValueError(
                f"the files of the classifier in {params.get('path')!r} changed since this was recorded (digest "
                f"{expert.code_digest}, the record has {recorded}): a resumed run would score its next draws with "
                "another model than its first; restore its files, or start a new run",
                "code_digest",
            )
        return expert


def _import_function(kind: str, params: Mapping[str, Any]) -> Callable[[Any], Any]:
    module_name, _, attr = kind.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # any failure of the user's module is the spec's error
        raise FieldValueError(f"cannot import module {module_name!r}: {type(err).__name__}: {err}", "kind") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise FieldValueError(f"module {module_name!r} has no attribute {attr!r}", "kind")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FieldValueError(f"{kind!r} is not callable", "kind")
    if not params:
        return obj
    fn = obj

    def with_params(batch: Any) -> Any:
        return fn(batch, **params)

    return with_params


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write the non-finite number {value!r} to a spec file")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise ValueError(f"cannot write {type(value).__name__} {value!r} to a spec file")
