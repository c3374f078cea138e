"""``mlm-ppl sample``: sample the masked positions of a template into a resumable run directory."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
from typing import Any, TextIO

from .. import campaign
from .._checks import check_interval
from ..diagnostics import CHAIN_RHAT_MAX, ESS_MIN_PER_CHAIN, RHAT_MAX
from ..inference.annealing import annealing_note, format_anneal, parse_anneal
from ..inference.base import INITS
from ..inference.distributed import WorkersLostError
from ..inference.estimate import estimate_run
from ..inference.registry import KERNELS, kernel_class
from ..inference.spec import KernelBase
from ..models.constraints import LIABILITIES, ConstraintSpec, Forbid, Rule, trusting_code
from ..models.energy import ENERGIES
from ..models.gaps import has_variable_gap
from ..rundir import RunDirectory
from ..settings import MAX_CHAINS, STOP_EVERY, RunSettings, option_flags
from ._common import add_model_args, exists_message, split_lines

_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(RunSettings)
    if f.name not in ("kernel_options", "model_files", "constraints", "length_prior", "starts")
}
_SETTINGS = tuple(_DEFAULTS)


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
    choices = {"kernel": tuple(KERNELS), "energy": ENERGIES, "init": INITS}
    types = typing.get_type_hints(RunSettings)
    for f in dataclasses.fields(RunSettings):  # the run's own settings, from the record's declaration
        if "help" in f.metadata:
            kind = [t for t in typing.get_args(types[f.name]) if t is not type(None)] or [types[f.name]]  # str | None
            smp.add_argument(
                f"--{f.name}",
                type=kind[0],
                choices=choices.get(f.name),
                metavar=f.metadata["metavar"],
                help=f"{f.metadata['help']}" + ("" if f.default is None else f" (default {f.default})"),
            )
    for name, declared in option_flags().items():  # every kernel's options, from their declarations
        info = declared[0][1]
        kernels_of: dict[str, list[str]] = {}  # each help once, with the kernels that declare it
        for kernel, i in declared:
            kernels_of.setdefault(i.help, []).append(kernel)
        help = "; ".join(f"{', '.join(kernels)}: {text}" for text, kernels in kernels_of.items())
        if info.type is bool:
            smp.add_argument(info.flag, dest=name, action="store_const", const=True, default=None, help=help)
        else:
            smp.add_argument(info.flag, dest=name, type=info.type, default=None, help=help)
    smp.add_argument(
        "--until-converged",
        action="store_const",
        const=True,
        default=None,
        help=f"end the run at the first multiple of {STOP_EVERY} draws whose summary says every chain converged "
        f"(R-hat <= {RHAT_MAX} across chains, split R-hat <= {CHAIN_RHAT_MAX} within each, bulk and tail ESS >= "
        f"{ESS_MIN_PER_CHAIN} per chain, for lp and the functionals the verdict reads); "
        "--draws is then the most it takes; recorded with the run",
    )
    rules = smp.add_argument_group("constraints (one spec, recorded with the run; docs/constraints.md)")
    rules.add_argument(
        "--constraints",
        metavar="FILE.toml",
        help="a constraint spec file: liabilities, [[rules]] (allowed, forbid, require) and [[experts]]",
    )
    rules.add_argument(
        "--trust-code",
        action="store_true",
        help="allow experts that name Python code (kind = 'module:function') in --constraints or in the record of "
        "the run --resume continues: their module is imported and run. Without it they are refused",
    )
    rules.add_argument(
        "--forbid",
        metavar="REGEX",
        action="append",
        help="a pattern no designed position may take part in (rule forbid-1, forbid-2 ...; repeatable)",
    )
    rules.add_argument(
        "--liabilities",
        metavar="NAME",
        nargs="*",
        help=f"forbid antibody liabilities: {', '.join(LIABILITIES)} (all of them when no name is given)",
    )
    gaps = smp.add_argument_group("loops of several lengths (a --template with a variable gap [MASK]{a,b})")
    gaps.add_argument(
        "--length-mode",
        choices=campaign.LENGTH_MODES,
        help="jump: one run whose chains move between lengths (kernel gap-jump: insert and delete moves on the "
        "energy, target pi(L) exp(-E/T); or --kernel surrogate-mh around those moves); strata: one run per gap "
        "length into DIR/L08 ..., combined as the "
        "mixture sum_L pi(L) p_L (designs.tsv: each draw's length and weight)",
    )
    gaps.add_argument(
        "--length-prior",
        metavar="FILE|uniform",
        help="pi(L): uniform (default) or a file of lines LENGTH<TAB>WEIGHT",
    )
    smp.add_argument("--out", help="run directory to create")
    smp.add_argument(
        "--overwrite", action="store_true", help="replace an existing mlm-ppl run directory (never another directory)"
    )
    smp.add_argument(
        "--starts-from",
        metavar="RUN",
        help="start each chain where the same chain of the earlier run in RUN is (its checkpoint, finished or not): "
        "a new run that goes on from that run's warm-up, e.g. with another kernel; same model, template and "
        "--chains; recorded with the run",
    )
    smp.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted run in DIR (with a higher --draws: raise its cap and go on to it)",
    )
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
    smp.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=30.0,
        help="checkpoint interval in seconds, a finite number >= 0 (default 30)",
    )


def config_from_flags(
    args: argparse.Namespace, template: str | None = None, extra: dict[str, Any] | None = None
) -> RunSettings:
    """Settings of a new run from the flags, checked before any work (``template``: a batch's
    first template, in place of ``--template``; ``extra``: settings the flags imply, such as
    ``--length-mode jump``'s kernel and length prior)."""
    if not args.out:
        raise ValueError("give --out DIR for the run directory")
    if args.workers is not None and not args.ray:
        raise ValueError("--workers applies to --ray")
    given = {k: getattr(args, k) for k in _SETTINGS if getattr(args, k) is not None}
    if template is not None:
        given["template"] = template
    given.update(extra or {})
    if "template" not in given and "length" not in given:
        raise ValueError("give --template TEXT (mask tokens at the positions to sample) or --length N")
    kernel = given.get("kernel", _DEFAULTS["kernel"])
    flags = option_flags()
    options = {k: getattr(args, k) for k in flags if getattr(args, k) is not None}
    for name in options:
        kernels = [k for k, _ in flags[name]]
        if kernel not in kernels:
            raise ValueError(f"{flags[name][0][1].flag} applies to --kernel {' or '.join(kernels)}, not {kernel}")
    _check_anneal_flags(args, kernel)
    if args.ray:
        from ..inference.distributed import check_address, import_ray

        import_ray()  # installed? (says how to install it)
        check_address()  # RAY_ADDRESS answers? (within seconds)
        given.setdefault("workers", min(given.get("chains", _DEFAULTS["chains"]), os.cpu_count() or 1))
    spec = constraints_from_flags(args)
    settings = RunSettings(  # the model and the constraints are part of the record
        **given, kernel_options=options, constraints=None if spec is None else spec.to_dict()
    ).with_model_files()
    if settings.chains > MAX_CHAINS and not args.force:
        raise ValueError(
            f"--chains {settings.chains} is more than {MAX_CHAINS}: plots and per-chain diagnostics stop "
            "being readable; split the chains over several runs, or pass --force"
        )
    return settings


def _check_anneal_flags(args: argparse.Namespace, kernel: str) -> None:
    """``--anneal FROM:TO`` well formed and for a kernel that anneals; ``--anneal-terms`` only with it."""
    if args.anneal is None:
        if args.anneal_terms is not None:
            raise ValueError("--anneal-terms applies to an annealed run; give --anneal FROM:TO too")
        return
    parse_anneal(args.anneal, "--anneal")
    if not kernel_class(kernel).anneals():
        which = " or ".join(name for name, k in KERNELS.items() if k.anneals())
        raise ValueError(f"--anneal applies to --kernel {which}, not {kernel}")


def _print_annealing(settings: RunSettings) -> None:
    """The note of an annealed run, once, as it starts: its draws are not samples of the target."""
    record = settings.annealing()
    if record is not None:
        print(f"note: {annealing_note(record)}", file=sys.stderr)


def constraints_from_flags(args: argparse.Namespace) -> ConstraintSpec | None:
    """The one constraint spec of ``--constraints FILE``, ``--forbid REGEX`` (rules ``forbid-1``,
    ``forbid-2`` ... after the file's) and ``--liabilities [NAME ...]`` (added to the file's; all
    of them without a name); None without any of them. A malformed one is a one-line ValueError
    naming the flag or the file, the entry and the key."""
    if args.constraints is None and args.forbid is None and args.liabilities is None:
        return None
    spec = ConstraintSpec() if args.constraints is None else ConstraintSpec.from_toml(args.constraints)
    source = args.constraints or "the constraint flags"
    rules: list[Rule] = list(spec.rules)
    for i, pattern in enumerate(args.forbid or [], 1):
        try:
            rules.append(Forbid(f"forbid-{i}", pattern))
        except (TypeError, ValueError) as err:
            raise ValueError(f"--forbid {pattern!r}: {err}") from None
    liabilities: list[str] | bool = list(spec.liabilities)
    if args.liabilities == []:
        liabilities = True
    elif args.liabilities is not None:
        unknown = [n for n in args.liabilities if n not in LIABILITIES]
        if unknown:
            raise ValueError(
                f"--liabilities: unknown liability {unknown[0]!r}; choose from {', '.join(LIABILITIES)} "
                "(or give no name for all of them)"
            )
        liabilities = [*spec.liabilities, *(n for n in args.liabilities if n not in spec.liabilities)]
    try:
        return ConstraintSpec(rules, spec.experts, liabilities=liabilities)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source} with --forbid/--liabilities: {err}") from None


