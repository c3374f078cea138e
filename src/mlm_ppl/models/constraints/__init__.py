"""Constraint specs: hard rules and soft experts that reshape a target (constrained generation).

A :class:`ConstraintSpec` describes, without any model, what a generated sequence must and
should be:

* **hard rules**, each with a name: :class:`Allowed` (an alphabet per free position; a fixed
  token is an alphabet of one), :class:`Forbid` (a regular expression that must not match where
  it touches a designed position), :class:`Require` (a regular expression that must match
  somewhere), :class:`OddCount` (a token that must appear an even number of times among the
  designed positions), :class:`Novel` (the designed loop at Hamming distance at least ``d`` from
  each of a set of known loops) and :class:`Mutations` (a trust region: at most ``k``, at least
  ``d`` positions changed from a reference loop, the rule's or the spec's ``reference``) and
  :class:`ExpertBound` (an expert's value within ``min`` / ``max``, numbers or relative to the
  reference's value: ``max = "reference - 0.2"``);
* **soft experts** ``f_k`` with weights ``w_k``: :class:`Expert`, and the built-ins
  :func:`hydropathy`, :func:`net_charge`, :func:`residue_count`, :func:`keyword_count`,
  :func:`hamming_distance` and :func:`classifier_log_prob`;
* a named set of antibody sequence liabilities, :data:`LIABILITIES`, selectable by name.

Bound to a target (:meth:`ConstraintSpec.bind`) it gives the constrained density

    log p(x) = -E(x)/T + log_factor(x),   log_factor(x) = sum_k w_k f_k(x) if x is feasible, else -inf,

as a :class:`ConstraintTarget`: a :class:`~mlm_ppl.models.ConstrainedTarget` that also
exposes :attr:`ConstraintTarget.allowed`, the ``(F, V)`` alphabets of the free positions, so
that kernels can restrict their proposals to them. Nothing here moves a state.

Regular expressions (RE2's syntax, matched in linear time: no lookarounds or backreferences)
read the sequence as :meth:`~mlm_ppl.models.TokenCodec.decode` writes it:
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

from .bound import BoundConstraints, FrameworkMatch
from .experts import (
    EXPERT_INPUTS,
    EXPERT_KINDS,
    KYTE_DOOLITTLE,
    Expert,
    classifier_log_prob,
    hamming_distance,
    hydropathy,
    keyword_count,
    net_charge,
    residue_count,
)
from .files import code_trusted, trusting_code
from .liabilities import LIABILITIES, liability_constraints
from .rules import Allowed, ExpertBound, Forbid, Mutations, Novel, OddCount, Require, Rule
from .spec import ConstraintSpec, recorded_expert_weights, weighted_expert_sum
from .target import ConstraintTarget

__all__ = [
    "Allowed",
    "Forbid",
    "Require",
    "OddCount",
    "Novel",
    "Mutations",
    "ExpertBound",
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
    "trusting_code",
    "code_trusted",
]
