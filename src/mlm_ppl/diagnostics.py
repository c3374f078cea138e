"""Chain diagnostics with ArviZ: InferenceData from runs, summaries with verdicts, plots.

Token ids are labels, so R-hat and ESS are computed on scalar functionals of the chains:
the log density ``lp``, the Hamming distance to each chain's start and to a reference,
indicators of chosen tokens at chosen positions, and any user function of the decoded
sequence. ArviZ (``>=0.21,<1``) and matplotlib are imported lazily.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ._checks import check_count
from ._files import save_figure
from .inference.annealing import annealing_note

if TYPE_CHECKING:  # pragma: no cover
    import arviz
    import pandas

    from .inference.runner import Run
    from .models.constraints import BoundConstraints
    from .models.gaps import LengthReference
    from .models.masked_lm import MaskedLM

__all__ = [
    "to_inference_data",
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
]

STUCK, CONVERGED, NOT_CONVERGED = "stuck", "converged", "not converged"
INFEASIBLE = "infeasible"
ANNEALED = "annealed"
RHAT_MAX = 1.01
CHAIN_RHAT_MAX = 1.05
ESS_MIN_PER_CHAIN = 100
MIN_DRAWS = 8  # split R-hat of one chain needs two halves of at least 4 draws


def _arviz():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        import arviz

    return arviz


def constraint_functionals(constraints: "BoundConstraints", tokens: Tensor) -> dict[str, np.ndarray]:
    """Per draw of ``tokens`` ``(C, D, L)``: ``rule_<name>`` (1.0 where the rule holds),
    ``feasible`` (1.0 where every rule holds) and ``expert_<name>`` (the expert's unweighted
    value), each ``(C, D)`` float64; names made identifiers (``n-glycosylation`` ->
    ``rule_n_glycosylation``). No forward pass: rules and experts read the tokens."""
    C, D, L = tokens.shape
    flat = tokens.reshape(-1, L)
    out: dict[str, np.ndarray] = {}

    def put(name: str, values: Tensor) -> None:
        if name in out:
            raise ValueError(f"two rules or experts give the functional {name!r}; rename one")
        out[name] = values.double().reshape(C, D).numpy()

    violations = constraints.violations(flat)
    for name, broke in violations.items():
        put(functional_name("rule", name), ~broke)
    if violations:
        put("feasible", constraints.feasible(flat))
    for name, values in constraints.expert_values(flat).items():
        put(functional_name("expert", name), values)
    return out


def functional_name(kind: str, name: str) -> str:
    """The name of a rule's (``kind="rule"``) or an expert's (``"expert"``) functional in
    ``run.nc``: ``<kind>_<name>``, the name made an identifier (``n-glycosylation`` ->
    ``rule_n_glycosylation``)."""
    return kind + "_" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def to_inference_data(
    run: "Run",
    *,
    mlm: "MaskedLM | None" = None,
    reference: str | Tensor | None = None,
    indicators: Sequence[tuple[int, str | int]] = (),
    functions: Mapping[str, Callable[[str], float]] | None = None,
    other_sites: Mapping[str, np.ndarray] | None = None,
    constraints: "BoundConstraints | None" = None,
) -> "arviz.InferenceData":
    """An ``arviz.InferenceData`` of a run, built with ``arviz.from_dict``.

    Parameters
    ----------
    run : Run
        From :func:`mlm_ppl.sample` / :func:`mlm_ppl.run_chains`, or
        :func:`mlm_ppl.inference.run_from_mcmc` for a ``pyro.infer.MCMC`` run.
    mlm : MaskedLM, optional
        Needed to decode sequences (``functions``), to read a string ``reference`` and token
        names in ``indicators``; its name goes to the attributes.
    reference : str or Tensor, optional
        A complete sequence (string, or ids ``(L,)``) for ``hamming_reference``; default: the
        start of chain 0.
    indicators : sequence of (position, token)
        Adds ``indicator_<position>_<token>``: 1.0 where the draw has ``token`` at
        ``position`` (token position in the encoded sequence; a token id or a string).
    functions : mapping name -> callable, optional
        Scalar functions of the decoded sequence, one variable each.
    other_sites : mapping name -> array, optional
        Draws ``(C, D, ...)`` of the model's other latent sites (continuous or discrete), added
        to the posterior as they are (see :func:`from_pyro`).
    constraints : BoundConstraints, optional
        The run's constraint spec bound to its target (a ``ConstraintTarget``'s
        ``constraints``): adds, per draw, ``rule_<name>`` (1.0 where the draw satisfies the
        rule), ``feasible`` (1.0 where it satisfies every rule) and ``expert_<name>`` (each
        expert's unweighted value), so the summary gives their R-hat and ESS
        (:func:`constraint_functionals`).

    Returns
    -------
    arviz.InferenceData
        ``posterior``: ``tokens`` (int, dims chain, draw, position), ``hamming_start`` (to each
        chain's own start: shows chains leaving their starts, but depends on the start, so it
        is left out of convergence verdicts), ``hamming_reference``, ``length`` (a variable gap's:
        the draw's gap length; its states are padded after the loop, so the Hamming distances
        count a residue against a pad as a difference) and the other functionals;
        ``sample_stats``: ``lp``, ``is_accepted``, ``acceptance_rate``, ``n_changed``,
        ``n_moves`` and a kernel's extras (surrogate-MH: ``inner_acceptance``,
        ``masked_copies``); attributes
        record model, kernel, energy, temperature, template, seed.
    """
    az = _arviz()
    tokens = run.tokens  # (C, D, L)
    C, D, L = tokens.shape
    free = _free_mask(run)
    posterior: dict[str, np.ndarray] = {"tokens": tokens.numpy().astype(np.int64)}
    start = run.initial if run.initial is not None else tokens[:, 0]
    posterior["hamming_start"] = _hamming(tokens, start[:, None, :], free)
    # A common reference makes a functional of the state alone (comparable across chains);
    # without one, chain 0's start serves.
    ref = _reference_ids(reference, mlm, L) if reference is not None else start[0]
    posterior["hamming_reference"] = _hamming(tokens, ref[None, None, :], free)
    gap = _attr_list(run.attrs, "gap_positions")
    if gap is not None:  # a variable gap: states padded after the loop (GapTarget)
        posterior["length"] = (tokens[..., gap] != int(run.attrs["pad_id"])).sum(-1).double().numpy()
    for position, token in indicators:
        tok_id = _token_id(token, mlm)
        if not 0 <= int(position) < L:
            raise ValueError(f"indicator position {position} is outside 0..{L - 1}")
        name = f"indicator_{position}_{mlm.vocab[tok_id] if mlm is not None else tok_id}"
        posterior[name] = (tokens[:, :, int(position)] == tok_id).double().numpy()
    if functions:
        if mlm is None:
            raise ValueError("functions of the decoded sequence need mlm= to decode the draws")
        decoded = [mlm.decode(tokens[c]) for c in range(C)]
        for name, fn in functions.items():
            if not name.isidentifier():
                raise ValueError(f"function name {name!r} must be an identifier")
            posterior[name] = np.array([[float(fn(s)) for s in chain] for chain in decoded])
    for name, values in (constraint_functionals(constraints, tokens) if constraints is not None else {}).items():
        if name in posterior:
            raise ValueError(f"the constraints' functional {name!r} clashes with another; rename the function")
        posterior[name] = values
    for name, values in (other_sites or {}).items():
        values = np.asarray(values)
        if name in posterior or values.shape[:2] != (C, D):
            raise ValueError(f"other site {name!r}: a new name with draws of shape ({C}, {D}, ...) expected")
        posterior[name] = values
    stats = {k: v.numpy() for k, v in run.stats.items()}
    attrs = {k: v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in run.attrs.items() if v is not None}
    if mlm is not None:
        attrs["model"] = mlm.name
        attrs["vocab"] = json.dumps(list(mlm.vocab))
    with warnings.catch_warnings():  # fewer draws than chains is a short run, not a transposed array
        warnings.filterwarnings("ignore", "More chains", UserWarning)
        return az.from_dict(
            posterior=posterior,
            sample_stats=stats,
            dims={"tokens": ["position"]},
            coords={"position": np.arange(L)},
            attrs=attrs,
        )


def from_pyro(
    mcmc: Any,
    *,
    site: str | None = None,
    element: int | None = None,
    mlm: "MaskedLM | None" = None,
    reference: str | Tensor | None = None,
    indicators: Sequence[tuple[int, str | int]] = (),
    functions: Mapping[str, Callable[[str], float]] | None = None,
) -> "arviz.InferenceData":
    """InferenceData of a finished ``pyro.infer.MCMC`` run of :class:`~mlm_ppl.MLMKernel` or
    :class:`~mlm_ppl.MLMGibbs`, where ``az.from_pyro`` and ``MCMC.summary`` stop on token draws.

    The token site (``site``, default: the only one; ``element`` picks one sequence of a site
    under a ``pyro.plate``) becomes ``tokens`` with the functionals of
    :func:`to_inference_data`; an ``MLMGibbs`` run's other latent sites (continuous and
    discrete) are added as they are, so :func:`summary` gives R-hat and ESS for both kinds.
    A site whose distribution has ``constraints`` adds their functionals per draw
    (``rule_<name>``, ``feasible``, ``expert_<name>``: :func:`constraint_functionals`).
    ``mlm`` defaults to the token site's model.
    """
    from .inference.gibbs import MLMGibbs, run_from_gibbs
    from .inference.pyro_kernel import MLMKernel, run_from_mcmc
    from .inference.starts import target_constraints

    kernel = mcmc.kernel
    others: dict[str, np.ndarray] = {}
    if isinstance(kernel, MLMKernel):
        run, target = run_from_mcmc(mcmc, kernel, site, element), kernel.target
    elif isinstance(kernel, MLMGibbs):
        run = run_from_gibbs(mcmc, kernel, site, element)
        target = kernel.site_target(site or kernel.mlm_sites[0], element)
        samples = mcmc.get_samples(group_by_chain=True)
        others = {k: v.detach().cpu().numpy() for k, v in samples.items() if k not in kernel.mlm_sites}
    else:
        raise TypeError(f"from_pyro reads MCMC runs of MLMKernel or MLMGibbs, not {type(kernel).__name__}")
    mlm = mlm if mlm is not None else getattr(target, "mlm", None)
    return to_inference_data(
        run,
        mlm=mlm,
        reference=reference,
        indicators=indicators,
        functions=functions,
        other_sites=others,
        constraints=target_constraints(target),
    )


def read_run(path: str) -> "arviz.InferenceData":
    """The InferenceData of a run: ``run.nc``, or a run directory holding one.

    Raises FileNotFoundError when there is no such file, ValueError when it is not an mlm-ppl
    run (no ``tokens`` draws or no ``is_accepted`` statistics) or holds what no run writes: a
    token id outside the model's vocabulary (recorded in the file), a free position outside
    the sequence.
    """
    import os

    if os.path.isdir(path):
        path = os.path.join(path, "run.nc")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    try:
        idata = _arviz().from_netcdf(path)
        if "tokens" not in idata.posterior or "is_accepted" not in idata.sample_stats:
            raise ValueError("no tokens or is_accepted")
        _check_tokens(idata)
    except Exception as err:
        raise ValueError(f"{path} is not an mlm-ppl run file ({err})") from None
    return idata


def _check_tokens(idata: "arviz.InferenceData") -> None:
    """A ValueError unless the draws are ``(C, D, L)`` integer ids of the recorded vocabulary and
    the recorded free positions lie in ``0 .. L-1``."""
    tokens = idata.posterior["tokens"].values
    if tokens.ndim != 3 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens are {tokens.dtype} of shape {tokens.shape}, not integer ids (chain, draw, position)")
    vocab = _attr_list(idata.attrs, "vocab")
    size = len(vocab) if vocab is not None else None
    bad = (tokens < 0) if size is None else (tokens < 0) | (tokens >= size)
    if bad.any():
        c, d, p = (int(i) for i in np.argwhere(bad)[0])
        where = "outside the vocabulary" + (f" of {size} tokens" if size is not None else "")
        raise ValueError(f"token id {int(tokens[c, d, p])} at chain {c}, draw {d}, position {p} is {where}")
    free = _attr_list(idata.attrs, "free_positions")
    L = tokens.shape[-1]
    if free is not None and any(not isinstance(i, int) or not 0 <= i < L for i in free):
        raise ValueError(f"free positions {free} lie outside the {L} positions of the draws")


@dataclass
class Summary:
    """Diagnostics of a run.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per functional: mean, sd, mcse_mean, ess_bulk, ess_tail, r_hat (rank-normalised
        split R-hat; Vehtari et al. 2021).
    acceptance_rate : float
        Fraction of accepted proposals.
    novel_transition_rate : float
        Fraction of steps whose accepted proposal changed the state (Goyal et al. 2021).
    chains : list of str
        Per-chain verdict: "converged", "not converged", "stuck" (never moved), "infeasible"
        (draws of density 0: they break a hard rule of the target) or "annealed" (a run that
        anneals: a mode seeker, whose draws are not samples of the target, whatever its R-hat).
    reasons : list of str
        Why each chain got its verdict.
    moves_per_step : float
        Mean accepted single-site changes per step (``n_moves``; NaN for runs that lack it).
    inner_acceptance : float or None
        Surrogate-MH: fraction of inner (surrogate) proposals accepted; None for other kernels.
    masked_copies_per_step : float or None
        Surrogate-MH: mean masked copies run per step; None for other kernels.
    annealing : str or None
        An annealed run's note (:func:`~mlm_ppl.inference.annealing.annealing_note`), the first
        line of the text; None for a run that samples its target.
    stopped : str or None
        Why a run with a stopping rule (:func:`stop_when_converged`) ended before its last draw,
        and where (the run's ``stopped`` attribute); None for a run that took every draw.
    lengths : list of (int, float, int, float, float) or None
        A variable gap's length marginal: per length of the prior, ``(length, prior pi(L),
        draws, frequency, MCSE of the frequency)`` over every draw of every chain; None for a
        run of one length.
    length_reference : LengthReference or None
        A length distribution the marginal is compared with (``summary(...,
        length_reference=)``), shown as a column beside it; None without one.
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
    stopped: str | None = None
    lengths: list[tuple[int, float, int, float, float]] | None = None
    length_reference: "LengthReference | None" = None

    @property
    def converged(self) -> bool:
        return all(v == CONVERGED for v in self.chains)

    def __str__(self) -> str:
        lines = [self.annealing, ""] if self.annealing is not None else []
        lines += [f"stopped early: {self.stopped}", ""] if self.stopped is not None else []
        lines += [self.table.to_string(float_format=lambda x: f"{x:.3f}"), ""]
        if self.lengths is not None:
            ref = self.length_reference
            lines += ["gap length: prior, draws, frequency over all draws and its Monte Carlo standard error"]
            if ref is None:
                lines += ["length   prior   draws  frequency   MCSE"]
                lines += [f"{L:>6}  {w:.4f}  {n:>6}  {f:9.4f}  {m:.4f}" for L, w, n, f, m in self.lengths]
            else:
                lines[-1] += f", and the reference {ref.source} renormalised over these lengths"
                lines += [f"(which hold {ref.inside:.1%} of its weight)"]
                lines += ["length   prior   draws  frequency   MCSE  reference"]
                lines += [
                    f"{L:>6}  {w:.4f}  {n:>6}  {f:9.4f}  {m:.4f}  {ref.weights[L]:9.4f}"
                    for L, w, n, f, m in self.lengths
                ]
            lines.append("")
        lines.append(
            f"acceptance rate {self.acceptance_rate:.3f}   novel-transition rate {self.novel_transition_rate:.3f}"
        )
        if self.inner_acceptance is not None:
            lines.append(
                f"surrogate: inner acceptance {self.inner_acceptance:.3f}   moves per step {self.moves_per_step:.2f}   "
                f"masked copies per step {self.masked_copies_per_step:.0f}"
            )
        for c, (verdict, why) in enumerate(zip(self.chains, self.reasons)):
            lines.append(f"chain {c}: {verdict} ({why})")
        return "\n".join(lines)


