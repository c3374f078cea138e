"""How states move: MCMC kernels over token sequences, batched chains, the Pyro adapter, and
exact enumeration of tiny state spaces.

* ``spec``: how a kernel declares itself (name, Options, State, Info, capabilities);
  ``registry``: the kernels by name (:func:`register` adds one everywhere);
* ``base``: the kernel contract, the one ``accept``, proposals, scans, starting states;
  ``annealing``: schedules a run records, and the note of an annealed run;
* ``mh``, ``surrogate_mh``, ``tempering`` (replica exchange), ``pseudo_gibbs``,
  ``mask_predict``, ``jump`` (gap-jump: the lengths of a variable gap): one algorithm each;
* ``exact``: enumeration and exact transition matrices;
* ``streams``: one random stream per chain (a chain's draws depend only on ``(seed, c)``);
  ``starts``: starting states that break no hard rule;
* ``runner``: batched chains with checkpoints; ``api``: kernels by name (a whole job: :func:`mlm_ppl.sample`);
  ``estimate``: what a run will cost, before it starts;
  ``distributed``: the same chains split over Ray workers;
* ``pyro_kernel``: :class:`MLMKernel`, a ``pyro.infer.mcmc.MCMCKernel``; ``gibbs``:
  :class:`MLMGibbs`, token sites beside continuous sites moved by ``NUTS``/``HMC``;
  ``pyro_sites``: what both read of a Pyro model's token sites.
"""

from . import exact
from .annealing import GeometricAnnealing
from .api import KERNELS, draw_from_distribution, make_kernel
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
from .distributed import GroupCheckpoints, WorkersLostError
from .estimate import Estimate, LongRunWarning, estimate_run
from .gibbs import MLMGibbs
from .jump import GapJump, GapJumpInfo, GapJumpOptions, GapJumpState, JumpState
from .mask_predict import MaskPredict, MaskPredictInfo, MaskPredictOptions, MaskPredictState
from .mh import MetropolisHastings, MHInfo, MHOptions, MHState, ProposalOptions
from .pseudo_gibbs import PSEUDO_GIBBS_SCANS, PseudoGibbs, PseudoGibbsInfo, PseudoGibbsOptions, PseudoGibbsState
from .pyro_kernel import MLMKernel
from .pyro_runs import run_from_gibbs, run_from_mcmc
from .registry import kernel_class, length_kernels, register, unregister
from .runner import STAT_NAMES, Checkpoint, Run, run_chains, step_stats
from .spec import Capabilities, KernelBase, OptionInfo, Options, option
from .streams import ChainStreams, chain_seed
from .surrogate_mh import SurrogateInfo, SurrogateMH, SurrogateOptions, SurrogateState
from .tempering import ReplicaInfo, ReplicaMH, ReplicaState, TemperingOptions

__all__ = [
    # running chains
    "run_chains",
    "ChainStreams",
    "chain_seed",
    "Run",
    "Checkpoint",
    "STAT_NAMES",
    "step_stats",
    "MLMKernel",
    "MLMGibbs",
    "run_from_mcmc",
    "run_from_gibbs",
    "KERNELS",
    "make_kernel",
    "register",
    "unregister",
    "kernel_class",
    "length_kernels",
    "draw_from_distribution",
    "estimate_run",
    "Estimate",
    "LongRunWarning",
    "GroupCheckpoints",
    "WorkersLostError",
    # kernels, and how one declares itself
    "Kernel",
    "KernelBase",
    "Options",
    "OptionInfo",
    "option",
    "Capabilities",
    "StepInfo",
    "MetropolisHastings",
    "MHOptions",
    "MHState",
    "MHInfo",
    "ProposalOptions",
    "SurrogateMH",
    "SurrogateOptions",
    "SurrogateState",
    "SurrogateInfo",
    "ReplicaMH",
    "TemperingOptions",
    "ReplicaState",
    "ReplicaInfo",
    "PseudoGibbs",
    "PseudoGibbsOptions",
    "PseudoGibbsState",
    "PseudoGibbsInfo",
    "MaskPredict",
    "MaskPredictOptions",
    "MaskPredictState",
    "MaskPredictInfo",
    "GapJump",
    "GapJumpOptions",
    "GapJumpState",
    "GapJumpInfo",
    "JumpState",
    # pieces
    "accept",
    "proposal_log_probs",
    "fill_template",
    "initial_tokens",
    "geometric_annealing",
    "GeometricAnnealing",
    "SCANS",
    "PSEUDO_GIBBS_SCANS",
    "INITS",
    "exact",
]
