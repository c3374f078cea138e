"""Constraint specs: hard rules and soft experts that reshape a target (constrained generation).

A :class:`ConstraintSpec` describes, without any model, what a generated sequence must and
should be:

* **hard rules**, each with a name: :class:`Allowed` (an alphabet per free position; a fixed
  token is an alphabet of one), :class:`Forbid` (a regular expression that must not match where
  it touches a designed position), :class:`Require` (a regular expression that must match
  somewhere) and :class:`OddCount` (a token that must appear an even number of times among the
  designed positions);
* **soft experts** ``f_k`` with weights ``w_k``: :class:`Expert`, and the built-ins
  :func:`hydropathy`, :func:`net_charge`, :func:`residue_count`, :func:`keyword_count`,
  :func:`hamming_distance` and :func:`classifier_log_prob`;
* a named set of antibody sequence liabilities, :data:`LIABILITIES`, selectable by name.

Bound to a target (:meth:`ConstraintSpec.bind`) it gives the constrained density

    log p(x) = -E(x)/T + log_factor(x),   log_factor(x) = sum_k w_k f_k(x) if x is feasible, else -inf,

as a :class:`ConstraintTarget`: a :class:`~mlm_ppl.models.ConstrainedTarget` that also
exposes :attr:`ConstraintTarget.allowed`, the ``(F, V)`` alphabets of the free positions, so
that kernels can restrict their proposals to them. Nothing here moves a state.

Regular expressions read the sequence as :meth:`~mlm_ppl.models.TokenCodec.decode` writes it:
residues without separators for protein models (``"EVQLV..."``), words separated by spaces for
text models. Positions of :class:`Allowed` count the template's free positions (0 is the first
mask token; negative values count from the end).

Specs can be written as TOML (:meth:`ConstraintSpec.from_toml`, :meth:`ConstraintSpec.to_toml`)::

    liabilities = ["n-glycosylation", "deamidation"]   # or true for all of them

    [[rules]]
    kind = "allowed"
    name = "no-cys-pro"
    tokens = "ADEFGHIKLMNQRSTVWY"
    positions = [0, 1, 2]      # optional: every free position

    [[rules]]
    kind = "forbid"
    name = "no-poly-g"
    pattern = "GGG"

    [[experts]]
    name = "hydropathy"
    kind = "hydropathy"        # a built-in, or "package.module:function"
    weight = -0.5              # nats per unit of the expert's value; default 1.0
    params = { region = "designed" }
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import numbers
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from .target import ConstrainedTarget, Target
from .tokens import TokenCodec

__all__ = [
    "Allowed",
    "Forbid",
    "Require",
    "OddCount",
    "Rule",
    "Expert",
    "EXPERT_INPUTS",
    "hydropathy",
    "net_charge",
    "residue_count",
    "keyword_count",
    "hamming_distance",
    "classifier_log_prob",
    "KYTE_DOOLITTLE",
    "EXPERT_KINDS",
    "LIABILITIES",
    "liability_constraints",
    "recorded_expert_weights",
    "weighted_expert_sum",
    "FrameworkMatch",
    "ConstraintSpec",
    "BoundConstraints",
    "ConstraintTarget",
]


# ---------------------------------------------------------------------- errors that name a field
class _FieldValueError(ValueError):
    """A ValueError about one field of a rule or an expert (``key``: its name in a spec file)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class _FieldTypeError(TypeError):
    """A TypeError about one field of a rule or an expert (``key``: its name in a spec file)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise _FieldTypeError(f"a {what}'s name must be text, got {type(name).__name__} {name!r}", "name")
    if not name.strip():
        raise _FieldValueError(f"a {what}'s name must not be empty", "name")
    return name


def _check_weight(name: str, w: Any) -> float:
    if isinstance(w, bool) or not isinstance(w, numbers.Real):
        raise _FieldTypeError(f"expert {name!r}: weight must be a number, got {type(w).__name__} {w!r}", "weight")
    if not math.isfinite(float(w)):
        raise _FieldValueError(f"expert {name!r}: weight must be finite, got {w!r}", "weight")
    return float(w)


def _compile(name: str, pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise _FieldTypeError(f"rule {name!r}: pattern must be text, got {type(pattern).__name__}", "pattern")
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise _FieldValueError(f"rule {name!r}: bad regular expression {pattern!r}: {err}", "pattern") from None
    if regex.fullmatch("") is not None:
        raise _FieldValueError(
            f"rule {name!r}: pattern {pattern!r} matches the empty string; give one that matches at least one "
            "character",
            "pattern",
        )
    return regex


# ---------------------------------------------------------------------- hard rules
@dataclass(frozen=True)
class Allowed:
    """The tokens a free position may hold.

    Parameters
    ----------
    name : str
    tokens : str or sequence of str
        The alphabet. A string is split into characters for residue-level models (spaces
        ignored) and into words at whitespace for text models; a sequence lists vocabulary
        entries one by one. Each must be an ordinary token of the model (checked at bind time).
    positions : sequence of int, optional
        Free-position indices the alphabet applies to (0 is the template's first mask token,
        -1 its last); default every free position. Several rules at one position intersect.

    A position fixed to one token is ``Allowed.fixed(name, position, token)``.
    """

    name: str
    tokens: str | tuple[str, ...]
    positions: tuple[int, ...] | None = None
    kind: ClassVar[str] = "allowed"
    _EMPTY: ClassVar[str] = "rule {!r} allows no token: an empty alphabet forbids everything"

    def __post_init__(self) -> None:
        _check_name(self.name, "rule")
        tokens = self.tokens
        if isinstance(tokens, str):
            if not tokens.strip():
                raise _FieldValueError(self._EMPTY.format(self.name), "tokens")
        else:
            if isinstance(tokens, (bytes, bytearray)) or not isinstance(tokens, Sequence):
                raise _FieldTypeError(
                    f"rule {self.name!r}: tokens must be a string or a list of strings, got {type(tokens).__name__}",
                    "tokens",
                )
            if not all(isinstance(t, str) and t for t in tokens):
                raise _FieldTypeError(f"rule {self.name!r}: tokens must be non-empty strings, got {tokens!r}", "tokens")
            if not tokens:
                raise _FieldValueError(self._EMPTY.format(self.name), "tokens")
            object.__setattr__(self, "tokens", tuple(tokens))
        if self.positions is not None:
            pos = self.positions
            if isinstance(pos, (str, bytes)) or not isinstance(pos, Sequence):
                raise _FieldTypeError(
                    f"rule {self.name!r}: positions must be a list of integers, got {type(pos).__name__}", "positions"
                )
            if not all(isinstance(p, int) and not isinstance(p, bool) for p in pos):
                raise _FieldTypeError(f"rule {self.name!r}: positions must be integers, got {list(pos)!r}", "positions")
            if not pos:
                raise _FieldValueError(
                    f"rule {self.name!r}: positions is empty; leave it out to mean every free position", "positions"
                )
            object.__setattr__(self, "positions", tuple(pos))

    @classmethod
    def fixed(cls, name: str, position: int, token: str) -> Allowed:
        """Free position ``position`` holds ``token`` and nothing else."""
        return cls(name, (token,), (position,))

    def token_mask(self, codec: TokenCodec) -> Tensor:
        """``(V,)`` bool, the alphabet as token ids of ``codec``; a ValueError names a token that is
        not an ordinary vocabulary entry."""
        if isinstance(self.tokens, str):
            parts = list(self.tokens.replace(" ", "")) if codec.residue_level else self.tokens.split()
        else:
            parts = list(self.tokens)
        index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
        mask = torch.zeros(codec.vocab_size, dtype=torch.bool)
        for tok in parts:
            i = index.get(tok)
            if i is None or not bool(codec.ordinary_mask[i]):
                what = "a special token" if i is not None else "not in the vocabulary"
                raise _FieldValueError(
                    f"rule {self.name!r}: token {tok!r} is {what} of model {codec.name!r}; allowed tokens are "
                    "ordinary vocabulary entries",
                    "tokens",
                )
            mask[i] = True
        return mask

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        out["tokens"] = self.tokens if isinstance(self.tokens, str) else list(self.tokens)
        if self.positions is not None:
            out["positions"] = list(self.positions)
        return out


@dataclass(frozen=True)
class _Pattern:
    """A named regular expression over the decoded sequence, compiled (and checked) when made."""

    name: str
    pattern: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    kind: ClassVar[str]

    def __post_init__(self) -> None:
        _check_name(self.name, "rule")
        object.__setattr__(self, "regex", _compile(self.name, self.pattern))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "pattern": self.pattern}


@dataclass(frozen=True)
class Forbid(_Pattern):
    """A pattern the sequence must not contain where it touches a designed position.

    A match counts only when its characters overlap those of a free position's token: a match
    lying wholly in the fixed framework cannot be designed away, so it is reported once at bind
    time (:attr:`BoundConstraints.framework_matches`) and does not make a state infeasible.
    Matches may overlap one another (each start position is tried). Anchors and lookarounds
    read the whole decoded sequence.
    """

    kind: ClassVar[str] = "forbid"


@dataclass(frozen=True)
class Require(_Pattern):
    """A pattern that must match somewhere in the decoded sequence (framework included)."""

    kind: ClassVar[str] = "require"


@dataclass(frozen=True)
class OddCount:
    """Violated when an odd number of free positions hold ``token``.

    The antibody liability ``"unpaired-cysteine"`` is ``OddCount("unpaired-cysteine", "C")``:
    the framework's cysteines are taken to pair among themselves (the canonical intradomain
    disulfide), so an odd number of cysteines among the designed residues leaves at least one
    of them unpaired. An even number is not proof of pairing; that needs a structure.
    """

    name: str
    token: str
    kind: ClassVar[str] = "odd-count"

    def __post_init__(self) -> None:
        _check_name(self.name, "rule")
        if not isinstance(self.token, str) or not self.token:
            raise _FieldTypeError(f"rule {self.name!r}: token must be a non-empty string, got {self.token!r}", "token")

    def token_id(self, codec: TokenCodec) -> int:
        return int(Allowed(self.name, (self.token,)).token_mask(codec).nonzero()[0])


Rule = Allowed | Forbid | Require | OddCount
"""A hard rule: a state that breaks one is infeasible (``log_factor = -inf``)."""

_RULE_KINDS: dict[str, type] = {"allowed": Allowed, "forbid": Forbid, "require": Require}


# ---------------------------------------------------------------------- soft experts
EXPERT_INPUTS = ("sequences", "designed", "tokens")
"""What an expert's function receives, for ``N`` states:

