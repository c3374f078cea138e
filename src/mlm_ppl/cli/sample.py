"""``mlm-ppl sample``: the flags (or a job file, flags replacing its keys) as a job spec, run by
:func:`mlm_ppl.jobs.run_job` or :func:`mlm_ppl.jobs.resume`; this module parses and prints."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import sys
import typing
from typing import Any, TextIO

from .._files import read_list_file
from ..diagnostics import CHAIN_RHAT_MAX, ESS_MIN_PER_CHAIN, RHAT_MAX
from ..inference.base import INITS
from ..inference.registry import KERNELS
from ..jobs import JobSpec, read_job_file, resume, run_job
from ..jobs.results import BatchRun
from ..models.constraints import LIABILITIES, ConstraintSpec, Forbid, Mutations, Novel, Rule, trusting_code
from ..models.energy import ENERGIES
from ..rundir import checkpoint_files
from ..settings import STOP_EVERY, RunSettings, option_flags
from ._common import add_model_args

_SETTING_FLAGS = tuple(f.name for f in dataclasses.fields(RunSettings) if "help" in f.metadata)
"""The run's settings that have flags of their own, declared with the record (``--num-chains`` ...)."""


def _kernel_line(name: str) -> str:
    """The first paragraph of a kernel's docstring, as its group's heading line."""
    doc = inspect.getdoc(KERNELS[name]) or ""
    line = " ".join(doc.split("\n\n")[0].split()).replace(" (see the module docstring)", "")
    return line.replace("``", "")


def add_parser(sub: argparse._SubParsersAction) -> None:
    smp = sub.add_parser(
        "sample",
        help=f"sample the masked positions of a template (kernels: {', '.join(KERNELS)})",
        description="Run C chains on the masked positions of a template and write a run directory: "
        "config.json, checkpoint.pt (as it goes), run.nc (ArviZ InferenceData), samples.txt, summary.txt, "
        "plots. The job is the flags, or a job file JOB.toml (the same keys: docs/sampling.md) with flags "
        "replacing its keys. --resume DIR continues an interrupted run exactly.",
    )
    smp.add_argument("job", nargs="?", metavar="JOB.toml", help="a job file; flags given beside it replace its keys")
    what = smp.add_argument_group("what to sample")
    add_model_args(what)
    smp.set_defaults(model=None)
    one = what.add_mutually_exclusive_group()
    one.add_argument("--template", help="sequence with mask tokens at the positions to sample, e.g. 'CAR[MASK][MASK]W'")
    one.add_argument("--length", type=int, help="sample a whole sequence of N tokens")
    one.add_argument(
        "--templates",
        metavar="FILE",
        help="a batch: one template per line (TEMPLATE, or NAME<TAB>TEMPLATE), each run with the same settings "
        "into DIR/NAME, then DIR/designs.tsv and DIR/summary.txt",
    )
    what.add_argument(
        "--length-mode",
        choices=("jump", "strata"),
        help="a --template with a variable gap [MASK]{a,b}: jump, one run whose chains move between lengths "
        "(target pi(L) exp(-E/T); kernel gap-jump, or surrogate-mh around its moves); strata, one run per gap "
        "length into DIR/L08 ..., combined as the mixture sum_L pi(L) p_L (designs.tsv: each draw's length "
        "and weight)",
    )
    what.add_argument(
        "--length-prior", metavar="FILE|uniform", help="pi(L): uniform (default) or lines LENGTH<TAB>WEIGHT"
    )
    run = smp.add_argument_group("the run")
    _add_setting_flags(run)
    run.add_argument(
        "--until-converged",
        action="store_const",
        const=True,
        default=None,
        help=f"end the run at the first multiple of {STOP_EVERY} draws whose summary says every chain converged "
        f"(R-hat <= {RHAT_MAX} across chains, split R-hat <= {CHAIN_RHAT_MAX} within each, bulk and tail ESS >= "
        f"{ESS_MIN_PER_CHAIN} per chain, for lp and the functionals the verdict reads); "
        "--num-samples is then the most it takes; recorded with the run",
    )
    run.add_argument(
        "--starts-from",
        metavar="RUN",
        help="start each chain where the same chain of the earlier run in RUN is (its checkpoint, finished or not): "
        "a new run that goes on from that run's warm-up, e.g. with another kernel; same model, template and "
        "--num-chains; recorded with the run",
    )
    run.add_argument(
        "--ray",
        action="store_true",
        help="split the chains over Ray workers (RAY_ADDRESS, or a local Ray instance); needs mlm-ppl[ray]",
    )
    run.add_argument(
        "--workers", type=int, help="--ray: workers, each with one model (default: CPUs, at most --chains)"
    )
    where = smp.add_argument_group("where")
    where.add_argument("--out", help="run directory to create")
    where.add_argument(
        "--overwrite",
        action="store_true",
        default=None,
        help="replace an existing mlm-ppl run directory (never another directory)",
    )
    where.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted run in DIR (with a higher --num-samples: raise its cap and go on to it)",
    )
    where.add_argument(
        "--force",
        action="store_true",
        default=None,
        help="run past the size limits (more than 1000 chains, half the memory, a day)",
    )
    where.add_argument(
        "--checkpoint-seconds", type=float, help="checkpoint interval in seconds, a finite number >= 0 (default 30)"
    )
    where.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch threads for this run (default: one per core; beside another busy process 1 is faster on 2 cores)",
    )
    _add_constraint_flags(smp.add_argument_group("constraints (one spec, recorded with the run; docs/constraints.md)"))
    _add_kernel_flags(smp)