def acceptance_rates(is_accepted, n_changed) -> tuple[float, float]:
    """Acceptance rate and novel-transition rate of per-draw statistics ``(C, D)``.

    The novel-transition rate counts accepted proposals that change the state (Goyal et al.
    2021); a pseudo-Gibbs step that redraws the same token is accepted but not novel.
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
    """
    az = _arviz()
    post = idata.posterior
    names = [v for v in post.data_vars if v != "tokens" and not np.isnan(post[v].values).all()]
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
    # hamming_start depends on each chain's own start: chains legitimately disagree on it
    varying = [n for n in names if n != "hamming_start" and np.nanstd(post[n].values) > 0]
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
        if table is not None and n_draws >= MIN_DRAWS:
            for n in varying:
                r, eb, et = (float(table.loc[n, k]) for k in ("r_hat", "ess_bulk", "ess_tail"))
                if not r <= rhat_max:
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
        stopped=idata.attrs.get("stopped"),
        lengths=length_marginal(idata),
        length_reference=_reference_for(idata, length_reference),
    )


def _length_prior(idata: "arviz.InferenceData") -> dict[int, float] | None:
    """A variable-gap run's prior ``{L: pi(L)}`` in order of length (its ``length_prior``
    attribute); None for a run of one length."""
    prior = _attr_list(idata.attrs, "length_prior")
    if prior is None or "length" not in idata.posterior:
        return None
    return {int(L): float(w) for L, w in sorted(prior.items(), key=lambda kw: int(kw[0]))}