``"sequences"``
    ``list[str]``, each whole state decoded (:meth:`~mlm_ppl.models.TokenCodec.decode`);
``"designed"``
    ``list[str]``, the tokens at the free positions only, decoded the same way (residues
    without separators, words with spaces);
``"tokens"``
    the ``(N, L)`` long tensor of token ids, special tokens included.

It returns ``N`` finite scores in nats (a list, an array or a tensor).
"""


@dataclass(frozen=True, eq=False)
class Expert:
    """A soft term ``w * f(x)`` of the log density.

    Parameters
    ----------
    name : str
    function : callable
        Maps a batch of states, in the form ``takes`` names (:data:`EXPERT_INPUTS`), to ``N``
        finite scores in nats.
    weight : float
        A finite number; negative weights penalise large scores.
    takes : {"sequences", "designed", "tokens"}
    kind, params
        How a spec file names the expert (a built-in name or ``"module:function"``) and the
        parameters it was built with; set by the built-ins and by
        :meth:`ConstraintSpec.from_dict`. ``kind=None`` derives ``"module:function"`` from a
        module-level function when the spec is written out.
    """

    name: str
    function: Callable[[Any], Any]
    weight: float = 1.0
    takes: str = "sequences"
    kind: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name, "expert")
        if not callable(self.function):
            raise _FieldTypeError(f"expert {self.name!r}: function must be callable, got {self.function!r}", "kind")
        object.__setattr__(self, "weight", _check_weight(self.name, self.weight))
        if self.takes not in EXPERT_INPUTS:
            raise _FieldValueError(
                f"expert {self.name!r}: takes must be one of {', '.join(map(repr, EXPERT_INPUTS))}, got {self.takes!r}",
                "takes",
            )
        object.__setattr__(self, "params", dict(self.params))

    def spec_kind(self) -> str:
        """The expert's ``kind`` in a spec file; a ValueError when it has none: a lambda, a
        closure, a ``functools.partial``, a callable object, or any function that importing its
        module and following its qualified name does not give back."""
        if self.kind is not None:
            return self.kind
        fn = self.function
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        named = (
            isinstance(module, str)
            and isinstance(qualname, str)
            and module not in ("", "__main__")
            and qualname != ""
            and "<" not in qualname
            and _resolves_to(module, qualname, fn)
        )
        if not named:
            raise ValueError(
                f"expert {self.name!r}: its function {fn!r} has no spec-file form: a spec file names an expert "
                "by a module-level function (kind = 'module:function', with params), not a lambda, closure, "
                "functools.partial or callable object"
            )
        return f"{module}:{qualname}"

    def to_dict(self) -> dict[str, Any]:
        kind = self.spec_kind()
        out: dict[str, Any] = {"name": self.name, "kind": kind, "weight": self.weight}
        if ":" in kind:
            out["takes"] = self.takes
        if self.params:
            out["params"] = dict(self.params)
        return out


KYTE_DOOLITTLE: dict[str, float] = {
    "A": 1.8, "R": -4.5, "N": -3.5, "D": -3.5, "C": 2.5, "Q": -3.5, "E": -3.5, "G": -0.4, "H": -3.2, "I": 4.5,
    "L": 3.8, "K": -3.9, "M": 1.9, "F": 2.8, "P": -1.6, "S": -0.8, "T": -0.7, "W": -0.9, "Y": -1.3, "V": 4.2,
}  # fmt: skip
"""Kyte & Doolittle (1982) hydropathy index of the 20 standard amino acids."""

_REGIONS = {"designed": "designed", "sequence": "sequences"}


def _region(name: str, region: Any) -> str:
    if region not in _REGIONS:
        raise _FieldValueError(
            f"expert {name!r}: region must be 'designed' or 'sequence', got {region!r}", "params.region"
        )
    return _REGIONS[region]


def _residues(text: str) -> str:
    return text.replace(" ", "")


def hydropathy(*, name: str = "hydropathy", weight: float = 1.0, region: str = "designed") -> Expert:
    """Mean Kyte-Doolittle hydropathy (:data:`KYTE_DOOLITTLE`) per residue.

    ``region="designed"`` averages over the free positions, ``"sequence"`` over the whole decoded
    sequence. Characters outside the 20 standard amino acids (``X``, ``B`` ...) count as 0 and
    are included in the mean. A negative weight favours hydrophilic designs.
    """
    takes = _region(name, region)

    def mean_hydropathy(sequences: list[str]) -> list[float]:
        out = []
        for s in sequences:
            res = _residues(s)
            out.append(sum(KYTE_DOOLITTLE.get(c, 0.0) for c in res) / len(res) if res else 0.0)
        return out

    return Expert(name, mean_hydropathy, weight, takes, kind="hydropathy", params={"region": region})


def net_charge(
    *, name: str = "net-charge", weight: float = 1.0, region: str = "sequence", histidine: float = 0.0
) -> Expert:
    """Net charge by residue counts: K and R count +1, D and E -1, H counts ``histidine``.

    Histidine's side chain (pKa about 6) is mostly neutral at pH 7.4, hence the default 0;
    give e.g. 0.1 (its charged fraction near pH 7) or 1.0 (below pH 6) to count it. Termini are
    not counted. ``region`` as for :func:`hydropathy`, default the whole sequence.
    """
    takes = _region(name, region)
    if isinstance(histidine, bool) or not isinstance(histidine, numbers.Real) or not math.isfinite(histidine):
        raise _FieldTypeError(
            f"expert {name!r}: histidine must be a finite number, got {histidine!r}", "params.histidine"
        )
    charge = {"K": 1.0, "R": 1.0, "D": -1.0, "E": -1.0, "H": float(histidine)}

    def charge_of(sequences: list[str]) -> list[float]:
        return [sum(charge.get(c, 0.0) for c in s) for s in sequences]

    params = {"region": region, "histidine": float(histidine)}
    return Expert(name, charge_of, weight, takes, kind="net-charge", params=params)


def residue_count(
    residues: str, *, name: str = "residue-count", weight: float = 1.0, region: str = "designed"
) -> Expert:
    """How many residues are any of ``residues`` (e.g. ``"MW"``); default over the designed ones."""
    takes = _region(name, region)
    if not isinstance(residues, str) or not _residues(residues):
        raise _FieldTypeError(
            f"expert {name!r}: residues must be a non-empty string such as 'MW', got {residues!r}", "params.residues"
        )
    chosen = frozenset(_residues(residues))

    def count(sequences: list[str]) -> list[float]:
        return [float(sum(c in chosen for c in s)) for s in sequences]

    return Expert(name, count, weight, takes, kind="residue-count", params={"residues": residues, "region": region})


def keyword_count(
    keywords: Sequence[str], *, name: str = "keywords", weight: float = 1.0, case_sensitive: bool = False
) -> Expert:
    """How many times the keywords occur as whole words in the decoded text (text models).

    A keyword matches where it is not preceded or followed by a letter, digit or underscore;
    overlapping keywords are counted once per non-overlapping match, longest keyword first.
    """
    if isinstance(keywords, str) or not isinstance(keywords, Sequence) or not keywords:
        raise _FieldTypeError(
            f"expert {name!r}: keywords must be a non-empty list of words, got {keywords!r}", "params.keywords"
        )
    if not all(isinstance(k, str) and k.strip() for k in keywords):
        raise _FieldTypeError(
            f"expert {name!r}: keywords must be non-empty strings, got {keywords!r}", "params.keywords"
        )
    if not isinstance(case_sensitive, bool):
        raise _FieldTypeError(f"expert {name!r}: case_sensitive must be true or false", "params.case_sensitive")
    alternatives = "|".join(re.escape(k.strip()) for k in sorted(keywords, key=len, reverse=True))
    regex = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", 0 if case_sensitive else re.IGNORECASE)

    def count(sequences: list[str]) -> list[float]:
        return [float(len(regex.findall(s))) for s in sequences]

    params = {"keywords": list(keywords), "case_sensitive": case_sensitive}
    return Expert(name, count, weight, "sequences", kind="keyword-count", params=params)


def hamming_distance(source: str, *, name: str = "hamming", weight: float = 1.0, unit: str = "residue") -> Expert:
    """Hamming distance of the decoded sequence to ``source``.

    ``unit="residue"`` compares characters (spaces ignored), ``"word"`` whitespace-separated
    words. Units are compared in order; a difference in length counts one per missing unit. Give
    a negative weight to keep designs near the source.
    """
    if not isinstance(source, str) or not source.strip():
        raise _FieldTypeError(f"expert {name!r}: source must be a non-empty string, got {source!r}", "params.source")
    if unit not in ("residue", "word"):
        raise _FieldValueError(f"expert {name!r}: unit must be 'residue' or 'word', got {unit!r}", "params.unit")

    def units(text: str) -> Sequence[str]:
        return _residues(text) if unit == "residue" else text.split()

    ref = units(source)

    def distance(sequences: list[str]) -> list[float]:
        out = []
        for s in sequences:
            u = units(s)
            out.append(float(sum(a != b for a, b in zip(u, ref)) + abs(len(u) - len(ref))))
        return out

    return Expert(name, distance, weight, "sequences", kind="hamming", params={"source": source, "unit": unit})


def classifier_log_prob(
    path: str | Path,
    label: int | str,
    *,
    name: str = "classifier",
    weight: float = 1.0,
    spaced: bool = False,
    batch_size: int = 32,
) -> Expert:
    """``log p(label | sequence)`` of a Hugging Face sequence classifier saved in a local directory.

    The model (``AutoModelForSequenceClassification``) and its tokenizer (``AutoTokenizer``) load
    from ``path`` with ``local_files_only=True``: nothing is downloaded. ``label`` is a class
    index or a name of ``config.label2id``. ``spaced=True`` puts a space between residues, for
    protein classifiers whose tokenizers expect ``"E V Q L"``. The model runs on its device,
    ``batch_size`` sequences at a time, without gradients.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not isinstance(spaced, bool):
        raise _FieldTypeError(f"expert {name!r}: spaced must be true or false", "params.spaced")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise _FieldValueError(f"expert {name!r}: batch_size must be an integer >= 1", "params.batch_size")
    directory = Path(path)
    if not directory.is_dir():
        raise _FieldValueError(
            f"expert {name!r}: classifier directory {str(directory)!r} does not exist", "params.path"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(directory, local_files_only=True).eval()
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise _FieldValueError(
            f"expert {name!r}: no sequence classifier loads from {str(directory)!r}: {first}", "params.path"
        ) from None
    num_labels = int(model.config.num_labels)
    label2id = {str(k): int(v) for k, v in (model.config.label2id or {}).items()}
    if isinstance(label, bool) or not isinstance(label, (int, str)):
        raise _FieldTypeError(f"expert {name!r}: label must be a class index or name, got {label!r}", "params.label")
    if isinstance(label, str):
        if label not in label2id:
            raise _FieldValueError(
                f"expert {name!r}: label {label!r} is not one of the classifier's {sorted(label2id)}", "params.label"
            )
        index = label2id[label]
    else:
        if not 0 <= label < num_labels:
            raise _FieldValueError(
                f"expert {name!r}: label {label} is out of range for {num_labels} classes", "params.label"
            )
        index = label
    device = next(model.parameters()).device

    def log_prob(sequences: list[str]) -> Tensor:
        texts = [" ".join(_residues(s)) if spaced else s for s in sequences]
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                enc = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, return_tensors="pt")
                logits = model(**{k: v.to(device) for k, v in enc.items()}).logits
                out.append(torch.log_softmax(logits.double(), dim=-1)[:, index].cpu())
        return torch.cat(out)

    params = {"path": str(path), "label": label, "spaced": spaced, "batch_size": batch_size}
    return Expert(name, log_prob, weight, "sequences", kind="classifier", params=params)


