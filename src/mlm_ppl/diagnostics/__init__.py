"""Chain diagnostics with ArviZ: InferenceData from runs, summaries with verdicts, plots.

Token ids are labels, so R-hat and ESS are computed on scalar functionals of the chains:
the log density ``lp``, the Hamming distance to each chain's start and to a reference,
indicators of chosen tokens at chosen positions, and any user function of the decoded
sequence. ArviZ (``>=0.21,<1``) and matplotlib are imported lazily.

One module a job: ``data`` (InferenceData of runs, ``run.nc``), ``summary`` (R-hat, ESS
and each chain's verdict), ``lengths`` (a variable gap's length marginal), ``plots`` and
``loops`` (the loop distribution), ``sites`` (the designed positions as the model reads them:
memorized or not), ``deep`` (the deepest states the chains visited). Every public name is importable from here.
"""

from .data import (
    constraint_functionals,
    from_pyro,
    functional_name,
    read_run,
    to_inference_data,
    with_reference,
)
from .deep import DEEP_GAP, DeepState, DeepStates, deep_disagreement, deep_states, draw_energies
from .lengths import gap_lengths, length_log_prior, length_marginal
from .loops import LoopDistribution, loop_distribution
from .plots import plot_diagnostics
from .sites import MEMORIZED_PROB, SITE_COPY_BUDGET, site_scores
from .summary import (
    ANNEALED,
    CHAIN_RHAT_MAX,
    CONVERGED,
    ESS_MIN_PER_CHAIN,
    INFEASIBLE,
    MIN_DRAWS,
    MIXED,
    NOT_CONVERGED,
    RHAT_MAX,
    STUCK,
    Summary,
    acceptance_rates,
    law_note,
    stop_when_converged,
    summary,
)

__all__ = [
    "to_inference_data",
    "with_reference",
    "read_run",
    "functional_name",
    "from_pyro",
    "summary",
    "stop_when_converged",
    "Summary",
    "acceptance_rates",
    "plot_diagnostics",
    "loop_distribution",
    "LoopDistribution",
    "STUCK",
    "INFEASIBLE",
    "CONVERGED",
    "NOT_CONVERGED",
    "ANNEALED",
    "MIXED",
    "law_note",
    "RHAT_MAX",
    "CHAIN_RHAT_MAX",
    "ESS_MIN_PER_CHAIN",
    "MIN_DRAWS",
    "constraint_functionals",
    "gap_lengths",
    "deep_states",
    "deep_disagreement",
    "DeepState",
    "DeepStates",
    "draw_energies",
    "site_scores",
    "MEMORIZED_PROB",
    "SITE_COPY_BUDGET",
    "DEEP_GAP",
    "length_log_prior",
    "length_marginal",
]