def gap_lengths(idata: "arviz.InferenceData") -> list[int] | None:
    """The gap lengths a variable-gap run's prior weighs, in order; None for a run of one length."""
    prior = _length_prior(idata)
    return None if prior is None else list(prior)


def length_marginal(idata: "arviz.InferenceData") -> list[tuple[int, float, int, float, float]] | None:
    """A variable gap's length marginal (:attr:`Summary.lengths`), None for a run of one length."""
    prior = _length_prior(idata)
    if prior is None:
        return None
    lengths = np.asarray(idata.posterior["length"].values)  # (C, D)
    rows = []
    for L, weight in prior.items():
        indicator = (lengths == L).astype(float)
        n = int(indicator.sum())
        rows.append((L, weight, n, n / indicator.size, _frequency_mcse(indicator)))
    return rows


def _reference_for(idata: "arviz.InferenceData", reference: "LengthReference | None") -> "LengthReference | None":
    """``reference`` when it covers the run's lengths; a ValueError for a run of one length or a
    reference read over other lengths."""
    if reference is None:
        return None
    lengths = gap_lengths(idata)
    if lengths is None:
        raise ValueError(
            "a length reference applies to a run over a variable gap's lengths (--length-mode jump); "
            "this run has one length"
        )
    if list(reference.weights) != lengths:
        raise ValueError(
            f"the length reference covers lengths {list(reference.weights)}, the run {lengths}: read it over the "
            "run's lengths (LengthReference.read(path, gap_lengths(idata)))"
        )
    return reference


