"""Pseudo-Gibbs ("degenerate Gibbs") resampling from MLM conditionals (Wang & Cho 2019).

No accept step and no guaranteed target: see :class:`PseudoGibbs`. Use
:class:`~mlm_ppl.inference.MetropolisHastings` to sample an energy. How its scans map to the
generation modes of Wang & Cho's code (``nyu-dl/bert-gen``) is tabled in ``docs/sampling.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .._checks import check_temperature, count_at_least
from ..models.target import Evaluation, log_density
from .base import PARALLEL_SCANS, SCANS, check_states, proposal_log_probs, sample_tokens, select_sites
from .exact import block_moves, scan_matrix
from .spec import Capabilities, KernelBase, Options, option
from .streams import ChainStreams

__all__ = ["PSEUDO_GIBBS_SCANS", "PseudoGibbsOptions", "PseudoGibbsState", "PseudoGibbsInfo", "PseudoGibbs"]

PSEUDO_GIBBS_SCANS = SCANS + PARALLEL_SCANS
"""The scans pseudo-Gibbs takes: the sequential ones of every kernel and Wang & Cho's parallel ones."""


@dataclass(frozen=True)
class PseudoGibbsOptions(Options):
    """Options of :class:`PseudoGibbs`, each checked when they are made.

    Parameters
    ----------
    scan : str, optional
        Which free positions each step redraws: one of :data:`~mlm_ppl.inference.PSEUDO_GIBBS_SCANS`
        (default ``"random"``; see :class:`PseudoGibbs` and docs/sampling.md).
    top_k : int, optional
        Truncate the conditionals to the ``k`` most likely tokens (default None: no truncation).
    proposal_temperature : float, optional
        Temperature of the MLM conditionals (default 1).
    burnin : int, optional
        Steps before ``top_k`` applies (default 0).
    compute_lp : bool, optional
        Also evaluate each new state's log density (costs an MH step's copies; default False).

    Raises
    ------
    TypeError
        Where an option has the wrong type.
    ValueError
        Where an option is out of range or not one of its choices.
    """

    scan: str = option(
        "random",
        "random, random_sweep, left_to_right, parallel_masked, parallel_unmasked (bert-gen's parallel mode; "
        "see docs/sampling.md)",
        choices=PSEUDO_GIBBS_SCANS,
    )
    top_k: int | None = option(None, "truncate the conditionals to the k most likely tokens", check=count_at_least(1))
    proposal_temperature: float = option(1.0, "temperature of the MLM conditionals", check=check_temperature)
    burnin: int = option(0, "steps before top_k applies", check=count_at_least(0))
    compute_lp: bool = option(False, "also evaluate each new state's log density (costs an MH step's copies)")


class PseudoGibbsState(NamedTuple):
    """State of C pseudo-Gibbs chains.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, L)`` long token ids, the chains' current states.
    step : int
        Steps taken (the scan position; ``top_k`` applies from ``burnin`` on).
    order : torch.Tensor
        Shape ``(C, F)``: the current sweep order of ``scan="random_sweep"`` (empty otherwise).
    """

    tokens: Tensor  # (C, L)
    step: int
    order: Tensor  # (C, F) random-sweep order (empty otherwise)


class PseudoGibbsInfo(NamedTuple):
    """Per-step statistics of C chains; every update is taken: there is no acceptance.

    Parameters
    ----------
    lp : torch.Tensor
        Shape ``(C,)``: the target's log density after the step with ``compute_lp``, else NaN.
    n_changed : torch.Tensor
        Shape ``(C,)``: the positions whose token changed.
    """

    lp: Tensor  # (C,) log density of the energy after the step if compute_lp, else NaN
    n_changed: Tensor  # (C,) positions whose token changed


