"""A variable gap's lengths in a run: its prior, the length marginal with its MCSE, a reference beside it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .data import attr_list, load_arviz

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from ..models.gaps import LengthReference


def _length_prior(idata: "arviz.InferenceData") -> dict[int, float] | None:
    """A variable-gap run's prior ``{L: pi(L)}`` in order of length (its ``length_prior``
    attribute); None for a run of one length."""
    prior = attr_list(idata.attrs, "length_prior")
    if prior is None or "length" not in idata.posterior:
        return None
    return {int(L): float(w) for L, w in sorted(prior.items(), key=lambda kw: int(kw[0]))}


def gap_lengths(idata: "arviz.InferenceData") -> list[int] | None:
    """The gap lengths a variable-gap run's prior weighs, in order; None for a run of one length.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData.

    Returns
    -------
    list of int or None
        The lengths of the prior (its ``length_prior`` attribute), shortest first; None for a run
        of one length.

    Raises
    ------
    ValueError
        Where the run's ``length_prior`` attribute is damaged.

    Examples
    --------
    A variable gap of 1 to 3 positions, sampled by gap-jump chains:

    >>> from mlm_ppl.diagnostics import gap_lengths
    >>> from mlm_ppl import sample
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = sample(mlm, "A[MASK]{1,3}C", length_mode="jump", num_chains=2, num_samples=10, seed=0)
    >>> idata = run.inference_data()
    >>> gap_lengths(idata)
    [1, 2, 3]
    """
    prior = _length_prior(idata)
    return None if prior is None else list(prior)


def length_marginal(idata: "arviz.InferenceData") -> list[tuple[int, float, int, float, float]] | None:
    """A variable gap's length marginal, over every draw of every chain; None for a run of one length.

    What a :class:`~mlm_ppl.diagnostics.Summary`'s ``lengths`` holds and its length table shows.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData.

    Returns
    -------
    list of (int, float, int, float, float) or None
        Per length of the prior, shortest first: ``(length, prior pi(L), draws, frequency, MCSE
        of the frequency)`` (the MCSE nan with fewer than 4 draws per chain or a length every
        draw has or none has); None for a run of one length.

    Raises
    ------
    ValueError
        Where the run's ``length_prior`` attribute is damaged.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import length_marginal
    >>> from mlm_ppl import sample
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = sample(mlm, "A[MASK]{1,3}C", length_mode="jump", num_chains=2, num_samples=10, seed=0)
    >>> idata = run.inference_data()
    >>> [row[0] for row in length_marginal(idata)]
    [1, 2, 3]
    >>> sum(row[2] for row in length_marginal(idata))  # every draw has one length
    20
    """
    prior = _length_prior(idata)
    if prior is None:
        return None
    lengths = np.asarray(idata.posterior["length"].values)  # (C, D)
    rows = []
    for L, weight in prior.items():
        indicator = (lengths == L).astype(float)
        n = int(indicator.sum())
        rows.append((L, weight, n, n / indicator.size, frequency_mcse(indicator)))
    return rows


def length_terms(idata: "arviz.InferenceData") -> dict[int, float] | None:
    """A variable-gap run's mean designed-position term per residue at each length of its prior:
    the mean over its draws of that length of ``site_energy / L`` (nan where no draw has it); None
    for a run of one length or without ``site_energy``. Beside ``log V`` (the uniform's term) it
    says why ``exp(-E)`` over lengths weighs long loops: while the mean term per residue is below
    ``log V``, each residue more multiplies the number of loops more than it divides their weight."""
    prior = _length_prior(idata)
    if prior is None or "site_energy" not in idata.posterior:
        return None
    lengths = np.asarray(idata.posterior["length"].values)
    terms = np.asarray(idata.posterior["site_energy"].values)
    return {L: float((terms[lengths == L] / L).mean()) if (lengths == L).any() else math.nan for L in prior}


def reference_for(idata: "arviz.InferenceData", reference: "LengthReference | None") -> "LengthReference | None":
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
    """``log pi(L)`` of each draw's gap length, the part of a variable gap's ``lp`` that is not the MLM's.

    A variable gap's ``lp = log pi(L) - E/T``.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData.

    Returns
    -------
    numpy.ndarray or None
        Shape ``(C, D)``, float: each draw's ``log pi(L)`` (``-inf`` for a length outside the
        prior); None for a run of one length.

    Raises
    ------
    ValueError
        Where the run's ``length_prior`` attribute is damaged.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import length_log_prior
    >>> from mlm_ppl import sample
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = sample(mlm, "A[MASK]{1,3}C", length_mode="jump", num_chains=2, num_samples=10, seed=0)
    >>> idata = run.inference_data()
    >>> length_log_prior(idata).shape
    (2, 10)
    """
    prior = _length_prior(idata)
    if prior is None:
        return None
    table = {L: math.log(w) for L, w in prior.items()}
    return np.vectorize(lambda L: table.get(int(L), -math.inf), otypes=[float])(idata.posterior["length"].values)


def frequency_mcse(indicator: np.ndarray) -> float:
    """ArviZ's MCSE of the mean of an indicator ``(C, D)``: nan where it cannot be estimated (fewer
    than 4 draws per chain, or the same value in every draw, as in a stuck run)."""
    if indicator.shape[1] < 4 or indicator.std() == 0:
        return float("nan")
    return float(load_arviz().mcse(indicator))
