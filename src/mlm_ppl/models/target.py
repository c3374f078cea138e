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

    Parameters
    ----------
    energy : torch.Tensor
        Shape ``(N,)``, the energy ``E(x)`` of each state in nats.
    log_factor : torch.Tensor
        Shape ``(N,)``, the extra log-density terms (constraints, likelihoods); zeros for a bare
        distribution.
    cond_logits : torch.Tensor
        Shape ``(N, F, V)``, the MLM logits at each free position with only that position
        masked: the single-site proposal distributions of the next MH step.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E")
    >>> ev = dist.evaluate(dist.encode(["ACDE", "AAAE"]))  # an Evaluation
    >>> ev.energy.shape, ev.log_factor.tolist(), ev.cond_logits.shape
    (torch.Size([2]), [0.0, 0.0], torch.Size([2, 2, 9]))
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

    A :class:`typing.Protocol`: a class is a target when it has these properties and methods
    (``isinstance(obj, Target)`` checks that they are there), whatever it derives from.

    Parameters
    ----------
    *args, **kwargs
        Unused: a protocol is never instantiated; a class is one by having its members.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import Target
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E")
    >>> isinstance(dist, Target), dist.num_free, dist.free_positions.tolist()
    (True, 2, [2, 3])
    """

    @property
    def template(self) -> Tensor:
        """The template, ``(L,)`` long token ids with the mask token at each free position."""
        ...

    @property
    def free_positions(self) -> Tensor:
        """The positions that are sampled, ``(F,)`` long, ascending."""
        ...

    @property
    def temperature(self) -> float:
        """The temperature ``T`` of ``-E/T``."""
        ...

    @property
    def energy_name(self) -> str:
        """Which energy ``E`` is (``"norm"`` or ``"raw"``), for the record.

        A name; a state's ``energy`` is the tensor of its values.
        """
        ...

    @property
    def num_free(self) -> int:
        """The number ``F`` of free positions."""
        ...

    @property
    def ordinary_mask(self) -> Tensor:
        """The model's ordinary tokens (never special tokens), ``(V,)`` bool.

        What a state may hold at a free position, what enumeration runs over.
        """
        ...

    @property
    def allowed(self) -> Tensor:
        """The tokens each free position may hold with nonzero density, ``(F, V)`` bool.

        Each position's alphabet, within :attr:`ordinary_mask`: every kernel proposes within it.
        A state with a token outside it has log-factor ``-inf``. :attr:`ordinary_mask` at every
        position unless constraints narrow it
        (:class:`~mlm_ppl.models.ConstraintTarget`).
        """
        ...

    @property
    def vocab_size(self) -> int:
        """The size ``V`` of the model's vocabulary (the logits' last dimension)."""
        ...

    def evaluate(self, tokens: Tensor) -> Evaluation:
        """Energies, log-factors and free-position conditionals of complete states.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states of the target.

        Returns
        -------
        Evaluation
            The energies ``(N,)``, log-factors ``(N,)`` and conditionals ``(N, F, V)`` of the states.
        """
        ...

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which complete states are known to have log-factor ``-inf`` from cheap checks alone.

        The checks are a constraint spec's rules: no forward pass and no soft term. False
        wherever finding out would cost as much as evaluating (an opaque log-factor: its
        ``-inf`` still comes from :meth:`evaluate`).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` bool, True where a state is known to be forbidden, False elsewhere.
        """
        ...

    def site_logits(self, tokens: Tensor, positions: Tensor, *, masked: bool = True) -> Tensor:
        """MLM logits at ``k`` positions of each state, masked together or read as they are.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of the states.
        positions : torch.Tensor
            Shape ``(N, k)``, long, the positions of each row to read.
        masked : bool, optional
            True (the default): read with all ``k`` positions masked together; False: read from
            the tokens as they are, nothing masked.

        Returns
        -------
        torch.Tensor
            Shape ``(N, k, V)``, the logits at ``positions``.
        """
        ...

    def validate_tokens(self, tokens: Tensor) -> None:
        """Check that ``tokens`` are complete states of the target.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(..., L)``, the token ids to check.

        Raises
        ------
        ValueError, TypeError
            Unless ``tokens`` are complete states of the target.
        """
        ...


