"""The frozen frame: copies of a few live columns read beside the rest of a fixed reference sequence.

Surrogate-MH's cheapest surrogate (``surrogate_frame="frozen"``) runs only the columns that move
(a loop and its neighbours) through the encoder; at every layer they attend to the keys and values
that the rest of a fixed reference sequence had when the model read it whole (:func:`frame_of`),
which stay as they were. This module writes down that computation for the one layer it knows, a
post-LayerNorm BERT layer with absolute positions (BERT, RoBERTa, AntiBERTy), and refuses every
other architecture by name (:func:`frozen_layers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["FrozenFrame", "frozen_layers", "frame_of", "frozen_forward", "layer_step", "heads"]


@dataclass(frozen=True)
class FrozenFrame:
    """A fixed reference sequence's columns outside ``columns``, as every layer of a model sees them.

    What :meth:`~mlm_ppl.MaskedLM.frozen_frame` returns (computed by ``mlm_ppl.models.frozen.frame_of``).
    Copies of the live columns read beside it (``Encoding(frame=...)``) attend, at every layer, to
    these keys and values of the reference's other columns, which stay as the model computed them
    reading the whole reference.

    Parameters
    ----------
    columns : torch.Tensor
        Shape ``(K,)``, long, the live columns, ascending.
    length : int
        ``L``, the length of the whole sequence.
    keys : tuple of torch.Tensor
        One per layer, shape ``(1, heads, L - K, d)``, the keys of the columns outside ``columns``.
    values : tuple of torch.Tensor
        One per layer, shape ``(1, heads, L - K, d)``, their values.
    reference : torch.Tensor
        Shape ``(L,)``, the sequence whose frame it is.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> reference = mlm.encode(["ACDEA"]).input_ids[0]  # [CLS] A C D E A [SEP]: L = 7
    >>> frame = mlm.frozen_frame(reference, torch.tensor([2, 3]))  # a FrozenFrame, K = 2
    >>> frame.length, len(frame.keys), frame.keys[0].shape  # two layers, two heads of size 16
    (7, 2, torch.Size([1, 2, 5, 16]))
    """

    columns: Tensor  # (K,) the live columns, ascending
    length: int  # L, the whole sequence's
    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    reference: Tensor  # (L,) the sequence whose frame it is

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the frame's keys and values."""
        return self.keys[0].dtype


def heads(t: Tensor, size: int) -> Tensor:
    """``(..., T, heads * size)`` -> ``(..., heads, T, size)``; a 2-D input gets a batch of one."""
    if t.dim() == 2:
        t = t[None]
    return t.reshape(*t.shape[:-1], t.shape[-1] // size, size).transpose(-3, -2)


def layer_step(layer: Any, x: Tensor, k_frame: Tensor, v_frame: Tensor) -> Tensor:
    """One post-LayerNorm BERT layer on hidden states ``x`` (n, T, H) whose tokens also attend to
    the frame's keys and values ``(1, heads, F, d)`` (F may be 0: the layer itself)."""
    att = layer.attention.self
    size = att.attention_head_size
    n = x.shape[0]
    q = heads(att.query(x), size)  # (n, heads, T, d)
    k = torch.cat([k_frame.expand(n, -1, -1, -1), heads(att.key(x), size)], dim=-2)
    v = torch.cat([v_frame.expand(n, -1, -1, -1), heads(att.value(x), size)], dim=-2)
    scale = float(getattr(att, "scaling", size**-0.5))  # 1/sqrt(d), as every BERT layer scales
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    attended = layer.attention.output(o.transpose(1, 2).reshape(x.shape), x)
    return layer.output(layer.intermediate(attended), attended)


def frozen_layers(encoder: Any, config: Any, head: Any, name: str) -> list:
    """The encoder's layers when a frozen frame can be computed for them: a post-LayerNorm BERT or
    RoBERTa encoder with absolute positions, whose layers this module's :func:`layer_step`
    reproduces. Any other architecture (ESM's pre-LayerNorm and rotary layers, relative
    positions, a decoder) is refused by name, with what to use instead."""
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    kind = getattr(config, "position_embedding_type", None) or "absolute"
    known = (
        head is not None
        and layers is not None
        and kind == "absolute"
        and not getattr(config, "is_decoder", False)
        and all(
            [n for n, _ in layer.named_children()] == ["attention", "intermediate", "output"]
            and [n for n, _ in layer.attention.named_children()] == ["self", "output"]
            for layer in layers
        )
    )
    if not known:
        raise ValueError(
            f"a frozen frame is computed for BERT-like encoders with absolute positions; model {name!r} "
            f"({type(encoder).__name__}, positions {kind!r}) is not one: use surrogate_frame='crop', or "
            "leave surrogate_context unset"
        )
    return list(layers)  # type: ignore[arg-type]


def frame_of(
    encoder: Any,
    layers: list,
    position_ids: Callable[[Tensor], Tensor],
    reference: Tensor,
    live: Tensor,
    device: torch.device,
) -> FrozenFrame:
    """The frame of ``reference`` (one complete sequence ``(L,)``) outside the ``live`` columns
    ``(K,)``, frozen: at every layer, the keys and values its hidden states give when the model
    reads the whole reference (``position_ids``: the ids the model reads columns at). Copies of
    the live columns read beside it attend to it as to the rest of their sequence, but the frame
    does not see them change: cheap (only K tokens run through the layers) and, when the live
    columns hold what moves, close to the whole copy. Call under ``torch.inference_mode``."""
    reference = torch.as_tensor(reference, dtype=torch.long).reshape(-1).cpu()
    live = torch.as_tensor(live, dtype=torch.long).cpu()
    frame = torch.ones(reference.numel(), dtype=torch.bool)
    frame[live] = False
    ids = reference[None].to(device)
    # the reference through the layers as the model reads it (the layer math of frozen_forward with
    # nothing frozen, which is the model's own; no output_hidden_states: its hooks stay on the modules)
    x = encoder.embeddings(input_ids=ids, position_ids=position_ids(torch.arange(ids.shape[1]))[None].to(device))
    keys, values = [], []
    empty = x.new_zeros((1, 0, x.shape[-1]))
    for layer in layers:
        h = x[0, frame.to(x.device)]  # (F, H): layer l's input at the frame's columns
        att = layer.attention.self
        keys.append(heads(att.key(h), att.attention_head_size))
        values.append(heads(att.value(h), att.attention_head_size))
        x = layer_step(
            layer,
            x,
            heads(att.key(empty), att.attention_head_size),
            heads(att.value(empty), att.attention_head_size),
        )
    return FrozenFrame(live, int(reference.numel()), tuple(keys), tuple(values), reference)


def frozen_forward(encoder: Any, layers: list, input_ids: Tensor, position_ids: Tensor, frame: FrozenFrame) -> Tensor:
    """``(n, T, H)`` last hidden states of the live columns ``input_ids`` (n, T) beside ``frame``."""
    x = encoder.embeddings(input_ids=input_ids, position_ids=position_ids)
    for layer, k_frame, v_frame in zip(layers, frame.keys, frame.values):
        x = layer_step(layer, x, k_frame, v_frame)
    return x
