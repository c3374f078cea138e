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
``run.nc`` without the memorization columns (the picks are read), a run without ``samples.txt``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import rundir
from ._checks import check_count
from ._files import read_list_file
from .campaign import batch_templates, run_model
from .diagnostics import MEMORIZED_PROB, functional_name, length_log_prior, site_scores
from .diagnostics.data import attr_list
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
    ``min_hamming`` (to the nearest design ranked above it in its template; None for the first),
    ``site_prob`` (the designed positions' mean conditional probability, each read with only itself
    masked) and ``memorized`` (``site_prob >= MEMORIZED_PROB``: the model predicts the loop from the
    rest as from memory, as it does sequences it was trained on), the ``sequence`` as the run
    decoded it, and, where a reference loop is known (the run's constraint spec's, or
    ``reference=``), the ``mutations`` from it, EvoProtGrad's way: ``"D3G"`` for the reference's D at
    the loop's third designed position taken by G (None: no reference of the loop's length), and
    ``relative``: ``energy`` and each expert column less the reference's own (the template with
    the reference loop on the designed positions: ``E - E(reference)``, ``f_k - f_k(reference)``)."""

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


@dataclass(frozen=True)
class Designs:
    """What :func:`pick_designs` found: the ``designs`` (template by template, each in rank
    order), the ``experts`` columns, and ``found``, the number picked per template (fewer than
    ``top`` where too few candidates lie ``min_hamming`` apart), and ``excluded``, per template, the
    distinct sequences ``novel_from`` left out and the memorized loops ``exclude_memorized`` passed
    over."""

    designs: list[Design]
    top: int
    min_hamming: int
    experts: list[str] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, dict[str, int]] = field(default_factory=dict)

    def short(self) -> dict[str, int]:
        """The templates with fewer than ``top`` designs, and how many each has."""
        return {name: k for name, k in self.found.items() if k < self.top}

    def to_tsv(self) -> str:
        """Tab-separated: rank, template, chain, draw, count, lp, energy, feasible (always 1: only
        feasible draws are picked), one column per expert, site_prob, memorized (1 or 0), and where
        a design has a reference loop n_mutations, mutations (``D3G,R4Y``; empty: none),
        delta_energy and one delta per expert (the design's value less the reference's), then
        min_hamming (empty for the first of a template), sequence."""
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
) -> Designs:
    """The best distinct designs of the run or batch in ``directory`` (made by ``mlm-ppl
    sample``; see the module docstring for the rule): up to ``top`` per template, at Hamming
    distance ``>= min_hamming`` from each other.

    Filters: ``novel_from`` (a file of loops, one per line, or the loops themselves) leaves out,
    before the picking, every loop at Hamming distance below ``min_distance`` from one of them
    (loops of another length are no match; a file with none of the run's loop lengths is refused);
    ``exclude_memorized`` passes over every memorized loop (``site_prob >= MEMORIZED_PROB``) the
    picking reaches and picks on. :attr:`Designs.excluded` counts, per template, the distinct
    sequences ``novel_from`` left out and the memorized loops ``exclude_memorized`` passed over.

    A run still going, cut off or resumed since its ``run.nc`` is read from its checkpoint (its
    draws so far; :func:`~mlm_ppl.campaign.current.read_current`: the model is loaded); for a ``run.nc``
    without the memorization columns (written before them, or of more distinct states than a run's
    end reads: :data:`~mlm_ppl.diagnostics.SITE_COPY_BUDGET`) the model reads the picks' alone.
    ``trust_code``: consent to code experts in the record of a run read so. ``reference``: a loop of
    the designed positions (residues, or tokens separated by spaces) the designs' ``mutations`` are
    counted from; by default the run's constraint spec's ``reference`` where it has one.

    Every template's run is read and checked before anything is picked. A ValueError (one
    line) for a ``top`` below 1 or a negative ``min_hamming``, a directory that is not an
    mlm-ppl sampling run or batch, a run with no draws yet, files that do not match, or no feasible
    draw anywhere ("nothing to pick"). A template with fewer candidates than ``top`` at that
    distance is no error: :attr:`Designs.found` and :meth:`Designs.short` say how many it has.
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
    draws = [_read_draws(name, run, path, kind, trust_code) for name, run in runs]
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
        size = len(reference.split()) if " " in reference else len(reference)
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
                    relative=None
                    if at_reference is None
                    else {
                        name: float((d.energy if name == "energy" else d.values[name])[p.index]) - value
                        for name, value in at_reference.items()
                    },
                )
            )
    return Designs(designs, top, min_hamming, experts, found, excluded)


def mutations(loop: tuple[str, ...], reference: str | None) -> tuple[str, ...] | None:
    """The changes from ``reference`` (a loop: residues, or tokens separated by spaces) to ``loop``
    (its tokens), each ``<old><position><new>`` with positions counted from 1 along the designed
    positions; None without a reference or for one of another length."""
    if reference is None:
        return None
    ref = tuple(reference.split()) if " " in reference else tuple(reference)
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
    loops = [tuple(line.split()) if " " in line else tuple(line) for line in lines if line and not line.startswith("#")]
    if not loops:
        raise ValueError(f"{where} holds no loop; give one loop (the designed positions' tokens) per line")
    return loops


def _nearest(loop: tuple[str, ...], novel: list[tuple[str, ...]]) -> float:
    """The Hamming distance from ``loop`` to the nearest loop of ``novel`` of its length (inf: none)."""
    return min((sum(a != b for a, b in zip(loop, other)) for other in novel if len(other) == len(loop)), default=np.inf)


def _distinct(d: "_Draws", rows: np.ndarray) -> int:
    """Distinct sequences among the draws ``rows`` marks."""
    return len({d.sequences[i] for i in np.flatnonzero(rows)})


