"""The best distinct designs of a finished run or batch directory (``mlm-ppl designs``).

Candidates are the kept draws of every chain (of every template, for a batch). Infeasible
draws (``feasible`` 0 in ``run.nc``, or log density ``-inf``) are never picked. Identical
sequences are one candidate, which counts how often it was drawn. The candidates are ranked by
their log density ``lp`` (highest first; ties by chain, then draw), then taken greedily: one is
taken if its Hamming distance to every design taken before it is at least ``min_hamming``,
until ``top`` are taken. A batch's templates are picked separately: up to ``top`` designs per
template, compared only with designs of the same template (different templates may differ in
length, and their log densities are of different conditionals). The Hamming distance counts the
token positions where two draws differ: the designed positions, since the fixed ones agree.

Each design carries its designed positions' mean conditional probability ``site_prob`` and the
flag ``memorized`` (:data:`~mlm_ppl.diagnostics.MEMORIZED_PROB`): a loop the model predicts from
the rest as from memory is most likely one it was trained on, however good its ``lp``. Filters
pass over memorized loops, and leave out loops near a given set (a novelty rule).

Everything is read, nothing written: ``run.nc`` (draws, ``lp``, functionals, and the run's
settings, recorded with it), ``samples.txt`` (each draw's sequence as the run decoded it) and,
for a batch, ``batch-record.json`` (its templates). No lock is taken. The model is loaded only
where these do not hold the draws: a run read from its checkpoint (still going, or cut off), a
``run.nc`` without the memorization columns (the picks are read), a run without ``samples.txt``,
and where a reference loop asks for its own energy (``draws`` reads a run's draws).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from .._checks import check_count
from .._files import read_list_file
from ..campaign import batch_templates
from ..diagnostics import MEMORIZED_PROB
from ..models.tokens import loop_tokens
from .draws import RunDraws, read_draws, recorded_settings
from .where import parse_where

__all__ = ["Design", "Designs", "Pick", "select_designs", "pick_designs", "mutations", "recorded_settings"]


@dataclass(frozen=True)
class Pick:
    """One design :func:`select_designs` took.

    Parameters
    ----------
    index : int
        The index of its best draw (highest ``lp``; the first such in draw order).
    count : int
        The draws of the same sequence (feasible ones).
    min_hamming : int or None
        Its Hamming distance to the nearest design taken before it (None for the first).
    """

    index: int
    count: int
    min_hamming: int | None


def select_designs(tokens: np.ndarray, lp: np.ndarray, feasible: np.ndarray, top: int, min_hamming: int) -> list[Pick]:
    """Select up to ``top`` designs among ``N`` draws, greedily.

    Draws that are infeasible or have ``lp == -inf`` are dropped; identical rows are merged (the
    draw kept is the first of highest ``lp``); the rest, ranked by ``lp`` (highest first, ties by
    index), are taken in turn when their Hamming distance to every design already taken is
    ``>= min_hamming``.

    Parameters
    ----------
    tokens : numpy.ndarray
        Shape ``(N, L)``, integer ids.
    lp : numpy.ndarray
        Shape ``(N,)``, the log densities.
    feasible : numpy.ndarray
        Shape ``(N,)``, bool: the draws that may be picked.
    top : int
        The most designs to take (at least 1).
    min_hamming : int
        The least Hamming distance between two designs taken (at least 0).

    Returns
    -------
    list of Pick
        The designs taken, in rank order (fewer than ``top`` where too few lie ``min_hamming``
        apart; empty where no draw is feasible).

    Raises
    ------
    ValueError
        Where a feasible draw's ``lp`` is NaN (nothing to rank by), ``top`` is below 1 or
        ``min_hamming`` below 0.
    TypeError
        Where ``top`` or ``min_hamming`` is not an integer.

    Examples
    --------
    >>> import numpy as np
    >>> from mlm_ppl.designs import select_designs
    >>> tokens = np.array([[5, 6], [5, 6], [5, 7], [8, 7]])
    >>> lp = np.array([-1.0, -1.0, -2.0, -3.0])
    >>> select_designs(tokens, lp, np.ones(4, dtype=bool), top=2, min_hamming=2)
    [Pick(index=0, count=2, min_hamming=None), Pick(index=3, count=1, min_hamming=2)]
    """
    top, min_hamming = check_count(top, "top", 1), check_count(min_hamming, "min_hamming", 0)
    tokens, lp = np.asarray(tokens), np.asarray(lp, dtype=np.float64)
    keep = np.asarray(feasible, dtype=bool) & ~np.isneginf(lp)
    if np.isnan(lp[keep]).any():
        raise ValueError("a feasible draw has no log density (lp is NaN); designs are ranked by lp")
    index = np.flatnonzero(keep)
    if index.size == 0:
        return []
    order = index[np.lexsort((index, -lp[index]))]  # by lp, highest first; ties by draw order
    _, first, inverse, counts = np.unique(
        tokens[order], axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    ranked = np.sort(first)  # the first (best) draw of each sequence, in rank order
    candidates = tokens[order[ranked]]
    count = counts[inverse.reshape(-1)[ranked]]
    nearest = np.full(len(ranked), np.iinfo(np.int64).max, dtype=np.int64)  # distance to the taken designs
    picks: list[Pick] = []
    i = 0
    while len(picks) < top:
        ahead = np.flatnonzero(nearest[i:] >= min_hamming)
        if ahead.size == 0:
            break
        i += int(ahead[0])
        picks.append(Pick(int(order[ranked[i]]), int(count[i]), int(nearest[i]) if picks else None))
        nearest = np.minimum(nearest, (candidates != candidates[i]).sum(-1))
        i += 1
    return picks


@dataclass(frozen=True)
class Design:
    """A picked design, with its scores and, where a reference loop is known, its mutations from it.

    Parameters
    ----------
    rank : int
        Its rank within its template (1 the best).
    template : str
        A batch's template name, or the run directory's name.
    chain : int
        The chain of its best draw.
    draw : int
        The draw of its best draw in that chain.
    count : int
        The feasible draws of this sequence.
    lp : float
        Its log density.
    energy : float
        The MLM energy ``E``: ``-T (lp - sum_k w_k f_k)``, and ``log pi(L)`` taken out too for a
        variable gap's draw.
    experts : dict of str to float
        Each expert's unweighted value, by its ``run.nc`` name ``expert_<name>``.
    min_hamming : int or None
        Its Hamming distance to the nearest design ranked above it in its template (None for the
        first).
    sequence : str
        The sequence as the run decoded it.
    site_prob : float, optional
        The designed positions' mean conditional probability, each read with only itself masked.
    memorized : bool, optional
        ``site_prob >= MEMORIZED_PROB`` (:data:`~mlm_ppl.diagnostics.MEMORIZED_PROB`): the model
        predicts the loop from the rest as from memory, as it does sequences it was trained on.
    mutations : tuple of str or None, optional
        Where a reference loop is known (the run's constraint spec's, or ``reference=``), the
        mutations from it, EvoProtGrad's way: ``"D3G"`` for the reference's D at the loop's third
        designed position taken by G (None: no reference of the loop's length).
    relative : dict of str to float or None, optional
        ``energy`` and each expert column less the reference's own (the template with the reference
        loop on the designed positions: ``E - E(reference)``, ``f_k - f_k(reference)``); None
        without a reference.
    loop : str, optional
        The designed positions' tokens (residues joined, words separated by spaces).
    """

    rank: int
    template: str
    chain: int
    draw: int
    count: int
    lp: float
    energy: float
    experts: dict[str, float]
    min_hamming: int | None
    sequence: str
    site_prob: float = float("nan")
    memorized: bool = False
    mutations: tuple[str, ...] | None = None
    relative: dict[str, float] | None = None
    loop: str = ""


@dataclass(frozen=True)
class Designs:
    """What :func:`pick_designs` found: the designs, template by template, and what was left out.

    Parameters
    ----------
    designs : list of Design
        The designs, template by template, each in rank order.
    top : int
        The most designs picked per template.
    min_hamming : int
        The least Hamming distance between two designs of a template.
    experts : list of str, optional
        The expert columns.
    found : dict of str to int, optional
        The number picked per template (fewer than ``top`` where too few candidates lie
        ``min_hamming`` apart).
    excluded : dict of str to dict of str to int, optional
        Per template, the distinct sequences ``where`` and ``novel_from`` left out and the memorized
        loops ``exclude_memorized`` passed over.
    """

    designs: list[Design]
    top: int
    min_hamming: int
    experts: list[str] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_frame(self) -> Any:
        """The table as a ``pandas.DataFrame``, a row per design, typed.

        Returns
        -------
        pandas.DataFrame
            The columns of :meth:`to_tsv` but ``feasible``, with ``loop`` (the designed positions'
            tokens) before ``sequence``.
        """
        import pandas as pd

        rows = []
        for d in self.designs:
            row: dict[str, Any] = dict(
                rank=d.rank, template=d.template, chain=d.chain, draw=d.draw, count=d.count, lp=d.lp, energy=d.energy
            )
            row.update({name: d.experts[name] for name in self.experts})
            row.update(site_prob=d.site_prob, memorized=d.memorized)
            if d.mutations is not None:
                row.update(n_mutations=len(d.mutations), mutations=",".join(d.mutations))
            row.update({f"delta_{name}": value for name, value in (d.relative or {}).items()})
            row.update(min_hamming=d.min_hamming, loop=d.loop, sequence=d.sequence)
            rows.append(row)
        return pd.DataFrame(rows)

    def short(self) -> dict[str, int]:
        """The templates with fewer than ``top`` designs, and how many each has.

        Returns
        -------
        dict of str to int
            Template name -> designs found, for each template short of ``top``.
        """
        return {name: k for name, k in self.found.items() if k < self.top}

    def to_tsv(self) -> str:
        """The table as tab-separated text, a line per design under a header.

        The columns: rank, template, chain, draw, count, lp, energy, feasible (always 1: only feasible
        draws are picked), one column per expert, site_prob, memorized (1 or 0), and where a design has
        a reference loop n_mutations, mutations (``D3G,R4Y``; empty: none), delta_energy and one delta
        per expert (the design's value less the reference's), then min_hamming (empty for the first of
        a template), sequence.

        Returns
        -------
        str
            The table, ending with a newline.
        """
        header = ["rank", "template", "chain", "draw", "count", "lp", "energy", "feasible", *self.experts]
        relative = any(d.mutations is not None for d in self.designs)
        deltas = ["energy", *self.experts] if any(d.relative is not None for d in self.designs) else []
        extra = ["n_mutations", "mutations", *(f"delta_{name}" for name in deltas)] if relative else []
        lines = ["\t".join([*header, "site_prob", "memorized", *extra, "min_hamming", "sequence"])]
        for d in self.designs:
            values = [f"{d.experts[name]:.4g}" for name in self.experts]
            values_extra = []
            if relative:
                values_extra = ["", ""] if d.mutations is None else [str(len(d.mutations)), ",".join(d.mutations)]
                values_extra += [f"{d.relative[name]:.4g}" if d.relative else "" for name in deltas]
            lines.append(
                "\t".join(
                    [
                        str(d.rank),
                        d.template,
                        str(d.chain),
                        str(d.draw),
                        str(d.count),
                        f"{d.lp:.4f}",
                        f"{d.energy:.4f}",
                        "1",
                        *values,
                        f"{d.site_prob:.4f}",
                        str(int(d.memorized)),
                        *values_extra,
                        "" if d.min_hamming is None else str(d.min_hamming),
                        d.sequence,
                    ]
                )  # fmt: skip
            )
        return "\n".join(lines) + "\n"


def pick_designs(
    directory: str | os.PathLike,
    top: int = 10,
    min_hamming: int = 1,
    *,
    exclude_memorized: bool = False,
    novel_from: str | os.PathLike | Sequence[str] | None = None,
    min_distance: int = 1,
    trust_code: bool = False,
    reference: str | None = None,
    where: str | None = None,
) -> Designs:
    """Pick the best distinct designs of a run or batch directory (made by ``mlm-ppl sample``).

    Up to ``top`` per template, at Hamming distance ``>= min_hamming`` from each other (the rule:
    :mod:`mlm_ppl.designs`). A run still going, cut off or resumed since its ``run.nc`` is read from
    its checkpoint (its draws so far; :func:`~mlm_ppl.jobs.read_current`: the model is loaded); for
    a ``run.nc`` without the memorization columns (written before them, or of more distinct states
    than a run's end reads: :data:`~mlm_ppl.diagnostics.SITE_COPY_BUDGET`) the model reads the
    picks' alone. Every template's run is read and checked before anything is picked. A template
    with fewer candidates than ``top`` at that distance is no error: ``Designs.found`` and
    :meth:`Designs.short` say how many it has.

    Parameters
    ----------
    directory : str or os.PathLike
        The run or batch directory.
    top : int, optional
        The most designs per template (default 10).
    min_hamming : int, optional
        The least Hamming distance between two designs of a template (default 1).
    exclude_memorized : bool, optional
        Pass over every memorized loop (``site_prob >= MEMORIZED_PROB``) the picking reaches and pick
        on.
    novel_from : str or os.PathLike or sequence of str or None, optional
        A file of loops, one per line, or the loops themselves: every loop at Hamming distance below
        ``min_distance`` from one of them is left out before the picking (loops of another length
        are no match; a file with none of the run's loop lengths is refused).
    min_distance : int, optional
        The distance of ``novel_from`` (default 1).
    trust_code : bool, optional
        Consent to code experts in the record of a run read from its checkpoint.
    reference : str or None, optional
        A loop of the designed positions (residues, or tokens separated by spaces) the designs'
        ``mutations`` are counted from; by default the run's constraint spec's ``reference`` where it
        has one.
    where : str or None, optional
        A condition on the draws' columns (the language of ``mlm_ppl.designs.where``, e.g.
        ``"hydropathy < reference and n_mutations <= 4"``); the draws that fail it are left out
        before the picking.

    Returns
    -------
    Designs
        The designs, the number found per template, and what the filters left out
        (``Designs.excluded``).

    Raises
    ------
    ValueError
        One line: for a ``top`` below 1, a negative ``min_hamming`` or a ``min_distance`` below 1, a
        directory that is not an mlm-ppl sampling run or batch, a run with no draws yet, files that
        do not match, no feasible draw anywhere ("nothing to pick"), ``novel_from`` loops or a
        ``reference`` of none of the designed loops' lengths, or a ``where`` that cannot be read.
    TypeError
        Where ``top``, ``min_hamming`` or ``min_distance`` is not an integer.
    """
    top, min_hamming = check_count(top, "top", 1), check_count(min_hamming, "min_hamming", 0)
    min_distance = check_count(min_distance, "min_distance", 1)
    novel = None if novel_from is None else _novel_loops(novel_from)
    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is not a directory; give a run or batch directory of mlm-ppl sample")
    kind = rundir.kind_of(path)
    if kind == "sample":
        runs = [(os.path.basename(os.path.abspath(path)), path)]
    elif kind == "batch":
        runs = [(name, path / name) for name, _ in batch_templates(path)]
    elif kind is None:
        raise ValueError(
            f"{str(path)!r} is not an mlm-ppl run or batch directory (no {rundir.MARKER} marker); give a directory "
            "made by mlm-ppl sample --out"
        )
    else:
        raise ValueError(f"{str(path)!r} holds an mlm-ppl {kind} run, not a sampling run or batch")
    draws = [read_draws(name, run, path, kind, trust_code) for name, run in runs]
    experts = draws[0].experts if draws else []
    if not any(d.feasible.any() for d in draws):
        raise ValueError(f"no feasible draw in {path}; nothing to pick")
    if novel is not None and not any(set(map(len, d.loops)) & set(map(len, novel)) for d in draws):
        lengths = sorted({len(loop) for d in draws for loop in d.loops})
        raise ValueError(
            f"novel_from: none of its {len(novel)} loops has the length of a designed loop ({lengths}); a novelty "
            "rule compares loops of one length: give loops of the designed positions"
        )
    if reference is not None:
        size = len(loop_tokens(reference))
        lengths = sorted({len(loop) for d in draws for loop in d.loops})
        if size not in lengths:
            raise ValueError(
                f"reference {reference!r} has {size} tokens; the designed loops have {lengths}: give a loop of the "
                "designed positions"
            )
    designs: list[Design] = []
    found: dict[str, int] = {}
    excluded: dict[str, dict[str, int]] = {}
    for d in draws:
        at_reference = d.reference_scores(reference or d.reference, trust_code)
        keep = d.feasible.copy()
        taken: dict[str, int] = {}
        if where is not None:
            meets = _where(where, d, reference or d.reference, at_reference)
            taken["where"] = _distinct(d, keep & ~meets)
            keep &= meets
        if novel is not None:
            near = np.array([_nearest(loop, novel) < min_distance for loop in d.loops])
            taken["novel_from"] = _distinct(d, keep & near)
            keep &= ~near
        passed = 0
        while True:  # pick; score the picks the run has no site_prob for; pass over memorized ones, pick again
            picks = select_designs(d.tokens, d.lp, keep, top, min_hamming)
            d.score([p.index for p in picks])
            memorized = [p.index for p in picks if d.site_prob[p.index] >= MEMORIZED_PROB]
            if not exclude_memorized or not memorized:
                break
            passed += len(memorized)
            for i in memorized:
                keep &= (d.tokens != d.tokens[i]).any(-1)
        if exclude_memorized:
            taken["exclude_memorized"] = passed
        excluded[d.name] = taken
        found[d.name] = len(picks)
        D = d.draws
        for rank, p in enumerate(picks, 1):
            designs.append(
                Design(
                    rank=rank,
                    template=d.name,
                    chain=p.index // D,
                    draw=p.index % D,
                    count=p.count,
                    lp=float(d.lp[p.index]),
                    energy=float(d.energy[p.index]),
                    experts={name: float(d.values[name][p.index]) for name in d.experts},
                    min_hamming=p.min_hamming,
                    sequence=d.sequences[p.index],
                    site_prob=float(d.site_prob[p.index]),
                    memorized=bool(d.site_prob[p.index] >= MEMORIZED_PROB),
                    mutations=mutations(d.loops[p.index], reference or d.reference),
                    loop=("" if all(len(t) == 1 for t in d.loops[p.index]) else " ").join(d.loops[p.index]),
                    relative=None
                    if at_reference is None
                    else {
                        name: float((d.energy if name == "energy" else d.values[name])[p.index]) - value
                        for name, value in at_reference.items()
                    },
                )
            )
    return Designs(designs, top, min_hamming, experts, found, excluded)


def _where(text: str, d: RunDraws, reference: str | None, at_reference: dict[str, float] | None) -> np.ndarray:
    """``(N,)`` bool: the draws of ``d`` that meet the condition ``text`` (:func:`.where.parse_where`)."""
    columns: dict[str, np.ndarray] = {"lp": d.lp, "energy": d.energy, **d.values}
    names = {name: name for name in columns}
    names.update({column.removeprefix("expert_"): column for column in d.values})
    if at_reference is not None and reference is not None:
        counts = [mutations(loop, reference) for loop in d.loops]
        columns["n_mutations"] = np.array([np.nan if m is None else len(m) for m in counts])
        for name, value in at_reference.items():
            columns[f"delta_{name}"] = columns[name] - value
        names.update({name: name for name in columns if name not in names})
    condition, uses_reference = parse_where(text, names)
    if uses_reference and at_reference is None:
        raise ValueError(
            f"where: 'reference' reads the reference loop's values; {d.name!r} has no reference loop of its designed "
            "loop's length: give --reference LOOP (reference=)"
        )
    return condition(columns, at_reference)


def mutations(loop: tuple[str, ...], reference: str | None) -> tuple[str, ...] | None:
    """The changes from a reference loop to a loop, each ``<old><position><new>``.

    Parameters
    ----------
    loop : tuple of str
        The loop's tokens.
    reference : str or None
        The reference loop: residues, or tokens separated by spaces.

    Returns
    -------
    tuple of str or None
        The changes, positions counted from 1 along the designed positions; None without a
        reference or for one of another length.

    Examples
    --------
    >>> from mlm_ppl.designs import mutations
    >>> mutations(("D", "G", "E", "Y"), "DREF")
    ('R2G', 'F4Y')
    >>> mutations(("D", "G"), "DREF") is None
    True
    """
    if reference is None:
        return None
    ref = loop_tokens(reference)
    if len(ref) != len(loop):
        return None
    return tuple(f"{a}{i}{b}" for i, (a, b) in enumerate(zip(ref, loop), 1) if a != b)


def _novel_loops(source: str | os.PathLike | Sequence[str]) -> list[tuple[str, ...]]:
    """The loops of a novelty rule: lines of a file (blank lines and ``#`` comments skipped), or the
    strings given; each split into tokens (at whitespace where it has any, else into characters)."""
    if isinstance(source, (str, os.PathLike)):
        lines, where = read_list_file(source, "loops"), f"novel_from: {source}"
    else:
        lines, where = [str(line).strip() for line in source], "novel_from"
    loops = [loop_tokens(line) for line in lines if line and not line.startswith("#")]
    if not loops:
        raise ValueError(f"{where} holds no loop; give one loop (the designed positions' tokens) per line")
    return loops


def _nearest(loop: tuple[str, ...], novel: list[tuple[str, ...]]) -> float:
    """The Hamming distance from ``loop`` to the nearest loop of ``novel`` of its length (inf: none)."""
    return min((sum(a != b for a, b in zip(loop, other)) for other in novel if len(other) == len(loop)), default=np.inf)


def _distinct(d: RunDraws, rows: np.ndarray) -> int:
    """Distinct sequences among the draws ``rows`` marks."""
    return len({d.sequences[i] for i in np.flatnonzero(rows)})
