"""``mlm-ppl sample``: sample the masked positions of a template into a resumable run directory."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from .._checks import check_choice, check_seed, check_temperature
from ..inference.api import KERNELS
from ..inference.base import INITS
from ..inference.runner import EXTRA_STAT_NAMES, STAT_NAMES
from ..models.energy import ENERGIES
from . import batch
from ._common import add_model_args, at_least
from ._execute import KERNEL_FLAGS, build, execute

_DEFAULTS: dict[str, Any] = dict(
    model="antiberty",
    kernel="mh",
    energy="norm",
    temperature=1.0,
    chains=4,
    draws=100,
    warmup=0,
    thin=1,
    seed=0,
    init="sample",
    dtype=None,
    device=None,
)
_SETTINGS = tuple(_DEFAULTS) + ("template", "length", "workers") + tuple(KERNEL_FLAGS)


def add_parser(sub: argparse._SubParsersAction) -> None:
    smp = sub.add_parser(
        "sample",
        help="sample the masked positions of a template (MH, surrogate-MH, pseudo-Gibbs or mask-predict)",
        description="Run C chains on the masked positions of a template and write a run directory: "
        "config.json, checkpoint.pt (as it goes), run.nc (ArviZ InferenceData), samples.txt, summary.txt, "
        "plots. --resume DIR continues an interrupted run exactly.",
    )
    add_model_args(smp)
    smp.set_defaults(model=None)
    what = smp.add_mutually_exclusive_group()
    what.add_argument(
        "--template", help="sequence with mask tokens at the positions to sample, e.g. 'CAR[MASK][MASK]W'"
    )
    what.add_argument("--length", type=int, help="sample a whole sequence of N tokens")
    what.add_argument(
        "--templates",
        metavar="FILE",
        help="a batch: one template per line (TEMPLATE, or NAME<TAB>TEMPLATE), each run with the same settings "
        "into DIR/NAME, then DIR/designs.tsv and DIR/summary.txt",
    )
    smp.add_argument("--kernel", choices=KERNELS)
    smp.add_argument("--energy", choices=ENERGIES)
    smp.add_argument("--temperature", type=float, help="target temperature T (default 1)")
    smp.add_argument("--chains", type=int, help="chains, advanced together (default 4)")
    smp.add_argument("--draws", type=int, help="draws kept per chain (default 100)")
    smp.add_argument("--warmup", type=int, help="steps discarded before the first draw (default 0)")
    smp.add_argument("--thin", type=int, help="keep every k-th step (default 1)")
    smp.add_argument("--seed", type=int, help="seed (default 0)")
    smp.add_argument("--init", choices=INITS, help="how the masks are first filled")
    smp.add_argument(
        "--scan",
        help="random, random_sweep, left_to_right; pseudo-Gibbs also parallel_masked, parallel_unmasked "
        "(bert-gen's parallel mode; see docs/sampling.md)",
    )
    smp.add_argument("--block-size", type=int, help="MH: positions proposed together")
    smp.add_argument("--proposal-temperature", type=float, help="MH, surrogate-MH: proposal temperature")
    smp.add_argument(
        "--top-k", type=int, help="MH, surrogate-MH, pseudo-Gibbs: truncate proposals to the k most likely tokens"
    )
    smp.add_argument("--top-p", type=float, help="MH, surrogate-MH: nucleus truncation of proposals")
    smp.add_argument(
        "--inner-steps",
        type=int,
        help="surrogate-MH: surrogate steps per exact correction (default 4 x free positions)",
    )
    smp.add_argument(
        "--surrogate-window",
        type=int,
        help="surrogate-MH: the surrogate scores positions within R of a free position (default 0)",
    )
    smp.add_argument("--surrogate-dtype", help="surrogate-MH: the surrogate's dtype (float32, bfloat16, float16)")
    smp.add_argument("--burnin", type=int, help="pseudo-Gibbs: steps before --top-k applies")
    smp.add_argument("--iterations", type=int, help="mask-predict: decoding iterations")
    smp.add_argument("--out", help="run directory to create")
    smp.add_argument(
        "--overwrite", action="store_true", help="replace an existing mlm-ppl run directory (never another directory)"
    )
    smp.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR")
    smp.add_argument(
        "--ray",
        action="store_true",
        help="split the chains over Ray workers (RAY_ADDRESS, or a local Ray instance); needs mlm-ppl[ray]",
    )
    smp.add_argument(
        "--workers", type=int, help="--ray: workers, each with one model (default: CPUs, at most --chains)"
    )
    smp.add_argument(
        "--force",
        action="store_true",
        help=f"run past the size limits (more than {MAX_CHAINS} chains, half the memory, a day)",
    )
    smp.add_argument("--checkpoint-seconds", type=float, default=30.0, help="checkpoint interval (default 30 s)")


_INT_SETTINGS = (
    "chains", "draws", "warmup", "thin", "seed", "length", "block_size", "top_k",
    "inner_steps", "surrogate_window", "burnin", "iterations", "workers",
)  # fmt: skip
_FLOAT_SETTINGS = ("temperature", "proposal_temperature", "top_p")
MAX_CHAINS = 1000
"""More chains than this are refused unless --force: their plots and per-chain diagnostics stop being
readable, and one run's memory grows with them; run several directories instead."""


