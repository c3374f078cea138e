"""Deprecated: the kernels now live one algorithm per module.

``mlm_ppl.inference.kernels`` re-exports its former names for one release. Import from
:mod:`mlm_ppl.inference` (or :mod:`.mh`, :mod:`.pseudo_gibbs`, :mod:`.mask_predict`,
:mod:`.base`) and :mod:`mlm_ppl.models` (``ConstrainedTarget``) instead.
"""

from __future__ import annotations

import warnings

from .._checks import check_count
from ..models.target import ConstrainedTarget
from .base import INITS, SCANS, accept, check_init, fill_template, geometric_annealing, proposal_log_probs
from .mask_predict import MaskPredict, MaskPredictState
from .mh import MetropolisHastings, MHInfo, MHState
from .pseudo_gibbs import PseudoGibbs, PseudoGibbsState

warnings.warn(
    "mlm_ppl.inference.kernels is deprecated and will be removed in the next release; import the kernels from "
    "mlm_ppl.inference and ConstrainedTarget from mlm_ppl.models",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "SCANS",
    "INITS",
    "check_count",
    "check_init",
    "accept",
    "proposal_log_probs",
    "ConstrainedTarget",
    "MHState",
    "MHInfo",
    "MetropolisHastings",
    "PseudoGibbsState",
    "PseudoGibbs",
    "MaskPredictState",
    "MaskPredict",
    "fill_template",
    "geometric_annealing",
]