EXPERT_KINDS: dict[str, Callable[..., Expert]] = {
    "hydropathy": hydropathy,
    "net-charge": net_charge,
    "residue-count": residue_count,
    "keyword-count": keyword_count,
    "hamming": hamming_distance,
    "classifier": classifier_log_prob,
}
"""The built-in experts by the ``kind`` a spec file gives; each takes ``name``, ``weight`` and its
own parameters (``params``)."""


# ---------------------------------------------------------------------- antibody liabilities
LIABILITIES: dict[str, Callable[[], Rule | Expert]] = {
    "n-glycosylation": lambda: Forbid("n-glycosylation", "N[^P][ST]"),
    "deamidation": lambda: Forbid("deamidation", "N[GS]"),
    "isomerisation": lambda: Forbid("isomerisation", "D[GS]"),
    "unpaired-cysteine": lambda: OddCount("unpaired-cysteine", "C"),
    "dp-cleavage": lambda: Forbid("dp-cleavage", "DP"),
    "met-trp-oxidation": lambda: residue_count("MW", name="met-trp-oxidation", weight=-1.0),
}
"""Common antibody sequence-liability motifs, each selectable by name.

Hard rules (a designed match makes a state infeasible; a framework match is only reported):

``n-glycosylation``  ``N[^P][ST]``, the N-linked glycosylation sequon N-X-S/T (X not P);
``deamidation``      ``N[GS]``, asparagine deamidation hot spots;
``isomerisation``    ``D[GS]``, aspartate isomerisation hot spots;
``dp-cleavage``      ``DP``, acid-labile Asp-Pro peptide bond (fragmentation);
``unpaired-cysteine`` an odd number of cysteines among the designed residues (:class:`OddCount`).

Soft: ``met-trp-oxidation``, an :func:`residue_count` expert of M and W among the designed
residues with weight -1 nat each.

These are the motifs that sequence-based developability screens commonly flag; see for
example Satława et al. (2024), "LAP: Liability Antibody Profiler by sequence & structural
mapping of natural and therapeutic antibodies", PLoS Comput Biol 20(3):e1011881, which also
shows that such annotation over-predicts (many flagged motifs are benign), and, for
developability guidelines beyond motifs, Raybould et al. (2019), "Five computational
developability guidelines for therapeutic antibody profiling", PNAS 116(10):4025-4030.
"""


