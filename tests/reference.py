"""Naive references written independently of the library: one full forward per masked copy."""

import torch


def naive_terms(mlm, input_ids, word_ids=None):
    """Per-position (raw, norm) energy terms of one encoded sequence, one forward per position.

    With ``word_ids`` (a list, None for special tokens), also mask the later tokens of the same
    word (within_word_l2r).
    """
    ids = torch.as_tensor(input_ids)
    special = set(mlm.tokenizer.all_special_ids)
    raw, norm = {}, {}
    for t, tok in enumerate(ids.tolist()):
        if tok in special:
            continue
        x = ids.clone()
        x[t] = mlm.tokenizer.mask_token_id
        if word_ids is not None:
            for u in range(t + 1, len(ids)):
                if word_ids[u] is not None and word_ids[u] == word_ids[t]:
                    x[u] = mlm.tokenizer.mask_token_id
        with torch.no_grad():
            logits = mlm.model(input_ids=x[None]).logits[0, t].double()
        raw[t] = -float(logits[tok])
        norm[t] = -float(torch.log_softmax(logits, -1)[tok])
    return raw, norm


def naive_pair_logits(mlm, input_ids, a, b, candidates_a, candidates_b):
    """``(K_a, K_b)`` logits at ``a`` (a masked, b set to each candidate) and at ``b`` (b masked,
    a set to each candidate), one full forward per copy."""
    ids = torch.as_tensor(input_ids)
    mask = mlm.tokenizer.mask_token_id
    la = torch.empty(len(candidates_a), len(candidates_b), dtype=torch.float64)
    lb = torch.empty_like(la)
    for j, y in enumerate(candidates_b):
        x = ids.clone()
        x[a], x[b] = mask, int(y)
        with torch.no_grad():
            logits = mlm.model(input_ids=x[None]).logits[0, a].double()
        la[:, j] = logits[list(candidates_a)]
    for i, y in enumerate(candidates_a):
        x = ids.clone()
        x[b], x[a] = mask, int(y)
        with torch.no_grad():
            logits = mlm.model(input_ids=x[None]).logits[0, b].double()
        lb[i, :] = logits[list(candidates_b)]
    return la, lb


def naive_both_masked(mlm, input_ids, a, b):
    """Logits ``(V,)`` at ``a`` and at ``b`` with both masked, one full forward."""
    x = torch.as_tensor(input_ids).clone()
    x[a] = x[b] = mlm.tokenizer.mask_token_id
    with torch.no_grad():
        logits = mlm.model(input_ids=x[None]).logits[0].double()
    return logits[a], logits[b]