def length_log_prior(idata: "arviz.InferenceData") -> np.ndarray | None:
    """``(C, D)`` ``log pi(L)`` of each draw's gap length, the part of a variable gap's ``lp`` that is
    not the MLM's (``lp = log pi(L) - E/T``); None for a run of one length."""
    prior = _length_prior(idata)
    if prior is None:
        return None
    table = {L: math.log(w) for L, w in prior.items()}
    return np.vectorize(lambda L: table.get(int(L), -math.inf), otypes=[float])(idata.posterior["length"].values)


def _frequency_mcse(indicator: np.ndarray) -> float:
    """ArviZ's MCSE of the mean of an indicator ``(C, D)``: nan where it cannot be estimated (fewer
    than 4 draws per chain, or the same value in every draw, as in a stuck run)."""
    if indicator.shape[1] < 4 or indicator.std() == 0:
        return float("nan")
    return float(_arviz().mcse(indicator))


def stop_when_converged(
    *, mlm: "MaskedLM | None" = None, constraints: "BoundConstraints | None" = None
) -> Callable[["Run"], str | None]:
    """A stopping rule for :func:`~mlm_ppl.run_chains` (``stop=``): the draws so far end the run
    when their :func:`summary` (of :func:`to_inference_data` with ``mlm`` and ``constraints``, as
    the run's outputs build it) says every chain converged. The run's summary then says converged
    too, and says it stopped early (``Summary.stopped``)."""

    def rule(run: "Run") -> str | None:
        report = summary(to_inference_data(run, mlm=mlm, constraints=constraints))
        return f"every chain converged ({report.reasons[0]})" if report.converged else None

    return rule


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