def _add_setting_flags(group: Any) -> None:
    """The run's own settings, from the record's declaration: Pyro's names, the short ones as aliases."""
    choices = {"kernel": tuple(KERNELS), "energy": ENERGIES, "init": INITS}
    types = typing.get_type_hints(RunSettings)
    for f in dataclasses.fields(RunSettings):
        if "help" not in f.metadata:
            continue
        kind = [t for t in typing.get_args(types[f.name]) if t is not type(None)] or [types[f.name]]  # str | None
        help = f.metadata["help"]
        if f.name == "kernel":
            help = f"the kernel: {', '.join(KERNELS)} (its options are under its own heading below)"
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            *f.metadata["aliases"],
            dest=f.name,
            type=kind[0],
            choices=choices.get(f.name),
            metavar=f.metadata["metavar"] or {int: "N", float: "X"}.get(kind[0]),
            help=help + ("" if f.default is None else f" (default {f.default})"),
        )


def _add_kernel_flags(parser: argparse.ArgumentParser) -> None:
    """One group per kernel, from its ``Options``: an option several kernels take is listed under the
    first of them, and named in the others' headings."""
    flags = option_flags()
    for kernel in KERNELS:
        own = [i for i in KERNELS[kernel].Options.describe() if i.cli]
        shared = [i.flag for i in own if flags[i.name][0][0] != kernel]
        heading = _kernel_line(kernel) + (
            f" Also takes {', '.join(shared)} (under the kernel named there)." if shared else ""
        )
        group = parser.add_argument_group(f"kernel {kernel}", heading)
        for info in own:
            if flags[info.name][0][0] != kernel:
                continue
            others = [k for k, _ in flags[info.name][1:]]
            help = info.help + (f" (also {', '.join(others)})" if others else "")
            if info.default is not None and "default" not in info.help:
                help += f" (default {info.default})"
            if info.type is bool:
                group.add_argument(info.flag, dest=info.name, action="store_const", const=True, default=None, help=help)
            else:
                metavar = {int: "N", float: "X"}.get(
                    info.type, "{" + ",".join(info.choices) + "}" if info.choices else "TEXT"
                )
                group.add_argument(info.flag, dest=info.name, type=info.type, default=None, metavar=metavar, help=help)


