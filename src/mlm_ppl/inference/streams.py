"""Per-chain random streams: the numbers chain ``c`` draws depend only on ``(seed, c)``.

Chains advance together (one batched forward pass for all of them), but each draws its random
numbers from its own ``torch.Generator``, seeded from ``(seed, c)`` through NumPy's
``SeedSequence`` (so the streams of neighbouring chains and seeds are unrelated). A chain's
draws are therefore the same whether it runs alone, beside 3 or 300 other chains, in another
process or on another worker: runs can be split, extended with more chains and compared chain
by chain. Every kernel draws through the methods below, which loop over the chains (a few
microseconds each, against milliseconds for the forward pass they accompany).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from .._checks import check_count, check_seed

__all__ = ["ChainStreams", "chain_seed"]


def chain_seed(seed: int, chain: int) -> int:
    """The 64-bit seed of chain ``chain``'s stream in a run seeded with ``seed``.

    Drawn from NumPy's ``SeedSequence`` of ``(seed, chain)``, so the seeds of neighbouring chains
    and runs are unrelated.

    Parameters
    ----------
    seed : int
        The run's seed, in ``[-2**63, 2**64)`` (torch's range; a negative seed is read modulo
        ``2**64``).
    chain : int
        The chain's index, ``>= 0``.

    Returns
    -------
    int
        The seed of the chain's ``torch.Generator``, in ``[0, 2**64)``.

    Raises
    ------
    TypeError
        When ``seed`` or ``chain`` is not an int (a bool is not one).
    ValueError
        When ``seed`` is outside torch's range or ``chain`` is negative.

    Examples
    --------
    >>> from mlm_ppl.inference import chain_seed
    >>> chain_seed(0, 1) == chain_seed(0, 1), chain_seed(0, 0) == chain_seed(0, 1)
    (True, False)
    >>> 0 <= chain_seed(-1, 0) < 2**64
    True
    """
    entropy = check_seed(seed) % 2**64  # torch's range, negative seeds included, as one non-negative int
    check_count(chain, "chain index", 0)
    return int(np.random.SeedSequence(entropy, spawn_key=(chain,)).generate_state(1, np.uint64)[0])


class ChainStreams:
    """One random stream per chain.

    Chain ``c``'s stream is a ``torch.Generator`` seeded with :func:`chain_seed` of ``(seed, c)``,
    so its draws do not depend on the other chains. The leading dimension of every tensor drawn is
    the chains, in the order given.

    Parameters
    ----------
    seed : int
        The run's seed.
    chains : int or sequence of int
        ``C`` (chains ``0 .. C-1``) or the indices of the chains (a group of a bigger run).

    Attributes
    ----------
    chains : tuple of int
        The chains' indices, in order.
    generators : list of torch.Generator
        One stream per chain, in the same order.

    Raises
    ------
    ValueError
        When there is no chain, a chain index is negative, or ``seed`` is outside torch's range.
    TypeError
        When ``seed`` is not an int.

    Examples
    --------
    >>> from mlm_ppl.inference import ChainStreams
    >>> streams = ChainStreams(0, 3)
    >>> streams.rand((3, 2)).shape
    torch.Size([3, 2])
    >>> alone = ChainStreams(0, [2])  # chain 2 on its own draws what it drew beside chains 0 and 1
    >>> bool(ChainStreams(0, 3).rand((3,))[2] == alone.rand((1,))[0])
    True
    """

    def __init__(self, seed: int, chains: int | Sequence[int]) -> None:
        ids = list(range(chains)) if isinstance(chains, int) else [int(c) for c in chains]
        if not ids:
            raise ValueError("ChainStreams needs at least one chain")
        self.seed = check_seed(seed)
        self.chains: tuple[int, ...] = tuple(ids)
        self.generators = [torch.Generator().manual_seed(chain_seed(seed, c)) for c in ids]

    def __len__(self) -> int:
        return len(self.generators)

    def __repr__(self) -> str:
        return f"ChainStreams(seed={self.seed}, chains={list(self.chains)})"

    def _check(self, n: int, what: str) -> None:
        if n != len(self):
            raise ValueError(f"{what} has {n} chains in its leading dimension; these streams have {len(self)}")

    def subset(self, rows: Sequence[int]) -> ChainStreams:
        """The streams of rows ``rows`` of these, shared: drawing from the subset advances them here.

        For work only some chains do, each still from its own stream.

        Parameters
        ----------
        rows : sequence of int
            Rows of these streams (positions in ``chains``, not chain indices).

        Returns
        -------
        ChainStreams
            The streams of those rows, in the order given, sharing their generators with these.

        Raises
        ------
        ValueError
            When ``rows`` is empty.

        Examples
        --------
        >>> from mlm_ppl.inference import ChainStreams
        >>> ChainStreams(0, [4, 5, 6]).subset([0, 2])
        ChainStreams(seed=0, chains=[4, 6])
        """
        out = object.__new__(ChainStreams)
        out.seed = self.seed
        out.chains = tuple(self.chains[int(r)] for r in rows)
        out.generators = [self.generators[int(r)] for r in rows]
        if not out.generators:
            raise ValueError("a subset of streams needs at least one row")
        return out

    def rand(self, shape: Sequence[int]) -> Tensor:
        """Uniform numbers on ``[0, 1)``, row ``c`` from chain ``c``'s stream.

        Parameters
        ----------
        shape : sequence of int
            The shape ``(C, ...)`` drawn, its first entry the number of chains.

        Returns
        -------
        torch.Tensor
            The numbers, of shape ``shape``.

        Raises
        ------
        ValueError
            When ``shape[0]`` is not the number of chains.
        """
        shape = tuple(shape)
        self._check(shape[0], f"shape {shape}")
        return torch.stack([torch.rand(shape[1:], generator=g) for g in self.generators])

    def categorical(self, probs: Tensor) -> Tensor:
        """One categorical draw per row of ``probs``, chain ``c``'s from its own stream.

        Parameters
        ----------
        probs : torch.Tensor
            Unnormalised probabilities (``>= 0``), shape ``(C, ..., K)``.

        Returns
        -------
        torch.Tensor
            The categories drawn, long, shape ``(C, ...)``.

        Raises
        ------
        ValueError
            When the leading dimension of ``probs`` is not the number of chains.
        """
        self._check(probs.shape[0], f"probabilities of shape {tuple(probs.shape)}")
        out = [
            torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=g).reshape(p.shape[:-1])
            for p, g in zip(probs, self.generators)
        ]
        return torch.stack(out)

    def randint(self, high: int) -> Tensor:
        """One integer in ``[0, high)`` per chain, uniformly.

        Parameters
        ----------
        high : int
            One more than the largest integer drawn.

        Returns
        -------
        torch.Tensor
            The integers, long, shape ``(C,)``.
        """
        return torch.stack([torch.randint(0, high, (), generator=g) for g in self.generators])

    def get_state(self) -> Tensor:
        """Every stream's state, for a checkpoint.

        Returns
        -------
        torch.Tensor
            One row per chain, uint8, shape ``(C, S)``.
        """
        return torch.stack([g.get_state() for g in self.generators])

    def set_state(self, state: Tensor) -> None:
        """Restore :meth:`get_state`'s states; a clear error for states of another run.

        Parameters
        ----------
        state : torch.Tensor
            The states :meth:`get_state` gave, shape ``(C, S)``.

        Raises
        ------
        ValueError
            When ``state`` is not a 2-D tensor with one row per chain, each a generator's state.
        """
        width = self.generators[0].get_state().numel() if self.generators else 0
        if not isinstance(state, Tensor) or state.dim() != 2 or state.shape[0] != len(self):
            shape = tuple(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(f"random states {shape} do not fit {len(self)} chains (one row per chain expected)")
        if state.shape[1] != width or state.dtype != torch.uint8:  # torch's own error named neither the run nor why
            raise ValueError(
                f"random states of {state.shape[1]} {state.dtype} values per chain are not this torch's generator "
                f"states ({width} uint8): the checkpoint is damaged or from another version of torch"
            )
        for g, s in zip(self.generators, state):
            g.set_state(s.clone())  # a row of its own: set_state reads the storage from its start