def plot_diagnostics(
    idata: "arviz.InferenceData",
    out_dir: str,
    *,
    mlm: "MaskedLM | None" = None,
    length_reference: "LengthReference | None" = None,
) -> list[str]:
    """Save PNGs: trace and rank plots of ``lp``, running acceptance, token-frequency heatmap, and
    for a variable gap ``length.png`` (with ``length_reference`` beside the marginal when given).

    Returns the paths written.
    """
    import os

    import matplotlib.pyplot as plt  # ArviZ draws through pyplot; the other plots use standalone Figures
    from matplotlib.figure import Figure

    az = _arviz()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    lp = idata.sample_stats["lp"]
    if not np.isnan(lp.values).all():
        for kind, fn in (("trace", az.plot_trace), ("rank", az.plot_rank)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # ArviZ 0.23 on matplotlib 3.11
                warnings.simplefilter("ignore", UserWarning)  # KDE of a constant lp (stuck chains)
                axes = fn(idata.sample_stats, var_names=["lp"])
            fig = np.ravel(axes)[0].figure
            paths.append(_save(fig, out_dir, f"{kind}_lp.png"))
            plt.close(fig)  # only the figure ArviZ made: a notebook's own figures stay open
    acc = idata.sample_stats["is_accepted"].values.astype(float)  # (C, D)
    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    running = np.cumsum(acc, axis=1) / np.arange(1, acc.shape[1] + 1)
    for c in range(acc.shape[0]):
        ax.plot(running[c], label=f"chain {c}")
    ax.set(xlabel="draw", ylabel="running acceptance rate", ylim=(0, 1.02), title="Acceptance")
    ax.legend(fontsize="small")
    paths.append(_save(fig, out_dir, "acceptance.png"))
    tokens = idata.posterior["tokens"].values  # (C, D, L)
    free = _attr_list(idata.attrs, "free_positions")
    if free is not None:
        positions = np.asarray(free)
    else:  # the positions that vary, or all
        varying = np.nonzero((tokens != tokens[:1, :1, :]).any(axis=(0, 1)))[0]
        positions = varying if len(varying) else np.arange(tokens.shape[-1])
    vocab_ids = np.unique(tokens[..., positions])
    freq = np.stack([(tokens[..., positions] == v).mean(axis=(0, 1)) for v in vocab_ids])  # (K, P)
    fig = Figure(figsize=(max(5, 0.35 * len(positions) + 2), max(3, 0.3 * len(vocab_ids) + 1)))
    ax = fig.subplots()
    im = ax.imshow(freq, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(positions)), [str(p) for p in positions], fontsize="small")
    vocab = list(mlm.vocab) if mlm is not None else _attr_list(idata.attrs, "vocab")
    labels = [vocab[v] if vocab is not None else str(v) for v in vocab_ids]
    ax.set_yticks(range(len(vocab_ids)), labels, fontsize="small")
    ax.set(xlabel="token position (sampled positions)", ylabel="token", title="Token frequency over all draws")
    fig.colorbar(im, ax=ax, label="frequency")
    paths.append(_save(fig, out_dir, "token_frequency.png"))
    rows = length_marginal(idata)
    reference = _reference_for(idata, length_reference)
    if rows is not None:
        paths.append(_plot_lengths(idata, rows, out_dir, reference))
    return paths