def _add_constraint_flags(rules: Any) -> None:
    rules.add_argument(
        "--constraints",
        metavar="FILE.toml",
        help="a constraint spec file: liabilities, [[rules]] (allowed, forbid, require, novel) and [[experts]]",
    )
    rules.add_argument(
        "--trust-code",
        action="store_true",
        help="allow experts that name Python code (kind = 'module:function') in --constraints, a job file or in "
        "the record of the run --resume continues: their module is imported and run. Without it they are refused",
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
    rules.add_argument(
        "--novel-from",
        metavar="FILE",
        help="a novelty rule (rule novel): every designed loop at Hamming distance >= --min-distance from each loop "
        "of FILE (one per line: the designed positions' tokens; a training set, known binders)",
    )
    rules.add_argument(
        "--min-distance",
        type=int,
        metavar="D",
        help="with --novel-from: the least Hamming distance from every loop of FILE (default 1: none of them)",
    )
    rules.add_argument(
        "--reference",
        metavar="LOOP",
        help="the reference loop of the designed positions (the parent's own): what --max-mutations and "
        "--min-mutations count changes from (the spec's reference)",
    )
    rules.add_argument(
        "--max-mutations",
        type=int,
        metavar="K",
        help="a trust region (rule mutations): every designed loop differs from --reference at K positions at most",
    )
    rules.add_argument(
        "--min-mutations",
        type=int,
        metavar="D",
        help="with the trust region: every designed loop differs from --reference at D positions at least",
    )


_JOB_FLAGS = (
    "model", "dtype", "device", "template", "length", "templates", "length_mode", "length_prior", *_SETTING_FLAGS,
    "until_converged", "starts_from", "workers", "out", "overwrite", "force", "checkpoint_seconds", "threads",
)  # fmt: skip
"""The flags that are keys of a job (:data:`~mlm_ppl.jobs.JOB_KEYS`) under the same names."""


def job_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The job keys the flags give (those left out are not in the mapping: a job file's, or the
    defaults, stand), the kernel's options under ``kernel_options``, the constraint flags as one spec."""
    if args.workers is not None and not args.ray:
        raise ValueError("--workers applies to --ray")
    keys = {k: getattr(args, k) for k in _JOB_FLAGS if getattr(args, k) is not None}
    options = {k: getattr(args, k) for k in option_flags() if getattr(args, k) is not None}
    if options:
        keys["kernel_options"] = options
    spec = constraints_from_flags(args)
    if spec is not None:
        keys["constraints"] = spec
    return keys


def job_from_flags(args: argparse.Namespace) -> JobSpec:
    """The job of the flags, or of the job file with the flags replacing its keys."""
    keys = job_keys(args)
    if args.job is None and "out" not in keys:
        raise ValueError("give --out DIR for the run directory")
    values = keys if args.job is None else read_job_file(args.job, keys)
    if values.get("out") is None:
        raise ValueError(f"{args.job}: give out (the run directory), in the file or as --out DIR")
    if args.ray and values.get("workers") is None:  # --ray alone: as many workers as CPUs, one per chain at most
        values["workers"] = min(values.get("num_chains", RunSettings.num_chains), os.cpu_count() or 1)
    return JobSpec.from_mapping(values, args.job)


def constraints_from_flags(args: argparse.Namespace) -> ConstraintSpec | None:
    """The one constraint spec of ``--constraints FILE``, ``--forbid REGEX`` (rules ``forbid-1``,
    ``forbid-2`` ... after the file's), ``--novel-from FILE --min-distance D`` (rule ``novel``) and
    ``--liabilities [NAME ...]`` (added to the file's; all of them without a name), ``--reference
    LOOP`` (the spec's reference) with ``--max-mutations K`` / ``--min-mutations D`` (rule
    ``mutations``); None without any of them. A malformed one is a one-line ValueError naming the
    flag or the file, the entry and the key."""
    if args.min_distance is not None and args.novel_from is None:
        raise ValueError("--min-distance applies to --novel-from FILE: give the file of loops to keep away from")
    trust = (args.max_mutations, args.min_mutations)
    if trust != (None, None) and args.reference is None and args.constraints is None:
        raise ValueError("--max-mutations and --min-mutations count changes from --reference LOOP: give the loop")
    flags = (args.forbid, args.liabilities, args.novel_from, args.reference, *trust)
    if args.constraints is None and all(f is None for f in flags):
        return None
    spec = ConstraintSpec() if args.constraints is None else ConstraintSpec.from_toml(args.constraints)
    source = args.constraints or "the constraint flags"
    rules: list[Rule] = list(spec.rules)
    for i, pattern in enumerate(args.forbid or [], 1):
        try:
            rules.append(Forbid(f"forbid-{i}", pattern))
        except (TypeError, ValueError) as err:
            raise ValueError(f"--forbid {pattern!r}: {err}") from None
    if args.novel_from is not None:
        try:
            rules.append(Novel("novel", tuple(read_list_file(args.novel_from, "loops")), args.min_distance or 1))
        except (TypeError, ValueError) as err:
            raise ValueError(f"--novel-from {args.novel_from}: {err}") from None
    reference = spec.reference
    if args.reference is not None:
        if reference is not None and reference != args.reference.strip():
            raise ValueError(
                f"--reference {args.reference!r} differs from the reference {reference!r} of {args.constraints}: "
                "give one of the two"
            )
        reference = args.reference
    if trust != (None, None):
        try:
            rules.append(Mutations("mutations", args.max_mutations, args.min_mutations or 0))
        except (TypeError, ValueError) as err:
            raise ValueError(f"--max-mutations/--min-mutations: {err}") from None
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
        return ConstraintSpec(rules, spec.experts, liabilities=liabilities, reference=reference)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source} with --forbid/--liabilities/--novel-from/--reference: {err}") from None


