"""A resumable pair-joint evaluation in a directory (``mlm-ppl pairs``).

The directory holds ``config.json`` (the settings), ``pairs.csv`` (one row per pair and
method, appended and flushed pair by pair), and at the end ``summary.csv``, ``summary.txt``
and ``pairs.png``. Running the same settings again continues where an interrupted run stopped:
a pair whose rows were cut off mid-write is dropped and recomputed. Other settings in the same
directory are refused unless ``overwrite`` is given.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.masked_lm import MaskedLM
from ..rundir import CONFIG, LOCK, MARKER, RunDirectory, RunExistsError, flat_record
from .pairs import (
    ROW_FIELDS,
    evaluate_pairs,
    format_differences,
    format_summary,
    paired_differences,
    plot_pairs,
    summarize_pairs,
)

__all__ = ["PAIRS_FORMAT", "PairsRun", "open_pairs_run", "run_pairs", "write_csv"]

PAIRS_FORMAT = "mlm-ppl-pairs-1"


def write_csv(run_dir: RunDirectory, name: str, fields: Sequence[str], rows: Sequence[dict]) -> Path:
    """Write a CSV into the run directory atomically; returns its path."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return run_dir.write_text(name, buffer.getvalue())


def open_pairs_run(
    directory: str | Path, config: dict[str, Any], *, overwrite: bool = False
) -> tuple[RunDirectory, list[dict]]:
    """Create ``directory`` for a pairs run, or reopen it to continue a run with the same settings.

    Returns the locked run directory and the rows already computed (complete pairs only;
    ``pairs.csv`` is rewritten without a pair cut off mid-write). Raises
    :class:`~mlm_ppl.rundir.RunExistsError` for a directory that holds something else, or a run
    with other settings unless ``overwrite`` (which never touches a directory mlm-ppl did not make).
    """
    path = Path(directory)
    if overwrite or not (path.is_dir() and any(p.name != LOCK for p in path.iterdir())):
        run_dir = RunDirectory.create(path, "pairs", overwrite=overwrite)
        try:
            run_dir.write_text(CONFIG, json.dumps(config, indent=1, sort_keys=True))
            write_csv(run_dir, "pairs.csv", ROW_FIELDS, [])
        except BaseException:
            run_dir.discard()
            raise
        return run_dir, []
    if not (path / MARKER).exists():
        raise RunExistsError(path, f"{str(path)!r} exists and is not an mlm-ppl pairs run", holds="foreign")
    run_dir = RunDirectory.open(path, "pairs")
    try:
        try:
            old = json.loads((path / CONFIG).read_text())
            if not isinstance(old, dict):
                raise ValueError("not a mapping")
        except (FileNotFoundError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise RunExistsError(path, f"{str(path)!r} holds a pairs run without readable settings") from None
        if old != config:
            was, now = flat_record(old), flat_record(config)  # a changed file named: model_files.model.safetensors
            changed = sorted(k for k in set(was) | set(now) if k not in was or k not in now or was[k] != now[k])
            raise RunExistsError(path, f"{str(path)!r} holds a pairs run with other settings ({', '.join(changed)})")
        rows: list[dict] = []
        if (path / "pairs.csv").exists():
            with open(path / "pairs.csv", newline="") as fh:
                rows = list(csv.DictReader(fh))
        per_pair = len(config["methods"]) + 1
        rows = [r for r in rows if None not in r and None not in r.values()]  # a row cut off mid-write has gaps
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["pair"]] = counts.get(r["pair"], 0) + 1
        rows = [r for r in rows if counts[r["pair"]] == per_pair]
        write_csv(run_dir, "pairs.csv", ROW_FIELDS, rows)  # drops a pair cut off mid-write
    except BaseException:
        run_dir.close()
        raise
    return run_dir, rows


@dataclass
class PairsRun:
    """A finished pairs run: its report (as printed) and the files written."""

    directory: Path
    report: str
    paths: list[Path]


