"""Exact enumeration of tiny state spaces: the target distribution and kernels' transition matrices.

For a template with ``F`` free positions and ``K`` ordinary tokens there are ``K**F`` states;
everything here is exact (float64) and meant for ``K**F`` up to a few thousand: tests, docs,
and checking a sampler before trusting it on a real model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from ..models.target import Target, log_density
from .base import Kernel, num_blocks

__all__ = [
    "enumerate_states",
    "state_index",
    "exact_log_probs",
    "transition_matrix",
    "scan_matrix",
    "stationary_distribution",
    "total_variation",
    "scan_cycles",
    "block_moves",
    "model_posterior",
]

_MAX_STATES = 200_000


def enumerate_states(target: Target) -> Tensor:
    """Enumerate every complete state of a target, in lexicographic order of the free tokens.

    Each state is the template with one combination of ordinary tokens at the free positions
    (``K**F`` states for ``K`` ordinary tokens and ``F`` free positions), ordered as
    ``itertools.product`` orders the ordinary tokens' ids: the last free position varies
    fastest. A constraint spec's alphabets do not narrow it: states outside them are included
    (their log-factor is ``-inf``).

    Parameters
    ----------
    target : Target
        A target of a fixed template, e.g. a :class:`~mlm_ppl.MaskedLMDistribution`.

    Returns
    -------
    torch.Tensor
        Shape ``(S, L)``, ``torch.long``: the states, ``S = K**F``.

    Raises
    ------
    ValueError
        Where there are more than 200,000 states.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference.exact import enumerate_states
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> enumerate_states(target).shape  # 4 residues at 3 free positions: 4**3 states
    torch.Size([64, 7])
    """
    ordinary = target.ordinary_mask.nonzero().flatten()
    F = target.num_free
    S = len(ordinary) ** F
    if S > _MAX_STATES:
        raise ValueError(f"{len(ordinary)}**{F} = {S} states is too many to enumerate (limit {_MAX_STATES})")
    combos = torch.tensor(list(itertools.product(ordinary.tolist(), repeat=F)), dtype=torch.long).reshape(S, F)
    states = target.template.expand(S, -1).clone()
    states[:, target.free_positions] = combos
    return states


def state_index(target: Target) -> Callable[[Tensor], Tensor]:
    """Make the function that maps states of a target to their rows in :func:`enumerate_states`.

    The function reads the free positions alone (the rest is taken to be the template).

    Parameters
    ----------
    target : Target
        A target of a fixed template.

    Returns
    -------
    callable
        ``index(states) -> rows``: states ``(N, L)`` to their rows ``(N,)`` (``torch.long``) in
        ``enumerate_states(target)``; it raises ValueError where a state holds a token that is
        not ordinary at a free position.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference.exact import enumerate_states, state_index
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> index = state_index(target)
    >>> torch.equal(index(enumerate_states(target)), torch.arange(64))
    True
    """
    ordinary = target.ordinary_mask.nonzero().flatten()
    K = len(ordinary)
    rank = torch.full((target.vocab_size,), -1, dtype=torch.long)
    rank[ordinary] = torch.arange(K)
    weights = K ** torch.arange(target.num_free - 1, -1, -1)

    def index(states: Tensor) -> Tensor:
        r = rank[states[:, target.free_positions]]
        if (r < 0).any():
            raise ValueError("a state holds a non-ordinary token at a free position")
        return (r * weights).sum(-1)

    return index


def exact_log_probs(target: Target, states: Tensor | None = None) -> Tensor:
    """Compute the exact normalised log-probabilities ``log softmax(-E/T + log_factor)`` of states.

    The target evaluates every state; the log densities are normalised over ``states``, so over
    the whole state space by default.

    Parameters
    ----------
    target : Target
        A target of a fixed template.
    states : torch.Tensor or None, optional
        Shape ``(S, L)``: the states (default None: :func:`enumerate_states` of ``target``).

    Returns
    -------
    torch.Tensor
        Shape ``(S,)``, float64: the log-probabilities (``-inf`` for a state of density 0).

    Raises
    ------
    ValueError
        Where ``states`` is None and the target has more than 200,000 states.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference.exact import exact_log_probs
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> logp = exact_log_probs(target)
    >>> logp.shape, logp.dtype, abs(float(logp.exp().sum()) - 1) < 1e-12
    (torch.Size([64]), torch.float64, True)
    """
    states = enumerate_states(target) if states is None else states
    ev = target.evaluate(states)
    return torch.log_softmax(log_density(ev.energy, ev.log_factor, target.temperature).double(), 0)


def transition_matrix(kernel: Kernel, states: Tensor | None = None) -> Tensor:
    """Compute the exact transition matrix of a kernel over all states of its target.

    What one transition is depends on the kernel and its scan:

    * ``scan="random"``: one step (a uniformly chosen block);
    * ``scan="left_to_right"``: one sweep (every block in order);
    * ``scan="random_sweep"``: one sweep, averaged over the sweep orders;
    * ``scan="parallel_masked"`` or ``"parallel_unmasked"`` (pseudo-Gibbs): one step updating
      every free position at once;
    * surrogate-MH: one step (the inner chain's exact matrix, corrected).

    Built from the kernel's own proposal code (``kernel.transition_matrix``); a kernel without
    the capability (``capabilities.exact_matrix``) is refused.

    Parameters
    ----------
    kernel : KernelBase
        A kernel on a tiny target of a fixed template.
    states : torch.Tensor or None, optional
        Shape ``(S, L)``: every state of the kernel's target, in the order of
        :func:`enumerate_states` (default None: enumerated here).

    Returns
    -------
    torch.Tensor
        Shape ``(S, S)``, float64: row ``i`` is the law of the next state from state ``i``.

    Raises
    ------
    TypeError
        Where the kernel has no exact transition matrix (``capabilities.exact_matrix`` is False),
        or its own does not apply (surrogate-MH on a variable gap or with replicas).
    ValueError
        Where ``states`` is None and the target has more than 200,000 states.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, MetropolisHastings
    >>> from mlm_ppl.inference.exact import exact_log_probs, stationary_distribution, total_variation
    >>> from mlm_ppl.inference.exact import transition_matrix
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> P = transition_matrix(MetropolisHastings(target))
    >>> P.shape, P.dtype
    (torch.Size([64, 64]), torch.float64)
    >>> total_variation(stationary_distribution(P), exact_log_probs(target).exp()) < 1e-4  # MH is exact
    True
    """
    if not kernel.capabilities.exact_matrix:
        raise TypeError(f"kernel {kernel.name!r} has no exact transition matrix")
    target = kernel.target
    states = enumerate_states(target) if states is None else states
    return kernel.transition_matrix(states, target.evaluate(states), state_index(target))


def scan_matrix(scan: str, num_free: int, block_size: int, block_matrix: Callable[[tuple[int, ...]], Tensor]) -> Tensor:
    """Compose the matrix of one scan cycle from the matrices of single block updates.

    The sum over the cycles of :func:`scan_cycles` of each cycle's probability times the product,
    in order, of its blocks' matrices ``block_matrix(block)`` (each block's computed once).

    Parameters
    ----------
    scan : {"random", "left_to_right", "random_sweep"}
        The scan, as :func:`scan_cycles` reads it.
    num_free : int
        Free positions of the template.
    block_size : int
        Free positions updated together.
    block_matrix : callable
        ``block_matrix(block) -> torch.Tensor``: the ``(S, S)`` matrix of an update of the free
        positions ``block`` (a tuple of indices among the free positions).

    Returns
    -------
    torch.Tensor
        Shape ``(S, S)``: the matrix of one cycle (one step for ``"random"``, one sweep for the
        other scans).

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.inference.exact import scan_matrix
    >>> flip = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    >>> scan_matrix("left_to_right", 2, 1, lambda block: flip)  # a sweep of two flips: back home
    tensor([[1., 0.],
            [0., 1.]])
    """
    cache: dict[tuple[int, ...], Tensor] = {}
    total: Tensor | None = None
    for weight, blocks in scan_cycles(scan, num_free, block_size):
        P: Tensor | None = None
        for block in blocks:
            if block not in cache:
                cache[block] = block_matrix(block)
            P = cache[block] if P is None else P @ cache[block]
        assert P is not None  # every cycle has a block
        total = weight * P if total is None else total + weight * P
    assert total is not None
    return total


def stationary_distribution(P: Tensor) -> Tensor:
    """Solve for the stationary distribution ``pi = pi P`` of a transition matrix.

    ``pi P = pi`` with ``sum(pi) = 1``, solved by least squares; unique if ``P`` is ergodic.

    Parameters
    ----------
    P : torch.Tensor
        Shape ``(S, S)``: a row-stochastic transition matrix.

    Returns
    -------
    torch.Tensor
        Shape ``(S,)``, in ``P``'s dtype: the stationary distribution.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.inference.exact import stationary_distribution
    >>> P = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    >>> pi = stationary_distribution(P)
    >>> torch.allclose(pi, torch.tensor([1 / 3, 2 / 3], dtype=torch.float64))
    True
    """
    S = P.shape[0]
    A = torch.cat([P.T - torch.eye(S, dtype=P.dtype), torch.ones(1, S, dtype=P.dtype)])
    b = torch.zeros(S + 1, dtype=P.dtype)
    b[-1] = 1
    return torch.linalg.lstsq(A, b[:, None]).solution[:, 0]


def total_variation(p: Tensor, q: Tensor) -> float:
    """Compute the total variation distance ``0.5 * sum |p - q|`` of two distributions.

    Parameters
    ----------
    p : torch.Tensor
        Shape ``(S,)``: one distribution's probabilities.
    q : torch.Tensor
        Shape ``(S,)``: the other's, over the same states.

    Returns
    -------
    float
        The distance, computed in float64: 0 for equal distributions, 1 for disjoint ones.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.inference.exact import total_variation
    >>> total_variation(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.5]))
    0.5
    """
    return 0.5 * float((p.double() - q.double()).abs().sum())


# ---------------------------------------------------------------------- block enumeration helpers
def scan_cycles(scan: str, num_free: int, block_size: int) -> list[tuple[float, list[tuple[int, ...]]]]:
    """List every sequence of blocks one scan cycle can apply, with its probability.

    ``"random"``: one block, each ``block_size``-subset equally likely; ``"left_to_right"``: the
    blocks of one sweep in order; ``"random_sweep"``: the blocks of one sweep for every
    permutation of the free positions. A sweep's blocks are consecutive runs of ``block_size``
    (the last one shorter where ``block_size`` does not divide ``num_free``).

    Parameters
    ----------
    scan : {"random", "left_to_right", "random_sweep"}
        The scan.
    num_free : int
        Free positions of the template.
    block_size : int
        Free positions updated together.

    Returns
    -------
    list of tuple of (float, list of tuple of int)
        One ``(probability, blocks)`` per cycle: the blocks, each a tuple of indices among the
        free positions, in the order they are applied.

    Raises
    ------
    ValueError
        Where ``scan`` is none of the three.

    Examples
    --------
    >>> from mlm_ppl.inference.exact import scan_cycles
    >>> scan_cycles("left_to_right", 3, 2)
    [(1.0, [(0, 1), (2,)])]
    >>> len(scan_cycles("random", 3, 1)), len(scan_cycles("random_sweep", 3, 1))
    (3, 6)
    """
    if scan not in ("random", "left_to_right", "random_sweep"):  # any other word used to read as random_sweep
        raise ValueError(f"scan must be 'random', 'left_to_right' or 'random_sweep', got {scan!r}")
    if scan == "random":
        subsets = list(itertools.combinations(range(num_free), block_size))
        return [(1.0 / len(subsets), [s]) for s in subsets]
    n = num_blocks(num_free, block_size)
    if scan == "left_to_right":
        return [(1.0, [tuple(range(j * block_size, min(num_free, (j + 1) * block_size))) for j in range(n)])]
    perms = list(itertools.permutations(range(num_free)))
    return [(1.0 / len(perms), [tuple(p[j * block_size : (j + 1) * block_size]) for j in range(n)]) for p in perms]


def block_moves(
    target: Target, states: Tensor, pos: Tensor, logq: Tensor, index: Callable[[Tensor], Tensor]
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield every proposal for a block, for the kernels' exact transition matrices.

    For each combination of ordinary tokens ``y`` at the block's positions (in the order of
    ``itertools.product`` over the ordinary tokens' ids), the log probability of proposing it
    from each state and the row of the state it leads to.

    Parameters
    ----------
    target : Target
        The target whose ordinary tokens are proposed.
    states : torch.Tensor
        Shape ``(S, L)``: the states proposed from.
    pos : torch.Tensor
        Shape ``(S, b)``: the positions (columns of ``states``) of each state's block.
    logq : torch.Tensor
        Shape ``(S, b, V)``: the proposal's log probabilities at each position of the block.
    index : callable
        Maps states ``(N, L)`` to their rows ``(N,)`` (:func:`state_index`).

    Yields
    ------
    log_q : torch.Tensor
        Shape ``(S,)``, float64: ``log q(y)``, the sum over the block of ``logq`` at ``y``.
    rows : torch.Tensor
        Shape ``(S,)``: the row of each state with ``y`` put at its block.
    """
    S = states.shape[0]
    ordinary = target.ordinary_mask.nonzero().flatten().tolist()
    for combo in itertools.product(ordinary, repeat=pos.shape[1]):
        y = torch.tensor(combo).expand(S, -1)
        yield logq.gather(-1, y[..., None]).sum((-1, -2)).double(), index(states.scatter(1, pos, y))