class PseudoGibbs(KernelBase[PseudoGibbsOptions]):
    """Pseudo-Gibbs ("degenerate Gibbs") resampling from MLM conditionals (Wang & Cho 2019).

    **Target**: none guaranteed. Each update replaces a position by a draw from the MLM's
    conditional there; because an MLM's conditionals are in general not those of any joint
    distribution, the chain's stationary distribution depends on the scan order and differs
    from the energy-based distribution ``exp(-E/T)`` (tests show both on enumerable cases).
    Use :class:`~mlm_ppl.inference.MetropolisHastings` to sample the energy.

    **Proposal**: ``x'_i ~ q_i ∝ exp(logit_i / proposal_temperature)`` over the tokens position
    ``i`` may hold (``target.allowed``), truncated to ``top_k`` once ``step >= burnin``, where
    ``logit_i`` is the MLM's prediction at position ``i`` read with ``i`` masked, or
    (``scan="parallel_unmasked"``) read unmasked.

    **Acceptance**: none; every draw is taken.

    Scans:

    * ``"random"``: one uniformly chosen free position per step, redrawn with it masked. This is
      the step of bert-gen's ``parallel_sequential_generation``, the mode Wang & Cho generate
      with (the transition matrices agree; ``tests/inference/test_pseudo_gibbs.py``).
    * ``"random_sweep"``, ``"left_to_right"``: the same update, the positions visited in a
      fresh random order per sweep or left to right, one position per step. (bert-gen's
      ``sequential_generation`` is not a sweep: it is *one* left-to-right fill from all
      ``[MASK]``, which is :func:`~mlm_ppl.inference.fill_template`, the start every
      pseudo-Gibbs run gets with ``init="sample"``.)
    * ``"parallel_masked"``: every free position at once, each from its own singly-masked
      conditional given the current state (``F`` masked copies per chain and step). Not a mode
      of bert-gen; formerly ``scan="parallel"``.
    * ``"parallel_unmasked"``: every free position at once from *one* forward pass of the
      current sequence with nothing masked (one copy per chain and step): bert-gen's
      ``parallel_generation``. The model then sees the token it is predicting, so this is a
      different chain from ``"parallel_masked"``, with a different stationary law.

    What bert-gen does that this kernel does not: it draws from the whole vocabulary, special
    tokens included (we renormalise over ordinary tokens); it starts from all ``[MASK]`` with
    positions still masked during the first steps (we start from a complete fill); and after
    ``burnin`` with ``top_k=0`` it takes the argmax (here: ``top_k=1``).

    Parameters
    ----------
    target : Target
        A bare MLM target: a :class:`~mlm_ppl.models.ConstrainedTarget` (log-factors, Pyro
        models with factors, observations or other sites) is refused, since pseudo-Gibbs would
        silently ignore its factor; but a constraint spec of alphabets alone
        (``alphabets_only`` of :class:`~mlm_ppl.models.constraints.BoundConstraints`) is honoured in
        full by the restricted draws, so it is accepted.
    **options
        The fields of :class:`~mlm_ppl.inference.PseudoGibbsOptions`:

        scan : str
            One of :data:`~mlm_ppl.inference.PSEUDO_GIBBS_SCANS` (default ``"random"``).
        top_k : int, optional
            Truncate the conditionals to the ``k`` most likely tokens (default None).
        proposal_temperature : float
            Temperature of the MLM conditionals that positions are redrawn from (default 1).
            (The target's own temperature plays no part: pseudo-Gibbs does not sample ``exp(-E/T)``.)
        burnin : int
            Steps before ``top_k`` applies (default 0).
        compute_lp : bool
            Also evaluate the target's log density of each new state for ``info.lp`` (costs the L
            masked copies that an MH step costs); otherwise ``info.lp`` is NaN.

    Raises
    ------
    TypeError
        Where an option is unknown or of the wrong type.
    ValueError
        Where an option is out of range, the target has terms the draws would ignore (a
        log-factor, a scaled energy), or it is a variable gap (``MASK{a,b}``).

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, PseudoGibbs, run_chains
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = PseudoGibbs(target, scan="left_to_right", compute_lp=True)
    >>> run = run_chains(kernel, num_chains=2, num_samples=5, seed=0)
    >>> run.tokens.shape
    torch.Size([2, 5, 7])
    >>> bool(run.stats["lp"].isfinite().all())  # compute_lp: each draw's log density (else NaN)
    True
    >>> run.attrs["stationary_law"]  # the chain's own law, not exp(-E/T)
    'own'
    """

    name = "pseudo-gibbs"
    Options = PseudoGibbsOptions
    State = PseudoGibbsState
    Info = PseudoGibbsInfo
    capabilities = Capabilities(
        log_factor=False, gibbs=False, complete_start=True, exact_matrix=True, samples_target=False
    )
    options: PseudoGibbsOptions

    def evaluations_per_step(self) -> float:
        """Say at most how much work one step does for one chain, in full evaluations of the target.

        Returns
        -------
        float
            1 for the conditionals' pass (at most one evaluation's copies), 2 with ``compute_lp``
            (one evaluation of the new state besides).
        """
        return 2.0 if self.options.compute_lp else 1.0

    def init(self, tokens: Tensor) -> PseudoGibbsState:
        """Start chains at complete states.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(C, L)`` long token ids, one complete state of the target per chain.

        Returns
        -------
        PseudoGibbsState
            The chains' state at step 0.

        Raises
        ------
        TypeError, ValueError
            Where ``tokens`` is not a ``(C, L)`` tensor of complete states of the target.
        """
        return PseudoGibbsState(check_states(self.target, tokens), 0, torch.empty(0, dtype=torch.long))

    def _proposal(self, logits: Tensor, sites: Tensor, step: int) -> Tensor:
        """``(C, k, V)`` log q at free indices ``sites`` ``(C, k)``, within their alphabets."""
        o = self.options
        top_k = o.top_k if step >= o.burnin else None
        allowed = self.target.allowed[sites]  # (C, k, V)
        return proposal_log_probs(logits, allowed, temperature=o.proposal_temperature, top_k=top_k)

    def _site_logits(self, tokens: Tensor, sites: Tensor) -> Tensor:
        """``(C, k, V)`` logits at free indices ``sites`` ``(C, k)``: each site masked alone (one
        copy per site), or for ``"parallel_unmasked"`` all read from one unmasked copy per chain."""
        C, k = sites.shape
        pos = self.target.free_positions[sites]
        if self.options.scan == "parallel_unmasked":
            return self.target.site_logits(tokens, pos, masked=False)
        rows = tokens.repeat_interleave(k, 0)  # (C*k, L)
        return self.target.site_logits(rows, pos.reshape(-1, 1)).reshape(C, k, -1)

    def _sites(self, state: PseudoGibbsState, C: int, streams: ChainStreams) -> tuple[Tensor, Tensor]:
        F = self.target.num_free
        if self.options.scan in PARALLEL_SCANS:
            return torch.arange(F).expand(C, -1), state.order
        return select_sites(self.options.scan, state.step, state.order, C, F, 1, streams)

    def step(self, state: PseudoGibbsState, streams: ChainStreams) -> tuple[PseudoGibbsState, PseudoGibbsInfo]:
        """Redraw the scan's positions in every chain from their MLM conditionals.

        Parameters
        ----------
        state : PseudoGibbsState
            The chains' current state.
        streams : ChainStreams
            One random stream per chain: chain ``c`` draws only from row ``c``.

        Returns
        -------
        state : PseudoGibbsState
            The chains' new state (every draw taken).
        info : PseudoGibbsInfo
            The step's statistics.
        """
        tokens = state.tokens
        C = tokens.shape[0]
        sites, order = self._sites(state, C, streams)
        pos = self.target.free_positions[sites]  # (C, k)
        logq = self._proposal(self._site_logits(tokens, sites), sites, state.step)  # (C, k, V)
        new = sample_tokens(logq, streams)  # (C, k)
        old = tokens.gather(1, pos)
        new_tokens = tokens.scatter(1, pos, new)
        if self.options.compute_lp:
            ev = self.target.evaluate(new_tokens)
            lp = log_density(ev.energy, ev.log_factor, self.target.temperature)
        else:
            lp = torch.full((C,), float("nan"))
        return PseudoGibbsState(new_tokens, state.step + 1, order), PseudoGibbsInfo(lp, (new != old).sum(-1))

    def block_matrix(self, states: Tensor, evaluation: Evaluation | None, sites: tuple[int, ...], index) -> Tensor:
        """Compute the exact transition matrix of resampling the free positions ``sites``.

        Each is drawn from its single-site conditional given the current state, or for
        ``"parallel_unmasked"`` from the unmasked state's logits; all at once when there are
        several. ``top_k`` applies (as after ``burnin``).

        Parameters
        ----------
        states : torch.Tensor
            Shape ``(S, L)``: every state of the target
            (:func:`~mlm_ppl.inference.exact.enumerate_states`).
        evaluation : Evaluation or None
            Unused (no acceptance step reads the target's density); taken to share the signature.
        sites : tuple of int
            The free indices (``0 .. F-1``) resampled.
        index : callable
            Maps states ``(N, L)`` to their rows in ``states`` ``(N,)``
            (:func:`~mlm_ppl.inference.exact.state_index`).

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)`` float64, row ``s`` the law of the next state from state ``s``.
        """
        S = states.shape[0]
        site_t = torch.tensor(sites).expand(S, -1)
        pos = self.target.free_positions[site_t]
        logq = self._proposal(self._site_logits(states, site_t), site_t, self.options.burnin)
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for log_fwd, dest in block_moves(self.target, states, pos, logq, index):
            P.index_put_((rows, dest), log_fwd.exp(), accumulate=True)
        return P

    def transition_matrix(self, states: Tensor, evaluation: Evaluation, index) -> Tensor:
        """Compute the exact ``(S, S)`` transition matrix of one step or one sweep of the scan.

        One step of a parallel scan or of ``"random"``; one sweep of ``"left_to_right"`` and of
        ``"random_sweep"`` (averaged over its orders); built from :meth:`block_matrix`: what
        :func:`~mlm_ppl.inference.exact.transition_matrix` returns for this kernel.

        Parameters
        ----------
        states : torch.Tensor
            Shape ``(S, L)``: every state of the target.
        evaluation : Evaluation
            The target's evaluation of ``states`` (unused: no acceptance step reads it).
        index : callable
            Maps states ``(N, L)`` to their rows in ``states`` ``(N,)``.

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)`` float64.
        """
        F = self.target.num_free
        if self.options.scan in PARALLEL_SCANS:
            return self.block_matrix(states, evaluation, tuple(range(F)), index)
        return scan_matrix(self.options.scan, F, 1, lambda block: self.block_matrix(states, evaluation, block, index))
