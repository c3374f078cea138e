"""What the distribution is: the masked-LM wrapper, loading, energies, and derived pair joints."""

from .distribution import Evaluation, MaskedLMDistribution
from .energy import ENERGIES, VARIANTS, EnergyTerms, energy_terms
from .loading import antiberty_paths, load_mlm
from .masked_lm import Encoding, MaskedConditionals, MaskedLM
from .pairs import PAIR_METHODS, PairConditionals, PairJoint, derive_pair_joint, pair_conditionals, pair_joint

__all__ = [
    "MaskedLM",
    "MaskedLMDistribution",
    "Evaluation",
    "Encoding",
    "MaskedConditionals",
    "load_mlm",
    "antiberty_paths",
    "EnergyTerms",
    "energy_terms",
    "ENERGIES",
    "VARIANTS",
    "PAIR_METHODS",
    "PairConditionals",
    "PairJoint",
    "pair_conditionals",
    "pair_joint",
    "derive_pair_joint",
]
