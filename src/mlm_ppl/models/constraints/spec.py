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

    The spec needs no model: :meth:`bind` checks it against a target (alphabets, tokens,
    positions), and :meth:`constrain` gives the target with its log-factor
    ``sum_k w_k f_k(x)`` on states that break no rule and ``-inf`` on the others.

    Parameters
    ----------
    rules : sequence of Rule, optional
        Hard rules (:class:`~mlm_ppl.models.constraints.Allowed`,
        :class:`~mlm_ppl.models.constraints.Forbid`, :class:`~mlm_ppl.models.constraints.Require`,
        :class:`~mlm_ppl.models.constraints.OddCount`, :class:`~mlm_ppl.models.constraints.Novel`,
        :class:`~mlm_ppl.models.constraints.Mutations`,
        :class:`~mlm_ppl.models.constraints.ExpertBound`); default none.
    experts : sequence of Expert, optional
        Soft experts (:class:`~mlm_ppl.models.constraints.Expert`); default none.
    liabilities : sequence of str or bool, optional
        Names of :data:`~mlm_ppl.models.constraints.LIABILITIES` to add (``True``: all of them);
        default none.
    reference : str, optional
        The reference loop of the designed positions (the parent's own, e.g. the example chain's
        CDR-H3): what a :class:`~mlm_ppl.models.constraints.Mutations` rule without its own
        ``reference`` counts changes from, and where a relative
        :class:`~mlm_ppl.models.constraints.ExpertBound` reads the expert's value. Surrounding
        spaces are stripped.

    Attributes
    ----------
    all_rules : tuple of Rule
        ``rules``, then the rules of the liabilities.
    all_experts : tuple of Expert
        ``experts``, then the experts of the liabilities.

    Raises
    ------
    ValueError
        Where ``reference`` is not a non-blank string, a liability name is unknown, or two rules or
        experts share a name.
    TypeError
        Where a rule or an expert is of another type, or ``liabilities`` is neither a bool nor a
        sequence of names.

    Notes
    -----
    Every name (rules, experts and liabilities together) must be unique: it is the key of
    :meth:`~mlm_ppl.models.constraints.BoundConstraints.violations` and
    :meth:`~mlm_ppl.models.constraints.BoundConstraints.expert_values`.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Allowed, Forbid, hydropathy
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> spec = ConstraintSpec([Allowed("no-cys", "ADE"), Forbid("no-dd", "DD")], [hydropathy(weight=-1.0)])
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]E", constraints=spec)
    >>> dist.constraints.feasible(dist.encode(["CADEE", "CADDE", "CCAAE"]))
    tensor([ True, False, False])
    >>> ConstraintSpec(liabilities=["deamidation"]).all_rules
    (Forbid(name='deamidation', pattern='N[GS]'),)
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
        """The experts' part of the log-factor, ``sum_k w_k f_k``, written once.

        Parameters
        ----------
        values : mapping of str to torch.Tensor
            Each expert's unweighted values by name, shape ``(n,)``, as
            :meth:`~mlm_ppl.models.constraints.BoundConstraints.expert_values` gives them; every
            expert of ``all_experts`` must have an entry.
        n : int
            The number of states.

        Returns
        -------
        torch.Tensor
            Shape ``(n,)``, float64: each expert's weight times its values, summed; zeros without
            experts.
        """
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
        """Check the spec against ``target`` (alphabets, tokens, positions), ready to evaluate states.

        Parameters
        ----------
        target : Target
            A target with a masked LM (a :class:`~mlm_ppl.MaskedLMDistribution`, or a target built
            on one).

        Returns
        -------
        BoundConstraints
            The spec bound to ``target``.

        Raises
        ------
        TypeError
            Where ``target`` has no masked LM.
        ValueError
            Where a token is not an ordinary vocabulary entry of the model, a position is outside
            the template's free positions, an alphabet becomes empty, or a rule does not fit the
            target (see :class:`~mlm_ppl.models.constraints.BoundConstraints`).
        """
        return BoundConstraints(self, target)

    def allowed_mask(self, target: Target) -> Tensor:
        """Each free position's alphabet, intersected with the tokens ``target`` allows.

        Parameters
        ----------
        target : Target
            A target with a masked LM, as for :meth:`bind`.

        Returns
        -------
        torch.Tensor
            Shape ``(F, V)``, bool (what :class:`~mlm_ppl.models.constraints.BoundConstraints` holds as ``allowed``).

        Raises
        ------
        TypeError, ValueError
            As for :meth:`bind`.
        """
        return self.bind(target).allowed

    def constrain(self, target: Target) -> ConstraintTarget:
        """Make ``target`` with this spec's log-factor and alphabets.

        Parameters
        ----------
        target : Target
            A target with a masked LM, as for :meth:`bind`.

        Returns
        -------
        ConstraintTarget
            ``target`` under the spec (:class:`~mlm_ppl.models.ConstraintTarget`).

        Raises
        ------
        TypeError, ValueError
            As for :meth:`bind`.
        """
        return ConstraintTarget(target, self.bind(target))

    # -- files
    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (what :meth:`from_dict` reads).

        Returns
        -------
        dict of str to object
            ``liabilities``, ``rules`` and ``experts`` (lists of tables, the liabilities' own
            rules and experts left out) and, where given, ``reference``.

        Raises
        ------
        ValueError
            Where a rule or an expert has no spec-file form: an
            :class:`~mlm_ppl.models.constraints.OddCount` rule (a spec file names it by its
            liability), or an expert whose function is not a module-level function
            (:meth:`~mlm_ppl.models.constraints.Expert.spec_kind`).
        """
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
        """The spec as TOML text (what :meth:`from_toml` reads).

        Returns
        -------
        str
            The spec file's text: ``liabilities``, ``reference`` where given, then a ``[[rules]]``
            table for each rule and an ``[[experts]]`` table for each expert.

        Raises
        ------
        ValueError
            As for :meth:`to_dict`, and where a parameter cannot be written to TOML (a non-finite
            number, an object of another type).

        Examples
        --------
        >>> from mlm_ppl import ConstraintSpec
        >>> from mlm_ppl.models.constraints import Forbid
        >>> print(ConstraintSpec([Forbid("no-dd", "DD")], liabilities=["deamidation"]).to_toml())
        liabilities = ["deamidation"]
        <BLANKLINE>
        [[rules]]
        kind = "forbid"
        name = "no-dd"
        pattern = "DD"
        <BLANKLINE>
        """
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
        """Read a spec file (TOML, in the format :mod:`mlm_ppl.models.constraints` describes).

        Parameters
        ----------
        path : str or path
            The spec file.
        mlm : TokenCodec, optional
            A model (a :class:`~mlm_ppl.MaskedLM`): the tokens of the ``allowed`` rules are
            checked against its vocabulary now, rather than at bind time.
        trust_code : bool or None, optional
            As for :meth:`from_dict`.

        Returns
        -------
        ConstraintSpec
            The spec the file describes.

        Raises
        ------
        ValueError
            Where the file cannot be read or is not TOML, or an entry is malformed: a one-line
            message naming the file, the entry and the key.

        Examples
        --------
        >>> import pathlib, tempfile
        >>> from mlm_ppl import ConstraintSpec
        >>> from mlm_ppl.models.constraints import Forbid
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "spec.toml"
        >>> _ = path.write_text(ConstraintSpec([Forbid("no-dd", "DD")], liabilities=True).to_toml())
        >>> ConstraintSpec.from_toml(path).liabilities[:2]
        ('n-glycosylation', 'deamidation')
        """
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
        """Build a spec from plain data, as a spec file's TOML reads (:meth:`to_dict`'s form).

        An expert that names Python code (``kind = "module:function"``) is refused unless
        ``trust_code`` is True; its module's digest, when the data records one, must match the
        module's file now.

        Parameters
        ----------
        data : mapping of str to object
            Keys ``liabilities``, ``reference``, ``rules`` and ``experts`` as in the TOML format,
            each optional.
        mlm : TokenCodec, optional
            A model (a :class:`~mlm_ppl.MaskedLM`): the tokens of the ``allowed`` rules are
            checked against its vocabulary now.
        source : str, optional
            What errors name as the data's origin (default ``"<dict>"``; a file's path).
        trust_code : bool or None, optional
            Whether code experts may be imported; None (default) as
            :func:`~mlm_ppl.models.constraints.trusting_code` says, False outside it.

        Returns
        -------
        ConstraintSpec
            The spec the data describes.

        Raises
        ------
        ValueError
            Where ``data`` is not a mapping, has an unknown key, or holds a malformed entry (a
            one-line message naming ``source``, the entry and the key), including a code expert not
            trusted or whose module changed since its digest was recorded.

        Examples
        --------
        >>> from mlm_ppl import ConstraintSpec
        >>> data = {"rules": [{"kind": "forbid", "name": "no-dd", "pattern": "DD"}], "liabilities": ["deamidation"]}
        >>> ConstraintSpec.from_dict(data)
        ConstraintSpec(['no-dd'], liabilities=['deamidation'])
        """
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
    """The weighted sum ``sum_k w_k f_k`` of experts' values.

    :meth:`~mlm_ppl.ConstraintSpec.expert_sum` of a spec, and of a recorded spec's
    :func:`recorded_expert_weights` without building it.

    Parameters
    ----------
    weights : mapping of str to float
        The experts' weights by name.
    values : mapping of str to torch.Tensor
        Each expert's unweighted values by name, shape ``(n,)``; every name of ``weights`` must
        have an entry.
    n : int
        The number of states.

    Returns
    -------
    torch.Tensor
        Shape ``(n,)``, float64: each weight times the expert's values, summed; zeros without
        experts.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.models.constraints import weighted_expert_sum
    >>> weighted_expert_sum({"a": 2.0, "b": -1.0}, {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([1.0, 3.0])}, 2)
    tensor([ 1., -3.], dtype=torch.float64)
    """
    total = torch.zeros(n, dtype=torch.float64)
    for name, weight in weights.items():
        total += weight * torch.as_tensor(values[name], dtype=torch.float64)
    return total


def recorded_expert_weights(data: Any, source: str = "<dict>") -> dict[str, float]:
    """The weight of every expert of a spec's plain data, read without building the spec.

    No ``module:function`` is imported, no classifier loaded. Only what it reads is checked (the
    experts' names and weights, the liabilities).

    Parameters
    ----------
    data : mapping of str to object
        A spec as plain data (:meth:`~mlm_ppl.ConstraintSpec.to_dict`'s form).
    source : str, optional
        What errors name as the data's origin (default ``"<dict>"``).

    Returns
    -------
    dict of str to float
        Name to weight, in the order of the spec's ``all_experts`` (the spec's own
        experts, then its liabilities').

    Raises
    ------
    ValueError
        Where ``data`` is not a mapping, or an expert's name or weight, or a liability, is
        malformed, or two experts share a name; the message names ``source``, the entry and the
        key.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec
    >>> from mlm_ppl.models.constraints import hydropathy, recorded_expert_weights
    >>> data = ConstraintSpec([], [hydropathy(weight=-0.5)], liabilities=["met-trp-oxidation"]).to_dict()
    >>> recorded_expert_weights(data)
    {'hydropathy': -0.5, 'met-trp-oxidation': -1.0}
    """
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
