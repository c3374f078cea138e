"""Sampling runs in run directories, from their :class:`~mlm_ppl.settings.RunSettings`: one run
(in this process or on Ray workers) and batches of templates (one run per template, in this
process or as Ray tasks). The command line parses flags into settings and prints what these
return; everything else is here.

A batch directory holds ``config.json`` (the shared settings and the templates), one run
directory per template (``DIR/NAME``: a complete sampling run each, with its own checkpoint,
``run.nc``, ``summary.txt`` and plots), and at the end ``designs.tsv`` (template, chain, draw,
energy, sequence for every draw of every template) and ``summary.txt`` (one line per template).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import rundir
from .inference.distributed import run_chains_ray, run_tasks_ray, split_chains
from .inference.registry import make_kernel
from .inference.runner import Checkpoint, Run, run_chains
from .inference.spec import KernelBase
from .models.distribution import MaskedLMDistribution
from .models.loading import check_model_files, load_mlm
from .models.masked_lm import MaskedLM
from .rundir import RunDirectory
from .settings import RunSettings

__all__ = [
    "BATCH_FORMAT",
    "build",
    "build_kernel",
    "execute",
    "start_batch",
    "resume_batch",
    "run_template",
    "run_batch",
]

BATCH_FORMAT = "mlm-ppl-batch-2"


# ---------------------------------------------------------------------- one run
def build(settings: RunSettings) -> tuple[MaskedLM, MaskedLMDistribution, KernelBase]:
    """Model, target and kernel of a run (loads the model, after checking its files against
    ``settings.model_files`` when they are recorded; checks the template and options)."""
    if settings.model_files is not None:
        check_model_files(settings.model, settings.model_files)
    mlm = load_mlm(settings.model, device=settings.device, dtype=settings.dtype)
    template = settings.template
    if template is None:
        mask = mlm.vocab[mlm.mask_id]
        length = int(settings.length or 0)
        template = (mask * length) if mlm.residue_level else " ".join([mask] * length)
    dist = MaskedLMDistribution(mlm, template, energy=settings.energy, temperature=settings.temperature)
    return mlm, dist, make_kernel(settings.kernel, dist, **settings.kernel_options.to_dict())


def build_kernel(settings: RunSettings) -> KernelBase:
    """The kernel of a run (what each Ray worker builds for itself)."""
    return build(settings)[2]


def execute(
    run_dir: RunDirectory,
    settings: RunSettings,
    checkpoint: Checkpoint | None,
    mlm: MaskedLM,
    kernel: KernelBase,
    *,
    progress: bool,
    checkpoint_seconds: float,
) -> tuple[Run, Any, list[str]]:
    """Run (or finish) the chains of ``settings`` in the locked ``run_dir`` (in this process, or
    on Ray workers when ``settings.workers`` is set) and write the outputs: ``(run, summary,
    paths written)``.

    A failure before the first checkpoint removes what the run wrote; Ctrl-C propagates after
    the checkpoint is saved.
    """
    record = settings.to_dict()
    options: dict[str, Any] = dict(
        warmup_steps=settings.warmup,
        thin=settings.thin,
        seed=settings.seed,
        init=settings.init,
        progress=progress,
        checkpoint_seconds=checkpoint_seconds,
    )
    try:
        if settings.workers is not None:
            groups = len(split_chains(settings.chains, settings.workers))
            result = run_chains_ray(
                functools.partial(build_kernel, settings),
                settings.chains,
                settings.draws,
                workers=settings.workers,
                checkpoints=rundir.group_checkpoints(run_dir, record, groups),
                device=settings.device,
                **options,
            )
        else:
            result = run_chains(
                kernel,
                settings.chains,
                settings.draws,
                on_checkpoint=lambda cp: rundir.save_checkpoint(run_dir, cp, record),
                resume=checkpoint,
                **options,
            )
    except Exception:
        if not rundir.checkpoint_files(run_dir.path):  # nothing worth keeping: leave no half-made directory
            run_dir.discard()
        raise
    result.attrs.update(
        model=mlm.name,
        kernel=settings.kernel,
        template_text=settings.template or "",
        config=json.dumps(record, sort_keys=True),
    )
    report, paths = rundir.write_outputs(run_dir, result, mlm)
    return result, report, paths


# ---------------------------------------------------------------------- batches of templates
def _shared(settings: RunSettings) -> dict[str, Any]:
    """A batch's settings as recorded: every setting but the template (each template has its own)."""
    return {k: v for k, v in settings.to_dict().items() if k not in ("template", "length")}


