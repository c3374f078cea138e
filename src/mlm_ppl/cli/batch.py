"""``mlm-ppl sample --templates FILE``: one run per template, with the same settings.

A batch directory holds ``config.json`` (the shared settings and the templates), one run
directory per template (``DIR/NAME``: a complete ``mlm-ppl sample`` run each, with its own
checkpoint, ``run.nc``, ``summary.txt`` and plots), and at the end ``designs.tsv`` (template,
chain, draw, energy, sequence for every draw of every template) and ``summary.txt`` (one line
per template). ``mlm-ppl sample --resume DIR`` continues an interrupted batch: finished templates
are read back, an interrupted one resumes from its checkpoint, the rest start. With ``--ray`` the
templates are spread over Ray workers, one template per worker at a time.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from ._common import split_lines
from ._execute import build, execute

__all__ = ["BATCH_FORMAT", "read_templates", "start_batch", "resume_batch", "run_template"]

BATCH_FORMAT = "mlm-ppl-batch-1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def read_templates(source: str) -> list[tuple[str, str]]:
    """``(name, template)`` per line of ``source``: ``TEMPLATE`` or ``NAME<TAB>TEMPLATE``.

    Names (default ``t001``, ``t002`` ... by line) become directory names: letters, digits,
    ``_ . -``, unique. A clear error for an empty file, a blank line or a bad or repeated name.
    """
    lines = split_lines(source, "one template per line")
    if not lines:
        raise ValueError(
            f"templates file {source!r} is empty; give one template per line (NAME<TAB>TEMPLATE or TEMPLATE)"
        )
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines, 1):
        fields = line.split("\t")
        if not line.strip() or len(fields) > 2 or not fields[-1].strip():
            raise ValueError(
                f"{source}, line {i}: {line!r} is not TEMPLATE or NAME<TAB>TEMPLATE "
                "(one template per line, no blank lines)"
            )
        name = fields[0].strip() if len(fields) == 2 else f"t{i:03d}"
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"{source}, line {i}: name {name!r} must be letters, digits, '_', '.' or '-' (a directory name)"
            )
        if name in {n for n, _ in out}:
            raise ValueError(f"{source}, line {i}: name {name!r} is used twice")
        out.append((name, fields[-1].strip()))
    return out


def _template_config(settings: dict[str, Any], template: str) -> dict[str, Any]:
    """One template's run settings: the batch's, with its template, in one process."""
    return dict(settings, template=template, length=None, workers=None)


def start_batch(directory: str, settings: dict[str, Any], templates: list[tuple[str, str]], *, overwrite: bool) -> Any:
    """Create and lock a batch directory and write its ``config.json``."""
    from .. import rundir

    run_dir = rundir.RunDirectory.create(directory, "batch", overwrite=overwrite)
    try:
        config = {"format": BATCH_FORMAT, "settings": settings, "templates": [list(t) for t in templates]}
        run_dir.write_text(rundir.CONFIG, json.dumps(config, indent=1, sort_keys=True))
    except BaseException:
        run_dir.discard()
        raise
    return run_dir


def resume_batch(directory: str) -> tuple[Any, dict[str, Any], list[tuple[str, str]]]:
    """Lock a batch directory and read it: ``(run directory, settings, templates)``."""
    from .. import rundir

    run_dir = rundir.RunDirectory.open(directory, "batch")
    try:
        try:
            config = json.loads((run_dir.path / rundir.CONFIG).read_text())
            settings, templates = config["settings"], [(str(n), str(t)) for n, t in config["templates"]]
            if config.get("format") != BATCH_FORMAT or not isinstance(settings, dict):
                raise ValueError("format")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{run_dir.path / rundir.CONFIG} is not an mlm-ppl batch configuration ({err})") from None
    except BaseException:
        run_dir.close()
        raise
    return run_dir, settings, templates


def run_template(directory: str, config: dict[str, Any], checkpoint_seconds: float, threads: int | None = None) -> dict:
    """Run (or finish) one template's run in ``directory`` and return its rows and summary line.

    Module-level so that a Ray worker can run it: a worker that dies leaves the template's
    checkpoint, and the retried task continues from it.
    """
    from .. import rundir

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    path = Path(directory)
    if (path / rundir.MARKER).exists():
        run_dir, _, checkpoint = rundir.resume_run(path)
    else:
        run_dir, checkpoint = rundir.start_run(path, config), None
    with run_dir:
        mlm, _, kernel = build(config)
        result, report, _ = execute(
            run_dir, config, checkpoint, mlm, kernel, progress=False, checkpoint_seconds=checkpoint_seconds
        )
    T = config["temperature"]
    energy = -result.stats["lp"] * T  # E = -T log p: the runs of the CLI have no other terms
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


def run_batch(run_dir: Any, settings: dict[str, Any], templates: list[tuple[str, str]], args: Any, out: TextIO) -> int:
    """Run every template of a locked batch directory, then write ``designs.tsv`` and ``summary.txt``."""
    from tqdm.auto import tqdm

    jobs = [(str(run_dir.path / name), _template_config(settings, template)) for name, template in templates]
    for name, _ in templates:
        run_dir.record(name)  # each template's directory is the batch's (an overwrite removes it)
    show = args.progress if args.progress is not None else True
    results: list[dict] = []
    with tqdm(total=len(jobs), unit=" template", desc="templates", disable=not show, file=sys.stderr) as bar:
        if settings.get("workers"):
            results = _run_on_ray(jobs, settings["workers"], args.checkpoint_seconds, bar)
        else:
            for directory, config in jobs:
                results.append(run_template(directory, config, args.checkpoint_seconds))
                bar.update(1)
    lines = ["template\tchain\tdraw\tenergy\tsequence"]
    table = ["template\tr_hat_lp\tess_lp\tacceptance\tbest_energy\tbest_sequence"]
    for (name, _), res in zip(templates, results):
        lines += [f"{name}\t{c}\t{d}\t{e:.4f}\t{seq}" for c, d, e, seq in res["rows"]]
        s = res["summary"]
        table.append(
            f"{name}\t{s['r_hat']:.3f}\t{s['ess']:.0f}\t{s['acceptance']:.3f}\t{s['best_energy']:.4f}\t{s['best']}"
        )
    run_dir.write_text("designs.tsv", "\n".join(lines) + "\n")
    run_dir.write_text("summary.txt", "\n".join(table) + "\n")
    out.write("\n".join(table) + "\n")
    out.write(f"\nwrote designs.tsv, summary.txt and one run directory per template in {run_dir.path}\n")
    return 0


def _run_on_ray(jobs: list[tuple[str, dict]], workers: int, checkpoint_seconds: float, bar: Any) -> list[dict]:
    """The templates as Ray tasks, at most ``workers`` at a time; a task whose worker died is
    retried and continues from the template's checkpoint."""
    from ..inference.distributed import connect

    ray = connect(num_cpus=max(workers, os.cpu_count() or 1))
    threads = max(1, int(ray.cluster_resources().get("CPU", 1)) // workers)
    task = ray.remote(run_template).options(num_cpus=1, max_retries=3)
    futures: list[Any] = []
    pending: dict[Any, int] = {}
    for i, (directory, config) in enumerate(jobs):
        if len(pending) >= workers:
            done, _ = ray.wait(list(pending), num_returns=1)
            pending.pop(done[0])
            bar.update(1)
        ref = task.remote(directory, config, checkpoint_seconds, threads)
        futures.append(ref)
        pending[ref] = i
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        pending.pop(done[0])
        bar.update(1)
    return ray.get(futures)