def config_from_flags(args: argparse.Namespace, template: str | None = None) -> dict[str, Any]:
    """Settings of a new run from the flags, checked before any work (``template``: a batch's
    first template, checked in place of ``--template``)."""
    config = {k: getattr(args, k) for k in _SETTINGS}
    if template is not None:
        config["template"] = template
    for k, v in _DEFAULTS.items():
        if config[k] is None:
            config[k] = v
    if not args.out:
        raise ValueError("give --out DIR for the run directory")
    if args.workers is not None and not args.ray:
        raise ValueError("--workers applies to --ray")
    if args.ray:
        from ..inference.distributed import check_address, import_ray

        import_ray()  # installed? (says how to install it)
        check_address()  # RAY_ADDRESS answers? (within seconds)
        if config["workers"] is None:
            config["workers"] = min(config["chains"], os.cpu_count() or 1)
    check_config(config)
    if config["chains"] > MAX_CHAINS and not args.force:
        raise ValueError(
            f"--chains {config['chains']} is more than {MAX_CHAINS}: plots and per-chain diagnostics stop "
            "being readable; split the chains over several runs, or pass --force"
        )
    return config


def check_config(config: dict[str, Any]) -> None:
    """Every setting of a run, from the flags or from a run's ``config.json``: present, of its type,
    in range, and applying to the kernel. A ValueError names what to fix."""
    missing = sorted(set(_SETTINGS) - set(config))
    unknown = sorted(set(config) - set(_SETTINGS))
    if missing or unknown:
        raise ValueError(
            f"run settings {'lack ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}{'have unknown ' + ', '.join(unknown) if unknown else ''}"
        )
    for k in _INT_SETTINGS:
        if config[k] is not None and (isinstance(config[k], bool) or not isinstance(config[k], int)):
            raise ValueError(f"{k} must be an integer, got {config[k]!r}")
    for k in _FLOAT_SETTINGS:
        if config[k] is not None and (isinstance(config[k], bool) or not isinstance(config[k], (int, float))):
            raise ValueError(f"{k} must be a number, got {config[k]!r}")
    for k in set(_SETTINGS) - set(_INT_SETTINGS) - set(_FLOAT_SETTINGS):
        if config[k] is not None and not isinstance(config[k], str):
            raise ValueError(f"{k} must be text, got {config[k]!r}")
    if (config["template"] is None) == (config["length"] is None):
        raise ValueError("give --template TEXT (mask tokens at the positions to sample) or --length N")
    for flag, minimum in (("chains", 1), ("draws", 1), ("warmup", 0), ("thin", 1), ("length", 1)):
        at_least(config[flag], flag, minimum)
    for flag, minimum in (("inner_steps", 1), ("surrogate_window", 0), ("workers", 1)):
        at_least(config[flag], flag.replace("_", "-"), minimum)
    check_seed(config["seed"])
    check_temperature(config["temperature"], "--temperature")
    check_choice(config["kernel"], "--kernel", KERNELS)
    check_choice(config["energy"], "--energy", ENERGIES)
    check_choice(config["init"], "--init", INITS)
    for flag, kernels in KERNEL_FLAGS.items():
        if config[flag] is not None and config["kernel"] not in kernels:
            raise ValueError(
                f"--{flag.replace('_', '-')} applies to --kernel {' or '.join(kernels)}, not {config['kernel']}"
            )