def _plot_lengths(idata: "arviz.InferenceData", rows: list, out_dir: str, reference: "LengthReference | None") -> str:
    """``length.png`` of a run over a variable gap's lengths: each chain's length at every draw (do
    the chains visit the same lengths?) and the length marginal, +- 2 MCSE, beside the prior (and
    the reference, when given)."""
    import os

    from matplotlib.figure import Figure

    lengths = np.asarray(idata.posterior["length"].values)  # (C, D)
    fig = Figure(figsize=(10, 3.5))
    trace, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for c in range(lengths.shape[0]):
        trace.step(np.arange(lengths.shape[1]), lengths[c], where="post", lw=1, label=f"chain {c}")
    trace.set(xlabel="draw", ylabel="gap length", title="Gap length of each chain")
    trace.legend(fontsize="small")
    L = np.array([r[0] for r in rows])
    freq, mcse = np.array([r[3] for r in rows]), np.array([r[4] for r in rows])
    bars.bar(L, freq, color="tab:blue", label="draws (+- 2 MCSE)")
    bars.errorbar(L, freq, yerr=2 * np.nan_to_num(mcse), fmt="none", ecolor="black", capsize=2)
    bars.plot(L, [r[1] for r in rows], "o", color="tab:orange", label="prior pi(L)")
    if reference is not None:
        label = f"reference ({os.path.basename(reference.source)}, renormalised)"
        bars.plot(L, [reference.weights[int(x)] for x in L], "s-", color="tab:green", ms=4, lw=1, label=label)
    bars.set(xlabel="gap length", ylabel="probability", title="Length marginal")
    bars.set_xticks(L)
    bars.legend(fontsize="small")
    return _save(fig, out_dir, "length.png")


