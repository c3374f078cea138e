"""Summaries of runs: R-hat and ESS of every functional, and each chain's verdict (converged, mixed,
not converged, stuck, infeasible, annealed)."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..inference.annealing import annealing_note
from ..inference.registry import KERNELS
from ..inference.runner import OWN_LAW
from .data import load_arviz, to_inference_data
from .deep import SITE_FUNCTIONALS, deep_disagreement
from .lengths import length_marginal, length_terms, reference_for
from .sites import MEMORIZED_PROB

if TYPE_CHECKING:  # pragma: no cover
    import arviz
    import pandas

    from ..inference.runner import Run
    from ..models.constraints import BoundConstraints
    from ..models.gaps import LengthReference
    from ..models.masked_lm import MaskedLM

STUCK = "stuck"
"""Verdict of a chain that never changed state: its draws say nothing of the target."""
CONVERGED = "converged"
"""Verdict of a chain whose R-hat and ESS pass every threshold, for a kernel whose target is the
energy's distribution: no check finds its draws unlike samples of ``exp(-E/T)``."""
NOT_CONVERGED = "not converged"
"""Verdict of a chain that moved but failed a check (a threshold, too few draws, one chain, a
functional constant within it); its reason lists each."""
INFEASIBLE = "infeasible"
"""Verdict of a chain with a draw of log density ``-inf``: a draw that breaks a hard rule of the target."""
ANNEALED = "annealed"
"""Verdict of a chain of an annealed run: its draws are not samples of the target, so no
convergence is claimed (mode seeking)."""
MIXED = "mixed"
"""Verdict of a chain that passed the thresholds under a kernel with no guaranteed target
(pseudo-Gibbs, mask-predict): it mixed, to a distribution that need not be the energy's."""
RHAT_MAX = 1.01
"""Largest R-hat across chains (rank-normalised, of each functional) a converged chain may have."""
CHAIN_RHAT_MAX = 1.05
"""Largest split R-hat within one chain (its two halves compared) a converged chain may have."""
ESS_MIN_PER_CHAIN = 100
"""Bulk and tail ESS of each functional a converged run needs, per chain (400 for 4 chains)."""
MIN_DRAWS = 8
"""Fewest draws per chain a chain needs to be called converged: split R-hat of one chain needs
two halves of at least 4 draws."""


