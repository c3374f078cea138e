"""mlm-ppl: masked language models as probabilistic models in Pyro.

Importing the package loads no model and changes no global state.
"""

from .diagnostics import from_pyro, plot_diagnostics, summary, to_inference_data
from .inference import (
    MaskPredict,
    MetropolisHastings,
    MLMGibbs,
    MLMKernel,
    PseudoGibbs,
    Run,
    SurrogateMH,
    run_chains,
)
from .jobs import BatchRun, JobSpec, SampledRun, load_run, resume, run_job, sample
from .models import (
    ENERGIES,
    PAIR_METHODS,
    VARIANTS,
    ConstraintSpec,
    Encoding,
    EnergyTerms,
    MaskedConditionals,
    MaskedLM,
    MaskedLMDistribution,
    PairConditionals,
    PairJoint,
    constraints,
    derive_pair_joint,
    energy_terms,
    load_mlm,
    pair_conditionals,
)

__version__ = "0.7.0"

__all__ = [
    # loading and the model wrapper
    "load_mlm",
    "MaskedLM",
    "Encoding",
    "MaskedConditionals",
    # the distribution and sampling
    "MaskedLMDistribution",
    "sample",
    "resume",
    "load_run",
    "run_job",
    "JobSpec",
    "SampledRun",
    "BatchRun",
    "run_chains",
    "Run",
    "MetropolisHastings",
    "SurrogateMH",
    "PseudoGibbs",
    "MaskPredict",
    "MLMKernel",
    "MLMGibbs",
    # constrained generation
    "constraints",
    "ConstraintSpec",
    # diagnostics
    "to_inference_data",
    "from_pyro",
    "summary",
    "plot_diagnostics",
    # explicit pair joints (Torroba Hennigen & Kim 2023)
    "derive_pair_joint",
    "pair_conditionals",
    "PairConditionals",
    "PairJoint",
    "PAIR_METHODS",
    # energies
    "EnergyTerms",
    "energy_terms",
    "ENERGIES",
    "VARIANTS",
]
