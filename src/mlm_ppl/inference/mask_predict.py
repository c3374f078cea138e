"""Mask-predict parallel decoding (Ghazvininejad et al. 2019): a deterministic baseline decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .._checks import count_at_least
from .base import proposal_log_probs
from .spec import Capabilities, KernelBase, Options, option
from .streams import ChainStreams

__all__ = ["MaskPredictOptions", "MaskPredictState", "MaskPredictInfo", "MaskPredict"]


@dataclass(frozen=True)
class MaskPredictOptions(Options):
    """Options of :class:`MaskPredict`, each checked when they are made.

    Parameters
    ----------
    iterations : int, optional
        Decoding iterations (default 10; at least 1): after this many steps every free position is
        predicted.

    Raises
    ------
    TypeError
        Where ``iterations`` is not an integer.
    ValueError
        Where it is below 1.
    """

    iterations: int = option(10, "decoding iterations", check=count_at_least(1))


class MaskPredictState(NamedTuple):
    """State of C decodings.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, L)`` long token ids, the mask token at the free positions still to predict.
    probs : torch.Tensor
        Shape ``(C, F)``: the predicted probability of the current token at each free position
        (0 before its first prediction).
    step : int
        Iterations done.
    """

    tokens: Tensor  # (C, L), mask ids at positions still to predict
    probs: Tensor  # (C, F) probability of the current token at each free position
    step: int


class MaskPredictInfo(NamedTuple):
    """Per-iteration statistics of C decodings; a decoder neither accepts nor has a density.

    Parameters
    ----------
    lp : torch.Tensor
        Shape ``(C,)``, NaN: partially masked states have no log density.
    n_changed : torch.Tensor
        Shape ``(C,)``: the positions predicted in this iteration (0 once decoding is done).
    """

    lp: Tensor  # (C,) NaN: partially masked states have no log density
    n_changed: Tensor  # (C,) positions predicted in this iteration (0 once decoding is done)


class MaskPredict(KernelBase[MaskPredictOptions]):
    """Mask-predict parallel decoding (Ghazvininejad et al. 2019), a deterministic baseline.

    **Target**: none; a greedy decoder. Starting with every free position masked, iteration
    ``t`` (of ``iterations``) predicts all masked positions at once (argmax of the MLM, with
    all of them masked, over the tokens each may hold: ``target.allowed``), then re-masks
    the ``floor(F * (iterations - t - 1) / iterations)`` free positions with the lowest
    predicted probability. After ``iterations`` steps the state is complete and further
    steps change nothing.

    It draws no random numbers; ``step`` takes random streams only to share the kernel signature.

    Parameters
    ----------
    target : Target
        What is decoded: its template (the free positions start masked), its MLM and the tokens
        each free position may hold (``target.allowed``: a constraint spec's alphabets are
        honoured). A target with terms the decoder would ignore (a log-factor: a
        :class:`~mlm_ppl.models.ConstrainedTarget`, other rules of a constraint spec; a scaled
        energy) is refused.
    **options
        The fields of :class:`~mlm_ppl.inference.MaskPredictOptions`: ``iterations`` (default 10).

    Raises
    ------
    TypeError
        Where an option is unknown or of the wrong type.
    ValueError
        Where an option is out of range, the target has such terms, or it is a variable gap
        (``MASK{a,b}``).

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, MaskPredict, run_chains
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> run = run_chains(MaskPredict(target, iterations=3), num_chains=2, num_samples=4)
    >>> run.tokens.shape
    torch.Size([2, 4, 7])
    >>> run.stats["n_changed"][0].tolist()  # positions predicted per iteration, then none
    [3, 2, 1, 0]
    >>> bool((run.tokens[0] == run.tokens[1]).all())  # deterministic: every chain decodes alike
    True
    """

    name = "mask-predict"
    Options = MaskPredictOptions
    State = MaskPredictState
    Info = MaskPredictInfo
    capabilities = Capabilities(
        log_factor=False, gibbs=False, complete_start=False, exact_matrix=False, samples_target=False
    )
    options: MaskPredictOptions

    def init(self, tokens: Tensor) -> MaskPredictState:
        """Start decodings of ``tokens``, every free position masked (whatever it held).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(C, L)`` long token ids, one row per chain; only the free positions of the
            template may differ from it.

        Returns
        -------
        MaskPredictState
            The masked template of each chain, no probabilities yet, at step 0.

        Raises
        ------
        TypeError
            Where ``tokens`` is not a tensor.
        ValueError
            Where it is not of shape ``(C, L)``, or changes a fixed position of the template.
        """
        L = self.target.template.numel()
        if not isinstance(tokens, Tensor):
            raise TypeError(f"tokens must be a (C, {L}) torch.long tensor, got {type(tokens).__name__}")
        if tokens.dim() != 2 or tokens.shape[1] != L:
            raise ValueError(f"tokens must have shape (C, {L}), got {tuple(tokens.shape)}")
        C = tokens.shape[0]
        free = self.target.free_positions
        tokens = tokens.cpu().clone()
        fixed = torch.ones(L, dtype=torch.bool)
        fixed[free] = False
        if (tokens[:, fixed] != self.target.template[fixed]).any():
            raise ValueError("tokens change a fixed position of the template; only its mask positions may vary")
        tokens[:, free] = self.target.template[free]  # the mask token
        return MaskPredictState(tokens, torch.zeros((C, self.target.num_free)), 0)

    def step(
        self, state: MaskPredictState, streams: ChainStreams | None = None
    ) -> tuple[MaskPredictState, MaskPredictInfo]:
        """Make one decoding iteration of every chain.

        Parameters
        ----------
        state : MaskPredictState
            The decodings so far.
        streams : ChainStreams or None, optional
            Unused (the decoder draws nothing); taken to share the kernel signature.

        Returns
        -------
        state : MaskPredictState
            The decodings after the iteration (unchanged but for the step once decoding is done).
        info : MaskPredictInfo
            The iteration's statistics.
        """
        tokens, probs, t = state
        C, F = probs.shape
        free = self.target.free_positions
        mask_id = int(self.target.template[free[0]])
        masked = tokens[:, free] == mask_id  # (C, F): still to predict
        n_masked = int(masked[0].sum())
        nan = torch.full((C,), float("nan"))
        if t >= self.options.iterations or n_masked == 0:
            return state._replace(step=t + 1), MaskPredictInfo(nan, torch.zeros(C, dtype=torch.long))
        sites = masked.nonzero()[:, 1].reshape(C, n_masked)  # (C, m) free indices, same count per chain
        logits = self.target.site_logits(tokens, free[sites])  # (C, m, V)
        logp = proposal_log_probs(logits, self.target.allowed[sites])  # within each position's alphabet
        best_lp, best = logp.max(-1)
        tokens = tokens.scatter(1, free[sites], best)
        probs = probs.scatter(1, sites, best_lp.exp().to(probs.dtype))  # float64 models give float64 logits
        n_next = (F * (self.options.iterations - t - 1)) // self.options.iterations
        if n_next > 0:
            remask = probs.argsort(-1)[:, :n_next]  # lowest-probability free positions
            tokens = tokens.scatter(1, free[remask], mask_id)
        return MaskPredictState(tokens, probs, t + 1), MaskPredictInfo(nan, torch.full((C,), n_masked))