def run_pairs(
    mlm: MaskedLM,
    sequences: Sequence[str],
    pairs: Sequence[tuple[int, int, int]],
    methods: Sequence[str],
    directory: str | Path,
    *,
    config: dict[str, Any],
    support: int | None = None,
    convention: str = "mlm-ppl",
    overwrite: bool = False,
    progress: bool | None = None,
    data_label: str = "",
) -> PairsRun:
    """Evaluate ``methods`` on ``pairs`` into ``directory``, resuming a run with the same ``config``.

    ``pairs`` come from :func:`~mlm_ppl.evaluation.draw_pairs` (with the same ``convention``,
    see :data:`~mlm_ppl.evaluation.CONVENTIONS`); ``progress`` shows a bar over the pairs
    (default: for 8 or more).
    A run that fails before its first pair is written leaves nothing behind.
    """
    run_dir, rows = open_pairs_run(directory, config, overwrite=overwrite)
    with run_dir:
        try:
            return _run_pairs(
                run_dir, mlm, sequences, pairs, methods, rows, config, support, convention, progress, data_label
            )
        except Exception:
            if not rows:  # _run_pairs extends rows as pairs are written
                run_dir.discard()
            raise


def _run_pairs(
    run_dir: RunDirectory,
    mlm: MaskedLM,
    sequences: Sequence[str],
    pairs: Sequence[tuple[int, int, int]],
    methods: Sequence[str],
    rows: list[dict],
    config: dict[str, Any],
    support: int | None,
    convention: str,
    progress: bool | None,
    data_label: str,
) -> PairsRun:
    from tqdm.auto import tqdm

    path = run_dir.path
    done = {int(r["pair"]) for r in rows}
    show = progress if progress is not None else len(pairs) >= 8
    t0 = time.perf_counter()
    with (
        tqdm(total=len(pairs), unit=" pair", disable=not show, dynamic_ncols=True) as bar,
        open(path / "pairs.csv", "a", newline="") as fh,
    ):
        bar.update(len(done))
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS, lineterminator="\n")
        for pair_rows in evaluate_pairs(
            mlm, sequences, pairs, list(methods), support=support, skip=done, convention=convention
        ):
            writer.writerows(pair_rows)
            fh.flush()
            rows.extend(pair_rows)
            bar.update(1)
    elapsed = time.perf_counter() - t0
    summary = summarize_pairs(rows)
    write_csv(run_dir, "summary.csv", ("method", "metric", "mean", "se", "n"), summary)
    kind, seed = config.get("pairs", ""), config.get("seed", "")
    if convention == "reference":
        setting = "reference convention: every token id, special tokens included; AG 40 plain steps"
    else:
        setting = f"support {'all ordinary tokens' if support is None else f'K={support}'}"
    lines = [
        f"model {mlm.name}  |  data {data_label} ({len(sequences)} sequences)  |  {len(pairs)} {kind} pairs, "
        f"seed {seed}  |  {setting}",
        "",
        format_summary(summary),
        "",
        "pair_ppl, unary_ppl: exp(mean NLL) with delta-method SE; kl_fwd = KL(MLM || joint), "
        "kl_rev = KL(joint || MLM), jsd: conditionals at the observed value (_gold) or averaged over all values "
        "(_all); compatibility: Arnold-Press score of the MLM's conditionals (0 = compatible).",
    ]
    if "ag" in methods:
        lines += ["", format_differences(paired_differences(rows, "ag"))]
    ag = [r for r in rows if r["method"] == "ag"]
    if ag:
        iters = sorted(int(r["iterations"]) for r in ag)
        conv = sum(str(r["converged"]) == "True" for r in ag)
        lines.append(
            f"ag: converged on {conv}/{len(ag)} pairs, median {iters[len(iters) // 2]} iterations, max {iters[-1]}"
        )
    compute = sum(float(r["seconds"]) for r in rows if r["method"] == "mlm")
    lines.append(
        f"compute {compute:.1f} s over {len(pairs)} pairs ({compute / len(pairs):.2f} s/pair); "
        f"this invocation {elapsed:.1f} s"
    )
    report = "\n".join(lines)
    run_dir.write_text("summary.txt", report + "\n")
    run_dir.record("pairs.png")
    plot_pairs(summary, str(path / "pairs.png"), title=f"{mlm.name}: {len(pairs)} {kind} pairs from {data_label}")
    return PairsRun(path, report, [path / "pairs.csv", path / "summary.csv", path / "summary.txt", path / "pairs.png"])
