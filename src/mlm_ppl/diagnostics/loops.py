"""The distribution of the sampled loops: per-position frequencies and the most frequent loops, with MCSE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import check_count
from .data import attr_list
from .lengths import frequency_mcse

if TYPE_CHECKING:  # pragma: no cover
    import arviz


def loop_draws(idata: "arviz.InferenceData") -> tuple[np.ndarray, list[int], Any, int | None]:
    """The draws ``(C, D, L)``, the designed positions, the vocabulary and the pad id of a run; a
    ValueError for an InferenceData that is not one run's draws (``from_pyro``'s token sites keep
    their Pyro names) or does not record its free positions."""
    if "tokens" not in idata.posterior:
        raise ValueError("the InferenceData holds no 'tokens' (a Pyro run keeps its sites' names): give one run's")
    tokens = np.asarray(idata.posterior["tokens"].values)
    free = attr_list(idata.attrs, "free_positions")
    if free is None:
        raise ValueError("the run does not record its free positions (attrs['free_positions']); nothing to call a loop")
    pad = idata.attrs.get("pad_id")
    return tokens, [int(p) for p in free], attr_list(idata.attrs, "vocab"), None if pad is None else int(pad)


@dataclass(frozen=True)
class LoopDistribution:
    """What a run's draws say of the loop: each sampled position's token frequencies, the top loops.

    Each position's token frequencies and the most frequent whole loops, over every draw of every
    chain; what :func:`loop_distribution` returns, and ``str()`` gives both as markdown tables.

    Parameters
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
    """Token frequencies at the sampled positions and the ``top`` most frequent loops of a run.

    Read from ``idata`` alone (its ``free_positions`` and ``vocab``); a variable gap's pads are
    left out of a loop's text.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData, with its ``tokens`` and recorded free positions.
    top : int, optional
        The number of most frequent loops (default 10).

    Returns
    -------
    LoopDistribution
        The positions, the tokens found at them, their frequencies and the ``top`` loops.

    Raises
    ------
    ValueError
        Where ``top`` is below 1, the draws are not one run's ``tokens`` (a Pyro run's keep its
        sites' names), or the run does not record its free positions.
    TypeError
        Where ``top`` is not an integer.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.diagnostics import loop_distribution
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> loops = loop_distribution(to_inference_data(run, mlm=mlm), top=3)
    >>> loops.positions, loops.draws  # the masked positions ([CLS] is 0), 2 chains x 20 draws
    ([2, 4, 5], 40)
    >>> loops.frequencies.shape == (3, len(loops.tokens))
    True
    """
    top = check_count(top, "top", minimum=1)
    tokens, positions, vocab, pad = loop_draws(idata)  # tokens (C, D, L)
    loops = tokens[..., positions]  # (C, D, P)
    C, D, P = loops.shape
    ids = np.unique(loops)
    names = [str(vocab[v]) if vocab is not None else str(int(v)) for v in ids]
    flat = loops.reshape(C * D, P)
    frequencies = np.stack([(flat == v).mean(0) for v in ids], axis=1)  # (P, K)
    unique, inverse, counts = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(C, D)
    order = np.argsort(-counts, kind="stable")[:top]
    residues = [v for v in ids if pad is None or v != pad]  # a variable gap's pads: left out of a loop's text
    sep = "" if vocab is not None and all(len(str(vocab[v])) == 1 for v in residues) else " "
    motifs = []
    for u in order:
        loop = sep.join(
            str(vocab[v]) if vocab is not None else str(int(v)) for v in unique[u] if pad is None or v != pad
        )
        mcse = frequency_mcse((inverse == u).astype(float))
        motifs.append((loop, int(counts[u]), float(counts[u]) / (C * D), mcse))
    return LoopDistribution(positions, names, frequencies, motifs, C * D)
