"""Deep states of a run: the lowest-energy states its chains visited, how each chain met them, and
whether the designed positions are ones the model knows by heart (memorized: :mod:`.sites`).

* :func:`deep_states`: the ``K`` distinct states of lowest energy, with which chains visited
  them, when first, how often and the longest stay (:class:`DeepStates`).
* :func:`deep_disagreement`: the line every summary carries when a state far below the rest was
  visited by some chains only: R-hat compares chains with each other and cannot weigh it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import check_count
from .data import attr_list
from .lengths import length_log_prior
from .loops import loop_draws
from .sites import MEMORIZED_PROB, site_scores

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from ..models.masked_lm import MaskedLM

__all__ = [
    "DEEP_GAP",
    "SITE_FUNCTIONALS",
    "draw_energies",
    "deep_states",
    "deep_disagreement",
    "DeepState",
    "DeepStates",
]

DEEP_GAP = 3.0
"""Nats of log density: a state this far below the best any other chain reached is one some
chains never found (:func:`deep_disagreement`)."""

SITE_FUNCTIONALS = ("site_prob", "site_energy", "memorized")
"""The per-draw functionals :func:`site_scores` adds: shown in a summary's table, left out of its
verdicts (a stop rule without the model cannot read them, and the deep-state line reports what
they would add)."""


def draw_energies(idata: "arviz.InferenceData") -> np.ndarray | None:
    """The MLM energy ``E`` of each draw, from its ``lp``, or None where the run cannot tell it.

    ``E = -T (lp - sum_k w_k f_k - log pi(L))``: the experts' weights from the run's recorded
    settings, a variable gap's length prior.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData, with ``lp`` in its ``sample_stats``.

    Returns
    -------
    numpy.ndarray or None
        Shape ``(C, D)``, float64: each draw's energy; None where a run with experts does not
        record their weights (its energy cannot be told from ``lp``).

    Examples
    --------
    At temperature 1, without experts or a length prior, ``E = -lp``:

    >>> import numpy as np
    >>> from mlm_ppl.diagnostics import draw_energies
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> idata = to_inference_data(run, mlm=mlm)
    >>> energy = draw_energies(idata)
    >>> energy.shape, bool(np.allclose(energy, -idata.sample_stats["lp"].values))
    ((2, 20), True)
    """
    from ..models.constraints import recorded_expert_weights

    lp = np.asarray(idata.sample_stats["lp"].values, dtype=np.float64)
    factor = np.zeros_like(lp)
    experts = [v for v in idata.posterior.data_vars if str(v).startswith("expert_")]
    if experts:
        config = attr_list(idata.attrs, "config")
        record = config.get("constraints") if isinstance(config, dict) else None
        if record is None:
            return None
        from .data import functional_name

        for name, weight in recorded_expert_weights(record, "run.nc settings: constraints").items():
            factor += weight * np.asarray(idata.posterior[functional_name("expert", name)].values, dtype=np.float64)
    prior = length_log_prior(idata)
    if prior is not None:
        factor += prior
    return -float(idata.attrs.get("temperature", 1.0)) * (lp - factor)


@dataclass(frozen=True)
class DeepState:
    """One distinct state of a run: its loop, energy, scores, and how the chains visited it.

    One of the ``states`` of a :class:`DeepStates` (:func:`deep_states`).

    Parameters
    ----------
    loop : str
        The designed positions' tokens (residues joined, words spaced; a variable gap's pads
        left out).
    energy : float or None
        The MLM energy ``E``; None where the run cannot tell it (:func:`draw_energies`).
    lp : float
        The log density of the state.
    site_energy : float or None
        The designed positions' own ``E_norm`` terms, summed; None without them.
    site_prob : float or None
        The designed positions' mean conditional probability; None without it.
    memorized : bool or None
        Whether ``site_prob >= MEMORIZED_PROB``; None without ``site_prob``.
    chains : dict of int to int
        The chains that visited the state, each with its number of draws in it.
    first : tuple of (int, int)
        The first visit, ``(chain, draw)``.
    longest : int
        The longest stay: consecutive draws of one chain in the state.
    ids : tuple of int, optional
        The designed positions' token ids (default empty).
    """

    loop: str
    energy: float | None
    lp: float
    site_energy: float | None
    site_prob: float | None
    memorized: bool | None
    chains: dict[int, int]
    first: tuple[int, int]
    longest: int
    ids: tuple[int, ...] = ()

    @property
    def visits(self) -> int:
        """The draws of every chain in this state."""
        return sum(self.chains.values())


@dataclass(frozen=True)
class DeepStates:
    """The distinct states of lowest energy of a run, with the run's size and disagreement line.

    What :func:`deep_states` returns; ``str()`` gives a markdown table of the states.

    Parameters
    ----------
    states : list of DeepState
        The states, lowest energy first (by ``lp`` where the energy cannot be told).
    chains : int
        The run's chains.
    draws : int
        The run's draws per chain.
    disagreement : str or None
        The run's :func:`deep_disagreement` line; None where the chains agree.
    by : str
        What the states are ranked by (``"energy E"``, or ``-lp`` and why).
    """

    states: list[DeepState]
    chains: int
    draws: int
    disagreement: str | None
    by: str

    def library(self, *, exclude_memorized: bool = False) -> str:
        """The states' loops as a library for a later run's unmask proposals.

        The ``library=`` option of :class:`~mlm_ppl.MetropolisHastings` and surrogate-MH
        (``--library``).

        Parameters
        ----------
        exclude_memorized : bool, optional
            Leave out the memorized states (a design run that should not revisit them; their mass
            then goes unseen, not removed). Default False.

        Returns
        -------
        str
            The loops separated by commas, deepest first.

        Raises
        ------
        ValueError
            Where no loop is left: the run has no feasible state, or every state is memorized and
            ``exclude_memorized``.
        """
        kept = [s.loop for s in self.states if not (exclude_memorized and s.memorized)]
        if not self.states:
            raise ValueError("no deep state to make a library of (no chain visited a feasible state)")
        if not kept:
            raise ValueError("every deep state is memorized: no loop is left for a library")
        return ",".join(kept)

    def __str__(self) -> str:
        def num(x: float | None, fmt: str = ".2f") -> str:
            return "-" if x is None else format(x, fmt)

        lines = [
            f"The {len(self.states)} distinct states of lowest {self.by} that any chain visited "
            f"({self.chains} chains x {self.draws} draws); site terms: the designed positions' own E_norm terms, "
            f"mean p: their mean conditional probability, memorized: mean p >= {MEMORIZED_PROB}:",
            "",
            "| rank | loop | E | lp | site terms | mean p | memorized | chains (draws) | first visit | draws | "
            "longest stay |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, s in enumerate(self.states, 1):
            chains = ", ".join(f"{c} ({n})" for c, n in sorted(s.chains.items()))
            memo = "-" if s.memorized is None else ("yes" if s.memorized else "no")
            lines.append(
                f"| {i} | {s.loop} | {num(s.energy)} | {num(s.lp)} | {num(s.site_energy)} | {num(s.site_prob, '.3f')} "
                f"| {memo} | {chains} | chain {s.first[0]}, draw {s.first[1]} | {s.visits} | {s.longest} |"
            )
        if self.disagreement is not None:
            lines += ["", self.disagreement]
        return "\n".join(lines)


def state_index(idata: "arviz.InferenceData", states: list[DeepState]) -> np.ndarray:
    """``(C, D)``: which of ``states`` each draw is (0, 1, ...), -1 for none."""
    tokens, free, _, _ = loop_draws(idata)
    loops = tokens[..., free]
    out = np.full(loops.shape[:2], -1)
    for i, s in enumerate(states):
        out[(loops == np.asarray(s.ids)).all(-1) & (out < 0)] = i
    return out


def loop_text(ids: np.ndarray, vocab: Any, pad: int | None) -> str:
    """A loop's tokens as text (a variable gap's pads left out; residues joined, words spaced)."""
    kept = [int(v) for v in ids if pad is None or int(v) != pad]
    names = [str(vocab[v]) if vocab is not None else str(v) for v in kept]
    return ("" if vocab is not None and all(len(n) == 1 for n in names) else " ").join(names)


def _draws(n: int) -> str:
    return f"{n} draw" if n == 1 else f"{n} draws"


def _longest_run(flags: np.ndarray) -> int:
    best = run = 0
    for f in flags:
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def deep_disagreement(idata: "arviz.InferenceData", gap: float = DEEP_GAP) -> str | None:
    """A line when some chains never came within ``gap`` nats of log density of the best state visited.

    R-hat compares chains with each other, so it cannot weigh a deep state that some never visit:
    every summary carries this line when it happens.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData.
    gap : float, optional
        Nats of log density below the best state any chain visited (default
        :data:`~mlm_ppl.diagnostics.DEEP_GAP`, 3).

    Returns
    -------
    str or None
        The line: the best state, the chains that held it, and the best ``lp`` of each chain that
        never came within ``gap`` of it. None when every chain did, or the run has one chain, no
        ``lp``, or is not one run's ``tokens`` of recorded free positions (as ``from_pyro``'s
        sites).
    """
    if "lp" not in idata.sample_stats or "tokens" not in idata.posterior or "free_positions" not in idata.attrs:
        return None  # no log density, or not one run's draws of recorded free positions (a Pyro run's sites)
    lp = np.asarray(idata.sample_stats["lp"].values, dtype=np.float64)
    if lp.shape[0] < 2 or lp.shape[1] == 0 or not np.isfinite(lp).any():
        return None
    best = np.where(np.isfinite(lp), lp, -np.inf).max(axis=1)  # (C,)
    top = float(best.max())
    behind = [c for c in range(lp.shape[0]) if best[c] < top - gap]
    if not behind:
        return None
    tokens, free, vocab, pad = loop_draws(idata)
    c0, d0 = (int(i) for i in np.argwhere(lp == top)[0])
    loop = tokens[c0, d0, free]
    at = (tokens[..., free] == loop).all(-1)  # (C, D) draws of that state
    holders = [c for c in range(lp.shape[0]) if at[c].any()]
    held = ", ".join(f"chain {c} ({_draws(int(at[c].sum()))}, longest stay {_longest_run(at[c])})" for c in holders)
    others = ", ".join(f"chain {c} {best[c]:.2f}" for c in behind)
    return (
        f"chains disagree on deep states; R-hat cannot weigh them: the best state visited, "
        f"{loop_text(loop, vocab, pad)} (lp {top:.2f}), was held by {held}; {len(behind)} of {lp.shape[0]} chains "
        f"never came within {gap:g} nats of it (their best lp: {others})"
    )


def deep_states(idata: "arviz.InferenceData", k: int = 10, *, mlm: "MaskedLM | None" = None) -> DeepStates:
    """The ``k`` distinct states of lowest energy that any chain of the run visited.

    Ranked by the MLM energy (:func:`draw_energies`), or by ``lp`` where the run cannot tell its
    energy; an infeasible draw is no state. ``site_energy`` and ``site_prob`` come from the run's
    own columns (``run.nc`` of mlm-ppl 0.6 and later), else from ``mlm`` (one masked copy per
    designed position of each of the ``k`` states), else are left out.

    Parameters
    ----------
    idata : arviz.InferenceData
        One run's InferenceData, with its ``tokens`` and recorded free positions.
    k : int, optional
        The number of states (default 10).
    mlm : MaskedLM or None, optional
        The run's model, to score the states' designed positions where the run has no such
        columns (default None).

    Returns
    -------
    DeepStates
        The states, lowest first, with which chains visited them, when first, how often and the
        longest stay.

    Raises
    ------
    ValueError
        Where ``k`` is below 1, or ``idata`` holds no ``tokens`` (a Pyro run's sites keep their
        names) or does not record its free positions.
    TypeError
        Where ``k`` is not an integer.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import deep_states
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> idata = to_inference_data(run, mlm=mlm)
    >>> report = deep_states(idata, 3)
    >>> report.chains, report.draws, len(report.states)
    (2, 20, 3)
    >>> len(report.states[0].loop)  # the three designed residues
    3
    """
    k = check_count(k, "k", minimum=1)
    tokens, free, vocab, pad = loop_draws(idata)
    C, D, L = tokens.shape
    lp = np.asarray(idata.sample_stats["lp"].values, dtype=np.float64)
    energy = draw_energies(idata)
    key = energy if energy is not None else -lp
    loops = tokens[..., free].reshape(C * D, len(free))
    flat_key = np.where(np.isfinite(lp.reshape(-1)), key.reshape(-1), np.inf)  # an infeasible draw is no state
    unique, first_index, inverse = np.unique(loops, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    best = np.full(len(unique), np.inf)
    np.minimum.at(best, inverse, flat_key)
    order = [u for u in np.argsort(best, kind="stable") if np.isfinite(best[u])][:k]
    post = idata.posterior
    site: dict[str, np.ndarray] | None = None
    if "site_prob" in post and "site_energy" in post:
        site = {n: np.asarray(post[n].values).reshape(-1) for n in ("site_prob", "site_energy")}
    elif mlm is not None and order:
        rows = np.array([first_index[u] for u in order])
        scores = site_scores(tokens.reshape(C * D, 1, L)[rows], free, mlm, pad_id=pad)
        assert scores is not None  # no budget: every state is read
        site = {n: np.full(C * D, np.nan) for n in ("site_prob", "site_energy")}
        for n in site:
            site[n][rows] = scores[n][:, 0]
    states = []
    for u in order:
        at = (inverse == u).reshape(C, D)
        j = int(first_index[u])  # a draw of this state
        first = min((int(np.flatnonzero(at[c])[0]), c) for c in range(C) if at[c].any())
        prob = None if site is None or math.isnan(site["site_prob"][j]) else float(site["site_prob"][j])
        states.append(
            DeepState(
                loop=loop_text(unique[u], vocab, pad),
                energy=None if energy is None else float(energy.reshape(-1)[j]),
                lp=float(lp.reshape(-1)[j]),
                site_energy=None if prob is None or site is None else float(site["site_energy"][j]),
                site_prob=prob,
                memorized=None if prob is None else prob >= MEMORIZED_PROB,
                chains={c: int(at[c].sum()) for c in range(C) if at[c].any()},
                first=(first[1], first[0]),
                longest=max(_longest_run(at[c]) for c in range(C)),
                ids=tuple(int(v) for v in unique[u]),
            )
        )
    by = "energy E" if energy is not None else "-lp (the run does not record its experts' weights)"
    return DeepStates(states, C, D, deep_disagreement(idata), by)
