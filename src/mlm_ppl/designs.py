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

Everything is read, nothing written: ``run.nc`` (draws, ``lp``, functionals, and the run's
settings, recorded with it), ``samples.txt`` (each draw's sequence as the run decoded it) and,
for a batch, ``batch-record.json`` (its templates). No lock is taken and no model is loaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import rundir
from ._checks import check_count
from .campaign import batch_templates
from .diagnostics import functional_name, length_log_prior, read_run
from .models.constraints import recorded_expert_weights, weighted_expert_sum
from .models.target import energy_from_log_density
from .settings import RunSettings

__all__ = ["Design", "Designs", "Pick", "select_designs", "pick_designs"]


@dataclass(frozen=True)
class Pick:
    """One design :func:`select_designs` took: the ``index`` of its best draw (highest ``lp``;
    the first such in draw order), ``count`` (draws of the same sequence, feasible ones), and
    ``min_hamming``, its distance to the nearest design taken before it (None for the first)."""

    index: int
    count: int
    min_hamming: int | None


def select_designs(tokens: np.ndarray, lp: np.ndarray, feasible: np.ndarray, top: int, min_hamming: int) -> list[Pick]:
    """Greedy selection of up to ``top`` designs among ``N`` draws.

    ``tokens`` ``(N, L)`` integer ids, ``lp`` ``(N,)`` log densities, ``feasible`` ``(N,)`` bool.
    Draws that are infeasible or have ``lp == -inf`` are dropped; identical rows are merged (the
    draw kept is the first of highest ``lp``); the rest, ranked by ``lp`` (highest first, ties
    by index), are taken in turn when their Hamming distance to every design already taken is
    ``>= min_hamming``. A NaN ``lp`` among the feasible draws is a ValueError (nothing to rank by).
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
    """A picked design: its ``rank`` within its template (1 the best), the ``template`` (a batch's
    template name, or the run directory's name), the ``chain`` and ``draw`` of its best draw,
    ``count`` (feasible draws of this sequence), ``lp``, ``energy`` (the MLM energy ``E``:
    ``-T (lp - sum_k w_k f_k)``, and ``log pi(L)`` taken out too for a variable gap's draw),
    ``experts`` (each expert's unweighted value, by its ``run.nc`` name ``expert_<name>``),
    ``min_hamming`` (to the nearest design ranked above it in its template; None for the first)
    and the ``sequence`` as the run decoded it."""

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


@dataclass(frozen=True)
class Designs:
    """What :func:`pick_designs` found: the ``designs`` (template by template, each in rank
    order), the ``experts`` columns, and ``found``, the number picked per template (fewer than
    ``top`` where too few candidates lie ``min_hamming`` apart)."""

    designs: list[Design]
    top: int
    min_hamming: int
    experts: list[str] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=dict)

    def short(self) -> dict[str, int]:
        """The templates with fewer than ``top`` designs, and how many each has."""
        return {name: k for name, k in self.found.items() if k < self.top}

    def to_tsv(self) -> str:
        """Tab-separated: rank, template, chain, draw, count, lp, energy, feasible (always 1: only
        feasible draws are picked), one column per expert, min_hamming (empty for the first of a
        template), sequence."""
        header = ["rank", "template", "chain", "draw", "count", "lp", "energy", "feasible", *self.experts]
        lines = ["\t".join([*header, "min_hamming", "sequence"])]
        for d in self.designs:
            values = [f"{d.experts[name]:.4g}" for name in self.experts]
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
                        "" if d.min_hamming is None else str(d.min_hamming),
                        d.sequence,
                    ]
                )  # fmt: skip
            )
        return "\n".join(lines) + "\n"


def pick_designs(directory: str | os.PathLike, top: int = 10, min_hamming: int = 1) -> Designs:
    """The best distinct designs of the run or batch in ``directory`` (made by ``mlm-ppl
    sample``; see the module docstring for the rule): up to ``top`` per template, at Hamming
    distance ``>= min_hamming`` from each other.

    Every template's run is read and checked before anything is picked. A ValueError (one
    line) for a ``top`` below 1 or a negative ``min_hamming``, a directory that is not an
    mlm-ppl sampling run or batch, an unfinished run, files that do not match, or no feasible
    draw anywhere ("nothing to pick"). A template with fewer candidates than ``top`` at that
    distance is no error: :attr:`Designs.found` and :meth:`Designs.short` say how many it has.
    """
    top, min_hamming = check_count(top, "top", 1), check_count(min_hamming, "min_hamming", 0)
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
    draws = [_read_draws(name, run, path, kind) for name, run in runs]
    experts = draws[0].experts if draws else []
    if not any(d.feasible.any() for d in draws):
        raise ValueError(f"no feasible draw in {path}; nothing to pick")
    designs: list[Design] = []
    found: dict[str, int] = {}
    for d in draws:
        picks = select_designs(d.tokens, d.lp, d.feasible, top, min_hamming)
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
                )
            )
    return Designs(designs, top, min_hamming, experts, found)


@dataclass
class _Draws:
    """One run's draws, flattened (chain-major): tokens ``(N, L)``, ``lp``, ``feasible``, the
    MLM ``energy``, each expert's ``values`` and the decoded ``sequences``."""

    name: str
    draws: int
    tokens: np.ndarray
    lp: np.ndarray
    feasible: np.ndarray
    energy: np.ndarray
    experts: list[str]
    values: dict[str, np.ndarray]
    sequences: list[str]


def _read_draws(name: str, path: Path, top_dir: Path, kind: str) -> _Draws:
    resume = f"mlm-ppl sample --resume {top_dir}"
    if rundir.kind_of(path) != "sample":
        raise ValueError(
            f"{path} is not the run of template {name!r} (no mlm-ppl sampling run there); the batch has not "
            f"run it yet: finish the batch with {resume}"
        )
    if not (path / "run.nc").is_file():
        what = "the batch" if kind == "batch" else "the run"
        raise ValueError(f"{path} has no run.nc: {what} has not finished; finish it with {resume}")
    idata = read_run(str(path))
    settings, weights = _settings(idata.attrs, path)
    tokens = idata.posterior["tokens"].values
    C, D, L = tokens.shape
    lp = idata.sample_stats["lp"].values.astype(np.float64).reshape(C * D)
    post = idata.posterior
    feasible = (post["feasible"].values.reshape(C * D) == 1.0) if "feasible" in post else np.ones(C * D, dtype=bool)
    feasible &= ~np.isneginf(lp)
    if np.isnan(lp[feasible]).any():
        raise ValueError(
            f"{path}/run.nc records no log density (lp is NaN: kernel {settings.kernel}); designs are ranked by lp: "
            "sample with mh or surrogate-mh, or pseudo-gibbs with --compute-lp"
        )
    names = {e: functional_name("expert", e) for e in weights}
    missing = [n for n in names.values() if n not in post]
    if missing:
        raise ValueError(f"{path}/run.nc lacks the expert functional {missing[0]!r} its settings name")
    values = {column: post[column].values.astype(np.float64).reshape(C * D) for column in names.values()}
    factor = weighted_expert_sum(weights, {e: torch.from_numpy(values[column]) for e, column in names.items()}, C * D)
    prior = length_log_prior(idata)
    if prior is not None:  # a variable gap: lp = log pi(L) - E/T, and the energy is the MLM's alone
        factor = factor + torch.from_numpy(prior.reshape(C * D))
    energy = energy_from_log_density(torch.from_numpy(lp), factor, settings.temperature).numpy()
    sequences = _sequences(path / "samples.txt", C, D, resume)
    return _Draws(name, D, tokens.reshape(C * D, L), lp, feasible, energy, list(names.values()), values, sequences)


def _settings(attrs: dict, path: Path) -> tuple[RunSettings, dict[str, float]]:
    """The settings ``run.nc`` was made with (recorded in it as ``config``), and the name and weight
    of each expert of its constraints (:func:`~mlm_ppl.models.constraints.recorded_expert_weights`).
    The spec is not built: designs needs no expert's function, and building one imports its
    ``module:function`` or loads its classifier."""
    config = attrs.get("config")
    if not isinstance(config, str):
        raise ValueError(f"{path}/run.nc records no settings (no config attribute); it was not made by mlm-ppl sample")
    try:
        record = json.loads(config)
    except ValueError as err:
        raise ValueError(f"{path}/run.nc: its recorded settings are not JSON ({err})") from None
    what = f"{path}/run.nc settings"
    if not isinstance(record, dict):
        raise ValueError(f"{what}: not a mapping of settings")
    constraints = record.get("constraints")
    settings = RunSettings.from_dict({**record, "constraints": None}, what)  # every other setting checked
    weights = {} if constraints is None else recorded_expert_weights(constraints, f"{what}: constraints")
    return settings, weights


def _sequences(file: Path, C: int, D: int, resume: str) -> list[str]:
    """Each draw's sequence from ``samples.txt`` (chain-major), its rows checked against the draws."""
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(
            f"{file} is missing: the run was cut off while it wrote its outputs; {resume} writes them"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{file} is not readable ({err})") from None
    header, *rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    fields = header.split("\t")
    if fields[:2] != ["chain", "draw"] or fields[-1] != "sequence" or len(rows) != C * D:
        raise ValueError(
            f"{file} does not match run.nc ({len(rows)} rows of {header!r}; {C} chains x {D} draws expected)"
        )
    out = []
    for i, row in enumerate(rows):
        parts = row.split("\t", len(fields) - 1)
        if len(parts) != len(fields) or parts[:2] != [str(i // D), str(i % D)]:
            raise ValueError(f"{file}, row {i + 2} is not chain {i // D}, draw {i % D}; it does not match run.nc")
        out.append(parts[-1])
    return out