def check_size(settings: RunSettings, kernel: KernelBase, *, force: bool, err: TextIO, runs: int = 1) -> None:
    """The run's estimate (:func:`~mlm_ppl.inference.estimate.estimate_run`; ``runs``: a batch's
    runs of these settings, one after another): printed for a big run, and a run past half of the
    machine's memory or past a day refused unless ``force``."""
    estimate = estimate_run(kernel, settings.chains, settings.total_steps, settings.draws, runs)
    estimate.check(force)
    if estimate.big:
        print(f"estimate: {estimate}", file=err)


def read_templates(source: str) -> list[tuple[str, str]]:
    """``(name, template)`` per line of the file ``source`` (``-``: stdin), read as
    :func:`~mlm_ppl.campaign.parse_templates` reads a templates file's lines."""
    return campaign.parse_templates(split_lines(source, "one template per line"), source)


def run(args: argparse.Namespace, out: TextIO) -> int:
    with trusting_code(args.trust_code):  # code named in a spec file or a run's record: only with consent
        return _run(args, out)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from .. import rundir

    check_interval(args.checkpoint_seconds, "--checkpoint-seconds")
    if args.resume:
        if args.length_mode or args.length_prior:
            raise ValueError(
                "--resume continues a run or a batch of strata with its own lengths and length prior; "
                "give --resume DIR without --length-mode and --length-prior"
            )
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise ValueError("--out and --resume name different directories; give only --resume DIR")
        if args.templates:
            raise ValueError("--resume continues a batch with its own templates; give only --resume DIR")
        if args.starts_from:
            raise ValueError(
                "--resume continues a run from its own checkpoint; --starts-from starts a new run (give --out)"
            )
        if rundir.kind_of(args.resume) == "batch":
            with campaign.resume_batch(args.resume) as batch:
                _check_resume_flags(args, batch.settings)
                return _run_batch(batch, args, out)
        run_dir, settings, checkpoint = rundir.resume_run(args.resume)
        with run_dir:
            raise_to = args.draws if args.draws is not None and args.draws != settings.draws else None
            _check_resume_flags(args, settings if raise_to is None else dataclasses.replace(settings, draws=raise_to))
            if raise_to is not None:  # a higher cap: the run goes on to it (refused where it cannot)
                settings = rundir.raise_cap(run_dir, settings, checkpoint, raise_to)
            mlm, _, kernel = campaign.build(settings)
            return _sample(run_dir, settings, checkpoint, mlm, kernel, args, out)
    if has_variable_gap(args.template) or args.length_mode or args.length_prior:
        return _start_gap(args, out)
    if args.templates:
        return _start_batch(args, out, read_templates(args.templates))
    return _start_run(args, out)