def model_posterior(model: Callable, *args: Any, **kwargs: Any) -> tuple[dict[str, Tensor], Tensor]:
    """Enumerate the exact posterior of a Pyro model's latent sites, as Pyro itself scores them.

    For users' tests of their own models, as this library's tests check its kernels. Every
    latent :class:`~mlm_ppl.MaskedLMDistribution` site (one sequence, outside any plate) and
    every unbatched discrete site with enumerable support takes each of its values; each
    combination is scored by Pyro itself, ``poutine.trace(poutine.condition(model,
    data=values)).get_trace(*args, **kwargs).log_prob_sum()`` (observed sites, factors and
    handlers included), and the scores are normalised. A continuous latent site is refused
    (condition on it, or integrate it out); the combinations are limited to 200,000.

    Parameters
    ----------
    model : callable
        The Pyro model.
    *args
        The model's positional arguments.
    **kwargs
        The model's keyword arguments.

    Returns
    -------
    values : dict of str to torch.Tensor
        Each latent site's values, ``(N, ...)``: row ``n`` of every site is the ``n``-th
        combination.
    probs : torch.Tensor
        Shape ``(N,)``, float64: the posterior probability of each combination.

    Raises
    ------
    TypeError
        Where a token site is observed as text (it takes token ids).
    ValueError
        Where a latent site is continuous, or under a plate; the model has no latent token or
        discrete site; the combinations (or a token site's states) number more than 200,000; a
        token site was hidden or reparametrized by a Pyro handler; or a token site is observed
        with mask tokens left at free positions.

    Examples
    --------
    >>> import pyro
    >>> import pyro.distributions as dist
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference.exact import model_posterior
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> seqs = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C")
    >>> def model():
    ...     z = pyro.sample("z", dist.Bernoulli(0.3))
    ...     pyro.sample("x", seqs)
    >>> values, probs = model_posterior(model)
    >>> values["x"].shape, values["z"].shape, probs.shape
    (torch.Size([8, 5]), torch.Size([8]), torch.Size([8]))
    >>> abs(float(probs[values["z"] == 1].sum()) - 0.3) < 1e-6  # z is independent of x
    True
    """
    import pyro.poutine as poutine

    from ..models.distribution import MaskedLMDistribution
    from .pyro_sites import is_sample_site, trace_model

    trace = trace_model(model, args, kwargs)
    choices: dict[str, Tensor] = {}
    for name, site in trace.nodes.items():
        if not is_sample_site(site) or site["is_observed"]:
            continue
        fn: Any = site["fn"]
        if isinstance(fn, MaskedLMDistribution) and fn.batch_shape == torch.Size():
            choices[name] = enumerate_states(fn)
        elif fn.support.is_discrete and fn.has_enumerate_support and fn.batch_shape == torch.Size():
            choices[name] = fn.enumerate_support(expand=False).reshape((-1,) + tuple(fn.event_shape))
        else:
            raise ValueError(
                f"site {name!r} is continuous, or under a plate: model_posterior enumerates token sites of one "
                "sequence and unbatched discrete sites; condition on it (poutine.condition) or integrate it out"
            )
    if not choices:
        raise ValueError("the model has no latent token or discrete site to enumerate")
    total = math.prod(len(v) for v in choices.values())
    if total > _MAX_STATES:
        raise ValueError(
            f"the latent sites have {total} combinations; model_posterior enumerates at most {_MAX_STATES}"
        )
    names = list(choices)
    rows = torch.cartesian_prod(*[torch.arange(len(choices[n])) for n in names]).reshape(total, len(names))

    def score(row: Tensor) -> Tensor:
        data = {n: choices[n][int(i)] for n, i in zip(names, row)}
        return torch.as_tensor(
            poutine.trace(poutine.condition(model, data=data)).get_trace(*args, **kwargs).log_prob_sum()
        )

    logp = torch.stack([score(row) for row in rows])
    return {n: choices[n][rows[:, k]] for k, n in enumerate(names)}, torch.softmax(logp.double(), 0)