def liability_constraints(names: Sequence[str] | bool = True) -> tuple[list[Rule], list[Expert]]:
    """The rules and experts of the named liabilities (``True``: all, ``False``: none)."""
    chosen = _liability_names(names)
    rules: list[Rule] = []
    experts: list[Expert] = []
    for n in chosen:
        item = LIABILITIES[n]()
        (experts if isinstance(item, Expert) else rules).append(item)  # type: ignore[arg-type]
    return rules, experts


def _liability_names(names: Any) -> tuple[str, ...]:
    if names is True:
        return tuple(LIABILITIES)
    if names is False:
        return ()
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise _FieldTypeError(
            f"liabilities must be true, false or a list of names, got {type(names).__name__} {names!r}", "liabilities"
        )
    out = []
    for n in names:
        if n not in LIABILITIES:
            raise _FieldValueError(
                f"unknown liability {n!r}; choose from {', '.join(map(repr, LIABILITIES))}", "liabilities"
            )
        if n not in out:
            out.append(n)
    return tuple(out)


# ---------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class FrameworkMatch:
    """A :class:`Forbid` match lying wholly in the fixed part of the template: reported, not
    infeasible. ``start``/``end`` are offsets in the decoded sequence (residue indices for
    residue-level models)."""

    rule: str
    start: int
    end: int
    text: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.text!r} at {self.start}-{self.end} (fixed framework)"


