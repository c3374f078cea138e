"""Sampling runs in run directories, from their :class:`~mlm_ppl.settings.RunSettings`: one run
(in this process or on Ray workers) and batches of templates (one run per template, in this
process or as Ray tasks). The command line parses flags into settings and prints what these
return; everything else is here: ``run`` (one run), ``batch`` (batches) and ``lengths``
(how a variable gap's lengths are sampled).

A batch directory holds ``config.json`` (the shared settings and the templates),
``batch-record.json`` (the same as the batch started, and the run id of each template's run: a
resume refuses a ``config.json`` or a template's run that differs from it), one run
directory per template (``DIR/NAME``: a complete sampling run each, with its own checkpoint,
``run.nc``, ``summary.txt`` and plots), and at the end ``designs.tsv`` (template, chain, draw,
energy, sequence for every draw of every template) and ``summary.txt`` (one line per template;
an annealed batch's starts with a ``#`` line that says its draws are not samples of the target).
"""

from ..settings import RunSettings as RunSettings  # the settings a run is built from, as before the split
from .batch import (
    BATCH_FORMAT,
    BATCH_RECORD,
    RESERVED_NAMES,
    Batch,
    batch_templates,
    check_batch,
    check_template_name,
    parse_templates,
    resume_batch,
    run_batch,
    run_template,
    start_batch,
)
from .current import CurrentRun, read_current, write_current
from .lengths import LENGTH_MODES, GapPlan, plan_gap, strata, strata_name
from .run import (
    build,
    build_kernel,
    build_target,
    connect_workers,
    constraints_of,
    execute,
    run_model,
    run_so_far,
    start_states,
    starts_record,
)

__all__ = [
    "LENGTH_MODES",
    "GapPlan",
    "plan_gap",
    "strata",
    "strata_name",
    "BATCH_FORMAT",
    "BATCH_RECORD",
    "RESERVED_NAMES",
    "Batch",
    "check_template_name",
    "parse_templates",
    "check_batch",
    "build",
    "build_target",
    "build_kernel",
    "connect_workers",
    "execute",
    "run_so_far",
    "run_model",
    "read_current",
    "write_current",
    "CurrentRun",
    "starts_record",
    "start_states",
    "constraints_of",
    "start_batch",
    "resume_batch",
    "batch_templates",
    "run_template",
    "run_batch",
]