def start_batch(
    directory: str | os.PathLike, settings: RunSettings, templates: Sequence[tuple[str, str]], *, overwrite: bool
) -> RunDirectory:
    """Create and lock a batch directory and write its ``config.json`` (``settings`` are the
    batch's, with its first template)."""
    run_dir = RunDirectory.create(directory, "batch", overwrite=overwrite)
    try:
        config = {"format": BATCH_FORMAT, "settings": _shared(settings), "templates": [list(t) for t in templates]}
        run_dir.write_text(rundir.CONFIG, json.dumps(config, indent=1, sort_keys=True))
    except BaseException:
        run_dir.discard()
        raise
    return run_dir


def resume_batch(directory: str | os.PathLike) -> tuple[RunDirectory, RunSettings, list[tuple[str, str]]]:
    """Lock a batch directory and read it: ``(run directory, settings with the first template, templates)``."""
    run_dir = RunDirectory.open(directory, "batch")
    file = run_dir.path / rundir.CONFIG
    try:
        try:
            config = json.loads(file.read_text())
            if config.get("format") != BATCH_FORMAT:
                raise ValueError(f"format {config.get('format')!r}, {BATCH_FORMAT!r} expected")
            templates = [(str(n), str(t)) for n, t in config["templates"]]
            shared = dict(config["settings"], template=templates[0][1], length=None)
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            raise ValueError(f"{file} is not an mlm-ppl batch configuration ({err})") from None
        settings = RunSettings.from_dict(shared, str(file))
    except BaseException:
        run_dir.close()
        raise
    return run_dir, settings, templates


def run_template(directory: str, settings: RunSettings, checkpoint_seconds: float, threads: int | None = None) -> dict:
    """Run (or finish) one template's run in ``directory``; its rows (chain, draw, energy,
    sequence) and summary line. Module-level so that a Ray task can run it: a worker that dies
    leaves the template's checkpoint, and the retried task continues from it."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    path = Path(directory)
    if (path / rundir.MARKER).exists():
        run_dir, _, checkpoint = rundir.resume_run(path)
    else:
        run_dir, checkpoint = rundir.start_run(path, settings), None
    with run_dir:
        mlm, _, kernel = build(settings)
        result, report, _ = execute(
            run_dir, settings, checkpoint, mlm, kernel, progress=False, checkpoint_seconds=checkpoint_seconds
        )
    energy = -result.stats["lp"] * settings.temperature  # E = -T log p: a batch's runs have no other terms
    rows = [
        (c, d, float(energy[c, d]), seq)
        for c in range(result.num_chains)
        for d, seq in enumerate(mlm.decode(result.tokens[c]))
    ]
    best = min(rows, key=lambda r: r[2])
    lp = report.table.loc["lp"] if "lp" in report.table.index else None
    line = dict(
        r_hat=float(lp["r_hat"]) if lp is not None else float("nan"),
        ess=float(lp["ess_bulk"]) if lp is not None else float("nan"),
        acceptance=float(report.acceptance_rate),
        best_energy=best[2],
        best=best[3],
    )
    return {"rows": rows, "summary": line}


def run_batch(
    batch_dir: RunDirectory,
    settings: RunSettings,
    templates: Sequence[tuple[str, str]],
    *,
    checkpoint_seconds: float,
    on_done: Callable[[], None] | None = None,
) -> str:
    """Run every template of a locked batch directory (as Ray tasks when ``settings.workers`` is
    set), then write ``designs.tsv`` and ``summary.txt``; returns the summary's text."""
    jobs = [
        (str(batch_dir.path / name), settings.for_template(template), checkpoint_seconds)
        for name, template in templates
    ]
    for name, _ in templates:
        batch_dir.record(name)  # each template's directory is the batch's (an overwrite removes it)
    if settings.workers:
        results = run_tasks_ray(run_template, jobs, workers=settings.workers, on_done=on_done)
    else:
        results = []
        for job in jobs:
            results.append(run_template(*job))
            if on_done is not None:
                on_done()
    lines = ["template\tchain\tdraw\tenergy\tsequence"]
    table = ["template\tr_hat_lp\tess_lp\tacceptance\tbest_energy\tbest_sequence"]
    for (name, _), res in zip(templates, results):
        lines += [f"{name}\t{c}\t{d}\t{e:.4f}\t{seq}" for c, d, e, seq in res["rows"]]
        s = res["summary"]
        table.append(
            f"{name}\t{s['r_hat']:.3f}\t{s['ess']:.0f}\t{s['acceptance']:.3f}\t{s['best_energy']:.4f}\t{s['best']}"
        )
    batch_dir.write_text("designs.tsv", "\n".join(lines) + "\n")
    text = "\n".join(table) + "\n"
    batch_dir.write_text("summary.txt", text)
    return text
