"""Chains split over Ray actors: groups of chains on workers, merged into the single-process run.

Each chain draws from its own random stream (:mod:`.streams`), so a group of chains run on a
worker (``run_chains(..., chains=[...])``) gives exactly those chains of the whole run, and the
groups, concatenated, are the run a single process would give with the same seed. Each worker
is a Ray actor holding one model; with ``checkpoints`` it saves its group's checkpoint as it
goes and, when Ray restarts it after it died, continues from there (Ray retries the group on
the restarted actor, up to ``RESTARTS`` times; then the run stops with
:class:`WorkersLostError`, the checkpoints kept). Ray is an optional extra (``pip install 'mlm-ppl[ray]'``): this module
imports it only when a Ray run starts.

Ray connects to ``address`` (or the ``RAY_ADDRESS`` environment variable) when one is given,
after checking within seconds that a Ray head (a gRPC server) answers there, and starts a local
Ray instance otherwise.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .._checks import check_count, check_interval
from .base import Kernel
from .runner import Checkpoint, Run, run_chains, state_consistent_lp

__all__ = [
    "split_chains",
    "import_ray",
    "check_address",
    "connect",
    "run_chains_ray",
    "run_tasks_ray",
    "gpu_share",
    "merge_runs",
    "GroupCheckpoints",
    "WorkersLostError",
    "RESTARTS",
]

_INSTALL = "pip install 'mlm-ppl[ray]'"

RESTARTS = 3
"""How often Ray restarts a worker that died (an actor, or a batch's task) before the run stops."""


class WorkersLostError(OSError):
    """A Ray worker died more often than Ray restarts it (``RESTARTS``, 3 times).

    The worker was killed, ran out of memory or lost its node. What the workers checkpointed
    stays; the run resumes from it. The message ends with Ray's first line of why.
    """


def split_chains(num_chains: int, workers: int) -> list[list[int]]:
    """``workers`` contiguous groups of chain indices, sizes differing by at most one (no empty group)."""
    C = check_count(num_chains, "num_chains", 1)
    W = min(check_count(workers, "workers", 1), C)
    bounds = [round(i * C / W) for i in range(W + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(W)]


def import_ray() -> Any:
    """The ``ray`` module, or ModuleNotFoundError saying how to install it."""
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError(f"Ray runs need the ray extra: {_INSTALL}") from None
    return ray


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # magic, empty SETTINGS


def _reachable(address: str, timeout: float = 3.0) -> None:
    """ValueError unless a Ray head answers at ``host:port`` of a Ray address within ``timeout``:
    a TCP connection opens, and what listens speaks gRPC (HTTP/2: it answers the connection
    preface with a SETTINGS frame), as Ray's head and Ray Client servers do. With
    ``RAY_USE_TLS`` set the answer is encrypted, and only the connection is checked."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"Ray address {address!r} is not host:port (or ray://host:port)")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as err:
        raise ValueError(
            f"cannot reach the Ray cluster at {address!r} ({err}); start it (`ray start --head`), fix RAY_ADDRESS, "
            "or unset RAY_ADDRESS to run on a local Ray instance"
        ) from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        answer = _answer_to_preface(conn, timeout)
    if len(answer) < 9 or answer[3] != 4:  # byte 3 of a frame header: its type; 4 is SETTINGS
        raise ValueError(
            f"something answers at {address!r}, but not a Ray cluster (it does not speak gRPC as a Ray head does); "
            "fix RAY_ADDRESS (the head's GCS port, 6379 by default, or ray://host:10001), or unset it to run on a "
            "local Ray instance"
        )


def _answer_to_preface(conn: socket.socket, timeout: float) -> bytes:
    """The first 9 bytes (a frame header) a server sends back to an HTTP/2 connection preface
    within ``timeout``, or fewer: what came before it closed, reset or fell silent."""
    answer = b""
    deadline = time.monotonic() + timeout
    try:
        conn.sendall(_HTTP2_PREFACE)
        while len(answer) < 9 and time.monotonic() < deadline:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = conn.recv(9 - len(answer))
            if not chunk:
                break
            answer += chunk
    except OSError:  # reset, or silent past the deadline
        pass
    return answer


def check_address(address: str | None = None) -> None:
    """ValueError within seconds unless the cluster at ``address`` (or ``RAY_ADDRESS``) answers
    as a Ray head does (:func:`_reachable`); nothing to check when neither is set (a local
    instance will start)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None and address != "auto":
        _reachable(address)


def connect(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """Connect to the Ray cluster at ``address`` or ``RAY_ADDRESS``, or start a local instance
    with ``num_cpus``; returns the ``ray`` module. An instance already running is reused."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    check_address(address)
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address is None:
        ray.init(num_cpus=num_cpus, **kwargs)
    else:
        _init_within(ray, address, kwargs, CONNECT_SECONDS)
    return ray


CONNECT_SECONDS = 60.0
"""How long connecting to a Ray cluster at an address may take: a server that answers the address
check and then falls silent would otherwise hang ``ray.init`` for ever."""


def _init_within(ray: Any, address: str, kwargs: dict[str, Any], seconds: float) -> None:
    """``ray.init(address=...)`` in a thread of its own; a ValueError when it has not returned after
    ``seconds`` (the thread is left behind as a daemon: Ray cannot cancel a connection)."""
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(address=address, **kwargs)
            outcome.append(None)
        except BaseException as err:  # handed to the caller's thread
            outcome.append(err)

    thread = threading.Thread(target=init, name="ray-init", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise ValueError(
            f"the Ray cluster at {address!r} accepted the connection but did not finish connecting within "
            f"{seconds:g} s; check the head (`ray status`), fix RAY_ADDRESS, or unset it to run on a local Ray "
            "instance"
        )
    if outcome[0] is not None:
        raise outcome[0]


class GroupCheckpoints:
    """Where the workers of a run directory keep their groups' checkpoints, a picklable pair of functions.

    A Ray run saves each group of chains' checkpoint with ``save`` as it goes, and a restarted
    worker continues its group from ``load``. Both run on the workers, so they must reach the
    directory (a shared filesystem on a cluster). :func:`~mlm_ppl.rundir.group_checkpoints` makes
    a run directory's.

    Parameters
    ----------
    save : callable
        ``save(group, checkpoint)``: keep the :class:`~mlm_ppl.inference.Checkpoint` of group
        ``group`` (an int, the group's index in the run).
    load : callable
        ``load(group) -> Checkpoint or None``: the group's last checkpoint, None where it has none.
    """

    def __init__(self, save: Callable[[int, Checkpoint], None], load: Callable[[int], Checkpoint | None]) -> None:
        self.save = save
        self.load = load


class _Worker:
    """A Ray actor: one model (one kernel), running groups of chains. Defined as a plain class and
    wrapped by ``ray.remote`` at run time, so that importing this module needs no Ray."""

    def __init__(self, make_kernel: Callable[[], Kernel], threads: int) -> None:
        torch.set_num_threads(threads)
        self.kernel = make_kernel()
        self.steps = 0

    def progress(self) -> int:
        return self.steps

    def run_group(
        self,
        group: int,
        chains: list[int],
        num_samples: int,
        options: dict[str, Any],
        checkpoints: GroupCheckpoints | None,
        checkpoint_seconds: float,
    ) -> Run:
        resume = checkpoints.load(group) if checkpoints is not None else None
        self.steps = resume.step if resume is not None else 0

        def counted(done: int) -> None:
            self.steps = done

        return run_chains(
            self.kernel,
            len(chains),
            num_samples,
            chains=chains,
            resume=resume,
            on_checkpoint=(lambda cp: checkpoints.save(group, cp)) if checkpoints is not None else None,
            checkpoint_seconds=checkpoint_seconds,
            on_step=counted,
            **options,
        )


def run_chains_ray(
    make_kernel: Callable[[], Kernel],
    num_chains: int,
    num_samples: int,
    *,
    workers: int,
    warmup_steps: int = 0,
    thin: int = 1,
    seed: int = 0,
    init: str | Tensor = "sample",
    progress: bool = False,
    checkpoints: GroupCheckpoints | None = None,
    checkpoint_seconds: float = 30.0,
    address: str | None = None,
    device: str | None = None,
) -> Run:
    """:func:`~mlm_ppl.inference.run_chains` with the chains split over ``workers`` Ray actors.

    ``make_kernel`` builds the kernel on each worker (it is pickled to them: a kernel object
    itself, wrapped in a function, or a function that loads the model there). The result is
    the run a single process gives with the same arguments: chain ``c`` draws from its own
    stream wherever it runs. A worker that dies is restarted by Ray and its group runs again,
    from its last checkpoint when ``checkpoints`` are kept. ``progress`` shows one bar for the
    whole run.
    """
    groups = split_chains(num_chains, workers)
    check_count(num_samples, "num_samples", 1)
    check_interval(checkpoint_seconds, "checkpoint_seconds")
    ray = connect(address, num_cpus=max(len(groups), os.cpu_count() or 1))
    resources = ray.cluster_resources()
    per_gpu = gpu_share(resources, len(groups), device)
    threads = _threads_per_worker(resources, len(groups))
    actor = ray.remote(_Worker).options(
        num_cpus=1,
        num_gpus=per_gpu,
        max_restarts=RESTARTS,
        max_task_retries=RESTARTS,
        max_concurrency=2,  # progress() meanwhile
    )
    actors = [actor.remote(make_kernel, threads) for _ in groups]

    def options(chains: list[int]) -> dict[str, Any]:  # starting tokens given for the run: each group its rows
        start = init[chains] if isinstance(init, Tensor) else init
        return dict(warmup_steps=warmup_steps, thin=thin, seed=seed, init=start)

    futures = [
        a.run_group.remote(k, chains, num_samples, options(chains), checkpoints, checkpoint_seconds)
        for k, (a, chains) in enumerate(zip(actors, groups))
    ]
    total = (warmup_steps + num_samples * thin) * len(groups)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit=" step", desc=f"sampling on {len(groups)} Ray workers", dynamic_ncols=True)
    try:
        pending = list(futures)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            if bar is not None:
                done = _progress(ray, actors)
                if done is not None:
                    bar.n = min(done, total)
                    bar.refresh()
        runs = _get(ray, futures)
    finally:
        if bar is not None:
            bar.close()
        for a in actors:
            ray.kill(a)
    return merge_runs(runs, num_chains)


def _threads_per_worker(resources: dict[str, Any], workers: int) -> int:
    """Torch threads for each of ``workers`` workers sharing the cluster's CPUs."""
    return max(1, int(resources.get("CPU", 1)) // workers)


def gpu_share(resources: Mapping[str, float], workers: int, device: str | None) -> float:
    """The GPUs each of ``workers`` Ray workers asks for: 0 off CUDA; else the whole GPUs shared out
    so that every worker can be placed (Ray never splits one worker's share over two GPUs, so
    ``k = ceil(workers / GPUs)`` workers go on each GPU, each asking ``1/k`` rounded down to Ray's
    unit of 0.0001), at most one GPU each. A ValueError for a cluster without GPUs."""
    if device is None or not str(device).startswith("cuda"):
        return 0.0
    gpus = float(resources.get("GPU", 0))
    whole = math.floor(gpus)
    share = math.floor(1e4 / math.ceil(workers / whole)) / 1e4 if whole >= 1 else math.floor(1e4 * gpus / workers) / 1e4
    if share <= 0:
        raise ValueError(f"device 'cuda' on Ray needs GPUs in the Ray cluster; it has {gpus:g}")
    return min(1.0, share)


def run_tasks_ray(
    task: Callable[..., Any],
    jobs: Sequence[tuple],
    *,
    workers: int,
    on_done: Callable[[], None] | None = None,
    address: str | None = None,
    device: str | None = None,
) -> list[Any]:
    """``task(*job, threads=T)`` for every job, as Ray tasks, at most ``workers`` at a time, each
    with ``T`` torch threads of the cluster's CPUs (and, for ``device`` cuda, its share of the
    GPUs, :func:`gpu_share`); the results in job order. A task whose
    worker died is retried (up to 3 times): a task that keeps its own checkpoints (a batch's
    template runs) continues from them. ``on_done`` is called as each task finishes."""
    W = check_count(workers, "workers", 1)
    ray = connect(address, num_cpus=max(W, os.cpu_count() or 1))
    resources = ray.cluster_resources()
    threads = _threads_per_worker(resources, W)
    remote = ray.remote(task).options(num_cpus=1, num_gpus=gpu_share(resources, W, device), max_retries=RESTARTS)
    futures: list[Any] = []
    pending: set[Any] = set()

    def wait_one() -> None:
        done, _ = ray.wait(list(pending), num_returns=1)
        pending.discard(done[0])
        if on_done is not None:
            on_done()

    for job in jobs:
        if len(pending) >= W:
            wait_one()
        ref = remote.remote(*job, threads=threads)
        futures.append(ref)
        pending.add(ref)
    while pending:
        wait_one()
    return _get(ray, futures)


def _get(ray: Any, futures: list[Any]) -> list[Any]:
    """``ray.get(futures)``; a worker that died for good (Ray gave up restarting it) is a
    :class:`WorkersLostError` with Ray's first line of why."""
    lost = (
        ray.exceptions.RayActorError,
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.OutOfMemoryError,
        ray.exceptions.LocalRayletDiedError,
    )
    try:
        return ray.get(futures)
    except lost as err:
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise WorkersLostError(
            f"a Ray worker died more often than Ray restarts one ({RESTARTS} times): {why}"
        ) from None


def _progress(ray: Any, actors: Sequence[Any]) -> int | None:
    """Steps done, summed over the workers, or None if a worker does not answer now (restarting)."""
    try:
        return sum(ray.get([a.progress.remote() for a in actors], timeout=0.2))
    except Exception:  # a worker being restarted, or busy for longer than the poll: try again later
        return None


def merge_runs(runs: Sequence[Run], num_chains: int) -> Run:
    """The groups' runs, in chain order, as one run of ``num_chains`` chains."""
    first = runs[0]
    tokens = torch.cat([r.tokens for r in runs])
    stats = {k: torch.cat([r.stats[k] for r in runs]) for k in first.stats}
    stats["lp"] = state_consistent_lp(tokens, stats["lp"])  # one value per state across the groups too
    starts = [r.initial for r in runs if r.initial is not None]
    initial = torch.cat(starts) if len(starts) == len(runs) else None
    attrs = dict(first.attrs, num_chains=num_chains)
    stopped = [r.attrs.get("annealing", {}).get("stopped_at") for r in runs]  # each group's chains: all of them
    if all(isinstance(s, list) for s in stopped):
        attrs["annealing"] = {**attrs["annealing"], "stopped_at": [t for s in stopped for t in s]}
    if tokens.shape[0] != num_chains:
        raise ValueError(f"the groups hold {tokens.shape[0]} chains, the run has {num_chains}")
    return Run(tokens, stats, attrs, initial)
