"""The designed positions of a run's draws as the model reads them: their mean conditional
probability ``site_prob``, their own ``E_norm`` terms ``site_energy``, and the flag ``memorized``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from ..models.masked_lm import MaskedLM

__all__ = ["MEMORIZED_PROB", "SITE_COPY_BUDGET", "site_scores"]

MEMORIZED_PROB = 0.9
"""A state is flagged **memorized** when the mean conditional probability of its designed
positions, each read with only itself masked, is at least this. Chosen on AntiBERTy
(``benchmarks/memorization.py``, docs/diagnostics.md "Memorized states"): windows of germline V
genes, which the model saw in training by the thousand, against their shuffles and the converge
run's draws."""

SITE_COPY_BUDGET = 10_000
"""The most masked copies a run's end runs to score its draws' designed positions (about 6
minutes of AntiBERTy on 2 cores, at 26 copies per second): a run with more distinct states gets no
per-draw ``site_prob`` (its summary says so); ``mlm-ppl diagnose --deep`` reads its deepest states
and ``mlm-ppl designs`` its picks instead."""


def site_scores(
    tokens: np.ndarray | torch.Tensor,
    positions: list[int],
    mlm: "MaskedLM",
    *,
    pad_id: int | None = None,
    progress: bool = False,
    known: "arviz.InferenceData | None" = None,
    budget: int | None = None,
) -> dict[str, np.ndarray] | None:
    r"""Per draw: the designed positions' mean conditional probability, their own terms, and the memorized flag.

    ``site_prob`` (the mean over the designed ``positions`` of ``p(x_t | x_\t)``, each read with
    only ``t`` masked), ``site_energy`` (their ``E_norm`` terms summed: ``-sum_t log p(x_t |
    x_\t)``) and ``memorized`` (1.0 where ``site_prob >= MEMORIZED_PROB``). Each distinct state is
    read once (``mlm_ppl.models.energy.site_log_probs``: one masked copy per designed position); a
    variable gap's pads (``pad_id``) are no residue and count in neither.

    Parameters
    ----------
    tokens : numpy.ndarray or torch.Tensor
        Shape ``(C, D, L)``: the draws' token ids.
    positions : list of int
        The designed positions (token positions in the encoded sequence).
    mlm : MaskedLM
        The model that reads them.
    pad_id : int or None, optional
        A variable gap's pad token, which counts as no residue (default None).
    progress : bool, optional
        A progress bar over the masked copies (default False).
    known : arviz.InferenceData or None, optional
        An earlier InferenceData of the same run whose ``site_prob`` and ``site_energy`` are
        reused for the states it holds (an older ``run.nc``), so only the states new since are
        read (default None).
    budget : int or None, optional
        The most masked copies to run (default None: no limit).

    Returns
    -------
    dict of str to numpy.ndarray or None
        ``site_prob``, ``site_energy`` and ``memorized``, each of shape ``(C, D)``, float64; None
        (nothing read) where the new states need more than ``budget`` masked copies.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.diagnostics import site_scores
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> tokens = mlm.encode(["ADCEE", "ACCDA"]).input_ids[None]  # one chain of two draws
    >>> scores = site_scores(tokens, [2, 4, 5], mlm)
    >>> {name: values.shape for name, values in scores.items()}
    {'site_prob': (1, 2), 'site_energy': (1, 2), 'memorized': (1, 2)}
    >>> site_scores(tokens, [2, 4, 5], mlm, budget=5) is None  # 2 states x 3 positions > 5 copies
    True
    """
    from ..models.energy import site_log_probs

    tokens = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    C, D, L = tokens.shape
    unique, which = torch.unique(tokens.reshape(C * D, L), dim=0, return_inverse=True)
    prob = np.full(len(unique), np.nan)
    energy = np.full(len(unique), np.nan)
    if known is not None and "site_prob" in known.posterior and "site_energy" in known.posterior:
        old = np.asarray(known.posterior["tokens"].values)
        if old.shape[-1] == L:
            index = {row.tobytes(): i for i, row in enumerate(old.reshape(-1, L).astype(np.int64))}
            old_prob = np.asarray(known.posterior["site_prob"].values).reshape(-1)
            old_energy = np.asarray(known.posterior["site_energy"].values).reshape(-1)
            for u, row in enumerate(unique.numpy().astype(np.int64)):
                i = index.get(row.tobytes())
                if i is not None:
                    prob[u], energy[u] = old_prob[i], old_energy[i]
    new = np.flatnonzero(np.isnan(prob))
    if budget is not None and new.size * len(positions) > budget:
        return None
    if new.size:
        logp = site_log_probs(mlm, unique[new], positions, pad_id=pad_id, progress=progress).numpy()  # (U, P)
        prob[new] = np.nanmean(np.exp(logp), axis=1)
        energy[new] = -np.nansum(logp, axis=1)
    idx = which.numpy()
    return {
        "site_prob": prob[idx].reshape(C, D),
        "site_energy": energy[idx].reshape(C, D),
        "memorized": (prob[idx] >= MEMORIZED_PROB).astype(np.float64).reshape(C, D),
    }
