"""Running one sampling run: its model and kernel from the settings, the chains (in this process
or on Ray workers), the outputs. Shared by ``mlm-ppl sample`` and its batches of templates."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

KERNEL_FLAGS = {  # kernel option (= flag) -> the kernels it applies to
    "scan": ("mh", "pseudo-gibbs"),
    "block_size": ("mh",),
    "proposal_temperature": ("mh", "surrogate-mh"),
    "top_k": ("mh", "surrogate-mh", "pseudo-gibbs"),
    "top_p": ("mh", "surrogate-mh"),
    "inner_steps": ("surrogate-mh",),
    "surrogate_window": ("surrogate-mh",),
    "surrogate_dtype": ("surrogate-mh",),
    "burnin": ("pseudo-gibbs",),
    "iterations": ("mask-predict",),
}


def build_kernel(config: dict[str, Any]) -> Any:
    """The kernel of a run configuration (what each Ray worker builds for itself)."""
    return build(config)[2]


def build(config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Model, target and kernel of a run configuration."""
    from ..inference.api import make_kernel
    from ..models.distribution import MaskedLMDistribution
    from ..models.loading import load_mlm

    mlm = load_mlm(config["model"], device=config["device"], dtype=config["dtype"])
    template = config["template"]
    if template is None:
        mask = mlm.vocab[mlm.mask_id]
        template = (mask * config["length"]) if mlm.residue_level else " ".join([mask] * config["length"])
    dist = MaskedLMDistribution(mlm, template, energy=config["energy"], temperature=config["temperature"])
    options = {flag: config[flag] for flag in KERNEL_FLAGS if config[flag] is not None}
    return mlm, dist, make_kernel(config["kernel"], dist, **options)


def execute(
    run_dir: Any,
    config: dict[str, Any],
    checkpoint: Any,
    mlm: Any,
    kernel: Any,
    *,
    progress: bool,
    checkpoint_seconds: float,
) -> tuple[Any, Any, list[str]]:
    """Run (or finish) the chains of ``config`` in the locked ``run_dir`` (in this process, or on
    Ray workers when ``config["workers"]`` is set) and write the outputs: ``(run, summary, paths)``.

    A failure before the first checkpoint removes what the run wrote; Ctrl-C propagates after
    the checkpoint is saved.
    """
    from .. import rundir
    from ..inference.runner import run_chains

    total = config["warmup"] + config["draws"] * config["thin"]
    if checkpoint is not None and checkpoint.step == total:
        print(f"run in {run_dir.path} is already complete; writing its outputs", file=sys.stderr)
    options = dict(
        warmup_steps=config["warmup"],
        thin=config["thin"],
        seed=config["seed"],
        init=config["init"],
        progress=progress,
        checkpoint_seconds=checkpoint_seconds,
    )
    try:
        if config["workers"] is not None:
            from ..inference.distributed import run_chains_ray, split_chains

            groups = len(split_chains(config["chains"], config["workers"]))
            result = run_chains_ray(
                functools.partial(build_kernel, config),
                config["chains"],
                config["draws"],
                workers=config["workers"],
                checkpoints=rundir.group_checkpoints(run_dir, config, groups),
                device=config["device"],
                **options,
            )
        else:
            result = run_chains(
                kernel,
                config["chains"],
                config["draws"],
                on_checkpoint=lambda cp: rundir.save_checkpoint(run_dir, cp, config),
                resume=checkpoint,
                **options,
            )
    except Exception:
        if not rundir.checkpoint_files(run_dir.path):  # nothing worth keeping: leave no half-made directory
            run_dir.discard()
        raise
    result.attrs.update(
        model=mlm.name,
        kernel=config["kernel"],
        template_text=config["template"] or "",
        config=json.dumps(config, sort_keys=True),
    )
    report, paths = rundir.write_outputs(run_dir, result, mlm)
    return result, report, paths  # report: the Summary written to summary.txt