def _start_run(args: argparse.Namespace, out: TextIO, extra: dict[str, Any] | None = None) -> int:
    """A new run of one template: every setting checked, the model loaded, the directory made."""
    from .. import rundir

    settings = config_from_flags(args, extra=extra)
    if args.starts_from:
        if args.init is not None:
            raise ValueError("--init fills the template; --starts-from starts from an earlier run's states: give one")
        settings = campaign.starts_record(settings, args.starts_from)  # before the model loads
    try:
        RunDirectory.check_new(
            args.out, "sample", overwrite=args.overwrite, names=rundir.OUTPUT_NAMES
        )  # before the model loads
        mlm, _, kernel = campaign.build(settings)  # loads the model and checks template and options first
        check_size(settings, kernel, force=args.force, err=sys.stderr)
        campaign.connect_workers(settings)  # Ray answers before the directory is made (or nothing is left)
        run_dir = rundir.start_run(args.out, settings, overwrite=args.overwrite)
    except rundir.RunExistsError as err:
        raise _exists(err) from None
    with run_dir:
        return _sample(run_dir, settings, None, mlm, kernel, args, out)


def _exists(err: Any) -> ValueError:
    same_kind = f"use --resume {err.path} to continue it, --overwrite to replace it, or another --out"
    return ValueError(exists_message(err, same_kind))


