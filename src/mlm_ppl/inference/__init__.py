"""How states move: MCMC kernels over token sequences, batched chains, the Pyro adapter, and
exact enumeration of tiny state spaces."""

from . import exact
from .pyro_kernel import MLMKernel, run_from_mcmc
from .runner import KERNELS, Run, run_chains, sample
from .kernels import (
    SCANS,
    ConstrainedTarget,
    MaskPredict,
    MaskPredictState,
    MetropolisHastings,
    MHInfo,
    MHState,
    PseudoGibbs,
    PseudoGibbsState,
    accept,
    fill_template,
    geometric_annealing,
    proposal_log_probs,
)

__all__ = [
    # running chains
    "sample",
    "run_chains",
    "Run",
    "MLMKernel",
    "run_from_mcmc",
    "KERNELS",
    # kernels
    "MetropolisHastings",
    "PseudoGibbs",
    "MaskPredict",
    "MHState",
    "MHInfo",
    "PseudoGibbsState",
    "MaskPredictState",
    # pieces
    "accept",
    "proposal_log_probs",
    "fill_template",
    "geometric_annealing",
    "ConstrainedTarget",
    "SCANS",
    "exact",
]
