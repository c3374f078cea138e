"""What a run will cost, before it starts: the memory its draws take and, for a long run, its time.

:func:`estimate_run` is the one estimate: the command line (``mlm-ppl sample``, a batch) prints it
for a big run and :func:`mlm_ppl.sample` warns with it (:class:`LongRunWarning`); both refuse a
run past half of the machine's memory, or past a day, unless forced.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .base import fill_template
from .spec import KernelBase
from .streams import ChainStreams

__all__ = ["Estimate", "LongRunWarning", "estimate_run", "time_per_evaluation"]

TIMED_FROM = 100_000
"""Chain-evaluations from which a run's time is estimated (by timing one evaluation)."""


class LongRunWarning(UserWarning):
    """A run of :func:`mlm_ppl.sample` estimated to take more than an hour or a GiB of draws."""


@dataclass(frozen=True)
class Estimate:
    """A run's cost: evaluations of the target, bytes of draws in memory and, for a long run, seconds.

    ``chains x steps x per_step`` evaluations of the target (``runs`` times), ``memory`` bytes of
    draws, and (for a long run) ``seconds``, timed on ``timed``; :func:`estimate_run` makes one,
    ``str()`` says it in a line.

    Parameters
    ----------
    chains : int
        Chains of each run.
    steps : int
        Steps of each chain.
    per_step : float
        Full evaluations of the target per chain and step (the kernel's options say how many).
    runs : int
        Runs of that size (templates of a batch).
    memory : int
        Bytes the draws and statistics take in memory.
    available : int
        The machine's memory, in bytes.
    seconds : float or None
        The run's estimated time, in seconds; None where it was not timed (a short run).
    timed : str
        What one timed evaluation was of (``"8 chains"``, or one chain of a kernel whose chains
        step one at a time).
    """

    chains: int
    steps: int
    per_step: float
    runs: int
    memory: int
    available: int  # the machine's memory, bytes
    seconds: float | None
    timed: str

    @property
    def big(self) -> bool:
        """Whether the run takes over a GiB of draws or over an hour, worth saying before it starts."""
        return self.memory > 2**30 or (self.seconds is not None and self.seconds > 3600)

    def __str__(self) -> str:
        text = f"{self.chains} chains x {self.steps} steps"
        if self.per_step != 1:
            text += f" x {self.per_step:,.4g} evaluations per step"
        if self.runs > 1:
            text += f" x {self.runs} templates"
        text += f": about {self.memory / 2**30:.1f} GiB of draws in memory"
        if self.seconds is not None:
            text += f", about {self.seconds / 3600:,.1f} h (timed: one evaluation of {self.timed})"
        return text

    def check(self, force: bool, what: str = "--force") -> None:
        """Refuse a run past half of the machine's memory or past a day, unless forced.

        Parameters
        ----------
        force : bool
            Let the run go whatever its cost.
        what : str, optional
            How the caller forces a run, for the message (default ``"--force"``).

        Raises
        ------
        ValueError
            Where ``force`` is false and the draws take more than half of the machine's memory,
            or the run is estimated to take more than a day.
        """
        if force:
            return
        if self.memory > self.available // 2:
            raise ValueError(
                f"{self}: more than half of this machine's {self.available / 2**30:.0f} GiB; "
                f"use fewer chains or draws, or {what}"
            )
        if self.seconds is not None and self.seconds > 86400:
            raise ValueError(f"{self}: more than a day; use fewer chains, draws or evaluations per step, or {what}")


def estimate_run(kernel: KernelBase, chains: int, steps: int, draws: int, runs: int = 1) -> Estimate:
    """The cost of ``runs`` runs of ``chains`` chains of ``kernel``, ``steps`` steps each.

    Memory: the draws and statistics kept in memory (and again while ``run.nc`` is written).
    Time: the run's work in full evaluations of the target (chains x steps x the kernel's
    evaluations per step, from its options), times one timed evaluation of up to 8 chains (of one
    chain for a kernel whose chains step one at a time: ``kernel.chains_batched()``); timed for runs of
    ``TIMED_FROM`` (100,000) chain-evaluations or more, without running a step (a step may be huge).

    Parameters
    ----------
    kernel : KernelBase
        The kernel the run would use, on its target (:class:`~mlm_ppl.inference.KernelBase`).
    chains : int
        Chains of each run.
    steps : int
        Steps of each chain (warm-up included).
    draws : int
        Draws kept per chain.
    runs : int, optional
        Runs of that size (default 1; a batch's templates).

    Returns
    -------
    Estimate
        The memory the draws take, the machine's memory and, for a long run, its time; its
        :meth:`~mlm_ppl.inference.Estimate.check` refuses a run too big.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import estimate_run, make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]"))
    >>> estimate = estimate_run(kernel, chains=4, steps=100, draws=100)
    >>> print(estimate)
    4 chains x 100 steps: about 0.0 GiB of draws in memory
    >>> estimate.seconds is None, estimate.big  # too short to time, nothing to say
    (True, False)
    """
    L = kernel.target.template.numel()
    memory = 3 * chains * draws * (8 * L + 8 * len(kernel.stat_names()))  # tokens + stats, three copies
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    per_step = kernel.evaluations_per_step()
    batched = kernel.chains_batched()
    batch = min(chains, 8) if batched else 1
    seconds = None
    if runs * chains * steps * per_step >= TIMED_FROM and memory <= available // 2:
        seconds = runs * time_per_evaluation(kernel, batch) * -(-chains // batch) * steps * per_step
    timed = f"{batch} chains" if batched else "one chain; its chains step one at a time"
    return Estimate(chains, steps, per_step, runs, memory, available, seconds, timed)


def time_per_evaluation(kernel: KernelBase, chains: int) -> float:
    """Seconds of one evaluation of the target for ``chains`` states filled uniformly."""
    tokens = fill_template(kernel.target, chains, ChainStreams(0, chains), "uniform")
    t0 = time.perf_counter()
    kernel.target.evaluate(tokens)
    return time.perf_counter() - t0
