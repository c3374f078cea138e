"""Explicit joint distributions over two positions derived from an MLM's conditionals.

Torroba Hennigen & Kim (2023), *Deriving Language Models from Masked Language Models*. Mask
two positions ``a`` and ``b`` of a sequence, keep the rest observed, and read the MLM's
conditionals ``P_a(x_a | x_b)`` and ``P_b(x_b | x_a)`` for every candidate of the other
position. These two families are in general *incompatible*: no joint has both as its
conditionals. Each method builds a normalised joint ``q(x_a, x_b)`` from them.

* ``conditionals``: reading the MLM (:func:`pair_conditionals`, :class:`PairConditionals`,
  the reference code's candidate sets) and :func:`derive_pair_joint` (read, then build);
* ``joints``: one small function per method (naive, MRF, MRF-logit, HCB, AG), their
  checked options, and :class:`PairJoint`, a Pyro ``Categorical`` over the candidate pairs;
* ``arnold_gokhale``: the Arnold-Gokhale fixed point (SQUAREM-accelerated).

Everything is computed over a *support*: the ordinary tokens of the vocabulary (``2V``
masked copies of the sequence), ``K`` candidates per position chosen by the reference code's rule, or
(``support="all"``) every token id, special tokens included, as the reference code's
whole-vocabulary mode. The MLM's conditionals are renormalised over the support. How these
settings and the method names map to the reference code is in ``docs/pairs.md``.
"""

from .arnold_gokhale import AGOptions, arnold_gokhale, summed_kl
from .conditionals import PairConditionals, candidate_sets, derive_pair_joint, pair_conditionals
from .joints import PAIR_METHODS, PIVOTS, HCBOptions, PairJoint, joint_options, pair_joint

__all__ = [
    "PAIR_METHODS",
    "PIVOTS",
    "PairConditionals",
    "PairJoint",
    "pair_conditionals",
    "derive_pair_joint",
    "pair_joint",
    "joint_options",
    "HCBOptions",
    "AGOptions",
    "candidate_sets",
    "arnold_gokhale",
    "summed_kl",
]