def run(args: argparse.Namespace, out: TextIO) -> int:
    def note(text: str) -> None:
        print(text, file=sys.stderr)

    progress = args.progress if args.progress is not None else True
    with trusting_code(args.trust_code):  # code named in a spec file, a job file or a run's record: only with consent
        directory = args.resume
        try:
            if args.resume:
                if args.job is not None:
                    raise ValueError("--resume continues a run with its own settings; give a job file or --resume")
                expect = job_keys(args)
                if args.ray:  # a resume on Ray: refused for a run that ran in one process
                    expect.setdefault("workers", 0)
                num_samples = expect.pop("num_samples", None)
                result = resume(
                    args.resume,
                    num_samples,
                    progress=progress,
                    checkpoint_seconds=expect.pop("checkpoint_seconds", 30.0),
                    trust_code=args.trust_code,
                    expect=expect,
                    notes=note,
                    threads=expect.pop("threads", None),
                    force=bool(expect.pop("force", False)),
                )
            else:
                job = job_from_flags(args)
                directory = job.out
                result = run_job(job, progress=progress, notes=note)
        except KeyboardInterrupt:
            if directory is None or not os.path.isdir(directory) or not checkpoint_files(directory):
                raise
            print(f"interrupted; checkpoint saved. Continue with: mlm-ppl sample --resume {directory}", file=sys.stderr)
            return 130
    if isinstance(result, BatchRun):
        out.write(result.summary)
        out.write(f"\nwrote designs.tsv, summary.txt and one run directory per template in {result.directory}\n")
        return 0
    out.write(str(result.report) + "\n\n")
    last = result.mlm.decode(result.tokens[:, -1])
    out.write("last draw of each chain:\n" + "".join(f"  chain {c}: {s}\n" for c, s in enumerate(last)))
    rest = ", ".join(os.path.basename(p) for p in result.written[1:])
    out.write(f"\nwrote {result.written[0]}, {rest} in {result.directory}\n")
    return 0