@dataclass
class _Draws:
    """One run's draws, flattened (chain-major): tokens ``(N, L)``, ``lp``, ``feasible``, the
    MLM ``energy``, each expert's ``values``, the decoded ``sequences``, the designed ``loops`` (as
    tokens) and their ``site_prob``."""

    name: str
    draws: int
    tokens: np.ndarray
    lp: np.ndarray
    feasible: np.ndarray
    energy: np.ndarray
    experts: list[str]
    values: dict[str, np.ndarray]
    sequences: list[str]
    loops: list[tuple[str, ...]]
    site_prob: np.ndarray  # nan where not read yet (a run.nc without the column): score() reads them
    scorer: Any = None  # rows -> site_prob of those draws, for a run.nc without the column
    reference: str | None = None  # the run's constraint spec's reference loop
    record: dict[str, Any] = field(default_factory=dict)  # the run's recorded settings (config)
    mlm: Any = None  # the model, where it was loaded

    def reference_scores(self, reference: str | None, trust_code: bool) -> dict[str, float] | None:
        """``{"energy": E, <expert column>: f_k}`` at the template with ``reference`` on the designed
        positions (one evaluation of the model, loaded if it is not), or None without a reference
        of the designed loop's length (or for a variable gap's run)."""
        if reference is None:
            return None
        from .campaign import build_target
        from .models.constraints import trusting_code
        from .models.constraints.rules import loop_ids

        size = len(reference.split()) if " " in reference else len(reference)
        if not self.loops or size != len(self.loops[0]) or len({len(loop) for loop in self.loops}) > 1:
            return None
        with trusting_code(trust_code):
            settings = RunSettings.from_dict(self.record, f"{self.name}: recorded settings")
        if self.mlm is None:
            self.mlm = run_model(settings)
        with trusting_code(trust_code):
            target: Any = build_target(self.mlm, settings)
        F = int(target.num_free)
        state = target.template.clone()
        state[target.free_positions] = torch.tensor(loop_ids(self.mlm, reference, F, "reference"))
        out = {"energy": float(target.evaluate(state[None]).energy[0])}
        constraints = getattr(target, "constraints", None)
        if self.experts and constraints is not None:
            values = constraints.expert_values(state[None])
            out.update({functional_name("expert", name): float(v[0]) for name, v in values.items()})
        return out

    def score(self, rows: list[int]) -> None:
        """Fill ``site_prob`` of the draws of the states at ``rows`` that lack it (each state read once)."""
        rows = [i for i in rows if np.isnan(self.site_prob[i])]
        if not rows:
            return
        values = self.scorer(self.tokens[rows])
        for i, value in zip(rows, values):
            self.site_prob[(self.tokens == self.tokens[i]).all(-1)] = value


def _read_draws(name: str, path: Path, top_dir: Path, kind: str, trust_code: bool) -> _Draws:
    from .campaign.current import read_current

    resume = f"mlm-ppl sample --resume {top_dir}"
    if rundir.kind_of(path) != "sample":
        raise ValueError(
            f"{path} is not the run of template {name!r} (no mlm-ppl sampling run there); the batch has not "
            f"run it yet: finish the batch with {resume}"
        )
    if not (path / "run.nc").is_file() and not (path / rundir.CHECKPOINT).is_file():
        what = "the batch" if kind == "batch" else "the run"
        raise ValueError(
            f"{path} has no draws yet (no run.nc, no checkpoint): {what} has not run; run it with {resume}"
        )
    current = read_current(path, trust_code=trust_code)
    idata = current.idata
    settings, weights = recorded_settings(idata.attrs, path)
    spec = json.loads(idata.attrs["config"]).get("constraints") or {}  # parsed once by recorded_settings
    reference = spec.get("reference") if isinstance(spec, dict) else None
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
    vocab, free, pad = attr_list(idata.attrs, "vocab"), attr_list(idata.attrs, "free_positions"), _pad(idata)
    decoded = (path / "samples.txt").is_file() and not current.from_checkpoint  # samples.txt holds the sequences
    mlm = current.mlm  # the model of a run read from its checkpoint; else loaded only for what run.nc lacks
    if mlm is None and ("site_prob" not in post or not decoded):
        mlm = run_model(settings)
    scorer = None
    if "site_prob" in post:
        site = post["site_prob"].values.astype(np.float64).reshape(C * D)
    else:  # a run.nc without the column (written before it, or too many states to read): the picks are read
        site = np.full(C * D, np.nan)

        def scorer(rows: np.ndarray) -> np.ndarray:
            scores = site_scores(rows[:, None, :], free, mlm, pad_id=pad)
            assert scores is not None  # no budget: every state is read
            return scores["site_prob"][:, 0]

    if decoded:
        sequences = _sequences(path / "samples.txt", C, D, resume)
    else:
        sequences = [seq for c in range(C) for seq in mlm.decode(torch.as_tensor(tokens[c]))]
    flat = tokens.reshape(C * D, L)
    loops = [
        tuple(str(vocab[int(v)]) if vocab is not None else str(int(v)) for v in row[free] if pad is None or v != pad)
        for row in flat
    ]
    return _Draws(
        name,
        D,
        flat,
        lp,
        feasible,
        energy,
        list(names.values()),
        values,
        sequences,
        loops,
        site,
        scorer,
        reference if isinstance(reference, str) else None,
        json.loads(idata.attrs["config"]),
        mlm,
    )


def _pad(idata: Any) -> int | None:
    pad = idata.attrs.get("pad_id")
    return None if pad is None else int(pad)


def recorded_settings(attrs: dict, path: Path) -> tuple[RunSettings, dict[str, float]]:
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
