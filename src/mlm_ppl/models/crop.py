"""The copies a surrogate reads: a distribution's states cropped to the columns within a context of
its free positions, read at their own position ids and beside a frozen frame; made in one place for
:meth:`~mlm_ppl.models.MaskedLMDistribution.evaluate` and
:meth:`~mlm_ppl.models.MaskedLMDistribution.site_logits`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .frozen import FrozenFrame
from .masked_lm import MaskedLM
from .tokens import Encoding

if TYPE_CHECKING:
    from .distribution import MaskedLMDistribution

__all__ = ["cropped_copies"]


def cropped_copies(
    dist: "MaskedLMDistribution",
    tokens: Tensor,
    dtype: torch.dtype | None,
    context: int | None,
    frame: FrozenFrame | None,
    wanted: Tensor | None,
) -> tuple[MaskedLM, Encoding, Tensor]:
    """``dist``'s model in ``dtype``, the encoding of ``tokens`` ``(N, L)`` its copies are made from
    (cropped to ``dist.context_columns(context)`` and beside ``frame`` where given) and the columns
    it keeps. ``wanted``: the columns that will be read (they must lie in the crop)."""
    N = tokens.shape[0]
    mlm = dist.mlm if dtype is None else dist.mlm.cast(dtype)
    if context is None:
        if frame is not None:
            raise ValueError("a frozen frame goes with the context it was made for; give context too")
        return mlm, mlm.encoding_from_ids(tokens), torch.arange(tokens.shape[1])
    columns = dist.context_columns(context)
    if frame is not None and not (
        torch.equal(frame.columns, columns) and frame.length == tokens.shape[1] and frame.dtype == mlm.dtype
    ):
        raise ValueError(
            f"the frozen frame was made for another template, context or dtype than this one's, {context} and "
            f"{mlm.dtype}: make it with frozen_frame(context, dtype)"
        )
    enc = mlm.encoding_from_ids(tokens[:, columns])
    enc = dataclasses.replace(enc, position_ids=mlm.position_ids(columns).expand(N, -1), frame=frame)
    if wanted is not None and not bool(torch.isin(wanted, columns).all()):
        raise ValueError(
            f"positions outside the context of {context} columns around the free positions: widen the "
            "context to cover every scored position"
        )
    return mlm, enc, columns
