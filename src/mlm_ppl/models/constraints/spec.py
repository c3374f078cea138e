"""The constraint spec: rules, experts and liabilities together, checked without a model, written
to and read from spec files, and bound to a target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..._files import read_toml
from ..target import Target
from ..tokens import TokenCodec
from .bound import BoundConstraints
from .experts import Expert
from .fields import FieldValueError, check_name, check_weight
from .files import (
    entries,
    entry_errors,
    entry_label,
    expert_from_dict,
    rule_from_dict,
    toml_key,
    toml_value,
    trusting_code,
)
from .liabilities import LIABILITIES, liability_constraints, liability_names
from .rules import Allowed, ExpertBound, Forbid, Mutations, Novel, OddCount, Require, Rule
from .target import ConstraintTarget


class ConstraintSpec:
    """Hard rules, soft experts and antibody liabilities; checked here, bound to a target later.

    Parameters
    ----------
    rules : sequence of Rule
    experts : sequence of Expert
    liabilities : sequence of str or bool
        Names of :data:`LIABILITIES` to add (``True``: all of them).
    reference : str, optional
        The reference loop of the designed positions (the parent's own, e.g. the example chain's
        CDR-H3): what a :class:`Mutations` rule without its own ``reference`` counts changes from.

    Notes
    -----
    Every name (rules, experts and liabilities together) must be unique: it is the key of
    :meth:`BoundConstraints.violations` and :meth:`BoundConstraints.expert_values`.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        experts: Sequence[Expert] = (),
        *,
        liabilities: Sequence[str] | bool = (),
        reference: str | None = None,
    ) -> None:
        if reference is not None and (not isinstance(reference, str) or not reference.strip()):
            raise FieldValueError(f"reference must be a loop of the designed positions, got {reference!r}", "reference")
        self.reference: str | None = None if reference is None else reference.strip()
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.experts: tuple[Expert, ...] = tuple(experts)
        for r in self.rules:
            if not isinstance(r, (Allowed, Forbid, Require, OddCount, Novel, Mutations, ExpertBound)):
                raise TypeError(
                    "rules must be Allowed, Forbid, Require, OddCount, Novel, Mutations or ExpertBound, got "
                    f"{type(r).__name__}"
                )
        for e in self.experts:
            if not isinstance(e, Expert):
                raise TypeError(f"experts must be Expert objects, got {type(e).__name__}")
        self.liabilities: tuple[str, ...] = liability_names(liabilities)
        extra_rules, extra_experts = liability_constraints(self.liabilities)
        self.all_rules: tuple[Rule, ...] = self.rules + tuple(extra_rules)
        self.all_experts: tuple[Expert, ...] = self.experts + tuple(extra_experts)
        seen: set[str] = set()
        for item in self.all_rules + self.all_experts:
            if item.name in seen:
                raise ValueError(f"two rules or experts are named {item.name!r}; names must be unique")
            seen.add(item.name)

    def __repr__(self) -> str:
        names = [r.name for r in self.rules] + [e.name for e in self.experts]
        return f"ConstraintSpec({names}, liabilities={list(self.liabilities)})"

    def expert_sum(self, values: Mapping[str, Tensor], n: int) -> Tensor:
        """``(n,)`` float64: ``sum_k w_k f_k``, each expert's weight times its values ``values[name]``
        (``(n,)``, unweighted, as :meth:`BoundConstraints.expert_values` gives them); zeros
        without experts. The experts' part of the log-factor, written once."""
        return weighted_expert_sum({e.name: e.weight for e in self.all_experts}, values, n)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled as its spec-file form (:meth:`to_dict`) where it has one: the built-in experts
        are closures, which pickle cannot write, and are rebuilt from their kind and parameters.
        A spec without one (an expert with no module-level name: a lambda, a ``functools.partial``, a
        callable object) is pickled attribute by attribute, as far as pickle can."""
        try:
            data = self.to_dict()
        except ValueError:
            return super().__reduce_ex__(protocol)
        return (_unpickle, (data,))

    # -- binding
    def bind(self, target: Target) -> BoundConstraints:
        """The spec checked against ``target`` (alphabets, tokens, positions) and ready to evaluate states."""
        return BoundConstraints(self, target)

    def allowed_mask(self, target: Target) -> Tensor:
        """``(F, V)`` bool: each free position's alphabet, intersected with the target's ordinary tokens."""
        return self.bind(target).allowed

    def constrain(self, target: Target) -> ConstraintTarget:
        """``target`` with this spec's log-factor and alphabets (:class:`ConstraintTarget`)."""
        return ConstraintTarget(target, self.bind(target))

    # -- files
    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (what :meth:`from_dict` reads)."""
        rules = []
        for r in self.rules:
            if isinstance(r, OddCount):
                raise ValueError(f"rule {r.name!r}: an OddCount rule has no spec-file form; use the liability name")
            rules.append(r.to_dict())
        out: dict[str, Any] = {
            "liabilities": list(self.liabilities),
            "rules": rules,
            "experts": [e.to_dict() for e in self.experts],
        }
        if self.reference is not None:
            out["reference"] = self.reference
        return out

    def to_toml(self) -> str:
        """The spec as TOML text (what :meth:`from_toml` reads)."""
        data = self.to_dict()
        lines = [f"liabilities = {toml_value(data['liabilities'])}"]
        if "reference" in data:
            lines.append(f"reference = {toml_value(data['reference'])}")
        for section in ("rules", "experts"):
            for entry in data[section]:
                lines += ["", f"[[{section}]]"] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in entry.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(
        cls, path: str | Path, mlm: TokenCodec | None = None, *, trust_code: bool | None = None
    ) -> ConstraintSpec:
        """Read a spec file (format in the module docstring); with ``mlm``, check the tokens of
        its ``allowed`` rules against the model's vocabulary now. Every malformed entry is a
        one-line ValueError naming the file, the entry and the key. ``trust_code``: as for
        :meth:`from_dict`."""
        path = Path(path)
        data = read_toml(path, "constraint spec")
        return cls.from_dict(data, mlm=mlm, source=str(path), trust_code=trust_code)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        mlm: TokenCodec | None = None,
        source: str = "<dict>",
        trust_code: bool | None = None,
    ) -> ConstraintSpec:
        """Build a spec from plain data: keys ``liabilities``, ``rules`` and ``experts`` as in
        the TOML format; errors name ``source``, the entry and the key. An expert that names
        Python code (``kind = "module:function"``) is refused unless ``trust_code`` is True (None:
        as :func:`~mlm_ppl.models.constraints.files.trusting_code` says, False outside it); its
        module's digest, when the data records one, must match the module's file now."""
        if trust_code is not None:
            with trusting_code(trust_code):
                return cls.from_dict(data, mlm=mlm, source=source)
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: a constraint spec is a table, got {type(data).__name__}")
        unknown = sorted(set(data) - {"liabilities", "rules", "experts", "reference"})
        if unknown:
            raise ValueError(
                f"{source}: top level: unknown key {unknown[0]!r}; expected liabilities, reference, rules, experts"
            )
        with entry_errors(source, "top level", "liabilities"):
            liabilities = liability_names(data.get("liabilities", ()))
        rules = [rule_from_dict(entry, i, mlm, source) for i, entry in enumerate(entries(data, "rules", source))]
        experts = [expert_from_dict(entry, i, source) for i, entry in enumerate(entries(data, "experts", source))]
        with entry_errors(source, "spec", "name"):
            return cls(rules, experts, liabilities=liabilities, reference=data.get("reference"))


def weighted_expert_sum(weights: Mapping[str, float], values: Mapping[str, Tensor], n: int) -> Tensor:
    """``(n,)`` float64: ``sum_k w_k f_k`` over the experts ``weights`` names (name -> weight),
    each weight times the expert's unweighted values ``values[name]`` (``(n,)``); zeros without
    experts. :meth:`ConstraintSpec.expert_sum` of a spec, and of a recorded spec's
    :func:`recorded_expert_weights` without building it."""
    total = torch.zeros(n, dtype=torch.float64)
    for name, weight in weights.items():
        total += weight * torch.as_tensor(values[name], dtype=torch.float64)
    return total


def recorded_expert_weights(data: Any, source: str = "<dict>") -> dict[str, float]:
    """Name -> weight of every expert of a spec's plain data (:meth:`ConstraintSpec.to_dict`'s
    form), in :attr:`ConstraintSpec.all_experts`'s order (the spec's own, then its liabilities'),
    read without building the spec: no ``module:function`` is imported, no classifier loaded.
    Only what it reads is checked (the experts' names and weights, the liabilities); a ValueError
    names ``source``, the entry and the key."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: a constraint spec is a table, got {type(data).__name__}")
    with entry_errors(source, "top level", "liabilities"):
        liabilities = liability_names(data.get("liabilities", ()))
    weights: dict[str, float] = {}
    for i, entry in enumerate(entries(data, "experts", source)):
        with entry_errors(source, entry_label("experts", i, entry), "name"):
            name = check_name(entry.get("name"), "expert")
            if name in weights:
                raise FieldValueError(f"two experts are named {name!r}; names must be unique", "name")
            weights[name] = check_weight(name, entry.get("weight", 1.0))
    for liability in liabilities:
        item = LIABILITIES[liability]()
        if isinstance(item, Expert):
            if item.name in weights:
                raise ValueError(f"{source}: two experts are named {item.name!r}; names must be unique")
            weights[item.name] = item.weight
    return weights


def _unpickle(data: dict[str, Any]) -> ConstraintSpec:
    """A pickled spec rebuilt: trusted, as pickle is (unpickling runs code by its nature); its code
    experts' digests checked as on any read."""
    return ConstraintSpec.from_dict(data, source="<pickle>", trust_code=True)