class ConstraintSpec:
    """Hard rules, soft experts and antibody liabilities; checked here, bound to a target later.

    Parameters
    ----------
    rules : sequence of Rule
    experts : sequence of Expert
    liabilities : sequence of str or bool
        Names of :data:`LIABILITIES` to add (``True``: all of them).

    Every name (rules, experts and liabilities together) must be unique: it is the key of
    :meth:`BoundConstraints.violations` and :meth:`BoundConstraints.expert_values`.
    """

    def __init__(
        self, rules: Sequence[Rule] = (), experts: Sequence[Expert] = (), *, liabilities: Sequence[str] | bool = ()
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.experts: tuple[Expert, ...] = tuple(experts)
        for r in self.rules:
            if not isinstance(r, (Allowed, Forbid, Require, OddCount)):
                raise TypeError(f"rules must be Allowed, Forbid, Require or OddCount, got {type(r).__name__}")
        for e in self.experts:
            if not isinstance(e, Expert):
                raise TypeError(f"experts must be Expert objects, got {type(e).__name__}")
        self.liabilities: tuple[str, ...] = _liability_names(liabilities)
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
        return (ConstraintSpec.from_dict, (data,))

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
        return {
            "liabilities": list(self.liabilities),
            "rules": rules,
            "experts": [e.to_dict() for e in self.experts],
        }

    def to_toml(self) -> str:
        """The spec as TOML text (what :meth:`from_toml` reads)."""
        data = self.to_dict()
        lines = [f"liabilities = {_toml_value(data['liabilities'])}"]
        for section in ("rules", "experts"):
            for entry in data[section]:
                lines += ["", f"[[{section}]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, path: str | Path, mlm: TokenCodec | None = None) -> ConstraintSpec:
        """Read a spec file (format in the module docstring); with ``mlm``, check the tokens of
        its ``allowed`` rules against the model's vocabulary now. Every malformed entry is a
        one-line ValueError naming the file, the entry and the key."""
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]

        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(f"{path}: cannot read the constraint spec: {err.strerror or err}") from None
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: not valid TOML: {err}") from None
        return cls.from_dict(data, mlm=mlm, source=str(path))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, mlm: TokenCodec | None = None, source: str = "<dict>"
    ) -> ConstraintSpec:
        """Build a spec from plain data: keys ``liabilities``, ``rules`` and ``experts`` as in
        the TOML format; errors name ``source``, the entry and the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: a constraint spec is a table, got {type(data).__name__}")
        unknown = sorted(set(data) - {"liabilities", "rules", "experts"})
        if unknown:
            raise ValueError(f"{source}: top level: unknown key {unknown[0]!r}; expected liabilities, rules, experts")
        with _entry_errors(source, "top level", "liabilities"):
            liabilities = _liability_names(data.get("liabilities", ()))
        rules = [_rule_from_dict(entry, i, mlm, source) for i, entry in enumerate(_entries(data, "rules", source))]
        experts = [_expert_from_dict(entry, i, source) for i, entry in enumerate(_entries(data, "experts", source))]
        with _entry_errors(source, "spec", "name"):
            return cls(rules, experts, liabilities=liabilities)


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
    with _entry_errors(source, "top level", "liabilities"):
        liabilities = _liability_names(data.get("liabilities", ()))
    weights: dict[str, float] = {}
    for i, entry in enumerate(_entries(data, "experts", source)):
        with _entry_errors(source, _label("experts", i, entry), "name"):
            name = _check_name(entry.get("name"), "expert")
            if name in weights:
                raise _FieldValueError(f"two experts are named {name!r}; names must be unique", "name")
            weights[name] = _check_weight(name, entry.get("weight", 1.0))
    for liability in liabilities:
        item = LIABILITIES[liability]()
        if isinstance(item, Expert):
            if item.name in weights:
                raise ValueError(f"{source}: two experts are named {item.name!r}; names must be unique")
            weights[item.name] = item.weight
    return weights


# ---------------------------------------------------------------------- spec-file parsing
class _entry_errors:
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


def _entries(data: Mapping[str, Any], section: str, source: str) -> list[Mapping[str, Any]]:
    entries = data.get(section, [])
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ValueError(f"{source}: top level, key {section!r}: must be an array of tables ([[{section}]])")
    return entries


def _label(section: str, index: int, entry: Mapping[str, Any]) -> str:
    name = entry.get("name")
    return f"{section}[{index}]" + (f" ({name!r})" if isinstance(name, str) else "")


def _require_keys(entry: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    for key in required:
        if key not in entry:
            raise _FieldValueError("missing", key)
    for key in entry:
        if key not in required + optional:
            expected = ", ".join(required + optional)
            raise _FieldValueError(f"unknown key; expected {expected}", str(key))


def _rule_from_dict(entry: Mapping[str, Any], index: int, mlm: TokenCodec | None, source: str) -> Rule:
    label = _label("rules", index, entry)
    with _entry_errors(source, label, "kind"):
        kind = entry.get("kind")
        if kind not in _RULE_KINDS:
            raise _FieldValueError(f"kind must be one of {', '.join(map(repr, _RULE_KINDS))}, got {kind!r}", "kind")
        rule: Rule
        if kind == "allowed":
            _require_keys(entry, ("kind", "name", "tokens"), ("positions",))
            rule = Allowed(entry["name"], entry["tokens"], entry.get("positions"))
            if mlm is not None:
                rule.token_mask(mlm)
        else:
            _require_keys(entry, ("kind", "name", "pattern"), ())
            rule = _RULE_KINDS[kind](entry["name"], entry["pattern"])
    return rule


def _expert_from_dict(entry: Mapping[str, Any], index: int, source: str) -> Expert:
    label = _label("experts", index, entry)
    with _entry_errors(source, label, "kind"):
        kind = entry.get("kind")
        if not isinstance(kind, str):
            raise _FieldValueError(
                f"kind must be a built-in ({', '.join(EXPERT_KINDS)}) or 'module:function', got {kind!r}", "kind"
            )
        user = ":" in kind
        _require_keys(entry, ("name", "kind"), ("weight", "params") + (("takes",) if user else ()))
        name = _check_name(entry["name"], "expert")
        weight = entry.get("weight", 1.0)
        params = entry.get("params", {})
        if not isinstance(params, Mapping):
            raise _FieldValueError(f"params must be a table, got {type(params).__name__}", "params")
        if user:
            function = _import_function(kind, params)
            return Expert(name, function, weight, entry.get("takes", "sequences"), kind=kind, params=params)
        if kind not in EXPERT_KINDS:
            raise _FieldValueError(
                f"unknown expert kind {kind!r}; built-ins are {', '.join(EXPERT_KINDS)}, or give 'module:function'",
                "kind",
            )
        factory = EXPERT_KINDS[kind]
        signature = inspect.signature(factory)
        accepted = [p for p in signature.parameters if p not in ("name", "weight")]
        for key in params:
            if key not in accepted:
                expected = ", ".join(accepted)
                raise _FieldValueError(f"unknown parameter of {kind!r}; expected {expected}", f"params.{key}")
        for p, spec in signature.parameters.items():
            if p not in ("name", "weight") and spec.default is inspect.Parameter.empty and p not in params:
                raise _FieldValueError(f"missing (required by {kind!r})", f"params.{p}")
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise _FieldTypeError(f"weight must be a number, got {type(weight).__name__} {weight!r}", "weight")
        return factory(name=name, weight=weight, **params)


def _resolves_to(module: str, qualname: str, fn: Any) -> bool:
    """Whether importing ``module`` and following the dotted ``qualname`` gives ``fn`` itself."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # no such module or attribute, or the module fails to import: no file form
        return False
    return obj is fn


