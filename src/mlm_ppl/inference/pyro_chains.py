"""Pyro's chains as the MCMC kernels see them: which chain a ``setup`` starts (Pyro's own chain
id, read from its samplers, sequential or in worker processes), that chain's random streams and
its thread in a worker, and what a chain hands back to the parent process (a
:class:`ChainRecord` through the kernel's ``diagnostics()``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from .streams import ChainStreams

__all__ = [
    "pyro_chain_id",
    "start_chain",
    "called_for_transforms",
    "chain_streams",
    "ChainRecord",
    "RECORD",
    "chain_records",
]


def _pyro_api() -> Any:
    from pyro.infer.mcmc import api

    return api


def _pyro_chain() -> tuple[int | None, bool]:
    """Pyro's chain id of the chain being set up (None outside Pyro's samplers) and whether it runs
    in one of Pyro's worker processes, read in one walk up the stack."""
    api = _pyro_api()
    frame: FrameType | None = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return None, False
        if frame.f_code is api._gen_samples.__code__:
            caller = frame.f_back
            owner = caller.f_locals.get("self") if caller is not None else None
            if isinstance(owner, api._Worker):
                return int(owner.chain_id), True
            if isinstance(owner, api._UnarySampler) and caller is not None:
                return int(caller.f_locals.get("i", 0)), False
            chain = frame.f_locals.get("chain_id")
            return (None if chain is None else int(chain)), False
        frame = frame.f_back
    return None, False


def pyro_chain_id() -> int | None:
    """Which chain of a ``pyro.infer.MCMC`` run a kernel's ``setup`` is starting: Pyro's own chain
    id, read from its samplers (``pyro/infer/mcmc/api.py``), which pass it to no kernel. Chain
    ``i`` of ``MCMC(num_chains=P)`` is ``i`` whether Pyro runs the chains one after another
    (``_UnarySampler``) or each in a worker process (``_Worker``, forked or spawned, each with its
    own copy of the kernel); None when ``setup`` is called outside Pyro's samplers."""
    return _pyro_chain()[0]


def start_chain(previous: int) -> tuple[int, bool]:
    """What a kernel's ``setup`` starts: the index of its chain (Pyro's chain id; ``previous + 1``
    when ``setup`` is called outside Pyro's samplers) and whether it runs in one of Pyro's worker
    processes. In a worker, the chain's forward passes run on one thread, as PyTorch's DataLoader
    workers do: a process forked after its parent ran a parallel forward inherits a thread pool
    that hangs at its first parallel region, and P workers of several threads each would
    oversubscribe the cores anyway."""
    chain, worker = _pyro_chain()
    if worker:
        torch.set_num_threads(1)
    return (previous + 1 if chain is None else chain), worker


def called_for_transforms() -> bool:
    """Whether ``MCMC`` called ``setup`` only to learn the kernel's transforms (after chains run in
    worker processes, whose kernels are copies: the parent's never ran). Such a set-up finds
    the sites and builds the targets, but is no chain."""
    frame = sys._getframe(2)  # the caller of the kernel's setup
    return frame is not None and frame.f_code is _pyro_api().AbstractMCMC._set_transforms.__code__


RECORD = "mlm_ppl chain record"
"""The key of a :class:`ChainRecord` in an MLM kernel's ``diagnostics()``."""


@dataclass
class ChainRecord:
    """What one Pyro chain of an MLM kernel leaves besides its draws: where it started and the
    kernel's per-draw statistics. The kernel hands it to ``MCMC`` through ``diagnostics()``,
    Pyro's one channel from a chain back to the parent, so it comes back from worker processes
    as from chains run one after another; :func:`mlm_ppl.from_pyro` reads it.

    ``initial`` and ``stats`` are the kernel's: for ``MLMKernel`` the ``(C, L)`` starting tokens
    and ``{name: (D, C)}``; for ``MLMGibbs`` ``{site: tokens}`` and ``{site: {name: (D,) or (D, B)}}``.
    """

    chain: int
    initial: Any
    stats: Any
    num_samples: int

    def __repr__(self) -> str:
        return f"ChainRecord(chain {self.chain}, {self.num_samples} draws: mlm_ppl.from_pyro(mcmc) reads it)"


def chain_records(mcmc: Any) -> list[ChainRecord]:
    """The :class:`ChainRecord` of every chain of a finished ``MCMC`` run, in Pyro's chain order;
    a run that did not finish (records missing, or of another run: a re-run that stopped
    partway) is refused, so its draws are never paired with another run's statistics."""
    per_chain = list(getattr(mcmc, "_diagnostics", None) or [])  # MCMC keeps each chain's kernel.diagnostics() here
    records = [d.get(RECORD) for d in per_chain if isinstance(d, dict)]
    chains = [r for r in records if isinstance(r, ChainRecord)]
    finished = len(chains) == len(per_chain) > 0 and all(
        r.chain == i and r.num_samples == getattr(mcmc, "num_samples", r.num_samples) for i, r in enumerate(chains)
    )
    if not finished:
        raise ValueError(
            "this MCMC object holds no finished run of an MLM kernel (each chain's record comes back with its last "
            "draw); call mcmc.run(...) to its end first"
        )
    return chains


def chain_streams(seed: int | None, chain_index: int, num_chains: int) -> ChainStreams:
    """The random streams of Pyro chain ``chain_index`` (:func:`pyro_chain_id`) with
    ``num_chains`` batched chains inside it: the streams of chains
    ``chain_index * C .. chain_index * C + C - 1`` of ``seed``; with ``seed=None`` a fresh seed from
    torch's global RNG, so ``pyro.set_rng_seed`` governs, as for Pyro's own kernels."""
    if seed is None:
        return ChainStreams(int(torch.randint(0, 2**62, ()).item()), num_chains)
    return ChainStreams(seed, range(chain_index * num_chains, (chain_index + 1) * num_chains))
