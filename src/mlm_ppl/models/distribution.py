"""The masked LM as a Pyro distribution over token sequences (an energy-based model).

``MaskedLMDistribution(mlm, template)`` is the distribution of the ``[MASK]`` positions of
``template`` given the rest:

    p(x) ∝ exp(-E(x) / T),   x = template with its masked positions filled by ordinary tokens,

with ``E`` the raw-logit or locally normalised energy of the *whole* sequence (Goyal et al.
2021; :mod:`mlm_ppl.models.energy`). Its normaliser is intractable, so ``log_prob`` is
unnormalised, as for Pyro's ``SpanningTree`` ("logits (aka negative energies)").

``MaskedLMDistribution(mlm, template, constraints=spec)`` is the same distribution under a
:class:`~mlm_ppl.models.constraints.ConstraintSpec`, ``-E(x)/T + log_factor(x)``: the spec's
alphabets are its :attr:`~MaskedLMDistribution.allowed` tokens, its rules its
:meth:`~MaskedLMDistribution.forbidden` states, its experts' weighted sum its log-factor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pyro.distributions import TorchDistribution, constraints
from torch import Tensor

from .._checks import check_temperature
from .constraints import BoundConstraints, ConstraintSpec
from .crop import cropped_copies
from .energy import check_energy, token_scores
from .frozen import FrozenFrame
from .masked_lm import MaskedLM
from .support import SVI_REFUSED, EnergyRefusals, TokenIds, template_ids, under_svi
from .target import Evaluation, log_density

__all__ = ["MaskedLMDistribution", "TokenIds", "register_sampler", "is_text"]  # TokenIds: models/support.py


def is_text(value: Any) -> bool:
    """Whether ``value`` is text (a string, or a non-empty list or tuple of strings), not token ids:
    what :meth:`MaskedLMDistribution.check_complete` refuses with the call that encodes it."""
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], str))


class MaskedLMDistribution(EnergyRefusals, TorchDistribution):
    """Energy-based Pyro distribution over the masked positions of a template.

    Parameters
    ----------
    mlm : MaskedLM
        The masked language model whose energy defines the distribution
        (:func:`~mlm_ppl.load_mlm`, or a tiny one of :mod:`mlm_ppl.testing`).
    template : str or torch.Tensor
        A sequence whose mask tokens (``[MASK]`` for BERT/AntiBERTy, ``<mask>`` for
        RoBERTa/ESM) are the free positions, e.g. ``"CAR[MASK][MASK][MASK]DYW"``, or with a
        count, ``"CAR[MASK]{3}DYW"`` (``mlm_ppl.models.gaps``; a variable gap ``[MASK]{a,b}``
        is refused: one distribution has one length); or the encoded ids, shape ``(L,)``,
        including special tokens. Other positions are fixed context.
    energy : {"norm", "raw"}, optional
        ``E_norm`` (negative PLL, the default) or ``E_raw`` (negative sum of masked logits); kept
        as ``energy_name``.
    temperature : float, optional
        ``T > 0`` (default 1); ``log_prob(x) = -E(x) / T``.
    sampler_options : dict, optional
        Options of :meth:`sample`, which runs Metropolis-Hastings chains:
        ``num_steps`` (default 20 sweeps over the free positions), ``seed`` (int: each call
        of :meth:`sample` runs the next chains of its streams, so successive calls give new
        draws and a fresh distribution with the same seed repeats them), ``init`` ("sample",
        "greedy" or "uniform"), and any :class:`~mlm_ppl.MetropolisHastings` option (``scan``,
        ``block_size``, ``top_k``, ``proposal_temperature``: by default ``max(T, 1)``, which
        mixes faster than 1 at ``T > 1``; docs/sampling.md "Proposal temperature" ...).
    constraints : ConstraintSpec, optional
        Hard rules and soft experts (:mod:`mlm_ppl.models.constraints`), checked against the
        model and the template here (:meth:`~mlm_ppl.ConstraintSpec.bind`: a token outside the
        vocabulary, a position outside the template, an empty alphabet are one-line errors).
        ``log_prob`` becomes ``-E(x)/T + sum_k w_k f_k(x)`` on the states that break no rule and
        ``-inf`` on the others; :attr:`allowed` holds the spec's alphabets, so every kernel
        proposes within them, and :meth:`forbidden` its rules, so a proposal that breaks one is
        rejected before its forward pass. Kept bound as ``constraints``
        (:class:`~mlm_ppl.models.constraints.BoundConstraints`: ``violations``, ``feasible``,
        ``expert_values``).
    batch_shape : torch.Size or tuple of int, optional
        The batch shape (default ``()``): independent sequences of the same template, as
        :meth:`expand` makes them.
    validate_args : bool or None, optional
        Whether :meth:`log_prob` checks its values against the support (:meth:`validate_tokens`);
        None (the default) follows torch's and Pyro's global setting (:func:`pyro.enable_validation`).

    Attributes
    ----------
    template : torch.Tensor
        Shape ``(L,)``, the template's token ids; the free positions hold the mask token.
    free : torch.Tensor
        Shape ``(L,)`` bool, True at the free positions.
    free_positions : torch.Tensor
        Shape ``(F,)`` long, the free positions, ascending.
    energy_name : str
        ``"norm"`` or ``"raw"``, the energy ``E``.
    constraints : BoundConstraints or None
        The spec bound to this distribution, or None without one.

    Raises
    ------
    TypeError
        When ``mlm`` is not a :class:`~mlm_ppl.MaskedLM`, ``constraints`` not a
        :class:`~mlm_ppl.ConstraintSpec`, ``template`` neither text nor 1-D ``torch.long`` ids, or
        ``temperature`` not a number.
    ValueError
        When the template has no mask token, holds padding, ids outside the vocabulary, a variable
        gap or more tokens than the model accepts; when ``energy`` is unknown or ``temperature``
        not positive and finite; or when ``constraints`` do not fit the model and the template.

    Notes
    -----
    The event is the whole token-id sequence, ``event_shape == (L,)``, special tokens included,
    so values can go straight to the model. ``log_prob`` is unnormalised and costs one forward
    pass per scorable position of each sequence (none for a sequence that breaks a rule of
    ``constraints``). ``has_enumerate_support`` is False: Pyro must not try to sum it out. The
    support is every sequence of ordinary tokens at the free positions, constrained or not: a
    sequence that breaks a rule is a value of density 0 (``log_prob`` ``-inf``), not an error.

    Examples
    --------
    >>> import pyro
    >>> from pyro import poutine
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> prior = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "AC[MASK][MASK]E")
    >>> prior.event_shape, prior.num_free  # [CLS] A C _ _ E [SEP]
    (torch.Size([7]), 2)
    >>> x = prior.encode(["ACADE", "ACCDE"])  # two complete sequences, (2, L)
    >>> prior.log_prob(x).shape  # unnormalised -E(x) / T, one per sequence
    torch.Size([2])
    >>> def model():
    ...     return pyro.sample("x", prior)  # a token site
    >>> trace = poutine.trace(poutine.condition(model, data={"x": x[0]})).get_trace()
    >>> bool(trace.log_prob_sum() == prior.log_prob(x[0]))
    True
    """

    arg_constraints: dict[str, Any] = {}
    has_enumerate_support = False

    def __init__(
        self,
        mlm: MaskedLM,
        template: str | Tensor,
        *,
        energy: str = "norm",
        temperature: float = 1.0,
        sampler_options: dict | None = None,
        constraints: ConstraintSpec | None = None,
        batch_shape: torch.Size | tuple = torch.Size(),
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(mlm, MaskedLM):
            raise TypeError(f"mlm must be a MaskedLM (see mlm_ppl.load_mlm), got {type(mlm).__name__}")
        self.mlm = mlm
        self.energy_name = check_energy(energy)
        self.temperature = check_temperature(temperature, "temperature")
        self.sampler_options = dict(sampler_options or {})
        self._chains_drawn = 0  # chains sample() has run: the next call runs the next ones of the seed
        self.template = template_ids(mlm, template)  # (L,)
        self.free = self.template == mlm.mask_id  # (L,) bool
        if not self.free.any():
            raise ValueError(
                f"template has no free position: put the mask token {mlm.vocab[mlm.mask_id]!r} where tokens "
                "should be sampled"
            )
        self.free_positions = self.free.nonzero().flatten()  # (F,)
        L = int(self.template.numel())
        self._support = TokenIds(mlm.vocab_size)
        super().__init__(torch.Size(batch_shape), torch.Size([L]), validate_args=validate_args)
        self.constraints: BoundConstraints | None = None  # None while the spec binds: it reads the bare alphabets
        if constraints is not None:
            if not isinstance(constraints, ConstraintSpec):
                raise TypeError(
                    f"constraints must be a ConstraintSpec (mlm_ppl.ConstraintSpec(...) or "
                    f"ConstraintSpec.from_toml(path)), got {type(constraints).__name__}"
                )
            self.constraints = constraints.bind(self)

    # ------------------------------------------------------------------ Pyro plumbing
    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):  # numpydoc ignore=PR01
        """The support, sequences of token ids in ``[0, V)`` (a discrete ``TokenIds`` constraint, event dimension 1)."""
        return self._support

    def expand(self, batch_shape, _instance=None):
        """This distribution with another batch shape: independent sequences of the same template.

        Parameters
        ----------
        batch_shape : torch.Size or tuple of int
            The batch shape of the result.
        _instance : MaskedLMDistribution or None, optional
            Pyro's and torch's argument for subclasses: an instance to fill in; None (the
            default) makes a new one.

        Returns
        -------
        MaskedLMDistribution
            A distribution sharing the model, template, energy, temperature, sampler options and
            bound constraints, with ``batch_shape``. Its seeded :meth:`sample` starts from the
            seed's first chains, as a fresh distribution does.
        """
        new = self._get_checked_instance(MaskedLMDistribution, _instance)
        new.mlm = self.mlm
        new.energy_name = self.energy_name
        new.temperature = self.temperature
        new.sampler_options = dict(self.sampler_options)
        new._chains_drawn = 0
        new.template = self.template
        new.free = self.free
        new.free_positions = self.free_positions
        new._support = self._support
        super(MaskedLMDistribution, new).__init__(
            torch.Size(batch_shape), self.event_shape, validate_args=self._validate_args
        )
        new.constraints = self.constraints  # bound to the same template: shared
        return new

    @property
    def num_free(self) -> int:
        """Number of free (sampled) positions."""
        return int(self.free_positions.numel())

    # ------------------------------------------------------------------ densities
    def validate_tokens(self, value: Tensor) -> None:
        """Raise a ValueError/TypeError unless ``value`` is in the support.

        Parameters
        ----------
        value : torch.Tensor
            Token ids, shape ``(..., L)``.

        Raises
        ------
        TypeError
            When ``value`` is not a tensor of ``torch.long`` ids.
        ValueError
            When its last dimension is not ``L``, an id lies outside ``[0, V)``, a fixed position
            of the template is changed, or a free position holds a special token (``[MASK]``,
            ``[PAD]`` ...).
        """
        if not isinstance(value, Tensor):
            raise TypeError(f"tokens must be a torch.Tensor, got {type(value).__name__}")
        if value.dtype != torch.long:
            raise TypeError(f"tokens must be torch.long ids, got {value.dtype}")
        if value.shape[-1:] != self.event_shape:
            raise ValueError(f"tokens must end in the event shape {tuple(self.event_shape)}, got {tuple(value.shape)}")
        v = value.cpu()
        if ((v < 0) | (v >= self.mlm.vocab_size)).any():
            raise ValueError(f"token ids must lie in [0, {self.mlm.vocab_size})")
        fixed = ~self.free
        if (v[..., fixed] != self.template[fixed]).any():
            raise ValueError("tokens change a fixed position of the template; only its mask positions may vary")
        if not self.mlm.ordinary_mask[v[..., self.free]].all():
            raise ValueError(
                "a free position holds a special token (e.g. [MASK], [PAD]); fill it with an ordinary token"
            )

    def check_complete(self, value: Any, what: str = "the value") -> None:
        """Raise unless ``value`` is token ids with no mask token left at a free position.

        A sequence conditioned on (``obs=``, ``poutine.condition``) with mask tokens left in it is
        a partial sequence, which this distribution cannot score; the known tokens belong in the
        template. Text is refused with the call that turns it into ids (:meth:`encode`). A value
        whose last dimension is not ``L`` passes here: :meth:`validate_tokens` reports it.

        Parameters
        ----------
        value : torch.Tensor
            Token ids, shape ``(..., L)``; text (a string or a list of them) is refused.
        what : str, optional
            How the error messages name ``value`` (default ``"the value"``).

        Raises
        ------
        TypeError
            When ``value`` is text (a string, or a list or tuple of strings), or anything else
            that is not a tensor.
        ValueError
            When a free position of ``value`` holds the mask token.
        """
        if is_text(value):
            raise TypeError(
                f"{what} is text; a token site takes token ids: condition on prior.encode({value!r}) (the ids of that "
                "sequence in this distribution's template, checked against it)"
            )
        if not isinstance(value, torch.Tensor):  # a list of ids: a tensor says its dtype and shape
            raise TypeError(f"{what} must be a tensor of token ids, got {type(value).__name__}: torch.tensor(ids)")
        if value.shape[-1:] != self.event_shape:
            return  # not a sequence of this template at all: validate_tokens says so
        mask = value[..., self.free] == self.mlm.mask_id
        if bool(mask.any()):
            raise ValueError(
                f"{what} holds the mask token at {int(mask.sum())} free position(s): a MaskedLMDistribution scores "
                "complete sequences, so conditioning a token site (poutine.condition, obs=) on part of a sequence "
                "cannot be honoured. To fix some positions and sample the rest, put the known tokens into the "
                "template (MaskedLMDistribution(mlm, template_with_them)) and leave the site latent"
            )

    def encode(self, sequence: str | list[str]) -> Tensor:
        """Token ids of complete sequences, through the model's tokenizer, checked against the template.

        What ``obs=`` and ``poutine.condition`` take for a token site: the template's fixed
        positions unchanged, no mask or special token at a free one.

        Parameters
        ----------
        sequence : str or list of str
            One sequence's text (without special tokens), or a non-empty list of them.

        Returns
        -------
        torch.Tensor
            Long token ids with the special tokens, shape ``(L,)`` for one sequence, ``(N, L)``
            for a list of ``N``.

        Raises
        ------
        TypeError
            When ``sequence`` is neither text nor a non-empty list of texts.
        ValueError
            When a sequence does not encode to the template's length, changes a fixed position, or
            leaves a mask or special token at a free position.

        Examples
        --------
        >>> from mlm_ppl import MaskedLMDistribution
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> prior = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "AC[MASK][MASK]E")
        >>> prior.encode("ACADE")  # [CLS] A C A D E [SEP]
        tensor([2, 5, 6, 5, 7, 8, 3])
        """
        texts = [sequence] if isinstance(sequence, str) else list(sequence)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise TypeError("encode takes a sequence's text or a list of them")
        ids = self.mlm.encode(texts).input_ids
        if ids.shape[-1] != self.event_shape[0]:
            raise ValueError(
                f"{texts[0]!r} encodes to {ids.shape[-1]} tokens, the template to {self.event_shape[0]}: give a "
                "sequence of the template's length"
            )
        ids = ids.to(self.template.device)
        self.check_complete(ids, "the sequence")
        self.validate_tokens(ids)
        return ids[0] if isinstance(sequence, str) else ids

    @property
    def scored_positions(self) -> Tensor:
        """Token columns that contribute an energy term, shape ``(M,)``, ascending.

        Every column of the template but its special tokens, the free positions included.
        """
        return (self.free | self.mlm.ordinary_mask[self.template]).nonzero().flatten()

    def evaluate(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """Energies, log-factors and free-position conditionals of complete states, in one batched pass.

        The options together give the cheap surrogates of :class:`~mlm_ppl.SurrogateMH`; the
        defaults give the energy itself.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states, shape ``(N, L)``, long.
        positions : torch.Tensor or None, optional
            The columns whose energy terms are summed: a subset of :attr:`scored_positions` holding
            every free position (one masked copy per column and state). None (the default): all
            of :attr:`scored_positions`.
        dtype : torch.dtype or None, optional
            Run a copy of the model in this dtype (:meth:`~mlm_ppl.MaskedLM.cast`); None: the model
            itself.
        context : int or None, optional
            Crop every copy to :meth:`context_columns` (the tokens within ``context`` columns of a
            free position, and the special tokens), read at their own position ids
            (:meth:`~mlm_ppl.MaskedLM.position_ids`); ``positions`` must then lie in the crop.
            None: whole copies.
        frame : FrozenFrame or None, optional
            A frame of :meth:`frozen_frame` for the same ``context`` and ``dtype``: gives the
            cropped copies the rest of the sequence back, frozen.

        Returns
        -------
        Evaluation
            ``energy`` ``(N,)``, ``log_factor`` ``(N,)`` (:meth:`log_factor`: zeros without
            ``constraints``) and ``cond_logits`` ``(N, F, V)``, the logits at each free position
            with only that position masked (:class:`~mlm_ppl.models.Evaluation`).

        Raises
        ------
        ValueError
            When ``positions`` leave out a free position or lie outside the crop, ``frame`` comes
            without ``context`` or was made for another context, dtype or template, or the model
            cannot read a crop (:meth:`context_columns`).
        """
        ev = self._evaluate_mlm(tokens, positions, dtype, context, frame)
        if self.constraints is None:
            return ev
        return ev._replace(log_factor=self.log_factor(tokens).to(ev.energy.device, ev.energy.dtype))

    def context_columns(self, context: int) -> Tensor:
        """Columns a copy cropped to ``context`` keeps, ascending.

        Every column within ``context`` of a free position and every special token of the
        template (``[CLS]``, ``[SEP]`` ...).

        Parameters
        ----------
        context : int
            How many columns on either side of each free position to keep.

        Returns
        -------
        torch.Tensor
            Shape ``(K,)``, the kept columns, ascending.

        Raises
        ------
        ValueError
            When the model cannot read a crop at its columns' places: it does not place tokens by
            the position ids it is given (:attr:`~mlm_ppl.MaskedLM.reads_position_ids`).
        """
        if not self.mlm.reads_position_ids:
            raise ValueError(
                f"model {self.mlm.name!r} does not place tokens by the position_ids it is given, so a cropped "
                "context would move every token to another position; leave surrogate_context unset and "
                "surrogate_frame 'crop' (the whole sequence)"
            )
        columns = torch.arange(self.template.numel())
        distance = (columns[:, None] - self.free_positions[None, :]).abs().min(1).values
        special = ~self.mlm.ordinary_mask[self.template] & ~self.free
        return ((distance <= context) | special).nonzero().flatten()

    def frozen_reference(self) -> Tensor:
        """The template with each free position filled by its most likely allowed token.

        The tokens are read given the frame, all free positions masked together (one copy): a
        fixed, typical sequence whose frame :meth:`frozen_frame` freezes (the same for every
        chain, seed and resume).

        Returns
        -------
        torch.Tensor
            Shape ``(L,)``, long token ids.
        """
        logits = self.mlm.block_logits(self.template[None], self.free_positions[None])[0]  # (F, V)
        best = logits.masked_fill(~self.allowed, float("-inf")).argmax(-1)
        out = self.template.clone()
        out[self.free_positions] = best
        return out

    def frozen_frame(self, context: int, dtype: torch.dtype | None = None) -> FrozenFrame:
        """The frame of :meth:`frozen_reference` outside :meth:`context_columns`, frozen.

        Parameters
        ----------
        context : int
            The crop's width, as in :meth:`context_columns`.
        dtype : torch.dtype or None, optional
            Freeze it in a copy of the model in this dtype (:meth:`~mlm_ppl.MaskedLM.cast`); None
            (the default): the model itself.

        Returns
        -------
        FrozenFrame
            The frame, frozen by :meth:`~mlm_ppl.MaskedLM.frozen_frame`:
            ``evaluate(..., context=context, dtype=dtype, frame=...)`` reads cropped copies beside
            it.

        Raises
        ------
        ValueError
            For a model that has no frozen forward here (an architecture
            :meth:`~mlm_ppl.MaskedLM.frozen_layers` refuses, such as ESM's) or cannot read a crop
            (:meth:`context_columns`).
        TypeError
            When ``dtype`` is not a floating ``torch.dtype``.
        """
        mlm = self.mlm if dtype is None else self.mlm.cast(dtype)
        mlm.frozen_layers()  # refuses an architecture it cannot freeze, before the reference's pass
        return mlm.frozen_frame(self.frozen_reference(), self.context_columns(context))

    def _evaluate_mlm(
        self,
        tokens: Tensor,
        positions: Tensor | None,
        dtype: torch.dtype | None,
        context: int | None = None,
        frame: FrozenFrame | None = None,
    ) -> Evaluation:
        """:meth:`evaluate` without the constraints: the MLM's pass, log-factor zeros."""
        N = tokens.shape[0]
        if positions is not None and not bool(torch.isin(self.free_positions, positions).all()):
            raise ValueError("positions must include every free position (their conditionals are the proposals)")
        wanted = self.scored_positions if positions is None else positions
        mlm, enc, columns = cropped_copies(self, tokens, dtype, context, frame, wanted)
        # every scorable position (or the chosen ones), rows ordered by (n, position), as columns of the copies
        read = None if positions is None else torch.searchsorted(columns, positions).tolist()
        cond = mlm.masked_log_probs(enc, read)
        rows, query = cond.batch_index, cond.position  # (M,), (M,) query: a column of the (cropped) copy
        scores = token_scores(cond.logits, enc.input_ids[rows, query])  # (M, 2): logit, log-prob
        picked = scores[:, 1] if self.energy_name == "norm" else scores[:, 0]
        energy = torch.zeros(N, dtype=picked.dtype).index_add_(0, rows, -picked)  # (N,)
        at_free = self.free[columns[query]]
        free_logits = cond.logits[at_free].reshape(N, self.num_free, self.mlm.vocab_size)  # (N, F, V)
        return Evaluation(energy, torch.zeros(N, dtype=energy.dtype), free_logits)

    @property
    def ordinary_mask(self) -> Tensor:
        """``(V,)`` bool, the tokens that may fill a free position (never special tokens)."""
        return self.mlm.ordinary_mask

    @property
    def allowed(self) -> Tensor:
        """Tokens each free position may hold, shape ``(F, V)`` bool.

        The ordinary tokens everywhere, narrowed by the alphabets of ``constraints``.
        """
        if self.constraints is not None:
            return self.constraints.allowed
        return self.mlm.ordinary_mask.expand(self.num_free, -1)

    @property
    def vocab_size(self) -> int:
        """Size ``V`` of the model's vocabulary."""
        return self.mlm.vocab_size

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which complete states break a rule of ``constraints``, read from the tokens alone.

        No forward pass runs; without constraints nothing is forbidden.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states, shape ``(N, L)``.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` bool, True where a state breaks a rule; False everywhere without
            constraints.

        Raises
        ------
        ValueError, TypeError
            With constraints: when ``tokens`` are not complete states ``(N, L)`` of the template
            (:meth:`validate_tokens`).
        """
        if self.constraints is None:
            return torch.zeros(tokens.shape[0], dtype=torch.bool)
        return ~self.constraints.feasible(tokens)

    def log_factor(self, tokens: Tensor) -> Tensor:
        """Log-factor of complete states: the experts' weighted sum, ``-inf`` where a rule is broken.

        No forward pass runs (the experts run on the feasible states only).

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states, shape ``(N, L)``.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` float64: ``sum_k w_k f_k(x)`` of the experts of ``constraints`` where
            ``x`` breaks no rule, ``-inf`` where it breaks one; zeros without constraints.

        Raises
        ------
        ValueError, TypeError
            With constraints: when ``tokens`` are not complete states ``(N, L)`` of the template
            (:meth:`validate_tokens`), or an expert returns values that are not finite numbers,
            one per state.
        """
        if self.constraints is None:
            return torch.zeros(tokens.shape[0], dtype=torch.float64)
        return self.constraints.log_factor(tokens)

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
        """MLM logits at chosen positions of states, all of a row's positions masked together.

        ``dtype``, ``context`` and ``frame`` read the copies as :meth:`evaluate` does (a
        surrogate's proposals); the defaults give the model itself.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states, shape ``(N, L)``.
        positions : torch.Tensor
            Shape ``(N, k)`` long, the positions to read in each row.
        masked : bool, optional
            True (the default): all ``k`` positions of a row masked together (one copy per row);
            False: read from one forward pass of each row as it is.
        dtype : torch.dtype or None, optional
            Read a copy of the model in this dtype, as :meth:`evaluate` does.
        context : int or None, optional
            Crop the copies to :meth:`context_columns`, as :meth:`evaluate` does.
        frame : FrozenFrame or None, optional
            A frame of :meth:`frozen_frame` beside the cropped copies, as :meth:`evaluate` reads it.

        Returns
        -------
        torch.Tensor
            Shape ``(N, k, V)``, the logits at ``positions``.

        Raises
        ------
        ValueError
            When ``positions`` lie outside the crop, ``frame`` comes without ``context`` or was
            made for another context, dtype or template, or the model cannot read a crop.
        """
        if dtype is None and context is None and frame is None:
            if masked:
                return self.mlm.block_logits(tokens, positions)
            return self.mlm.masked_logits(tokens, torch.zeros(tokens.shape, dtype=torch.bool), positions)
        pos = torch.as_tensor(positions, dtype=torch.long).cpu()
        mlm, enc, columns = cropped_copies(self, tokens, dtype, context, frame, pos.unique())
        query = torch.searchsorted(columns, pos.contiguous())  # (N, k) the positions' columns in the (cropped) copies
        masks = torch.zeros(enc.input_ids.shape, dtype=torch.bool)
        if masked:
            masks.scatter_(1, query, True)
        N = tokens.shape[0]
        out = mlm.masked_reduce(enc, torch.arange(N), masks, query, lambda lg, tgt: lg)
        return out.reshape(N, pos.shape[1], mlm.vocab_size)

    def log_prob(self, value: Tensor) -> Tensor:
        """Unnormalised log density ``-E(value) / T + log_factor(value)`` of complete sequences.

        The normaliser is intractable and depends on the template, the temperature and the
        constraints, so this compares sequences of one distribution only; see ``docs/pyro.md``.

        Parameters
        ----------
        value : torch.Tensor
            Complete sequences of the template, long token ids of shape ``(..., L)``.

        Returns
        -------
        torch.Tensor
            ``-E(value) / T + log_factor(value)`` (:meth:`log_factor`: 0 without ``constraints``;
            ``-inf`` for a sequence that breaks a rule, whose forward pass is not run), broadcast
            as Pyro's distributions do: shape ``broadcast(value.shape[:-1], batch_shape)``.

        Raises
        ------
        TypeError
            When ``value`` is text (:meth:`check_complete`: condition on :meth:`encode`'s ids), or,
            with validation on, not a tensor of ``torch.long`` ids.
        ValueError
            When a free position of ``value`` holds the mask token (a partial sequence), or, with
            validation on, ``value`` is outside the support (:meth:`validate_tokens`).
        """
        self.check_complete(value)  # first: a partial sequence is a misuse to name, not just a bad value
        if self._validate_args:
            self._validate_sample(value)
            self.validate_tokens(value)
        flat = value.reshape(-1, value.shape[-1])
        if self.constraints is None:
            energy = self._evaluate_mlm(flat, None, None).energy
            lp = log_density(energy, torch.zeros_like(energy), self.temperature)
        else:
            factor = self.log_factor(flat)
            feasible = torch.isfinite(factor)
            lp = torch.full(factor.shape, float("-inf"), dtype=self.mlm.logits_dtype)
            if bool(feasible.any()):
                energy = self._evaluate_mlm(flat[feasible], None, None).energy
                factor = factor[feasible].to(energy.device, energy.dtype)
                lp[feasible] = log_density(energy, factor, self.temperature).to(lp.device)
        lp = lp.reshape(value.shape[:-1]).to(value.device)
        return lp.expand(torch.broadcast_shapes(value.shape[:-1], self.batch_shape))

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = torch.Size()) -> Tensor:
        """Draw sequences by running independent Metropolis-Hastings chains (one per draw) on the energy.

        Each draw is the last state of its own chain after ``sampler_options["num_steps"]``
        steps (default: 20 sweeps, ``20 * num_free`` single-site steps) from an MLM fill-in of
        the template. That is approximate for short chains, as for any MCMC-based sampler;
        use :func:`mlm_ppl.sample` with diagnostics when it matters.

        Cost: every draw runs its own chain, and every proposal that changes a chain's state
        costs one pass over its L masked copies; on a CPU and a real model that is seconds to
        minutes per draw (a plain ``poutine.trace`` of a 3-mask AntiBERTy model took 76 s). Set
        ``sampler_options=dict(num_steps=...)`` to choose the length. :class:`~mlm_ppl.MLMKernel`
        and :class:`~mlm_ppl.MLMGibbs` never call it: they hold token sites while tracing.

        Refused inside Pyro's SVI (a latent token site there would be drawn by these approximate
        chains and scored by an unnormalised ``log_prob``: not the ELBO SVI promises); the message
        names ``MLMGibbs(NUTS(model))`` and conditioning on fixed sequences.

        The chains are run by the sampler that :mod:`mlm_ppl.inference` registers
        (``register_sampler``) when it is imported, as it is by ``import mlm_ppl``: the
        distribution describes the target and never imports the code that moves states.

        Parameters
        ----------
        sample_shape : torch.Size or sequence of int, optional
            Shape of the draws before the batch shape (default ``()``: one draw per batch element).

        Returns
        -------
        torch.Tensor
            Long token ids of shape ``sample_shape + batch_shape + (L,)``.

        Raises
        ------
        NotImplementedError
            Inside Pyro's SVI or an ELBO.
        RuntimeError
            When no sampler is registered (:mod:`mlm_ppl.inference` not imported).

        Examples
        --------
        >>> from mlm_ppl import MaskedLMDistribution
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> prior = MaskedLMDistribution(
        ...     tiny_residue_bert("ACDE", seed=1), "AC[MASK][MASK]E", sampler_options=dict(num_steps=2, seed=0)
        ... )
        >>> prior.sample((3,)).shape  # 3 chains of 2 steps each
        torch.Size([3, 7])
        """
        if under_svi():  # a latent token site under SVI: approximate draws, an unnormalised score
            raise NotImplementedError(SVI_REFUSED)
        if _SAMPLER is None:
            raise RuntimeError("no sampler is registered for MaskedLMDistribution.sample; import mlm_ppl first")
        shape = torch.Size(sample_shape) + self.batch_shape
        n = max(1, shape.numel())
        if self.sampler_options.get("seed") is None:  # torch's global RNG draws a fresh seed per call
            tokens = _SAMPLER(self, n, **self.sampler_options)  # (n, L)
        else:  # a fixed seed: the next chains of its streams
            tokens = _SAMPLER(self, n, first_chain=self._chains_drawn, **self.sampler_options)
            self._chains_drawn += n
        return tokens.reshape(shape + self.event_shape)

    def __reduce__(self):
        return (
            _rebuild,
            (
                self.mlm,
                self.template,
                self.energy_name,
                self.temperature,
                self.sampler_options,
                tuple(self.batch_shape),
                self._validate_args,
                None if self.constraints is None else self.constraints.spec,
            ),
        )

    def __repr__(self) -> str:
        spec = "" if self.constraints is None else f", constraints={self.constraints.spec!r}"
        return (
            f"MaskedLMDistribution({self.mlm.name!r}, L={self.event_shape[0]}, free={self.num_free}, "
            f"energy={self.energy_name!r}, temperature={self.temperature}, batch_shape={tuple(self.batch_shape)}"
            f"{spec})"
        )


_SAMPLER: Callable[..., Tensor] | None = None


def register_sampler(sampler: Callable[..., Tensor]) -> None:
    """Set what :meth:`MaskedLMDistribution.sample` calls: ``sampler(dist, n, **sampler_options)``
    returns ``(n, L)`` draws. :mod:`mlm_ppl.inference.api` registers its MH chains."""
    global _SAMPLER
    _SAMPLER = sampler


def _rebuild(mlm, template, energy, temperature, sampler_options, batch_shape, validate_args, constraints=None):
    return MaskedLMDistribution(
        mlm,
        template,
        energy=energy,
        temperature=temperature,
        sampler_options=sampler_options,
        constraints=constraints,
        batch_shape=batch_shape,
        validate_args=validate_args,
    )