@dataclass(frozen=True)
class LoopDistribution:
    """What a run's draws say of the sampled positions (the loop): each position's token
    frequencies and the most frequent whole loops, over every draw of every chain.

    Attributes
    ----------
    positions : list of int
        The sampled token positions (``[CLS]`` is 0).
    tokens : list of str
        The tokens that occur at them, in vocabulary order (ids where the run has no vocabulary).
    frequencies : numpy.ndarray
        ``(P, K)``: the fraction of draws with ``tokens[k]`` at ``positions[p]``.
    motifs : list of (str, int, float, float)
        The ``top`` most frequent loops: the loop (its tokens joined), its count, its frequency
        and the Monte Carlo standard error of that frequency (ArviZ's MCSE of the mean of the
        indicator over the chains; nan with fewer than 4 draws per chain, or when every draw is
        that loop or none is).
    draws : int
        Draws counted (chains x draws).
    """

    positions: list[int]
    tokens: list[str]
    frequencies: np.ndarray
    motifs: list[tuple[str, int, float, float]]
    draws: int

    def __str__(self) -> str:
        def cell(text: str) -> str:  # a token such as BERT's "|" must not split a markdown cell
            return text.replace("|", "\\|")

        head = "| position | " + " | ".join(map(cell, self.tokens)) + " |"
        rule = "|---|" + "---|" * len(self.tokens)
        rows = [
            f"| {p} | " + " | ".join(f"{100 * f:.0f}" if f > 0 else "." for f in freq) + " |"
            for p, freq in zip(self.positions, self.frequencies)
        ]
        motif_rows = [
            f"| {i} | {cell(loop)} | {count} | {freq:.4f} | {mcse:.4f} |"
            for i, (loop, count, freq, mcse) in enumerate(self.motifs, 1)
        ]
        return "\n".join(
            [
                f"Token frequency at each sampled position, % of {self.draws} draws ('.': never):",
                "",
                head,
                rule,
                *rows,
                "",
                f"The {len(self.motifs)} most frequent loops:",
                "",
                "| rank | loop | draws | frequency | MCSE |",
                "|---|---|---|---|---|",
                *motif_rows,
            ]
        )


