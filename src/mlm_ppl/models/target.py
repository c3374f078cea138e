"""The target contract between the models and the kernels.

A *target* is what a kernel samples: an unnormalised distribution over the free positions of
a template,

    log p(x) = -E(x) / T + log_factor(x),

that can (1) evaluate complete states in one batched pass over masked copies, giving the
energy, the extra log terms and the single-site conditionals at the free positions (the next
MH step's proposals), (2) read the MLM's logits at a block of positions masked together, and
(3) say which tokens each free position may hold (:attr:`Target.allowed`, the proposals'
support) and which states its hard rules forbid, without a forward pass
(:meth:`Target.forbidden`, so that a kernel rejects such a proposal before running it).
:class:`Target` writes that down as a :class:`typing.Protocol`; every kernel in
:mod:`mlm_ppl.inference` relies on it and on nothing else.

Implementations: :class:`~mlm_ppl.models.distribution.MaskedLMDistribution` (the MLM),
:class:`ConstrainedTarget` (a target plus log-factors: constraints, likelihood terms), and the
table targets of :mod:`mlm_ppl.testing` (exactly solvable examples).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor

from .._checks import check_temperature

if TYPE_CHECKING:
    from .frozen import FrozenFrame

__all__ = [
    "Evaluation",
    "Target",
    "WindowedTarget",
    "DerivedTarget",
    "ConstrainedTarget",
    "ScaledTarget",
    "TemperedTarget",
    "log_density",
    "energy_from_log_density",
]


class Evaluation(NamedTuple):
    """What one batched pass over masked copies of states gives.

    Attributes
    ----------
    energy : Tensor
        ``(N,)`` energy ``E(x)`` in nats.
    log_factor : Tensor
        ``(N,)`` extra log-density terms (constraints, likelihoods); zeros for a bare
        distribution.
    cond_logits : Tensor
        ``(N, F, V)`` MLM logits at each free position with only that position masked:
        the single-site proposal distributions of the next MH step.
    """

    energy: Tensor
    log_factor: Tensor
    cond_logits: Tensor


def log_density(energy: Tensor, log_factor: Tensor, temperature: float) -> Tensor:
    """The unnormalised log density of a target, ``-E/T + log_factor``: the one place it is written."""
    return -energy / temperature + log_factor


def energy_from_log_density(lp: Tensor, log_factor: Tensor, temperature: float) -> Tensor:
    """The energy ``E`` of states from their log density and log-factor: ``-T (lp - log_factor)``,
    the inverse of :func:`log_density` (what a run's ``lp`` gives back of the MLM's energy)."""
    return -(lp - log_factor) * temperature


@runtime_checkable
class Target(Protocol):
    """What a kernel needs of the distribution it samples.

    Attributes
    ----------
    template : Tensor
        ``(L,)`` long token ids; free positions hold the mask token.
    free_positions : Tensor
        ``(F,)`` long, the positions that are sampled, ascending.
    num_free : int
        ``F``.
    temperature : float
        ``T`` of ``-E/T``.
    energy_name : str
        Which energy ``E`` is (``"norm"`` or ``"raw"``), for the record (a name; a state's
        ``energy`` is the tensor of its values).
    ordinary_mask : Tensor
        ``(V,)`` bool, the model's ordinary tokens (never special tokens): what a state may hold
        at a free position, what enumeration runs over.
    allowed : Tensor
        ``(F, V)`` bool, the tokens each free position may hold with nonzero density (its
        alphabet; within ``ordinary_mask``): every kernel proposes within it. A state with a
        token outside it has log-factor ``-inf``. ``ordinary_mask`` at every position unless
        constraints narrow it (:class:`~mlm_ppl.models.constraints.ConstraintTarget`).
    vocab_size : int
        ``V``.
    """

    @property
    def template(self) -> Tensor: ...

    @property
    def free_positions(self) -> Tensor: ...

    @property
    def temperature(self) -> float: ...

    @property
    def energy_name(self) -> str: ...

    @property
    def num_free(self) -> int: ...

    @property
    def ordinary_mask(self) -> Tensor: ...

    @property
    def allowed(self) -> Tensor: ...

    @property
    def vocab_size(self) -> int: ...

    def evaluate(self, tokens: Tensor) -> Evaluation:
        """Energies, log-factors and free-position conditionals of complete states ``(N, L)``."""
        ...

    def forbidden(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where complete states ``(N, L)`` are known to have log-factor ``-inf``
        from cheap checks alone (a constraint spec's rules), with no forward pass and no soft
        term; False elsewhere, including wherever finding out would cost as much as evaluating
        (an opaque log-factor: its ``-inf`` still comes from :meth:`evaluate`)."""
        ...

    def site_logits(self, tokens: Tensor, positions: Tensor, *, masked: bool = True) -> Tensor:
        """``(N, k, V)`` logits at ``positions`` ``(N, k)`` of ``tokens`` ``(N, L)``: with all k
        masked together, or (``masked=False``) read from the tokens as they are, nothing masked."""
        ...

    def validate_tokens(self, tokens: Tensor) -> None:
        """Raise a ValueError/TypeError unless ``tokens`` ``(..., L)`` are complete states of the target."""
        ...


