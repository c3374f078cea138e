"""Sampling jobs, the library's front door: one schema for a job (:class:`JobSpec`, read alike from
keyword arguments, a TOML job file and the command line's flags), :func:`sample` and
:func:`run_job` to run one (in memory, in a run directory, or as a batch), :func:`resume` to
continue one exactly, :func:`load_run` to read one back.

This floor stands above :mod:`mlm_ppl.campaign` (what a run directory's run and a batch do) and
:mod:`mlm_ppl.rundir` (the directory's files); the command line only turns flags into a job and
prints what these return.
"""

from ..campaign.current import CurrentRun, read_current, write_current
from .door import resume, run_job, sample
from .results import BatchRun, SampledRun, load_run
from .spec import JOB_KEYS, JobSpec, read_job_file

__all__ = [
    "JobSpec",
    "JOB_KEYS",
    "read_job_file",
    "sample",
    "run_job",
    "resume",
    "load_run",
    "SampledRun",
    "BatchRun",
    "read_current",
    "write_current",
    "CurrentRun",
]