def loop_distribution(idata: "arviz.InferenceData", *, top: int = 10) -> LoopDistribution:
    """Token frequencies at the sampled positions and the ``top`` most frequent loops of a run
    (:class:`LoopDistribution`), read from ``idata`` alone (its ``free_positions`` and ``vocab``)."""
    top = check_count(top, "top", minimum=1)
    tokens = np.asarray(idata.posterior["tokens"].values)  # (C, D, L)
    free = _attr_list(idata.attrs, "free_positions")
    if free is None:
        raise ValueError("the run does not record its free positions (attrs['free_positions']); nothing to call a loop")
    positions = [int(p) for p in free]
    loops = tokens[..., positions]  # (C, D, P)
    C, D, P = loops.shape
    vocab = _attr_list(idata.attrs, "vocab")
    ids = np.unique(loops)
    names = [str(vocab[v]) if vocab is not None else str(int(v)) for v in ids]
    flat = loops.reshape(C * D, P)
    frequencies = np.stack([(flat == v).mean(0) for v in ids], axis=1)  # (P, K)
    unique, inverse, counts = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(C, D)
    order = np.argsort(-counts, kind="stable")[:top]
    pad = idata.attrs.get("pad_id")  # a variable gap's pads: no residue, left out of a loop's text
    residues = [v for v in ids if pad is None or v != int(pad)]
    sep = "" if vocab is not None and all(len(str(vocab[v])) == 1 for v in residues) else " "
    motifs = []
    for u in order:
        loop = sep.join(
            str(vocab[v]) if vocab is not None else str(int(v)) for v in unique[u] if pad is None or v != int(pad)
        )
        mcse = _frequency_mcse((inverse == u).astype(float))
        motifs.append((loop, int(counts[u]), float(counts[u]) / (C * D), mcse))
    return LoopDistribution(positions, names, frequencies, motifs, C * D)


def _save(fig, out_dir: str, name: str) -> str:
    import os

    return save_figure(fig, os.path.join(out_dir, name), dpi=100, bbox_inches="tight")


def _attr_list(attrs: Mapping, name: str) -> Any:
    """A list (or mapping) attribute, stored as itself in a Run and as JSON text in InferenceData."""
    value = attrs.get(name)
    return json.loads(value) if isinstance(value, str) else value


def _free_mask(run: "Run") -> Tensor:
    """``(L,)`` bool: the sampled positions (all positions if the run does not say)."""
    L = run.tokens.shape[-1]
    free = _attr_list(run.attrs, "free_positions")
    mask = torch.zeros(L, dtype=torch.bool)
    if free is None:
        return ~mask
    mask[torch.as_tensor(free, dtype=torch.long)] = True
    return mask


def _hamming(tokens: Tensor, other: Tensor, free: Tensor) -> np.ndarray:
    return ((tokens != other) & free).sum(-1).double().numpy()


def _reference_ids(reference, mlm, L: int) -> Tensor:
    if isinstance(reference, str):
        if mlm is None:
            raise ValueError("a string reference needs mlm= to encode it")
        ids = mlm.encode([reference]).input_ids[0]
    else:
        ids = torch.as_tensor(reference, dtype=torch.long)
    if ids.shape != (L,):
        raise ValueError(f"reference has {ids.shape[-1]} tokens, the draws have {L}; give a complete sequence")
    return ids


def _token_id(token, mlm) -> int:
    if isinstance(token, str):
        if mlm is None or token not in mlm.vocab:
            raise ValueError(f"unknown token {token!r}" + ("" if mlm is not None else " (pass mlm= to name tokens)"))
        return mlm.vocab.index(token)
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"indicator token must be a str or int id, got {token!r}")
    return int(token)
