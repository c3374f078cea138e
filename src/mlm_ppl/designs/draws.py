"""One run's draws as the picking reads them: tokens, ``lp``, feasibility, the MLM energy, each
expert's values, the decoded sequences and loops, site scores (read for the picks where the run has
none), the run's reference loop and its recorded settings; and the reference's own energy and
expert values (:meth:`RunDraws.reference_scores`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import rundir
from ..campaign import run_model
from ..diagnostics import functional_name, length_log_prior, site_scores
from ..diagnostics.data import attr_list
from ..models.constraints import recorded_expert_weights, weighted_expert_sum
from ..models.target import energy_from_log_density
from ..models.tokens import loop_tokens
from ..settings import RunSettings

__all__ = ["RunDraws", "read_draws", "recorded_settings"]


@dataclass
class RunDraws:
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
        from ..campaign import build_target
        from ..models.constraints import trusting_code
        from ..models.constraints.rules import loop_ids

        size = len(loop_tokens(reference))
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


def read_draws(name: str, path: Path, top_dir: Path, kind: str, trust_code: bool) -> RunDraws:
    from ..campaign.current import read_current

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
    return RunDraws(
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
    """Read the settings a ``run.nc`` was made with, and its experts' names and weights.

    The settings are recorded in ``run.nc`` as ``config``. The spec is not built: designs needs no
    expert's function, and building one imports its ``module:function`` or loads its classifier.

    Parameters
    ----------
    attrs : dict
        The attributes of the run's InferenceData.
    path : pathlib.Path or str
        The run directory, for the messages.

    Returns
    -------
    settings : RunSettings
        The settings, every one but the constraints checked (``constraints`` None).
    weights : dict of str to float
        The name and weight of each expert of its constraints
        (:func:`~mlm_ppl.models.constraints.recorded_expert_weights`).

    Raises
    ------
    ValueError
        Where the attributes record no settings, or settings that are not JSON, not a mapping, or
        not valid.

    Examples
    --------
    >>> import json
    >>> from mlm_ppl.designs import recorded_settings
    >>> from mlm_ppl.settings import RunSettings
    >>> record = RunSettings(template="AC[MASK]E").to_dict()
    >>> settings, weights = recorded_settings({"config": json.dumps(record)}, "run")
    >>> settings.template, weights
    ('AC[MASK]E', {})
    """
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