@runtime_checkable
class WindowedTarget(Target, Protocol):
    """A target whose energy can be evaluated on a subset of its positions, in another dtype.

    Its energy is a sum of per-position terms, and the model may run in another dtype: what
    :class:`~mlm_ppl.inference.SurrogateMH` needs for its cheap surrogate.
    :class:`~mlm_ppl.MaskedLMDistribution` is one, and a :class:`ConstrainedTarget` over one.

    Parameters
    ----------
    *args, **kwargs
        Unused: a protocol is never instantiated; a class is one by having its members.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import WindowedTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E")
    >>> isinstance(dist, WindowedTarget), dist.scored_positions.tolist()
    (True, [1, 2, 3, 4])
    """

    @property
    def scored_positions(self) -> Tensor:
        """The columns that contribute an energy term (free positions included), ``(M,)`` long."""
        ...

    def evaluate(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """Evaluate states as :meth:`Target.evaluate` does, on a subset of the energy's terms, read cheaply.

        The defaults give the energy itself.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.
        positions : torch.Tensor or None, optional
            The columns whose energy terms are summed (every free position among them); None
            (the default): every scored position.
        dtype : torch.dtype or None, optional
            The dtype the model runs in; None (the default): the model's own.
        context : int or None, optional
            Crop every copy to the columns within ``context`` of a free position
            (:meth:`context_columns`); None (the default): the whole sequence.
        frame : FrozenFrame or None, optional
            The rest of a reference sequence, frozen (:meth:`frozen_frame`), that the cropped
            copies are read beside; None (the default): none.

        Returns
        -------
        Evaluation
            The energies (summed over ``positions``), log-factors and free-position conditionals.
        """
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
        """Read logits as :meth:`Target.site_logits` does, from copies read as :meth:`evaluate` reads them.

        A surrogate's own proposals: the copies in ``dtype``, cropped to ``context`` and beside
        ``frame``.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of the states.
        positions : torch.Tensor
            Shape ``(N, k)``, long, the positions of each row to read.
        masked : bool, optional
            True (the default): all ``k`` positions masked together; False: nothing masked.
        dtype : torch.dtype or None, optional
            The dtype the model runs in; None (the default): the model's own.
        context : int or None, optional
            Crop every copy to the columns within ``context`` of a free position; None (the
            default): the whole sequence.
        frame : FrozenFrame or None, optional
            The frozen rest of a reference sequence beside the cropped copies; None (the
            default): none.

        Returns
        -------
        torch.Tensor
            Shape ``(N, k, V)``, the logits at ``positions``.
        """
        ...

    def context_columns(self, context: int) -> Tensor:
        """The columns a copy cropped to ``context`` keeps.

        Parameters
        ----------
        context : int
            How far from a free position a kept column may be.

        Returns
        -------
        torch.Tensor
            Shape ``(K,)``, long, the kept columns.

        Raises
        ------
        ValueError
            If the model cannot read a crop at its columns' own positions.
        """
        ...

    def frozen_frame(self, context: int, dtype: torch.dtype | None = None) -> FrozenFrame:
        """The rest of a fixed reference sequence beside copies cropped to ``context``, frozen.

        What ``evaluate(..., frame=...)`` takes.

        Parameters
        ----------
        context : int
            The crop the frame goes with (as for :meth:`context_columns`).
        dtype : torch.dtype or None, optional
            The dtype of the model the frame is computed in; None (the default): the model's own.

        Returns
        -------
        FrozenFrame
            The frozen frame.

        Raises
        ------
        ValueError
            For a model without a frozen forward.
        """
        ...


class DerivedTarget:
    """A target built on another, ``base``, whose whole description is the base's.

    The template, free positions, temperature, energy, vocabulary, conditionals at blocks,
    validation, and the base's ``mlm`` and ``scored_positions`` where it has them are the base's;
    a subclass changes :meth:`evaluate`. :class:`ConstrainedTarget` adds log-factors;
    :class:`~mlm_ppl.models.SurrogateTarget` restricts the energy.

    Parameters
    ----------
    base : Target
        The target whose description this one takes.

    Attributes
    ----------
    base : Target
        The target it is built on.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import DerivedTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E")
    >>> derived = DerivedTarget(dist)
    >>> derived.num_free, derived.mlm is dist.mlm
    (2, True)
    """

    def __init__(self, base: Target) -> None:
        self.base = base

    @property
    def template(self) -> Tensor:
        """The base's template, ``(L,)`` long token ids with the mask token at each free position."""
        return self.base.template

    @property
    def free_positions(self) -> Tensor:
        """The base's free positions, ``(F,)`` long, ascending."""
        return self.base.free_positions

    @property
    def num_free(self) -> int:
        """The base's number of free positions."""
        return self.base.num_free

    @property
    def temperature(self) -> float:
        """The base's temperature."""
        return self.base.temperature

    @property
    def energy_name(self) -> str:
        """The base's energy name (``"norm"`` or ``"raw"``)."""
        return self.base.energy_name

    @property
    def ordinary_mask(self) -> Tensor:
        """The base's ordinary tokens, ``(V,)`` bool."""
        return self.base.ordinary_mask

    @property
    def allowed(self) -> Tensor:
        """The base's alphabets (the tokens each free position may hold), ``(F, V)`` bool."""
        return self.base.allowed

    @property
    def vocab_size(self) -> int:
        """The base's vocabulary size ``V``."""
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
        """The base's columns of a copy cropped to ``context`` (a :class:`WindowedTarget` capability).

        Parameters
        ----------
        context : int
            How far from a free position a kept column may be.

        Returns
        -------
        torch.Tensor
            Shape ``(K,)``, long, the kept columns.

        Raises
        ------
        AttributeError
            For a base that is not a :class:`WindowedTarget`.
        ValueError
            Where the base's model cannot read a crop at its columns' own positions.
        """
        return self.base.context_columns(context)  # type: ignore[attr-defined]

    def frozen_frame(self, context: int, dtype: torch.dtype | None = None) -> FrozenFrame:
        """The base's frozen frame beside copies cropped to ``context`` (a :class:`WindowedTarget` capability).

        Parameters
        ----------
        context : int
            The crop the frame goes with.
        dtype : torch.dtype or None, optional
            The dtype of the model the frame is computed in; None (the default): the model's own.

        Returns
        -------
        FrozenFrame
            The base's frozen frame.

        Raises
        ------
        AttributeError
            For a base that is not a :class:`WindowedTarget`.
        ValueError
            Where the base's model has no frozen forward.
        """
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
        """The base's logits at ``positions`` of each state (:meth:`Target.site_logits`).

        ``dtype``, ``context`` and ``frame`` go to a base that reads copies as a surrogate
        (:class:`WindowedTarget`); with all three None, the base is called without them.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of the states.
        positions : torch.Tensor
            Shape ``(N, k)``, long, the positions of each row to read.
        masked : bool, optional
            True (the default): all ``k`` positions masked together; False: nothing masked.
        dtype : torch.dtype or None, optional
            The dtype the base's model runs in; None (the default): its own.
        context : int or None, optional
            Crop the copies to the columns within ``context`` of a free position; None (the
            default): the whole sequence.
        frame : FrozenFrame or None, optional
            The frozen rest of a reference sequence beside the cropped copies; None (the
            default): none.

        Returns
        -------
        torch.Tensor
            Shape ``(N, k, V)``, the logits at ``positions``.
        """
        if dtype is None and context is None and frame is None:
            return self.base.site_logits(tokens, positions, masked=masked)
        return self.base.site_logits(  # type: ignore[call-arg]
            tokens, positions, masked=masked, dtype=dtype, context=context, frame=frame
        )

    def validate_tokens(self, tokens: Tensor) -> None:
        """Check that ``tokens`` are complete states of the base.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(..., L)``, the token ids to check.

        Raises
        ------
        ValueError, TypeError
            Where the base refuses them.
        """
        self.base.validate_tokens(tokens)

    def evaluate(self, tokens: Tensor) -> Evaluation:
        """The base's evaluation of complete states (what a subclass changes).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.

        Returns
        -------
        Evaluation
            The base's energies, log-factors and free-position conditionals.
        """
        return self.base.evaluate(tokens)

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which complete states the base's cheap checks forbid (:meth:`Target.forbidden`).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` bool, the base's answer.
        """
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
        """The base's evaluation, restricted and read cheaply where the base can.

        ``positions``, ``dtype``, ``context`` and ``frame`` go to a base that can restrict its
        energy (:class:`WindowedTarget`), so a derived target of one is one too; with all four
        None, the base's plain :meth:`evaluate` runs.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.
        positions : torch.Tensor or None, optional
            The columns whose energy terms are summed; None (the default): every scored position.
        dtype : torch.dtype or None, optional
            The dtype the base's model runs in; None (the default): its own.
        context : int or None, optional
            Crop the copies to the columns within ``context`` of a free position; None (the
            default): the whole sequence.
        frame : FrozenFrame or None, optional
            The frozen rest of a reference sequence beside the cropped copies; None (the
            default): none.

        Returns
        -------
        Evaluation
            The base's energies, log-factors and free-position conditionals.
        """
        if positions is None and dtype is None and context is None and frame is None:
            return self.base.evaluate(tokens)
        return self.base.evaluate(tokens, positions, dtype=dtype, context=context, frame=frame)  # type: ignore[call-arg]


class TemperedTarget(DerivedTarget):
    """The base target at ``factor`` times its temperature.

    ``p_t(x) ∝ exp(-E(x)/(T factor) + log_factor(x))``, the log-factor (hard rules, likelihood
    terms) as it is. A replica of replica exchange (:class:`~mlm_ppl.inference.ReplicaMH`);
    everything but the temperature is the base's, its evaluation included (the energy does not
    depend on the temperature).

    Parameters
    ----------
    base : Target
        The target at its own temperature ``T``.
    factor : float
        The temperature's multiplier, at least ``1e-6`` (finite).

    Attributes
    ----------
    factor : float
        The checked ``factor``.

    Raises
    ------
    TypeError
        If ``factor`` is not a number.
    ValueError
        If ``factor`` is not finite or is below ``1e-6``.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import TemperedTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E", temperature=1.5)
    >>> TemperedTarget(dist, 2.0).temperature
    3.0
    """

    def __init__(self, base: Target, factor: float) -> None:
        super().__init__(base)
        self.factor = check_temperature(factor, "factor")

    @property
    def temperature(self) -> float:
        """The base's temperature times ``factor``."""
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

    Raises
    ------
    TypeError
        If ``log_factor`` is not callable.

    Examples
    --------
    A log-factor that forbids every state without ``C`` at token position 2:

    >>> import torch
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import ConstrainedTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> dist = MaskedLMDistribution(mlm, "A[MASK][MASK]E")
    >>> c = mlm.vocab.index("C")
    >>> target = ConstrainedTarget(dist, lambda tokens: torch.where(tokens[:, 2] == c, 0.0, float("-inf")))
    >>> target.evaluate(dist.encode(["ACDE", "AAAE"])).log_factor
    tensor([0., -inf])
    """

    def __init__(self, base: Target, log_factor: Callable[[Tensor], Tensor]) -> None:
        if not callable(log_factor):
            raise TypeError("log_factor must be a callable tokens (N, L) -> (N,)")
        super().__init__(base)
        self._log_factor = log_factor

    def log_factor(self, tokens: Tensor) -> Tensor:
        """The given log-factor of states, checked.

        Its shape is checked, and NaN or ``+inf`` is refused: every evaluation, and every sampler
        that reads the log-factor alone, goes through here. An integer result is converted to
        float64.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of the states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, on the CPU, the log-factor of each state (``-inf`` for a forbidden one).

        Raises
        ------
        ValueError
            If the log-factor does not have shape ``(N,)``, or holds NaN or ``+inf``.
        """
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
        """The base evaluation with :meth:`log_factor` added to its log-factors.

        ``positions``, ``dtype``, ``context`` and ``frame`` go to a base that can restrict its
        energy (:class:`WindowedTarget`), as in :meth:`~mlm_ppl.models.DerivedTarget.evaluate_base`.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.
        positions : torch.Tensor or None, optional
            The columns whose energy terms are summed; None (the default): every scored position.
        dtype : torch.dtype or None, optional
            The dtype the base's model runs in; None (the default): its own.
        context : int or None, optional
            Crop the copies to the columns within ``context`` of a free position; None (the
            default): the whole sequence.
        frame : FrozenFrame or None, optional
            The frozen rest of a reference sequence beside the cropped copies; None (the
            default): none.

        Returns
        -------
        Evaluation
            The base's evaluation, its log-factors plus :meth:`log_factor` (in the energy's dtype).

        Raises
        ------
        ValueError
            Where :meth:`log_factor` refuses the given log-factor's values.
        """
        ev = self.evaluate_base(tokens, positions, dtype=dtype, context=context, frame=frame)
        return ev._replace(log_factor=ev.log_factor + self.log_factor(tokens).to(ev.energy.dtype))

    def __repr__(self) -> str:
        return f"ConstrainedTarget({self.base!r})"


class ScaledTarget(DerivedTarget):
    """A target whose whole log density is multiplied by ``scale >= 0``.

    ``log p(x) = scale * (-E(x)/T + log_factor(x))``, the base's log-factor (its constraints)
    included. It is what Pyro's ``poutine.scale(s)`` (``scale=s``) and ``poutine.mask``
    (``scale=0``) make of a token site's ``log_prob``; the MLM's conditionals, and so the
    kernels' proposals, are the base's.

    A scale of 0 drops the base's term whole, as Pyro's mask drops the site's ``log_prob``: its
    energy, its log-factor and the rules behind them, so every ordinary token is allowed and no
    state is forbidden. A positive scale keeps the base's alphabets and rules (``-inf`` stays
    ``-inf``).

    Parameters
    ----------
    base : Target
        The target whose log density is scaled.
    scale : float
        The multiplier, finite and ``>= 0``.

    Attributes
    ----------
    scale : float
        The multiplier, as a float.

    Raises
    ------
    ValueError
        If ``scale`` is negative, infinite or NaN (or a string that is not a number).
    TypeError
        If ``scale`` cannot be converted to a float.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import ScaledTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]E")
    >>> states = dist.encode(["ACDE", "AAAE"])
    >>> bool((ScaledTarget(dist, 2.0).evaluate(states).energy == 2 * dist.evaluate(states).energy).all())
    True
    >>> ScaledTarget(dist, 0.0).evaluate(states).energy
    tensor([0., 0.])
    """

    def __init__(self, base: Target, scale: float) -> None:
        scale = float(scale)
        if not 0 <= scale < float("inf"):
            raise ValueError(f"a token site's scale must be finite and >= 0, got {scale}")
        super().__init__(base)
        self.scale = scale

    @property
    def allowed(self) -> Tensor:
        """The tokens each free position may hold, ``(F, V)`` bool; every ordinary token at scale 0, else the base's."""
        if self.scale == 0:
            return self.base.ordinary_mask.expand(self.base.num_free, -1)
        return self.base.allowed

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which complete states are forbidden: none at scale 0, else the base's answer.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` bool, all False at scale 0, else the base's :meth:`Target.forbidden`.
        """
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
        """The base evaluation with its energy and log-factor times ``scale``.


        The log-factor is 0 at scale 0 (a ``-inf`` of the base's included); the conditionals are
        the base's. ``positions``, ``dtype``, ``context`` and ``frame`` as for
        :class:`ConstrainedTarget`.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.
        positions : torch.Tensor or None, optional
            The columns whose energy terms are summed; None (the default): every scored position.
        dtype : torch.dtype or None, optional
            The dtype the base's model runs in; None (the default): its own.
        context : int or None, optional
            Crop the copies to the columns within ``context`` of a free position; None (the
            default): the whole sequence.
        frame : FrozenFrame or None, optional
            The frozen rest of a reference sequence beside the cropped copies; None (the
            default): none.

        Returns
        -------
        Evaluation
            The scaled energies and log-factors, and the base's conditionals.
        """
        ev = self.evaluate_base(tokens, positions, dtype=dtype, context=context, frame=frame)
        factor = ev.log_factor * self.scale if self.scale > 0 else torch.zeros_like(ev.log_factor)
        return ev._replace(energy=ev.energy * self.scale, log_factor=factor)

    def __repr__(self) -> str:
        return f"ScaledTarget({self.base!r}, scale={self.scale})"
