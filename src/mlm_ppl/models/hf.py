"""What the library reads off a Hugging Face masked LM: its maximum length, its encoder and LM head
(so the head runs only where logits are read), and how it numbers and reads token positions (what
a cropped copy needs to keep its columns' places)."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor

__all__ = ["max_length", "position_ids", "reads_position_ids", "split_head"]


def max_length(model: Any, tokenizer: Any) -> int:
    """The longest encoded sequence (special tokens included) the model and tokenizer accept."""
    cfg = model.config
    limit = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    if limit and getattr(cfg, "position_embedding_type", "absolute") == "absolute":
        # RoBERTa-style embeddings offset positions by padding_idx + 1.
        if cfg.model_type in {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "esm"}:
            limit -= int(cfg.pad_token_id or 0) + 1
    tok_max = getattr(tokenizer, "model_max_length", None)
    if tok_max is not None and 0 < tok_max < 1_000_000:
        limit = min(limit, int(tok_max)) if limit > 0 else int(tok_max)
    return limit if limit > 0 else 512


def split_head(model: Any) -> tuple[Any, Any]:
    """The encoder and the LM head, so the head runs only at the positions that are read.

    Returns ``(base, head)``; ``head`` is None when the architecture is not recognised,
    in which case the full model runs and logits are read off its output.
    """
    base = getattr(model, "base_model", None)
    for attr in ("cls", "lm_head"):
        head = getattr(model, attr, None)
        if head is not None and base is not None and base is not model:
            return base, head
    return model, None


def position_ids(encoder: Any, columns: Tensor) -> Tensor:
    """``(K,)`` the position ids ``encoder`` gives ``columns`` (ascending token indices of one
    unpadded sequence, ``[CLS]`` at 0) when it reads the whole sequence: the columns themselves,
    or shifted past the padding index for models that number positions from it (RoBERTa, ESM:
    ``padding_idx + 1 + column``)."""
    embeddings = getattr(encoder, "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    offset = 0 if padding_idx is None else int(padding_idx) + 1
    return torch.as_tensor(columns, dtype=torch.long) + offset


@torch.inference_mode()
def reads_position_ids(module: Any, *, hidden: bool, encoder: Any, mask_id: int, max_len: int) -> bool:
    """Whether ``module`` (the encoder, or the whole model when ``hidden`` is False) places tokens
    by the ``position_ids`` it is given: its forward must take them, and moving one token of a
    three-token probe further away must change what the first token reads (models that derive
    relative positions from the sequence length, e.g. DeBERTa, take the argument and ignore the
    gap)."""
    module = getattr(module, "_orig_mod", module)  # a compiled encoder: the module it wraps
    try:
        if "position_ids" not in inspect.signature(module.forward).parameters:
            return False
    except (TypeError, ValueError):
        return False
    gap = min(4, max_len - 3)
    if gap < 1:
        return False
    device = next(module.parameters()).device
    ids = torch.full((1, 3), mask_id, dtype=torch.long, device=device)
    near = position_ids(encoder, torch.tensor([0, 1, 2]))
    far = position_ids(encoder, torch.tensor([0, 1, 2 + gap]))

    def first(pos: Tensor) -> Tensor:
        out = module(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos[None].to(device))
        states = out.last_hidden_state if hidden else out.logits
        return states[0, 0].float()

    return not torch.allclose(first(near), first(far), atol=1e-6, rtol=0)
