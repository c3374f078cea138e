"""The surrogate ``p~`` of surrogate-transition MH (:mod:`mlm_ppl.inference.surrogate_mh`): a
target's energy restricted to the terms near the free positions, read cheaply (another dtype,
cropped copies, a frozen frame), with the same log-factor and support."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .frozen import FrozenFrame
from .target import DerivedTarget, Evaluation, WindowedTarget

__all__ = ["SurrogateTarget"]


class SurrogateTarget(DerivedTarget):
    """The surrogate ``p~`` of surrogate-transition MH: a target's energy near its free positions, read cheaply.

    A :class:`~mlm_ppl.models.WindowedTarget`'s energy restricted to the scored positions within
    ``window`` of a free position, its model in ``dtype``, its copies cropped to the tokens
    within ``context`` of a free position (None: the whole sequence) and, with
    ``frame="frozen"``, reading the other tokens of a fixed reference sequence, frozen
    (:meth:`~mlm_ppl.MaskedLMDistribution.frozen_frame`, made once here); and the same
    log-factor. A :class:`~mlm_ppl.models.Target` itself (everything but :meth:`evaluate` is the
    base's), so an inner chain is any of the library's kernels (surrogate-MH's).

    Parameters
    ----------
    base : WindowedTarget
        The target whose energy is restricted.
    window : int
        The scored positions within ``window`` columns of a free position contribute a term.
    dtype : torch.dtype or None
        The dtype the model runs in; None: the model's own.
    context : int or None, optional
        Crop every copy to the columns within ``context`` of a free position
        (:meth:`~mlm_ppl.models.WindowedTarget.context_columns`); None (the default): the whole
        sequence, except with ``frame="frozen"``, where it becomes ``window``.
    frame : str, optional
        ``"crop"`` (the default): the cropped copies alone; ``"frozen"``: the cropped copies
        beside the base's frozen frame, computed here once.

    Attributes
    ----------
    positions : torch.Tensor
        Shape ``(W,)``, the columns whose energy terms ``E~`` sums.
    columns : torch.Tensor
        Shape ``(K,)``, the columns each copy runs.
    frame : FrozenFrame or None
        The frozen frame the copies are read beside, None without one.
    frame_kind : str
        The ``frame`` argument.
    copies : int
        The masked copies run so far (evaluations and proposal reads): what a step counts.
    offset : float
        Added to ``E~`` (:meth:`calibrate`); 0 until then.

    Raises
    ------
    ValueError
        Where ``frame`` is neither ``"crop"`` nor ``"frozen"``, or the base's model cannot read a
        crop at its columns' positions (with ``context``), or has no frozen forward (with
        ``frame="frozen"``).
    AttributeError
        For a base that is not a :class:`~mlm_ppl.models.WindowedTarget`.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.models import SurrogateTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "ACA[MASK][MASK]EDC")
    >>> surrogate = SurrogateTarget(dist, window=1, dtype=None)
    >>> dist.free_positions.tolist(), surrogate.positions.tolist()  # the terms within 1 of a free position
    ([4, 5], [3, 4, 5, 6])
    >>> surrogate.evaluate(dist.encode(["ACAACEDC", "ACADDEDC"])).energy.shape
    torch.Size([2])
    >>> surrogate.copies  # one masked copy per state and summed position
    8
    """

    def __init__(
        self,
        base: WindowedTarget,
        window: int,
        dtype: torch.dtype | None,
        context: int | None = None,
        frame: str = "crop",
    ) -> None:
        if frame not in ("crop", "frozen"):  # any other word used to build a frozen frame
            raise ValueError(f"frame must be 'crop' or 'frozen', got {frame!r}")
        super().__init__(base)
        self.window = window
        self.dtype = dtype
        if frame == "frozen" and context is None:
            context = window  # the least the scored positions need
        self.context = context
        self.frame_kind = frame
        scored, free = base.scored_positions, base.free_positions
        distance = (scored[:, None] - free[None, :]).abs().min(1).values
        self.positions = scored[distance <= window]  # (W,) the columns whose terms E~ sums
        # (K,) the columns each copy runs (checks that the model can read a crop in place)
        self.columns = torch.arange(base.template.numel()) if context is None else base.context_columns(context)
        self.frame = None if frame == "crop" or context is None else base.frozen_frame(context, dtype)
        self.copies = 0  # masked copies run so far (evaluations and proposal reads): what a step counts
        self.offset = 0.0  # added to E~ (calibrate)

    def calibrate(self, reference: Tensor) -> float:
        """Set ``offset`` to ``E(r) - E~(r)`` at a fixed state ``r``, so that ``E~ + offset`` matches ``E`` there.

        On a variable gap each length's surrogate misses its own share of the frame's terms (on
        AntiBERTy's CDR-H3, 2.0 nats at 8 residues down to 0.9 at 20), and without the offset the
        inner chain would favour the lengths where it misses most. A constant per target, so
        exact whatever it is; costs one evaluation of ``r`` by each.

        Parameters
        ----------
        reference : torch.Tensor
            Shape ``(1, L)``, the state ``r`` (the kernel gives the base's greedy fill, the same
            at every start and resume).

        Returns
        -------
        float
            The offset, ``E(r) - E~(r)`` in nats.
        """
        self.offset = 0.0
        self.offset = float(self.base.evaluate(reference).energy[0] - self.evaluate(reference).energy[0])
        return self.offset

    def evaluate(self, tokens: Tensor) -> Evaluation:
        """``E~``, the log-factor and the free positions' conditionals (from the window's copies).

        ``E~`` includes ``offset``; ``copies`` grows by one copy per state and summed
        position.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of complete states.

        Returns
        -------
        Evaluation
            The surrogate energies ``(N,)``, the base's log-factors and the conditionals
            ``(N, F, V)``, as the surrogate's copies read them.
        """
        extra: dict[str, Any] = {} if self.context is None else {"context": self.context}  # a WindowedTarget of before
        if self.frame is not None:
            extra["frame"] = self.frame
        self.copies += tokens.shape[0] * self.positions.numel()
        ev = self.base.evaluate(tokens, self.positions, dtype=self.dtype, **extra)  # type: ignore[call-arg]
        return ev if self.offset == 0 else ev._replace(energy=ev.energy + self.offset)

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
        """Logits at blocks read from the surrogate's own copies (its dtype, crop and frozen frame).

        What the inner chain's block and unmask proposals cost is a surrogate evaluation's, not the
        target's. Any proposal is exact for the inner chain, as long as it reads its reverse the
        same way. ``copies`` grows by one per state.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long token ids of the states.
        positions : torch.Tensor
            Shape ``(N, k)``, long, the positions of each row to read.
        masked : bool, optional
            True (the default): all ``k`` positions masked together; False: nothing masked.
        dtype : None
            Must be None: the surrogate reads in its own dtype.
        context : None
            Must be None: the surrogate reads its own crop.
        frame : None
            Must be None: the surrogate reads beside its own frame.

        Returns
        -------
        torch.Tensor
            Shape ``(N, k, V)``, the logits at ``positions``.

        Raises
        ------
        ValueError
            If ``dtype``, ``context`` or ``frame`` is given.
        """
        if dtype is not None or context is not None or frame is not None:
            raise ValueError("a surrogate reads its copies in its own dtype, crop and frame; give none of them")
        self.copies += tokens.shape[0]
        # DerivedTarget's read: the base's own when the surrogate reads the model as it is
        return super().site_logits(
            tokens, positions, masked=masked, dtype=self.dtype, context=self.context, frame=self.frame
        )

    def __repr__(self) -> str:
        return (
            f"SurrogateTarget(window={self.window}, positions={self.positions.numel()}, dtype={self.dtype}, "
            f"context={self.context}, columns={self.columns.numel()}, frame={self.frame_kind!r})"
        )