def _check_resume_flags(args: argparse.Namespace, settings: RunSettings) -> None:
    """Flags given with ``--resume`` must be the run's own settings."""
    if args.ray and settings.workers is None:
        raise ValueError(f"--resume {args.resume}: the run ran in one process; resume it without --ray")
    record = settings.to_dict()
    have = {**{k: v for k, v in record.items() if k != "kernel_options"}, **record["kernel_options"]}
    names = (*_SETTINGS, *option_flags())
    given = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if "anneal" in given:  # as the record keeps it: 1:0.05 and 1.0:0.050 are the same schedule
        given["anneal"] = format_anneal(*parse_anneal(given["anneal"], "--anneal"))
    clash = {k: (v, have.get(k)) for k, v in given.items() if have.get(k) != v}
    details = [f"--{k.replace('_', '-')} {v!r} (run has {c!r})" for k, (v, c) in clash.items()]
    spec = constraints_from_flags(args)
    if (
        spec is not None
        and dataclasses.replace(settings, constraints=spec.to_dict()).constraints != settings.constraints
    ):
        details.append(f"--constraints/--forbid/--liabilities {spec.to_dict()!r} (run has {settings.constraints!r})")
    if details:
        detail = ", ".join(details)
        raise ValueError(
            f"--resume {args.resume}: settings differ from the run's: {detail}; "
            "resume with the run's own settings, or start a new run"
        )


def _start_gap(args: argparse.Namespace, out: TextIO) -> int:
    """A template with a variable gap: one run over every length (``jump``: kernel gap-jump, or another that
    moves lengths, surrogate-mh), or a
    batch of strata, one run per length of the gap, weighted by the prior (``strata``)."""
    if args.templates or args.length is not None or not has_variable_gap(args.template):
        raise ValueError(
            "--length-mode and --length-prior apply to one --template with a variable gap, e.g. 'CAR[MASK]{10,16}WGQG'"
        )
    plan = campaign.plan_gap(args.template, args.length_mode, args.length_prior, args.kernel)
    if plan.mode == "jump":
        return _start_run(args, out, extra={"kernel": plan.kernel, "length_prior": plan.prior.record()})
    templates, lengths = plan.strata()
    return _start_batch(args, out, templates, lengths)


