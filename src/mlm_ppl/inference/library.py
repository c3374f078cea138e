"""A fixed library of deep states, mixed into MH's unmask proposal (issue 45).

A chain of local moves that finds a state far below the rest (a loop the MLM memorized, say)
enters it rarely and, once in, leaves it rarely: R-hat cannot weigh a state that one chain found.
An independence proposal that sometimes proposes one of a few such states, found before sampling
(the deep states of an earlier run, :func:`~mlm_ppl.diagnostics.deep_states`, or an annealed
run's ends) lets every chain move in and out of them in one step.

**The move.** An unmask proposal redraws a run ``R`` of free positions (``unmask_size``, by default
all) along a random order ``o``, both drawn independently of the state; given them it proposes
``y_R`` from

    q(y_R | x_{\\R}) = (1 - w) q_U(y_R | x_{\\R}, o) + w n(y_R) / K,

where ``q_U`` is the sequential unmask (:meth:`~mlm_ppl.inference.MetropolisHastings.unmask`),
``K`` the library's size, ``n(y_R)`` how many of its entries hold ``y_R`` on ``R`` and ``w`` the
``library_weight``: with probability ``w`` an entry drawn uniformly puts its tokens on ``R``. The
proposal depends on ``x`` only through ``x_{\\R}``, which the proposed state shares, so the reverse
move's probability is ``q(x_R | x_{\\R})`` from the same formula and the MH ratio

    log a = log p(y) - log p(x) + log q(x_R | .) - log q(y_R | .)

leaves ``p`` invariant for every ``(R, o)``; the library being fixed (never learnt from the chain),
the kernel is exact, as tests check by enumeration. Both ``q`` terms need ``q_U`` of both states: a
drawn proposal has them from its own pass; a library proposal reads them in one batched pass over
both states (``2b`` masked copies for a run of ``b``, against ``2b - 1``).

The library is given as loops of the free positions (:func:`parse_library`) and recorded with the
run as given; :func:`library_ids` reads them against the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..models.target import Target
from ..models.tokens import loop_tokens
from .streams import ChainStreams

__all__ = [
    "Library",
    "check_library",
    "parse_library",
    "library_ids",
    "library_share",
    "mixture_log_q",
    "fill_from_library",
]

SEPARATOR = ","


def parse_library(value: str) -> tuple[str, ...]:
    """The loops of a library as recorded: separated by commas, each a string of residues (or
    tokens separated by spaces), stripped."""
    return tuple(loop.strip() for loop in value.split(SEPARATOR))


def check_library(value: Any, name: str) -> str:
    """The ``library`` option: loops separated by commas, none empty (from Python,
    ``",".join(loops)``); a ValueError names an empty one."""
    loops = parse_library(value)
    if not all(loops):
        raise ValueError(f"{name}: {value!r} holds an empty loop; give loops of the free positions separated by commas")
    return SEPARATOR.join(loops)


def library_ids(target: Target, library: str) -> Tensor:
    """``(K, F)`` token ids of the library's loops at the target's ``F`` free positions.

    Refused (ValueError) for a target without a tokenizer (a table target), a loop of another
    length than the free positions, a token outside the model's vocabulary or outside the alphabet
    of its position, and a loop whose state breaks one of the target's hard rules (it could only be
    proposed and refused)."""
    codec = getattr(target, "mlm", None)
    if codec is None or not hasattr(codec, "vocab"):
        raise ValueError(
            f"a library of loops needs a target read by a tokenizer (an MLM's); {type(target).__name__} has none"
        )
    index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
    F = target.num_free
    rows = []
    for loop in parse_library(library):
        parts = loop_tokens(loop)
        if len(parts) != F:
            raise ValueError(
                f"library loop {loop!r} has {len(parts)} tokens; the template has {F} free positions, and each loop "
                "gives one token for each (residues, or tokens separated by spaces)"
            )
        missing = [p for p in parts if p not in index]
        if missing:
            raise ValueError(f"library loop {loop!r}: token {missing[0]!r} is not in the vocabulary of {codec.name!r}")
        ids = [index[p] for p in parts]
        outside = [i for i, t in enumerate(ids) if not bool(target.allowed[i, t])]
        if outside:
            i = outside[0]
            raise ValueError(
                f"library loop {loop!r}: {parts[i]!r} at free position {i} is outside the tokens that position may "
                "hold (the constraint spec's alphabet there, or a special token)"
            )
        rows.append(ids)
    ids_t = torch.tensor(rows, dtype=torch.long)
    states = target.template.expand(len(rows), -1).clone()
    states[:, target.free_positions] = ids_t
    broken = target.forbidden(states)
    if broken.any():
        loop = parse_library(library)[int(broken.nonzero()[0])]
        raise ValueError(f"library loop {loop!r} breaks a hard rule of the target: it could never be accepted")
    return ids_t


def library_share(library: Tensor, tokens: Tensor, free_positions: Tensor, run: Tensor) -> Tensor:
    """``(N,)`` float64 share of the library's ``K`` entries that hold, at the free indices ``run``
    ``(N, b)``, the tokens of the states ``tokens`` ``(N, L)``: ``n(x_R) / K``."""
    entries = library[:, run]  # (K, N, b)
    held = tokens.gather(1, free_positions[run])  # (N, b)
    return (entries == held[None]).all(-1).double().mean(0)


def mixture_log_q(log_q_unmask: Tensor, share: Tensor, weight: float) -> Tensor:
    """``log((1 - w) exp(log_q_unmask) + w share)``, float64: the library proposal's ``log q``."""
    a = log_q_unmask.double() + math.log1p(-weight)
    b = share.log() + math.log(weight)
    return torch.logaddexp(a, b)