def check_size(config: dict[str, Any], kernel: Any, *, force: bool, err: TextIO) -> None:
    """Estimate a run's memory and time before it starts; print the estimate for a big run and
    refuse one past the machine's memory, or past a day, unless ``force``.

    Memory: the draws and statistics kept in memory (and again while ``run.nc`` is written).
    Time: one timed step of up to 8 chains (only for runs of 100,000 chain-steps or more).
    """
    C, steps = config["chains"], config["warmup"] + config["draws"] * config["thin"]
    L = kernel.target.template.numel()
    kept = C * config["draws"]
    memory = 3 * kept * (8 * L + 8 * (len(STAT_NAMES) + len(EXTRA_STAT_NAMES)))  # tokens + stats, three copies
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    seconds = None
    if C * steps >= 100_000 and memory <= available // 2:
        seconds = _time_per_step(kernel, min(C, 8)) * -(-C // 8) * steps
    big = memory > 2**30 or (seconds is not None and seconds > 3600)
    if not big:
        return
    text = f"{C} chains x {steps} steps: about {memory / 2**30:.1f} GiB of draws in memory"
    if seconds is not None:
        text += f", about {seconds / 3600:.1f} h (timed: one step of {min(C, 8)} chains)"
    if not force and memory > available // 2:
        raise ValueError(
            f"{text}: more than half of this machine's {available / 2**30:.0f} GiB; "
            "use fewer chains or draws, or --force"
        )
    if not force and seconds is not None and seconds > 86400:
        raise ValueError(f"{text}: more than a day; use fewer chains or draws, or --force")
    print(f"estimate: {text}", file=err)


def _time_per_step(kernel: Any, chains: int) -> float:
    """Seconds of one step of ``chains`` chains from a uniform start (init excluded)."""
    import time

    from ..inference.base import initial_tokens
    from ..inference.streams import ChainStreams

    streams = ChainStreams(0, chains)
    state = kernel.init(initial_tokens(kernel, chains, streams, "uniform"))
    t0 = time.perf_counter()
    kernel.step(state, streams)
    return time.perf_counter() - t0


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .. import rundir

    if args.resume:
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise ValueError("--out and --resume name different directories; give only --resume DIR")
        if args.templates:
            raise ValueError("--resume continues a batch with its own templates; give only --resume DIR")
        if rundir.kind_of(args.resume) == "batch":
            batch_dir, settings, templates = batch.resume_batch(args.resume)
            with batch_dir:
                _check_resume_flags(args, settings)
                return batch.run_batch(batch_dir, settings, templates, args, out)
        run_dir, config, checkpoint = rundir.resume_run(args.resume)
        with run_dir:
            config.setdefault("workers", None)  # runs before Ray runs existed ran in one process
            _check_resume_flags(args, config)
            try:
                check_config(config)
            except ValueError as err:
                raise ValueError(f"{run_dir.path / rundir.CONFIG}: {err}") from None
            mlm, _, kernel = build(config)
            return _sample(run_dir, config, checkpoint, mlm, kernel, args, out)
    if args.templates:
        return _start_batch(args, out)
    config = config_from_flags(args)
    try:
        rundir.RunDirectory.check_new(args.out, "sample", overwrite=args.overwrite)  # before the model loads
        mlm, _, kernel = build(config)  # loads the model and checks template and options first
        check_size(config, kernel, force=args.force, err=sys.stderr)
        run_dir = rundir.start_run(args.out, config, overwrite=args.overwrite)
    except rundir.RunExistsError as err:
        hint = (
            f"use --resume {err.path} to continue it, --overwrite to replace it, or another --out"
            if err.ours
            else "use another --out"
        )
        raise ValueError(f"{err.detail}; {hint}") from None
    with run_dir:
        return _sample(run_dir, config, None, mlm, kernel, args, out)


def _check_resume_flags(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """Flags given with ``--resume`` must be the run's own settings."""
    if args.ray and config.get("workers") is None:
        raise ValueError(f"--resume {args.resume}: the run ran in one process; resume it without --ray")
    given = {k: getattr(args, k) for k in _SETTINGS if getattr(args, k) is not None}
    clash = {k: (v, config.get(k)) for k, v in given.items() if config.get(k) != v}
    if clash:
        detail = ", ".join(f"--{k.replace('_', '-')} {v!r} (run has {c!r})" for k, (v, c) in clash.items())
        raise ValueError(
            f"--resume {args.resume}: settings differ from the run's: {detail}; "
            "resume with the run's own settings, or start a new run"
        )


def _start_batch(args: argparse.Namespace, out: TextIO) -> int:
    """A new batch: every template and setting checked, then one run per template."""
    from .. import rundir
    from ..models.distribution import MaskedLMDistribution

    templates = batch.read_templates(args.templates)
    config = config_from_flags(args, template=templates[0][1])
    try:
        rundir.RunDirectory.check_new(args.out, "batch", overwrite=args.overwrite)
        mlm, _, _ = build(config)  # the model, the settings and the first template
        for name, template in templates[1:]:
            try:
                MaskedLMDistribution(mlm, template, energy=config["energy"], temperature=config["temperature"])
            except ValueError as err:
                raise ValueError(f"template {name!r}: {err}") from None
        settings = dict(config, template=None)
        batch_dir = batch.start_batch(args.out, settings, templates, overwrite=args.overwrite)
    except rundir.RunExistsError as err:
        hint = f"use --resume {err.path} to continue it, --overwrite to replace it, or another --out"
        raise ValueError(f"{err.detail}; {hint if err.ours else 'use another --out'}") from None
    with batch_dir:
        return batch.run_batch(batch_dir, settings, templates, args, out)


def _sample(
    run_dir: Any, config: dict[str, Any], checkpoint: Any, mlm: Any, kernel: Any, args: Any, out: TextIO
) -> int:
    """Run (or finish) the chains in the locked ``run_dir``, write the outputs, print the report."""
    show = args.progress if args.progress is not None else True
    try:
        result, report, paths = execute(
            run_dir, config, checkpoint, mlm, kernel, progress=show, checkpoint_seconds=args.checkpoint_seconds
        )
    except KeyboardInterrupt:
        print(f"interrupted; checkpoint saved. Continue with: mlm-ppl sample --resume {run_dir.path}", file=sys.stderr)
        return 130
    out.write(str(report) + "\n\n")
    last = mlm.decode(result.tokens[:, -1])
    out.write("last draw of each chain:\n" + "".join(f"  chain {c}: {s}\n" for c, s in enumerate(last)))
    out.write(f"\nwrote {paths[0]}, {', '.join(os.path.basename(p) for p in paths[1:])} in {run_dir.path}\n")
    return 0