def _start_batch(
    args: argparse.Namespace, out: TextIO, templates: list[tuple[str, str]], lengths: dict | None = None
) -> int:
    """A new batch: every template and setting checked, then one run per template."""
    from .. import rundir

    if args.starts_from:
        raise ValueError(
            "--starts-from starts one run from an earlier run's states; a batch (--templates, --length-mode strata) "
            "starts each template's run from its own fills"
        )
    settings = config_from_flags(args, template=templates[0][1])
    try:
        names = [name for name, _ in templates]  # each template's folder: absent, or the old batch's
        RunDirectory.check_new(args.out, "batch", overwrite=args.overwrite, names=names)  # before the model loads
        batch = campaign.start_batch(
            args.out,
            settings,
            templates,
            overwrite=args.overwrite,
            lengths=lengths,
            check_size=lambda kernel: check_size(
                settings, kernel, force=args.force, err=sys.stderr, runs=len(templates)
            ),
        )  # checks (the size too), then creates
    except rundir.RunExistsError as err:
        raise _exists(err) from None
    with batch:
        return _run_batch(batch, args, out)


def _run_batch(batch: campaign.Batch, args: Any, out: TextIO) -> int:
    from tqdm.auto import tqdm

    show = args.progress if args.progress is not None else True
    _print_annealing(batch.settings)
    n = len(batch.templates)
    with tqdm(total=n, unit=" template", desc="templates", disable=not show, file=sys.stderr) as bar:
        try:
            text = campaign.run_batch(batch, checkpoint_seconds=args.checkpoint_seconds, on_done=lambda: bar.update(1))
        except WorkersLostError as err:  # each template's run keeps its own checkpoints
            raise _kept(err, batch.directory.path, kept=True) from None
    out.write(text)
    out.write(f"\nwrote designs.tsv, summary.txt and one run directory per template in {batch.directory.path}\n")
    return 0


def _kept(err: WorkersLostError, path: Any, kept: bool) -> WorkersLostError:
    """The error with what stays of the run in ``path`` and how to continue it."""
    if kept:
        return WorkersLostError(f"{err}; the checkpoints are kept: continue with mlm-ppl sample --resume {path}")
    return WorkersLostError(f"{err}; nothing had been checkpointed, so nothing is kept: run the command again")


def _sample(
    run_dir: RunDirectory,
    settings: RunSettings,
    checkpoint: Any,
    mlm: Any,
    kernel: KernelBase,
    args: Any,
    out: TextIO,
) -> int:
    """Run (or finish) the chains in the locked ``run_dir``, write the outputs, print the report."""
    show = args.progress if args.progress is not None else True
    _print_annealing(settings)
    if checkpoint is not None and checkpoint.step == settings.total_steps:
        print(f"run in {run_dir.path} is already complete; writing its outputs", file=sys.stderr)
    try:
        result, report, paths = campaign.execute(
            run_dir, settings, checkpoint, mlm, kernel, progress=show, checkpoint_seconds=args.checkpoint_seconds
        )
    except KeyboardInterrupt:
        print(f"interrupted; checkpoint saved. Continue with: mlm-ppl sample --resume {run_dir.path}", file=sys.stderr)
        return 130
    except WorkersLostError as err:
        from .. import rundir

        kept = run_dir.path.is_dir() and bool(rundir.checkpoint_files(run_dir.path))
        raise _kept(err, run_dir.path, kept) from None
    out.write(str(report) + "\n\n")
    last = mlm.decode(result.tokens[:, -1])
    out.write("last draw of each chain:\n" + "".join(f"  chain {c}: {s}\n" for c, s in enumerate(last)))
    out.write(f"\nwrote {paths[0]}, {', '.join(os.path.basename(p) for p in paths[1:])} in {run_dir.path}\n")
    return 0
