"""What the distribution is: the masked-LM wrapper, loading, and energies."""

from .distribution import Evaluation, MaskedLMDistribution
from .energy import ENERGIES, VARIANTS, EnergyTerms, energy_terms
from .loading import antiberty_paths, load_mlm
from .masked_lm import Encoding, MaskedConditionals, MaskedLM

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
]