def _import_function(kind: str, params: Mapping[str, Any]) -> Callable[[Any], Any]:
    module_name, _, attr = kind.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # any failure of the user's module is the spec's error
        raise _FieldValueError(f"cannot import module {module_name!r}: {type(err).__name__}: {err}", "kind") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _FieldValueError(f"module {module_name!r} has no attribute {attr!r}", "kind")
        obj = getattr(obj, part)
    if not callable(obj):
        raise _FieldValueError(f"{kind!r} is not callable", "kind")
    if not params:
        return obj
    fn = obj

    def with_params(batch: Any) -> Any:
        return fn(batch, **params)

    return with_params


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _toml_value(value: Any) -> str:
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
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise ValueError(f"cannot write {type(value).__name__} {value!r} to a spec file")


# ---------------------------------------------------------------------- bound to a target
@dataclass(frozen=True)
class _Decoded:
    """States as text: ``sequences`` (whole), ``designed`` (free positions only) and, per state and
    free position, the character span of that token in ``sequences``."""

    sequences: list[str]
    designed: list[str]
    spans: list[list[tuple[int, int]]]


class BoundConstraints:
    """A :class:`ConstraintSpec` checked against one target: its alphabets, framework report,
    and the rule and expert values of states.

    Attributes
    ----------
    allowed : Tensor
        ``(F, V)`` bool, the alphabet of each free position (the target's allowed tokens, ordinary
        ones for a bare distribution, that every :class:`Allowed` rule at that position allows).
    alphabets_only : bool
        The spec has :class:`Allowed` rules alone (no other rule, no expert): its log-factor is 0
        on the alphabets and ``-inf`` elsewhere, so a kernel whose proposals keep to
        :attr:`allowed` samples it without reading the log-factor.
    framework_matches : tuple of FrameworkMatch
        :class:`Forbid` matches wholly inside the fixed template: reported once here, never
        infeasible (found in the template filled with each free position's first allowed token).
    """

    _CACHE_SIZE = 1 << 16

    def __init__(self, spec: ConstraintSpec, target: Target) -> None:
        codec = getattr(target, "mlm", None)
        if not isinstance(codec, TokenCodec):
            raise TypeError(
                f"constraints read decoded sequences, so they need a target with a masked LM (a MaskedLMDistribution "
                f"or a target built on one); got {type(target).__name__}"
            )
        self.spec = spec
        self.target = target
        self.codec = codec
        self.free_positions = target.free_positions.cpu()
        F, V = int(target.num_free), int(target.vocab_size)
        allowed = target.allowed.cpu().expand(F, V).clone()  # a constrained target's own alphabets narrow further
        self._alphabets: list[tuple[Allowed, Tensor, Tensor]] = []  # (rule, free indices, (V,) mask)
        for rule in spec.all_rules:
            if not isinstance(rule, Allowed):
                continue
            mask = rule.token_mask(codec)
            wanted = range(F) if rule.positions is None else rule.positions
            indices = [self._free_index(rule, k, F) for k in wanted]
            for k in indices:
                narrowed = allowed[k] & mask
                if not bool(narrowed.any()):
                    raise ValueError(
                        f"rule {rule.name!r} leaves free position {k} (token position "
                        f"{int(self.free_positions[k])}) with no allowed token: its tokens and those of the "
                        "target and of the rules before it have nothing in common"
                    )
                allowed[k] = narrowed
            self._alphabets.append((rule, torch.tensor(indices, dtype=torch.long), mask))
        self.allowed: Tensor = allowed
        self.alphabets_only = not spec.all_experts and all(isinstance(r, Allowed) for r in spec.all_rules)
        self._odd = [(r, r.token_id(codec)) for r in spec.all_rules if isinstance(r, OddCount)]
        self._forbid = [r for r in spec.all_rules if isinstance(r, Forbid)]
        self._require = [r for r in spec.all_rules if isinstance(r, Require)]
        self._cache: dict[tuple[int, ...], tuple[str, str, list[tuple[int, int]]]] = {}
        self.framework_matches: tuple[FrameworkMatch, ...] = self._framework_matches()

    @staticmethod
    def _free_index(rule: Allowed, k: int, F: int) -> int:
        if not -F <= k < F:
            raise ValueError(
                f"rule {rule.name!r}: free position {k} is out of range; the template has {F} free positions "
                f"(0 .. {F - 1}, negatives count from the end)"
            )
        return k % F

    def report(self) -> str:
        """The framework matches, one per line (empty when there are none)."""
        return "\n".join(str(m) for m in self.framework_matches)

    # -- decoding
    def _decode(self, tokens: Tensor) -> _Decoded:
        seqs, designed, spans = [], [], []
        for row in tokens.tolist():
            key = tuple(row)
            hit = self._cache.get(key)
            if hit is None:
                if len(self._cache) >= self._CACHE_SIZE:
                    self._cache.clear()
                hit = self._cache[key] = self._decode_row(row)
            seqs.append(hit[0])
            designed.append(hit[1])
            spans.append(hit[2])
        return _Decoded(seqs, designed, spans)

    def _decode_row(self, row: list[int]) -> tuple[str, str, list[tuple[int, int]]]:
        codec = self.codec
        ordinary = codec.ordinary_mask
        kept = [(p, t) for p, t in enumerate(row) if 0 <= t < codec.vocab_size and bool(ordinary[t])]
        free = set(self.free_positions.tolist())
        ids = [t for _, t in kept]
        text = codec.decode(ids)[0]
        span_of: dict[int, tuple[int, int]] = {}
        if codec.residue_level:
            offset = 0
            for p, t in kept:
                piece = codec.vocab[t]
                span_of[p] = (offset, offset + len(piece))
                offset += len(piece)
        else:  # text: a token's span is what it adds to the decoded prefix (spaces stripped)
            previous = 0
            for k, (p, _) in enumerate(kept):
                prefix = codec.decode(ids[: k + 1])[0]
                if not text.startswith(prefix):  # the tokenizer's clean-up rewrote the prefix: be conservative
                    span_of[p] = (0, len(text))
                    continue
                start = previous
                while start < len(prefix) and prefix[start].isspace():
                    start += 1
                span_of[p] = (start, len(prefix))
                previous = len(prefix)
        free_ids = [row[p] for p in self.free_positions.tolist()]
        designed = codec.decode(free_ids)[0]
        spans = [span_of.get(p, (0, 0)) for p in sorted(free)]
        return text, designed, spans

    # -- rules
    @staticmethod
    def _matches(regex: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
        """Every match, one per start position (so overlapping ones too)."""
        pos = 0
        while pos <= len(text):
            m = regex.search(text, pos)
            if m is None:
                return
            yield m
            pos = m.start() + 1

    @staticmethod
    def _touches(m: re.Match[str], spans: list[tuple[int, int]]) -> bool:
        return any(s < m.end() and m.start() < e for s, e in spans if e > s)

    def _framework_matches(self) -> tuple[FrameworkMatch, ...]:
        if not self._forbid:
            return ()
        state = self.target.template.cpu().clone()
        state[self.free_positions] = self.allowed.long().argmax(-1)  # each position's first allowed token
        decoded = self._decode(state[None])
        text, spans = decoded.sequences[0], decoded.spans[0]
        found = []
        for rule in self._forbid:
            for m in self._matches(rule.regex, text):
                if m.end() > m.start() and not self._touches(m, spans):
                    found.append(FrameworkMatch(rule.name, m.start(), m.end(), m.group()))
        return tuple(found)

    def _check(self, tokens: Tensor) -> Tensor:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise ValueError(f"tokens must be a (N, L) tensor of states, got {getattr(tokens, 'shape', tokens)!r}")
        self.target.validate_tokens(tokens)
        return tokens.cpu()

    def violations(self, tokens: Tensor) -> dict[str, Tensor]:
        """``{rule name: (N,) bool}``, True where the state breaks the rule."""
        return self._violations(self._check(tokens))

    def _violations(self, tokens: Tensor) -> dict[str, Tensor]:
        N = tokens.shape[0]
        free = tokens[:, self.free_positions]  # (N, F)
        out: dict[str, Tensor] = {}
        for rule, indices, mask in self._alphabets:
            out[rule.name] = ~mask[free[:, indices]].all(-1)
        for odd, token_id in self._odd:
            out[odd.name] = (free == token_id).sum(-1) % 2 == 1
        if self._forbid or self._require:
            decoded = self._decode(tokens)
            for forbid in self._forbid:
                out[forbid.name] = torch.tensor(
                    [
                        any(m.end() > m.start() and self._touches(m, spans) for m in self._matches(forbid.regex, text))
                        for text, spans in zip(decoded.sequences, decoded.spans)
                    ],
                    dtype=torch.bool,
                ).reshape(N)
            for req in self._require:
                out[req.name] = torch.tensor(
                    [req.regex.search(text) is None for text in decoded.sequences], dtype=torch.bool
                ).reshape(N)
        return {r.name: out[r.name] for r in self.spec.all_rules}

    def feasible(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where the state breaks no rule."""
        return self._feasible(self._check(tokens))

    def _feasible(self, tokens: Tensor) -> Tensor:
        ok = torch.ones(tokens.shape[0], dtype=torch.bool)
        for broken in self._violations(tokens).values():
            ok &= ~broken
        return ok

    # -- experts
    def expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        """``{expert name: (N,) float64}``, each expert's value ``f_k`` (unweighted); a non-finite
        value is a ValueError naming the expert."""
        return self._expert_values(self._check(tokens))

    def _expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        N = tokens.shape[0]
        decoded = self._decode(tokens) if any(e.takes != "tokens" for e in self.spec.all_experts) else None
        out: dict[str, Tensor] = {}
        for expert in self.spec.all_experts:
            if expert.takes == "tokens":
                arg: Any = tokens.clone()
            else:
                assert decoded is not None
                arg = list(decoded.sequences if expert.takes == "sequences" else decoded.designed)
            raw = expert.function(arg)
            try:
                values = torch.as_tensor(raw, dtype=torch.float64).detach().cpu()
            except (TypeError, ValueError, RuntimeError) as err:
                raise TypeError(f"expert {expert.name!r} returned {type(raw).__name__}, not numbers: {err}") from None
            if values.numel() != N or values.dim() > 1:
                raise ValueError(
                    f"expert {expert.name!r} returned shape {tuple(values.shape)} for {N} states; it must give ({N},)"
                )
            values = values.reshape(N)
            bad = ~torch.isfinite(values)
            if bool(bad.any()):
                n = int(bad.nonzero()[0])
                raise ValueError(
                    f"expert {expert.name!r} returned {float(values[n])} for state {n}; expert values must be finite"
                )
            out[expert.name] = values
        return out

    def log_factor(self, tokens: Tensor) -> Tensor:
        """``(N,)`` float64: ``sum_k w_k f_k(x)`` on feasible states, ``-inf`` on the others
        (experts run on the feasible states only)."""
        tokens = self._check(tokens)
        ok = self._feasible(tokens)
        out = torch.full((tokens.shape[0],), -math.inf, dtype=torch.float64)
        if bool(ok.any()):
            out[ok] = self.spec.expert_sum(self._expert_values(tokens[ok]), int(ok.sum()))
        return out


class ConstraintTarget(ConstrainedTarget):
    """A target under a :class:`ConstraintSpec`: a :class:`~mlm_ppl.models.ConstrainedTarget` whose
    log-factor is :meth:`BoundConstraints.log_factor` and whose :attr:`allowed` (the
    :class:`~mlm_ppl.models.Target` protocol's alphabets) are the spec's.

    Every kernel proposes within :attr:`allowed`, renormalised, with the Hastings ratio of that
    restricted proposal; the other rules (:class:`Forbid`, :class:`Require`, :class:`OddCount`)
    give ``-inf``, and :meth:`forbidden` finds them from the rules alone, which MH reads before
    running a proposal's masked copies. A kernel that does not sample log-factors
    (pseudo-Gibbs, mask-predict) accepts it when :attr:`BoundConstraints.alphabets_only`: its
    restricted proposals then honour the whole spec.
    """

    def __init__(self, base: Target, constraints: BoundConstraints) -> None:
        if constraints.target is not base:
            raise ValueError("constraints were bound to another target; bind them to this one (spec.constrain(base))")
        super().__init__(base, constraints.log_factor)
        self.constraints = constraints

    @property
    def allowed(self) -> Tensor:
        """``(F, V)`` bool, the tokens each free position may hold."""
        return self.constraints.allowed

    def forbidden(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where the states break a rule (:meth:`BoundConstraints.feasible`: the
        rules alone, no expert, no forward pass) or the base forbids them."""
        return self.base.forbidden(tokens) | ~self.constraints.feasible(tokens)

    def __repr__(self) -> str:
        return f"ConstraintTarget({self.base!r}, {self.constraints.spec!r})"