@dataclass
class Summary:
    """Diagnostics of a run: R-hat and ESS of each functional, acceptance rates, and a verdict per chain.

    What :func:`~mlm_ppl.summary` returns; ``str()`` gives the report the command line prints.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per functional: mean, sd, mcse_mean, ess_bulk, ess_tail, r_hat (rank-normalised
        split R-hat; Vehtari et al. 2021).
    acceptance_rate : float
        Fraction of accepted proposals.
    novel_transition_rate : float
        Fraction of steps whose accepted proposal changed the state (Goyal et al. 2021).
    chains : list of str
        Per-chain verdict: "converged" (to the target), "mixed" (a kernel with no guaranteed
        target, such as pseudo-Gibbs, whose chains agree on a law of its own: not the target's),
        "not converged", "stuck" (never moved), "infeasible" (draws of density 0: they break a
        hard rule of the target) or "annealed" (a run that anneals: a mode seeker, whose draws
        are not samples of the target, whatever its R-hat).
    reasons : list of str
        Why each chain got its verdict.
    moves_per_step : float, optional
        Mean accepted single-site changes per step (``n_moves``; NaN for runs that lack it).
    inner_acceptance : float or None, optional
        Surrogate-MH: fraction of inner (surrogate) proposals accepted; None for other kernels.
    masked_copies_per_step : float or None, optional
        Surrogate-MH: mean masked copies run per step; None for other kernels.
    annealing : str or None, optional
        An annealed run's note (``mlm_ppl.inference.annealing.annealing_note``), the first
        line of the text; None for a run that samples its target.
    stationary_law : str or None, optional
        The note of a run whose kernel has no guaranteed target
        (:func:`~mlm_ppl.diagnostics.law_note`), the first line of the text; None for a kernel
        whose stationary law is its target's.
    stopped : str or None, optional
        Why a run with a stopping rule (:func:`~mlm_ppl.diagnostics.stop_when_converged`) ended
        before its last draw, and where (the run's ``stopped`` attribute); None for a run that
        took every draw.
    lengths : list of (int, float, int, float, float) or None, optional
        A variable gap's length marginal: per length of the prior, ``(length, prior pi(L),
        draws, frequency, MCSE of the frequency)`` over every draw of every chain; None for a
        run of one length.
    length_reference : LengthReference or None, optional
        A length distribution the marginal is compared with (``summary(...,
        length_reference=)``), shown as a column beside it; None without one.
    deep : str or None, optional
        The line of a run whose chains disagree on deep states
        (:func:`~mlm_ppl.diagnostics.deep_disagreement`); None where they agree.
    memorized : float or None, optional
        The fraction of draws flagged memorized (``site_prob >= MEMORIZED_PROB``: the designed
        positions are predicted from the rest as from memory); None for a run without the column.
    reference : str or None, optional
        What the table's Hamming distances count: the designed positions that differ from the
        reference (``hamming_reference``) or from chain 0's start (``hamming_chain0_start``).
    length_terms : dict of int to float or None, optional
        A variable gap's mean designed-position term per residue at each length
        (``mlm_ppl.diagnostics.lengths.length_terms``), a column of the length table; None
        for a run of one length or without ``site_energy``.
    site_scores : str or None, optional
        Why a run has no ``site_prob`` column (its ``site_scores`` attribute: too many distinct
        states to read at its end); None otherwise.
    """

    table: "pandas.DataFrame"
    acceptance_rate: float
    novel_transition_rate: float
    chains: list[str]
    reasons: list[str]
    moves_per_step: float = float("nan")
    inner_acceptance: float | None = None
    masked_copies_per_step: float | None = None
    annealing: str | None = None
    stationary_law: str | None = None
    stopped: str | None = None
    lengths: list[tuple[int, float, int, float, float]] | None = None
    length_reference: "LengthReference | None" = None
    deep: str | None = None
    memorized: float | None = None
    reference: str | None = None
    length_terms: dict[int, float] | None = None
    site_scores: str | None = None

    @property
    def converged(self) -> bool:
        """Every chain converged to the target (a "mixed" chain did not, its law being another)."""
        return all(v == CONVERGED for v in self.chains)

    @property
    def mixed(self) -> bool:
        """Every chain converged to its kernel's stationary law, the target's or the kernel's own.

        The target's for a chain "converged", the kernel's own for a chain "mixed" (a kernel with
        no guaranteed target).
        """
        return all(v in (CONVERGED, MIXED) for v in self.chains)

    def __str__(self) -> str:
        lines = [self.annealing, ""] if self.annealing is not None else []
        lines += [self.stationary_law, ""] if self.stationary_law is not None else []
        lines += [f"stopped early: {self.stopped}", ""] if self.stopped is not None else []
        lines += [self.table.to_string(float_format=lambda x: f"{x:.3f}"), ""]
        if self.reference is not None:
            lines += [self.reference, ""]
        if self.lengths is not None:
            ref, terms = self.length_reference, self.length_terms
            lines += ["gap length: prior, draws, frequency over all draws and its Monte Carlo standard error"]
            head = "length   prior   draws  frequency   MCSE"
            if ref is not None:
                lines[-1] += f", and the reference {ref.source} renormalised over these lengths"
                lines += [f"(which hold {ref.inside:.1%} of its weight)"]
                head += "  reference"
            if terms is not None:
                lines[-1] += "; term/residue: the loop's mean E_norm term per residue"
                head += "  term/residue"
            lines.append(head)
            for L, w, n, f, m in self.lengths:
                row = f"{L:>6}  {w:.4f}  {n:>6}  {f:9.4f}  {m:.4f}"
                row += f"  {ref.weights[L]:9.4f}" if ref is not None else ""
                row += f"  {terms[L]:12.3f}" if terms is not None else ""
                lines.append(row)
            lines.append("")
        lines.append(
            f"acceptance rate {self.acceptance_rate:.3f}   novel-transition rate {self.novel_transition_rate:.3f}"
        )
        if self.inner_acceptance is not None:
            lines.append(
                f"surrogate: inner acceptance {self.inner_acceptance:.3f}   moves per step {self.moves_per_step:.2f}   "
                f"masked copies per step {self.masked_copies_per_step:.0f}"
            )
        if self.site_scores is not None:
            lines.append(f"memorized: {self.site_scores}")
        if self.memorized is not None:
            lines.append(
                f"memorized: {self.memorized:.1%} of draws have designed positions of mean conditional probability "
                f">= {MEMORIZED_PROB} (the model predicts them from the rest as from memory)"
            )
        if self.deep is not None:
            lines.append(self.deep)
        for c, (verdict, why) in enumerate(zip(self.chains, self.reasons)):
            lines.append(f"chain {c}: {verdict} ({why})")
        return "\n".join(lines)


