"""How states move: MCMC kernels over token sequences, batched chains, the Pyro adapter, and
exact enumeration of tiny state spaces.

* :mod:`.base`: the kernel contract, the one ``accept``, proposals, scans, starting states;
* :mod:`.mh`, :mod:`.surrogate_mh`, :mod:`.pseudo_gibbs`, :mod:`.mask_predict`: one algorithm each;
* :mod:`.exact`: enumeration and exact transition matrices;
* :mod:`.streams`: one random stream per chain (a chain's draws depend only on ``(seed, c)``);
* :mod:`.runner`: batched chains with checkpoints; :mod:`.api`: :func:`sample` by name;
* :mod:`.pyro_kernel`: :class:`MLMKernel`, a ``pyro.infer.mcmc.MCMCKernel``; :mod:`.gibbs`:
  :class:`MLMGibbs`, token sites beside continuous sites moved by ``NUTS``/``HMC``.
"""

from . import exact
from .api import KERNELS, draw_from_distribution, make_kernel, sample
from .base import (
    INITS,
    SCANS,
    Kernel,
    StepInfo,
    accept,
    fill_template,
    geometric_annealing,
    initial_tokens,
    proposal_log_probs,
)
from .gibbs import MLMGibbs, run_from_gibbs
from .mask_predict import MaskPredict, MaskPredictInfo, MaskPredictState
from .mh import MetropolisHastings, MHInfo, MHState
from .pseudo_gibbs import PSEUDO_GIBBS_SCANS, PseudoGibbs, PseudoGibbsInfo, PseudoGibbsState
from .pyro_kernel import MLMKernel, run_from_mcmc
from .runner import EXTRA_STAT_NAMES, STAT_NAMES, Checkpoint, Run, run_chains, step_stats
from .streams import ChainStreams, chain_seed
from .surrogate_mh import SurrogateInfo, SurrogateMH, SurrogateState


def __getattr__(name: str) -> object:
    """``ConstrainedTarget`` moved to :mod:`mlm_ppl.models`; importable from here for one more release."""
    if name == "ConstrainedTarget":
        import warnings

        from ..models.target import ConstrainedTarget

        warnings.warn(
            "mlm_ppl.inference.ConstrainedTarget moved to mlm_ppl.models; the old path will be removed in the "
            "next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return ConstrainedTarget
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # running chains
    "sample",
    "run_chains",
    "ChainStreams",
    "chain_seed",
    "Run",
    "Checkpoint",
    "STAT_NAMES",
    "EXTRA_STAT_NAMES",
    "step_stats",
    "MLMKernel",
    "MLMGibbs",
    "run_from_mcmc",
    "run_from_gibbs",
    "KERNELS",
    "make_kernel",
    "draw_from_distribution",
    # kernels
    "Kernel",
    "StepInfo",
    "MetropolisHastings",
    "MHState",
    "MHInfo",
    "SurrogateMH",
    "SurrogateState",
    "SurrogateInfo",
    "PseudoGibbs",
    "PseudoGibbsState",
    "PseudoGibbsInfo",
    "MaskPredict",
    "MaskPredictState",
    "MaskPredictInfo",
    # pieces
    "accept",
    "proposal_log_probs",
    "fill_template",
    "initial_tokens",
    "geometric_annealing",
    "SCANS",
    "PSEUDO_GIBBS_SCANS",
    "INITS",
    "exact",
]