@runtime_checkable
class WindowedTarget(Target, Protocol):
    """A target whose energy is a sum of per-position terms that can be evaluated on a subset of
    its positions, optionally with the model in another dtype: what
    :class:`~mlm_ppl.inference.SurrogateMH` needs for its cheap surrogate.
    :class:`~mlm_ppl.MaskedLMDistribution` is one, and a :class:`ConstrainedTarget` over one.

    Attributes
    ----------
    scored_positions : Tensor
        ``(M,)`` long, the columns that contribute an energy term (free positions included).
    """

    @property
    def scored_positions(self) -> Tensor: ...

    def evaluate(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """:meth:`Target.evaluate` with the energy summed over ``positions`` only (every free
        position among them), the model run in ``dtype``, and every copy cropped to the columns
        within ``context`` of a free position (:meth:`context_columns`), beside ``frame`` (the rest,
        frozen: :meth:`frozen_frame`); the defaults give the energy itself."""
        ...

    def site_logits(
        self,
        tokens: Tensor,
        positions: Tensor,
        *,
        masked: bool = True,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Tensor:
        """:meth:`Target.site_logits` with the copies read as :meth:`evaluate` reads them in ``dtype``,
        cropped to ``context`` and beside ``frame`` (a surrogate's own proposals)."""
        ...

    def context_columns(self, context: int) -> Tensor:
        """``(K,)`` the columns a copy cropped to ``context`` keeps (ValueError if the model cannot
        read a crop at its columns' own positions)."""
        ...

    def frozen_frame(self, context: int, dtype: torch.dtype | None = None) -> FrozenFrame:
        """The rest of a fixed reference sequence beside copies cropped to ``context``, frozen
        (``evaluate(..., frame=...)``; ValueError for a model without a frozen forward)."""
        ...


class DerivedTarget:
    """A target built on another, ``base``: its whole description is the base's (template, free
    positions, temperature, energy, vocabulary, conditionals at blocks, validation, and the
    base's ``mlm`` and ``scored_positions`` where it has them); a subclass changes
    :meth:`evaluate`. :class:`ConstrainedTarget` adds log-factors;
    :class:`~mlm_ppl.models.surrogate.SurrogateTarget` restricts the energy."""

    def __init__(self, base: Target) -> None:
        self.base = base

    @property
    def template(self) -> Tensor:
        return self.base.template

    @property
    def free_positions(self) -> Tensor:
        return self.base.free_positions

    @property
    def num_free(self) -> int:
        return self.base.num_free

    @property
    def temperature(self) -> float:
        return self.base.temperature

    @property
    def energy_name(self) -> str:
        return self.base.energy_name

    @property
    def ordinary_mask(self) -> Tensor:
        return self.base.ordinary_mask

    @property
    def allowed(self) -> Tensor:
        return self.base.allowed

    @property
    def vocab_size(self) -> int:
        return self.base.vocab_size

    @property
    def mlm(self):
        """The base target's masked LM (None for targets without one)."""
        return getattr(self.base, "mlm", None)

    @property
    def scored_positions(self) -> Tensor:
        """The base's (a :class:`WindowedTarget` capability; AttributeError for bases without it)."""
        return self.base.scored_positions  # type: ignore[attr-defined]

    def context_columns(self, context: int) -> Tensor:
        """The base's (a :class:`WindowedTarget` capability)."""
        return self.base.context_columns(context)  # type: ignore[attr-defined]

    def frozen_frame(self, context: int, dtype: torch.dtype | None = None) -> FrozenFrame:
        """The base's (a :class:`WindowedTarget` capability)."""
        return self.base.frozen_frame(context, dtype)  # type: ignore[attr-defined]

    def site_logits(
        self,
        tokens: Tensor,
        positions: Tensor,
        *,
        masked: bool = True,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Tensor:
        """The base's; ``dtype``, ``context`` and ``frame`` go to a base that reads copies as a
        surrogate (:class:`WindowedTarget`)."""
        if dtype is None and context is None and frame is None:
            return self.base.site_logits(tokens, positions, masked=masked)
        return self.base.site_logits(  # type: ignore[call-arg]
            tokens, positions, masked=masked, dtype=dtype, context=context, frame=frame
        )

    def validate_tokens(self, tokens: Tensor) -> None:
        self.base.validate_tokens(tokens)

    def evaluate(self, tokens: Tensor) -> Evaluation:
        return self.base.evaluate(tokens)

    def forbidden(self, tokens: Tensor) -> Tensor:
        return self.base.forbidden(tokens)

    def evaluate_base(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """The base's evaluation; ``positions``, ``dtype``, ``context`` and ``frame`` go to a base that can
        restrict its energy (:class:`WindowedTarget`), so a derived target of one is one too."""
        if positions is None and dtype is None and context is None and frame is None:
            return self.base.evaluate(tokens)
        return self.base.evaluate(tokens, positions, dtype=dtype, context=context, frame=frame)  # type: ignore[call-arg]


class TemperedTarget(DerivedTarget):
    """The base target at ``factor`` times its temperature: ``p_t(x) ∝ exp(-E(x)/(T factor) +
    log_factor(x))``, the log-factor (hard rules, likelihood terms) as it is. A replica of replica
    exchange (:class:`~mlm_ppl.inference.ReplicaMH`); everything but the temperature is the base's,
    its evaluation included (the energy does not depend on the temperature)."""

    def __init__(self, base: Target, factor: float) -> None:
        super().__init__(base)
        self.factor = check_temperature(factor, "factor")

    @property
    def temperature(self) -> float:
        return self.base.temperature * self.factor

    def __repr__(self) -> str:
        return f"TemperedTarget({self.base!r}, factor={self.factor:g})"


class ConstrainedTarget(DerivedTarget):
    """A target with extra log-density terms: ``log p(x) = -E(x)/T + log_factor(x)``.

    Everything but :meth:`evaluate` is the base target's.

    Parameters
    ----------
    base : Target
        Usually a :class:`~mlm_ppl.MaskedLMDistribution`.
    log_factor : callable
        ``tokens (N, L) -> (N,)`` extra log-density (constraints, likelihood terms that depend
        on the tokens); ``-inf`` forbids a state. NaN or ``+inf`` is an error where it appears.
    """

    def __init__(self, base: Target, log_factor: Callable[[Tensor], Tensor]) -> None:
        if not callable(log_factor):
            raise TypeError("log_factor must be a callable tokens (N, L) -> (N,)")
        super().__init__(base)
        self._log_factor = log_factor

    def log_factor(self, tokens: Tensor) -> Tensor:
        """``(N,)`` the given log-factor of ``tokens`` ``(N, L)``, checked: its shape, and a
        ValueError for NaN or ``+inf`` (every evaluation, and every sampler that reads the
        log-factor alone, goes through here)."""
        extra = torch.as_tensor(self._log_factor(tokens)).reshape(-1).cpu()  # a Pyro model's other sites: any device
        if extra.shape != (tokens.shape[0],):
            raise ValueError(f"log_factor must return shape ({tokens.shape[0]},), got {tuple(extra.shape)}")
        if not extra.is_floating_point():
            extra = extra.double()
        bad = extra.isnan() | (extra == float("inf"))
        if bad.any():
            rows = bad.nonzero()[:, 0].tolist()
            raise ValueError(
                f"log_factor returned {extra[rows[0]].item()} for {len(rows)} of {extra.numel()} states (first: row "
                f"{rows[0]}, tokens {tokens[rows[0]].tolist()}); it must return a number, or -inf for a forbidden state"
            )
        return extra

    # -- the one thing it changes
    def evaluate(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """The base evaluation with :meth:`log_factor` added to its log-factors; ``positions``
        ``dtype``, ``context`` and ``frame`` go to a base that can restrict its energy (:class:`WindowedTarget`)."""
        ev = self.evaluate_base(tokens, positions, dtype=dtype, context=context, frame=frame)
        return ev._replace(log_factor=ev.log_factor + self.log_factor(tokens).to(ev.energy.dtype))

    def __repr__(self) -> str:
        return f"ConstrainedTarget({self.base!r})"


class ScaledTarget(DerivedTarget):
    """A target whose whole log density is multiplied by ``scale >= 0``: ``log p(x) = scale *
    (-E(x)/T + log_factor(x))``, the base's log-factor (its constraints) included. It is what
    Pyro's ``poutine.scale(s)`` (``scale=s``) and ``poutine.mask`` (``scale=0``) make of a token
    site's ``log_prob``; the MLM's conditionals, and so the kernels' proposals, are the base's.

    A scale of 0 drops the base's term whole, as Pyro's mask drops the site's ``log_prob``: its
    energy, its log-factor and the rules behind them, so every ordinary token is allowed and no
    state is forbidden. A positive scale keeps the base's alphabets and rules (``-inf`` stays
    ``-inf``).
    """

    def __init__(self, base: Target, scale: float) -> None:
        scale = float(scale)
        if not 0 <= scale < float("inf"):
            raise ValueError(f"a token site's scale must be finite and >= 0, got {scale}")
        super().__init__(base)
        self.scale = scale

    @property
    def allowed(self) -> Tensor:
        if self.scale == 0:
            return self.base.ordinary_mask.expand(self.base.num_free, -1)
        return self.base.allowed

    def forbidden(self, tokens: Tensor) -> Tensor:
        if self.scale == 0:
            return torch.zeros(tokens.shape[0], dtype=torch.bool)
        return self.base.forbidden(tokens)

    def evaluate(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """The base evaluation with its energy and log-factor times :attr:`scale` (a log-factor of 0
        at scale 0); ``positions``, ``dtype``, ``context`` and ``frame`` as for :class:`ConstrainedTarget`."""
        ev = self.evaluate_base(tokens, positions, dtype=dtype, context=context, frame=frame)
        factor = ev.log_factor * self.scale if self.scale > 0 else torch.zeros_like(ev.log_factor)
        return ev._replace(energy=ev.energy * self.scale, log_factor=factor)

    def __repr__(self) -> str:
        return f"ScaledTarget({self.base!r}, scale={self.scale})"