def acceptance_rates(is_accepted, n_changed) -> tuple[float, float]:
    """Acceptance rate and novel-transition rate of per-draw statistics ``(C, D)``.

    The novel-transition rate counts accepted proposals that change the state (Goyal et al.
    2021); a pseudo-Gibbs step that redraws the same token is accepted but not novel.

    Parameters
    ----------
    is_accepted : numpy.ndarray or sequence of sequence of bool
        Shape ``(C, D)``, bool: whether each draw's proposal was accepted.
    n_changed : numpy.ndarray or sequence of sequence of int
        Shape ``(C, D)``: the positions each step changed.

    Returns
    -------
    acceptance_rate : float
        The fraction of accepted proposals.
    novel_transition_rate : float
        The fraction of steps whose accepted proposal changed the state.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import acceptance_rates
    >>> acceptance_rates([[True, True, False, True]], [[1, 0, 0, 2]])
    (0.75, 0.5)
    """
    accepted = np.asarray(is_accepted, dtype=bool)
    return float(accepted.mean()), float((accepted & (np.asarray(n_changed) > 0)).mean())


def summary(
    idata: "arviz.InferenceData",
    *,
    rhat_max: float = RHAT_MAX,
    chain_rhat_max: float = CHAIN_RHAT_MAX,
    ess_min_per_chain: int = ESS_MIN_PER_CHAIN,
    length_reference: "LengthReference | None" = None,
) -> Summary:
    """R-hat, ESS and MCSE of every scalar functional, acceptance rates, and a verdict per chain.

    A chain with a draw of log density ``-inf`` is **infeasible**: the draw breaks a hard rule
    of the target (a kernel that does not compute ``lp``, NaN, cannot tell). A chain that never
    changed state is **stuck** (ArviZ would give R-hat NaN and ESS = N for it, which must not
    read as converged). The others are **converged** when every functional
    that varies has rank-normalised R-hat <= ``rhat_max`` across all chains (Vehtari et al.
    2021), split R-hat <= ``chain_rhat_max`` within the chain alone (its two halves: noisier, so
    a looser bound), and bulk and tail ESS >= ``ess_min_per_chain`` x chains; otherwise
    **not converged**, with the reasons.

    A run that annealed (its ``annealing`` attribute, :func:`~mlm_ppl.run_chains`' record of the
    kernel's schedule) sought a mode: its draws are not samples of the target. Its summary starts
    with a note that says so, and a chain that is neither stuck nor infeasible is **annealed**, its
    reasons those of the diagnostics of the annealed chain itself.

    A run of a kernel with no guaranteed target (its ``stationary_law`` attribute, or a kernel
    whose declaration ``capabilities.samples_target`` is false: pseudo-Gibbs, mask-predict)
    converges, if at all, to a law of the kernel's own, not ``exp(-E/T)``: R-hat and ESS measure
    agreement on that law. Its summary starts with a note that says so, and a chain that passes
    the checks is **mixed**, never **converged**.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData (:func:`~mlm_ppl.to_inference_data`, :func:`~mlm_ppl.from_pyro`,
        a ``run.nc`` read by :func:`~mlm_ppl.diagnostics.read_run`).
    rhat_max : float, optional
        Largest rank-normalised R-hat across chains of a converged chain's functionals (default
        :data:`~mlm_ppl.diagnostics.RHAT_MAX`, 1.01).
    chain_rhat_max : float, optional
        Largest split R-hat within one chain (default :data:`~mlm_ppl.diagnostics.CHAIN_RHAT_MAX`,
        1.05).
    ess_min_per_chain : int, optional
        Bulk and tail ESS each functional needs, per chain (default
        :data:`~mlm_ppl.diagnostics.ESS_MIN_PER_CHAIN`, 100).
    length_reference : LengthReference or None, optional
        For a run over a variable gap's lengths: a length distribution over the same lengths,
        shown beside the length marginal (default None).

    Returns
    -------
    Summary
        The table of R-hat, ESS and MCSE per functional, the acceptance rates, each chain's
        verdict and its reasons, and the notes that apply (:class:`~mlm_ppl.diagnostics.Summary`).

    Raises
    ------
    ValueError
        Where ``length_reference`` is given for a run of one length or covers other lengths
        than the run's, or a list attribute of the run is damaged.

    Examples
    --------
    20 draws of 2 chains are too few to converge, and the summary says so:

    >>> from mlm_ppl import MaskedLMDistribution, run_chains, summary, to_inference_data
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> report = summary(to_inference_data(run, mlm=mlm))
    >>> report.chains
    ['not converged', 'not converged']
    >>> report.converged
    False
    >>> print(report)
    mean ...
    chain 0: not converged (...)
    chain 1: not converged (...)
    """
    az = load_arviz()
    post = idata.posterior
    names = [v for v in post.data_vars if not _is_sequence(post[v]) and not np.isnan(post[v].values).all()]
    lp_values = idata.sample_stats["lp"].values if "lp" in idata.sample_stats else None
    # lp is a functional unless the kernel does not compute it (NaN) or a draw has density 0 (-inf:
    # no R-hat; its chain's verdict is "infeasible")
    if lp_values is not None and not np.isnan(lp_values).all() and not np.isneginf(lp_values).any():
        lp = idata.sample_stats["lp"]
        post = post.assign(lp=lp)
        names = ["lp"] + names
    n_draws = int(post.sizes["draw"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant functionals give NaN R-hat
        warnings.simplefilter("ignore", UserWarning)  # too few draws: ArviZ warns and returns NaN
        table = az.summary(post, var_names=names, kind="all", round_to="none") if names else None
    n_chains = int(post.sizes["chain"])
    n_changed = idata.sample_stats["n_changed"].values  # (C, D)
    accepted = idata.sample_stats["is_accepted"].values
    verdicts, reasons = [], []
    note = _annealing(idata.attrs)
    law = law_note(idata.attrs)
    # hamming_start (a token site's <site>_hamming_start) depends on each chain's own start: chains
    # legitimately disagree on it
    # the site functionals need the model: a stop rule without it cannot read them, and the deep-state
    # line reports what they would add
    varying = [n for n in names if not _from_start(n) and n not in SITE_FUNCTIONALS and np.nanstd(post[n].values) > 0]
    for c in range(n_chains):
        infeasible = 0 if lp_values is None else int(np.isneginf(lp_values[c]).sum())
        if infeasible:
            verdicts.append(INFEASIBLE)
            reasons.append(
                f"{infeasible} of {n_draws} draws have log density -inf: they break a hard rule of the target"
            )
            continue
        if (n_changed[c] == 0).all():
            verdicts.append(STUCK)
            reasons.append("the chain never changed state")
            continue
        problems = []
        if n_draws < MIN_DRAWS:
            problems.append(f"only {n_draws} draws; R-hat needs at least {MIN_DRAWS}")
        for n in varying if n_draws >= MIN_DRAWS else ():
            values = post[n].values[c]  # (D,)
            if np.std(values) == 0:
                problems.append(f"{n} constant in this chain")
                continue
            half = len(values) // 2
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a constant half gives inf
                r = float(az.rhat(np.stack([values[:half], values[half : 2 * half]]), method="rank"))  # split
            if not r <= chain_rhat_max:
                problems.append(f"split R-hat of {n} in this chain {r:.3f} > {chain_rhat_max}")
        if n_chains < 2:
            problems.append("one chain: R-hat across chains needs two or more; run num_chains >= 2")
        if table is not None and n_draws >= MIN_DRAWS:
            for n in varying:
                r, eb, et = (float(table.loc[n, k]) for k in ("r_hat", "ess_bulk", "ess_tail"))
                if n_chains >= 2 and not r <= rhat_max:
                    problems.append(f"R-hat of {n} across chains {r:.3f} > {rhat_max}")
                if not min(eb, et) >= ess_min_per_chain * n_chains:
                    problems.append(f"ESS of {n} {min(eb, et):.0f} < {ess_min_per_chain * n_chains}")
        if not varying:
            problems.append("no functional varies")
        why = (
            "; ".join(dict.fromkeys(problems))
            if problems
            else f"R-hat <= {rhat_max}, ESS >= {ess_min_per_chain * n_chains}"
        )
        if note is not None:  # the diagnostics describe the annealed chain, not draws of the target
            verdicts.append(ANNEALED)
            reasons.append(f"mode-seeking, not samples of the target; the annealed chain: {why}")
            continue
        if law is not None and not problems:
            verdicts.append(MIXED)
            reasons.append(f"{why}: the chains agree on the kernel's own stationary law, not exp(-E/T)")
            continue
        verdicts.append(NOT_CONVERGED if problems else CONVERGED)
        reasons.append(why)
    acceptance, novel = acceptance_rates(accepted, n_changed)
    stats = idata.sample_stats

    def mean_of(name: str) -> float | None:
        return float(stats[name].values.mean()) if name in stats else None

    moves = mean_of("n_moves")
    return Summary(
        table if table is not None else _empty_table(),
        acceptance,
        novel,
        verdicts,
        reasons,
        moves_per_step=float("nan") if moves is None else moves,
        inner_acceptance=mean_of("inner_acceptance"),
        masked_copies_per_step=mean_of("masked_copies"),
        annealing=note,
        stationary_law=law,
        stopped=idata.attrs.get("stopped"),
        lengths=length_marginal(idata),
        length_reference=reference_for(idata, length_reference),
        deep=deep_disagreement(idata),
        memorized=float(post["memorized"].values.mean()) if "memorized" in post else None,
        reference=_reference_line(idata),
        length_terms=length_terms(idata),
        site_scores=idata.attrs.get("site_scores"),
    )


def _reference_line(idata: "arviz.InferenceData") -> str | None:
    """What the Hamming distances of the table count, each to its own reference."""
    post = idata.posterior
    parts = []
    if "hamming_reference" in post:
        ref = idata.attrs.get("hamming_reference")
        parts.append(
            f"hamming_reference: to the reference {ref}" if ref else "hamming_reference: to the reference given"
        )
    if "hamming_chain0_start" in post:
        parts.append("hamming_chain0_start: to chain 0's start (no reference given: --reference LOOP)")
    return None if not parts else "Hamming distances over the designed positions: " + "; ".join(parts)


def _is_sequence(values: Any) -> bool:
    """Whether a posterior variable holds token draws (``tokens``, or a Pyro token site's draws: a
    dimension of positions), not a functional."""
    return any(str(d) == "position" or str(d).endswith("_position") for d in values.dims)


def _from_start(name: str) -> bool:
    """Whether a functional measures the distance to each chain's own start (left out of verdicts)."""
    return name == "hamming_start" or name.endswith("_hamming_start")


def stop_when_converged(
    *, mlm: "MaskedLM | None" = None, constraints: "BoundConstraints | None" = None
) -> Callable[["Run"], str | None]:
    """A stopping rule for :func:`~mlm_ppl.run_chains` (``stop=``): end the run once every chain converged.

    The draws so far end the run when their :func:`~mlm_ppl.summary` (of
    :func:`~mlm_ppl.to_inference_data` with ``mlm`` and ``constraints``, as the run's outputs
    build it) says every chain converged, or, for a kernel with no guaranteed target, every chain
    mixed. The run's summary then says so too, and says it stopped early (``Summary.stopped``).

    Parameters
    ----------
    mlm : MaskedLM or None, optional
        The run's model, as its outputs read the draws with it (default None).
    constraints : BoundConstraints or None, optional
        The run's constraint spec bound to its target, so that rules and experts are functionals
        too (default None).

    Returns
    -------
    callable
        ``rule(run) -> str or None``: the reason to stop (every chain converged, or mixed, with
        the summary's reason), or None to go on.

    Examples
    --------
    20 draws of 2 chains are too few to converge, so the rule never stops this run:

    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.diagnostics import stop_when_converged
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> kernel = make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]"))
    >>> run = run_chains(kernel, 2, 20, seed=0, stop=stop_when_converged(mlm=mlm))
    >>> run.num_draws, "stopped" in run.attrs
    (20, False)
    """

    def rule(run: "Run") -> str | None:
        report = summary(to_inference_data(run, mlm=mlm, constraints=constraints))
        if report.converged:
            return f"every chain converged ({report.reasons[0]})"
        if report.mixed:  # a kernel with no guaranteed target: as far as its chains will go
            return f"every chain mixed ({report.reasons[0]})"
        return None

    return rule


def law_note(attrs: Mapping) -> str | None:
    """The note of a run whose kernel has no guaranteed target; None for a kernel that samples its target.

    A run has no guaranteed target where its ``stationary_law`` attribute says so
    (``mlm_ppl.inference.runner.kernel_attrs``) or, for a run recorded before it, where the
    kernel it names declares none (``capabilities.samples_target``).

    Parameters
    ----------
    attrs : mapping
        The run's attributes (``Run.attrs``, or an InferenceData's ``attrs``).

    Returns
    -------
    str or None
        The note, which names the kernel; None where the kernel samples its target.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import law_note
    >>> law_note({"kernel": "mh"}) is None
    True
    >>> print(law_note({"kernel": "pseudo-gibbs"}))
    pseudo-gibbs has no guaranteed target: its chains converge, if at all, to a stationary law of its own, ...
    """
    kernel = str(attrs.get("kernel", ""))
    match = re.fullmatch(r"MLMKernel\((.+)\)", kernel)  # a Pyro run names its token kernel so
    name = match.group(1) if match else kernel
    # a run directory records the kernel's name, run_chains its class
    by_name = {**{cls.__name__: cls for cls in KERNELS.values()}, **KERNELS}
    declared = by_name[name].capabilities.samples_target if name in by_name else True
    name = by_name[name].name if name in by_name else name
    if attrs.get("stationary_law") != OWN_LAW and declared:
        return None
    return (
        f"{name or 'this kernel'} has no guaranteed target: its chains converge, if at all, to a stationary law "
        "of its own, which is not exp(-E/T). R-hat and ESS below say whether the chains agree on that law; "
        '"mixed" means they do, never that the draws follow the energy (MH or Gibbs-within-MH samples it)'
    )


def _annealing(attrs: Mapping) -> str | None:
    """The note of an annealed run (its ``annealing`` attribute: a mapping in a Run, JSON text in
    InferenceData), or None."""
    record = attrs.get("annealing")
    if record is None:
        return None
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except ValueError:
            record = None
    return annealing_note(record if isinstance(record, Mapping) else {})


def _empty_table():
    import pandas

    return pandas.DataFrame()