def fill_from_library(library: Tensor, entry: Tensor, tokens: Tensor, free_positions: Tensor, run: Tensor) -> Tensor:
    """The states ``tokens`` ``(N, L)`` with the library entries ``entry`` ``(N,)``'s tokens on the
    free indices ``run`` ``(N, b)``."""
    return tokens.scatter(1, free_positions[run], library[entry[:, None], run])


@dataclass(frozen=True)
class Library:
    """A kernel's bound library: ``ids`` ``(K, F)`` (the loops' tokens), ``weight`` (``w``) and the
    target's ``free_positions``. :meth:`propose` makes MH's unmask proposals with it, and
    :meth:`log_q` gives the mixture's ``log q`` both there and in the exact matrix."""

    ids: Tensor
    weight: float
    free_positions: Tensor

    @classmethod
    def bind(cls, options: Any, target: Target) -> Library | None:
        """The library of MH's ``options`` (``library``, ``library_weight``, ``p_unmask``) read against
        ``target``, or None without one; a ValueError for a library that could do nothing."""
        o = options
        if o.library is None:
            if o.library_weight != 0.5:
                raise ValueError(f"library_weight={o.library_weight} does nothing without a library: give library too")
            return None
        if o.p_unmask == 0:
            raise ValueError(
                "a library is proposed by unmask proposals (the mixture (1 - w) q_unmask + w library): "
                "give p_unmask > 0"
            )
        if not 0 < o.library_weight < 1:
            raise ValueError(
                f"library_weight must lie in (0, 1) with a library, got {o.library_weight}: at 1 no state outside "
                "the library could be proposed back, so no chain would ever enter it"
            )
        return cls(library_ids(target, o.library), float(o.library_weight), target.free_positions)

    def log_q(self, log_q_unmask: Tensor, tokens: Tensor, order: Tensor) -> Tensor:
        """``(N,)`` float64 log q of the states' runs ``order`` under the unmask proposal mixed with the library."""
        share = library_share(self.ids, tokens, self.free_positions, order)
        return mixture_log_q(log_q_unmask, share, self.weight)

    def propose(
        self,
        unmask: Callable[[Tensor, Tensor, ChainStreams | None], tuple[Tensor, Tensor, Tensor]],
        tokens: Tensor,
        order: Tensor,
        streams: ChainStreams,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The mixture's proposal in each of ``N`` chains along the runs ``order`` ``(N, b)``: with
        probability ``w`` (each chain's own draw) a library entry drawn uniformly on the run, else
        the sequential unmask ``unmask`` (:meth:`~mlm_ppl.inference.MetropolisHastings.unmask`).
        Returns the proposed states, ``log q(x_R | .) - log q(y_R | .)`` (float64) and the masked
        copies each read (``2b - 1`` for a draw, ``2b`` for a library loop: both states read along
        the order in one batched pass a position)."""
        N, b = order.shape
        pick = streams.rand((N,)) < self.weight
        prop = tokens.clone()
        log_fwd, log_rev = torch.zeros(N, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)
        copies = torch.full((N,), 2 * b - 1)
        drawn, picked = (~pick).nonzero().flatten(), pick.nonzero().flatten()
        if drawn.numel():
            prop[drawn], fwd, rev = unmask(tokens[drawn], order[drawn], streams.subset(drawn.tolist()))
            log_fwd[drawn], log_rev[drawn] = fwd.double(), rev.double()
        if picked.numel():
            entry = streams.subset(picked.tolist()).randint(self.ids.shape[0])
            prop[picked] = fill_from_library(self.ids, entry, tokens[picked], self.free_positions, order[picked])
            _, log_q, _ = unmask(torch.cat([prop[picked], tokens[picked]]), order[picked].repeat(2, 1), None)
            n = picked.numel()
            log_fwd[picked], log_rev[picked] = log_q[:n].double(), log_q[n:].double()
            copies[picked] = 2 * b
        return prop, self.log_q(log_rev, tokens, order) - self.log_q(log_fwd, prop, order), copies
