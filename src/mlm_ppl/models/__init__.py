"""What the distribution is: the token codec, the masked-LM engine, energies, the target
contract, the Pyro distribution, and derived pair joints. Nothing here moves states: that is
:mod:`mlm_ppl.inference`."""

from . import constraints
from .constraints import ConstraintSpec, ConstraintTarget
from .distribution import MaskedLMDistribution
from .energy import ENERGIES, VARIANTS, EnergyTerms, energy_terms
from .frozen import FrozenFrame
from .gap_target import GapConstraints, GapTarget
from .gaps import GapTemplate, LengthPrior, LengthReference
from .loading import antiberty_paths, load_mlm
from .masked_lm import MaskedConditionals, MaskedLM, NonFiniteLogitsError
from .pairs import PAIR_METHODS, PairConditionals, PairJoint, derive_pair_joint, pair_conditionals, pair_joint
from .surrogate import SurrogateTarget
from .target import (
    ConstrainedTarget,
    DerivedTarget,
    Evaluation,
    ScaledTarget,
    Target,
    TemperedTarget,
    WindowedTarget,
)
from .tokens import Encoding, TokenCodec

__all__ = [
    # the model
    "load_mlm",
    "antiberty_paths",
    "MaskedLM",
    "NonFiniteLogitsError",
    "MaskedConditionals",
    "Encoding",
    "TokenCodec",
    # energies
    "EnergyTerms",
    "energy_terms",
    "ENERGIES",
    "VARIANTS",
    # targets
    "Target",
    "Evaluation",
    "ConstrainedTarget",
    "ScaledTarget",
    "TemperedTarget",
    "DerivedTarget",
    "WindowedTarget",
    "SurrogateTarget",
    "FrozenFrame",
    "MaskedLMDistribution",
    # a variable gap (a template's [MASK]{a,b}) and its lengths' prior
    "GapTemplate",
    "GapTarget",
    "GapConstraints",
    "LengthPrior",
    "LengthReference",
    # constraints (hard rules, soft experts, antibody liabilities)
    "constraints",
    "ConstraintSpec",
    "ConstraintTarget",
    # pair joints
    "PAIR_METHODS",
    "PairConditionals",
    "PairJoint",
    "pair_conditionals",
    "pair_joint",
    "derive_pair_joint",
]
