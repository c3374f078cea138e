"""The :class:`MaskedLM` wrapper: a token codec plus the chunked masked-copy engine.

Everything expensive in this library is a forward pass over *masked copies* of a
sequence: copy ``x``, replace one (or a few) positions by ``[MASK]``, run the encoder,
read the prediction at the masked position. :class:`MaskedLM` owns that operation
(:meth:`MaskedLM.masked_reduce`, and on top of it :meth:`~MaskedLM.masked_logits`,
:meth:`~MaskedLM.block_logits` and :meth:`~MaskedLM.masked_log_probs`) and does it in chunks
of copies whose size comes from a memory budget, sorted by length so that padding is small,
with the language-model head applied only at the positions that are read. Encoding and
decoding come from :class:`~mlm_ppl.models.tokens.TokenCodec`; energies from
:mod:`mlm_ppl.models.energy`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._checks import check_type
from .energy import EnergyTerms, check_energy, energy_terms
from .frozen import FrozenFrame, frame_of, frozen_forward, frozen_layers
from .hf import max_length, position_ids, reads_position_ids, split_head
from .tokens import Encoding, TokenCodec

__all__ = ["Encoding", "MaskedConditionals", "MaskedLM", "NonFiniteLogitsError"]


@dataclass(frozen=True)
class MaskedConditionals:
    """MLM conditionals at a set of (sequence, position) pairs, each read with only that position masked.

    What :meth:`MaskedLM.masked_log_probs` returns.

    Parameters
    ----------
    batch_index : torch.Tensor
        Shape ``(N,)``, long, which sequence of the batch each row belongs to.
    position : torch.Tensor
        Shape ``(N,)``, long, the token position (in the encoded sequence) that was masked.
    logits : torch.Tensor
        Shape ``(N, V)``, logits over the whole vocabulary (:attr:`MaskedLM.logits_dtype`).

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> cond = mlm.masked_log_probs(["ACD", "CE"])  # every scorable position of each sequence
    >>> cond.batch_index.tolist(), cond.position.tolist()
    ([0, 0, 0, 1, 1], [1, 2, 3, 1, 2])
    >>> cond.logits.shape
    torch.Size([5, 9])
    """

    batch_index: Tensor
    position: Tensor
    logits: Tensor

    @property
    def log_probs(self) -> Tensor:
        """``(N, V)`` log-probabilities (log-softmax of ``logits``)."""
        return torch.log_softmax(self.logits, dim=-1)


class MaskedLM(TokenCodec):
    """A Hugging Face masked language model with its tokenizer, ready to score and sample.

    Build one with :func:`mlm_ppl.load_mlm` (or :mod:`mlm_ppl.testing` for tiny random
    models) rather than by hand.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        Any ``AutoModelForMaskedLM`` model, in eval mode.
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    name : str, optional
        A label recorded in outputs (the name or path it was loaded from); default ``"<model>"``.
    residue_level : bool or None, optional
        Treat each non-space character of an input string as one token (protein and
        antibody models: AntiBERTy, ESM). Default: detected, True when every ordinary
        vocabulary entry is a single character.
    memory_budget_mb : float, optional
        Approximate activation memory (in MiB, ``> 0``) for one chunk of masked copies; sets
        how many copies go through the encoder together. The default, 64, suits CPUs (about 28
        copies of a 100-residue sequence on AntiBERTy); raise it on a GPU.
    compile : bool, optional
        Wrap the encoder in ``torch.compile`` (dynamic shapes). Approximate to float
        rounding; the first calls are slow while it compiles. Default False.

    Attributes
    ----------
    encoder : torch.nn.Module
        The model without its LM head (the whole model when the head is not recognised).
    head : torch.nn.Module or None
        The LM head, run only at the positions that are read.

    Raises
    ------
    ValueError
        If ``memory_budget_mb`` is not positive, or the tokenizer has no mask token or only
        special tokens.

    Notes
    -----
    Logits come out in float32, or float64 for a float64 model (exact enumeration checks
    run tiny models in float64 so that rounding does not blur them).

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_esm
    >>> mlm = tiny_esm()  # a tiny random ESM; load_mlm("antiberty") gives the real antibody model
    >>> mlm.residue_level, mlm.vocab_size
    (True, 25)
    >>> mlm.score(["ACDEF", "KLMNPQ"]).shape  # one energy per sequence, in nats
    torch.Size([2])
    >>> mlm.decode(mlm.encode(["ACDEF"]).input_ids)
    ['ACDEF']
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "<model>",
        residue_level: bool | None = None,
        memory_budget_mb: float = 64.0,
        compile: bool = False,
    ) -> None:
        if not memory_budget_mb > 0:
            raise ValueError(f"memory_budget_mb must be > 0, got {memory_budget_mb!r}")
        super().__init__(
            tokenizer,
            vocab_size=int(model.config.vocab_size),
            max_length=max_length(model, tokenizer),
            name=name,
            pad_id=model.config.pad_token_id,
            residue_level=residue_level,
        )
        self.model = model.eval()
        self.memory_budget_mb = float(memory_budget_mb)
        self._casts: dict[torch.dtype, MaskedLM] = {}  # copies in other dtypes, made by cast()
        self._reads_position_ids: bool | None = None  # probed on first use (reads_position_ids)
        self._frozen: list | None = None  # the layers a frozen frame runs, checked once (frozen_layers)
        self.encoder, self.head = split_head(model)
        if compile:
            self.encoder = torch.compile(self.encoder, dynamic=True)
        cfg = model.config
        self._hidden = int(getattr(cfg, "hidden_size", 768))
        self._intermediate = int(getattr(cfg, "intermediate_size", 4 * self._hidden))
        self._heads = int(getattr(cfg, "num_attention_heads", 12))

    # ------------------------------------------------------------------ properties
    @property
    def device(self) -> torch.device:
        """Device the model's weights live on."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the model's weights."""
        return next(self.model.parameters()).dtype

    @property
    def logits_dtype(self) -> torch.dtype:
        """The dtype of the logits and energies (float32, or float64 for a float64 model)."""
        return torch.float64 if self.dtype == torch.float64 else torch.float32

    @property
    def reads_position_ids(self) -> bool:
        """Whether the model places tokens by the ``position_ids`` it is given; probed once.

        What a cropped copy (:meth:`position_ids`) needs to keep its columns' places (the probe:
        ``mlm_ppl.models.hf.reads_position_ids``).
        """
        if self._reads_position_ids is None:
            self._reads_position_ids = reads_position_ids(
                self.model if self.head is None else self.encoder,
                hidden=self.head is not None,
                encoder=self.encoder,
                mask_id=self.mask_id,
                max_len=self.max_length,
            )
        return self._reads_position_ids

    def position_ids(self, columns: Tensor) -> Tensor:
        """The position ids the model gives ``columns`` when it reads the whole sequence.

        The columns themselves, or shifted past the padding index for models that number
        positions from it (RoBERTa, ESM: ``padding_idx + 1 + column``). A copy cropped to
        ``columns`` and read at these ids sees every kept token where the whole sequence has it.

        Parameters
        ----------
        columns : torch.Tensor
            Shape ``(K,)``, ascending token indices of one unpadded sequence, ``[CLS]`` at 0.

        Returns
        -------
        torch.Tensor
            Shape ``(K,)``, long, the position ids.

        Examples
        --------
        >>> import torch
        >>> from mlm_ppl.testing import tiny_esm
        >>> tiny_esm().position_ids(torch.tensor([0, 3, 4]))  # ESM numbers positions past its padding index, 1
        tensor([2, 5, 6])
        """
        return position_ids(self.encoder, columns)

    def frozen_layers(self) -> list:
        """The encoder's layers when a frozen frame can be computed for them; checked once.

        A post-LayerNorm BERT or RoBERTa encoder with absolute positions (the check:
        ``mlm_ppl.models.frozen.frozen_layers``).

        Returns
        -------
        list
            The encoder's layer modules.

        Raises
        ------
        ValueError
            For any other architecture, naming what to use instead.
        """
        if self._frozen is None:
            self._frozen = frozen_layers(self.encoder, self.model.config, self.head, self.name)
        return self._frozen

    @torch.inference_mode()
    def frozen_frame(self, reference: Tensor, live: Tensor) -> FrozenFrame:
        """The frame of ``reference`` outside the ``live`` columns, frozen.

        Copies of the live columns read beside it (``Encoding(frame=...)``) attend to it as to
        the rest of their sequence (computed by ``mlm_ppl.models.frozen.frame_of``).

        Parameters
        ----------
        reference : torch.Tensor
            Shape ``(L,)``, long token ids of one complete sequence.
        live : torch.Tensor
            Shape ``(K,)``, long, the columns that the copies hold.

        Returns
        -------
        FrozenFrame
            Per layer, the keys and values of the reference's other columns.

        Raises
        ------
        ValueError
            For a model whose layers have no frozen forward (:meth:`frozen_layers`).
        """
        return frame_of(self.encoder, self.frozen_layers(), self.position_ids, reference, live, self.device)

    def cast(self, dtype: torch.dtype) -> "MaskedLM":
        """This masked LM with its weights in ``dtype``.

        Logits still come out in float32 (float64 for a float64 copy).

        Parameters
        ----------
        dtype : torch.dtype
            A floating dtype.

        Returns
        -------
        MaskedLM
            ``self`` when its weights already are in ``dtype``, else a copy made once and cached
            (e.g. a bfloat16 surrogate beside a float32 target).

        Raises
        ------
        TypeError
            If ``dtype`` is not a floating :class:`torch.dtype`.

        Examples
        --------
        >>> import torch
        >>> from mlm_ppl.testing import tiny_esm
        >>> mlm = tiny_esm()
        >>> half = mlm.cast(torch.bfloat16)
        >>> half.dtype, half.logits_dtype, mlm.cast(torch.bfloat16) is half
        (torch.bfloat16, torch.float32, True)
        """
        if dtype == self.dtype:
            return self
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        if dtype not in self._casts:
            self._casts[dtype] = MaskedLM(
                copy.deepcopy(self.model).to(dtype),
                self.tokenizer,
                name=f"{self.name} ({str(dtype).removeprefix('torch.')})",
                residue_level=self.residue_level,
                memory_budget_mb=self.memory_budget_mb,
            )
        return self._casts[dtype]

    def __repr__(self) -> str:
        kind = "residue-level" if self.residue_level else "subword"
        return (
            f"MaskedLM({self.name!r}, {type(self.model).__name__}, vocab={self.vocab_size}, {kind}, "
            f"max_length={self.max_length}, device={self.device}, dtype={self.dtype})"
        )

    # ------------------------------------------------------------------ the masked-copy engine
    def block_logits(self, input_ids: Tensor, positions: Tensor, *, progress: bool = False) -> Tensor:
        """Logits at several positions read from one copy with all of them masked.

        Parameters
        ----------
        input_ids : Tensor
            ``(N, L)`` complete token ids.
        positions : Tensor
            ``(N, k)`` long, distinct positions per row to mask together and read.
        progress : bool, optional
            Show a progress bar over the copies on stderr (default False).

        Returns
        -------
        Tensor
            ``(N, k, V)`` logits (:attr:`logits_dtype`): row ``n``, slot ``j`` is the MLM's prediction at
            ``positions[n, j]`` given ``input_ids[n]`` with all of ``positions[n]`` masked.

        Raises
        ------
        TypeError, ValueError
            Where ``input_ids`` are not long ids of shape ``(N, L)`` within the vocabulary
            (:meth:`~mlm_ppl.models.TokenCodec.encoding_from_ids`).
        NonFiniteLogitsError
            If the model returns nan or inf logits.

        Examples
        --------
        >>> import torch
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> mlm = tiny_residue_bert("ACDE", seed=1)
        >>> ids = mlm.encode(["ACDE", "CCDE"]).input_ids  # (2, 6): [CLS], four residues, [SEP]
        >>> mlm.block_logits(ids, torch.tensor([[2, 3], [2, 3]])).shape
        torch.Size([2, 2, 9])
        """
        pos = torch.as_tensor(positions, dtype=torch.long).cpu()
        masks = torch.zeros(torch.as_tensor(input_ids).shape, dtype=torch.bool)
        masks.scatter_(1, pos, True)
        return self.masked_logits(input_ids, masks, pos, progress=progress)

    def masked_logits(self, input_ids: Tensor, masks: Tensor, positions: Tensor, *, progress: bool = False) -> Tensor:
        """Logits at chosen positions of copies with chosen positions masked.

        Parameters
        ----------
        input_ids : Tensor
            ``(N, L)`` complete token ids.
        masks : Tensor
            ``(N, L)`` bool, the positions of each row replaced by the mask token.
        positions : Tensor
            ``(N, k)`` long, the positions of each row to read (masked or not).
        progress : bool, optional
            Show a progress bar over the copies on stderr (default False).

        Returns
        -------
        Tensor
            ``(N, k, V)`` logits (:attr:`logits_dtype`); the copies go through the model in chunks sized
            by ``memory_budget_mb``, and the LM head runs only at the read positions.

        Raises
        ------
        ValueError
            If ``masks`` does not have the shape of ``input_ids`` or ``positions`` is not ``(N, k)``;
            also where :meth:`~mlm_ppl.models.TokenCodec.encoding_from_ids` refuses ``input_ids``.
        TypeError
            Where ``input_ids`` are not long ids.
        NonFiniteLogitsError
            If the model returns nan or inf logits.
        """
        enc = self.encoding_from_ids(input_ids)
        masks = torch.as_tensor(masks, dtype=torch.bool).cpu()
        pos = torch.as_tensor(positions, dtype=torch.long).cpu()
        if masks.shape != enc.input_ids.shape or pos.dim() != 2 or pos.shape[0] != len(enc):
            raise ValueError(
                f"masks must have the shape of input_ids {tuple(enc.input_ids.shape)} and positions (N, k); "
                f"got masks {tuple(masks.shape)}, positions {tuple(pos.shape)}"
            )
        N = len(enc)
        out = self.masked_reduce(enc, torch.arange(N), masks, pos, lambda lg, tgt: lg, progress=progress)
        return out.reshape(N, pos.shape[1], self.vocab_size)

    # ------------------------------------------------------------------ conditionals
    def masked_log_probs(
        self,
        sequences: str | Sequence[str] | Encoding,
        positions: Sequence[int] | None = None,
        *,
        progress: bool = False,
    ) -> MaskedConditionals:
        """MLM conditionals ``p(x_t | x_\\t)`` with only position ``t`` masked.

        Parameters
        ----------
        sequences : str, sequence of str, or Encoding
            The sequences (text, encoded with :meth:`~mlm_ppl.models.TokenCodec.encode`) or their encoding.
        positions : sequence of int, optional
            Token positions (in the encoded sequence, ``[CLS]`` is 0) to read in every
            sequence. Default: every scorable position of every sequence.
        progress : bool, optional
            Show a progress bar over masked copies on stderr (default False).

        Returns
        -------
        MaskedConditionals
            One row per (sequence, position) pair, sequences in order, positions ascending.

        Raises
        ------
        ValueError
            If ``positions`` is empty, lies outside the encoded length, or holds a position that
            is not scorable (a special token or padding) in some sequence; also where
            :meth:`~mlm_ppl.models.TokenCodec.encode` refuses ``sequences``.
        TypeError
            If a position is not an int, or ``sequences`` are not strings.
        NonFiniteLogitsError
            If the model returns nan or inf logits.

        Examples
        --------
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> mlm = tiny_residue_bert("ACDE", seed=1)
        >>> cond = mlm.masked_log_probs("ACDE", positions=[2, 3])
        >>> cond.position.tolist(), cond.log_probs.shape
        ([2, 3], torch.Size([2, 9]))
        """
        enc = sequences if isinstance(sequences, Encoding) else self.encode(sequences)
        select = enc.scorable.clone()
        if positions is not None:
            pos = _check_positions(positions, enc)
            select = torch.zeros_like(enc.scorable)
            select[:, pos] = True
            bad = select & ~enc.scorable
            if bad.any():
                b, t = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"position {t} of sequence {b} is not scorable (a special token or padding); "
                    f"scorable positions are {enc.scorable[b].nonzero().flatten().tolist()}"
                )
        rows, query = select.nonzero(as_tuple=True)
        masks = torch.zeros((rows.numel(), enc.input_ids.shape[1]), dtype=torch.bool)
        masks[torch.arange(rows.numel()), query] = True
        logits = self.masked_reduce(enc, rows, masks, query, lambda lg, tgt: lg, progress=progress)
        return MaskedConditionals(rows, query, logits)

    def masked_reduce(
        self,
        enc: Encoding,
        rows: Tensor,
        masks: Tensor,
        query: Tensor,
        reduce: Callable[[Tensor, Tensor], Tensor],
        *,
        progress: bool = False,
    ) -> Tensor:
        """Run masked copies through the model in chunks and reduce each chunk's logits.

        The one forward-pass loop of the library: every read of the model goes through it.

        Parameters
        ----------
        enc : Encoding
            The sequences the copies are made from.
        rows : Tensor
            ``(N,)`` long: copy ``n`` is sequence ``rows[n]`` of ``enc``.
        masks : Tensor
            ``(N, T)`` bool: the positions of copy ``n`` replaced by the mask token.
        query : Tensor
            ``(N,)`` long, the position read in each copy (logits ``(n, V)``), or ``(N, k)`` for
            several positions read from one copy (logits ``(n, k, V)``).
        reduce : callable
            ``reduce(logits, target_ids) -> Tensor`` applied to each chunk, with the original
            tokens at the read positions as targets; its outputs are concatenated in the
            original copy order.
        progress : bool, optional
            Progress bar over the copies (default False).

        Returns
        -------
        torch.Tensor
            The outputs of ``reduce`` over all chunks, concatenated in the original copy order;
            with no copies, an empty ``(0, V)`` tensor (:attr:`logits_dtype`).

        Raises
        ------
        NonFiniteLogitsError
            If the model returns nan or inf logits for a copy (nothing is computed from them).

        Notes
        -----
        Copies are sorted by length, trimmed to the longest in their chunk, and grouped by
        :meth:`chunks`.
        """
        N = int(rows.numel())
        if N == 0:
            return torch.empty((0, self.vocab_size), dtype=self.logits_dtype)
        lengths = enc.lengths[rows]  # (N,)
        order = torch.argsort(lengths, stable=True)
        device = self.device
        outputs: list[Tensor] = []
        bar = _progress_bar(N, progress, "masked copies")
        try:
            frame_length = 0 if enc.frame is None else enc.frame.length - int(enc.frame.columns.numel())
            for chunk in self.chunks(lengths[order].tolist(), frame_length):
                idx = order[chunk]
                T = int(lengths[idx].max())
                ids = enc.input_ids[rows[idx], :T]  # (n, T)
                q = query[idx] if query.dim() == 2 else query[idx, None]  # (n, k)
                targets = ids.gather(1, q)  # (n, k)
                ids = ids.masked_fill(masks[idx, :T], self.mask_id).to(device)
                attn = enc.attention_mask[rows[idx], :T].to(device)
                if enc.position_ids is None:
                    logits = self.logits_at(ids, attn, q.to(device))  # (n, k, V)
                else:  # a cropped copy, read at its columns' own position ids (and beside a frozen frame)
                    pos_ids = enc.position_ids[rows[idx], :T].to(device)
                    extra = {} if enc.frame is None else {"frame": enc.frame}
                    logits = self.logits_at(ids, attn, q.to(device), position_ids=pos_ids, **extra)
                self._check_finite(logits, rows[idx], q)
                if query.dim() == 1:
                    logits, targets = logits[:, 0], targets[:, 0]
                outputs.append(reduce(logits, targets.to(device)).cpu())
                if bar is not None:
                    bar.update(len(idx))
        finally:
            if bar is not None:
                bar.close()
        out = torch.cat(outputs)
        result = torch.empty_like(out)
        result[order] = out
        return result

    def _check_finite(self, logits: Tensor, rows: Tensor, query: Tensor) -> None:
        """NonFiniteLogitsError for the first copy whose logits hold a nan or an infinity."""
        finite = torch.isfinite(logits).all(dim=-1)  # (n, k)
        if bool(finite.all()):
            return
        n, j = (~finite).nonzero()[0].tolist()
        values = logits[n, j]
        kind = "nan" if bool(values.isnan().any()) else "inf"
        raise NonFiniteLogitsError(
            f"model {self.name!r} returned non-finite logits ({kind}) at token position {int(query[n, j])} of "
            f"sequence {int(rows[n])} (position 0 is the first special token); its weights are damaged or its "
            f"dtype ({self.dtype}) overflows. Nothing was computed from them"
        )

    def chunks(self, sorted_lengths: list[int], frame_length: int = 0) -> Iterator[slice]:
        """Greedy chunks of consecutive copies whose padded activations fit ``memory_budget_mb``.

        A chunk holds at least one copy, however long.

        Parameters
        ----------
        sorted_lengths : list of int
            The copies' lengths, in ascending order.
        frame_length : int, optional
            The frozen frame's columns each copy also attends to (its keys and values, expanded
            per copy, and the longer attention rows); default 0, no frame.

        Yields
        ------
        slice
            The next chunk, a slice into ``sorted_lengths``.

        Examples
        --------
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> list(tiny_residue_bert("ACDE", seed=1).chunks([5, 5, 6, 6]))
        [slice(0, 4, None)]
        """
        budget = self.memory_budget_mb * 2**20
        elem = torch.finfo(self.dtype).bits // 8
        start = 0
        n = len(sorted_lengths)
        while start < n:
            end = start + 1
            while end < n:
                T = sorted_lengths[end]
                per_token = elem * (6 * self._hidden + self._intermediate + self._heads * (T + frame_length))
                per_copy = T * per_token + 2 * frame_length * self._hidden * elem
                if (end + 1 - start) * per_copy > budget:
                    break
                end += 1
            yield slice(start, end)
            start = end

    @torch.inference_mode()
    def logits_at(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        query: Tensor,
        *,
        position_ids: Tensor | None = None,
        frame: FrozenFrame | None = None,
    ) -> Tensor:
        """One forward pass: logits at positions ``query[i]`` of row ``i`` of ``input_ids``.

        Inputs are already masked and on the model's device; :meth:`masked_reduce` calls this
        once per chunk.

        Parameters
        ----------
        input_ids : torch.Tensor
            Shape ``(n, T)``, long token ids, masked where they are to be predicted.
        attention_mask : torch.Tensor
            Shape ``(n, T)``, 1 on real tokens, 0 on padding.
        query : torch.Tensor
            Shape ``(n, k)``, long, the positions of each row to read.
        position_ids : torch.Tensor or None, optional
            Shape ``(n, T)``, the ids the model reads the tokens at (a cropped copy's,
            :meth:`position_ids`); None (the default): the model's own.
        frame : FrozenFrame or None, optional
            The rows are the live columns of a longer sequence whose other columns are frozen
            (:meth:`frozen_frame`); None (the default): the rows are whole.

        Returns
        -------
        torch.Tensor
            Shape ``(n, k, V)``, logits in float32 (float64 for a float64 model).

        Raises
        ------
        ValueError
            If ``frame`` is given without ``position_ids`` or with padded rows; also for a model
            whose layers have no frozen forward (:meth:`frozen_layers`).
        """
        out_dtype = self.logits_dtype
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]  # (n, 1)
        if frame is not None:
            if position_ids is None or not bool(attention_mask.all()):
                raise ValueError("a frozen frame needs the live columns' position ids and unpadded rows")
            hidden = frozen_forward(self.encoder, self.frozen_layers(), input_ids, position_ids, frame)  # (n, T, H)
            return self.head(hidden[rows, query]).to(out_dtype)[..., : self.vocab_size]
        extra = {} if position_ids is None else {"position_ids": position_ids}
        if self.head is None:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits  # (n, T, V)
            return logits[rows, query].to(out_dtype)
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        return self.head(hidden[rows, query]).to(out_dtype)[..., : self.vocab_size]  # (n, k, V)

    # ------------------------------------------------------------------ energies
    def energy_terms(
        self, sequences: str | Sequence[str] | Encoding, *, variant: str = "pll", progress: bool = False
    ) -> EnergyTerms:
        """Per-position energy terms of each sequence (see :func:`~mlm_ppl.energy_terms`).

        Parameters
        ----------
        sequences : str, sequence of str, or Encoding
            Complete sequences (no mask tokens), as text or encoded.
        variant : {"pll", "within_word_l2r"}, optional
            Which positions are masked when reading the term of position ``t``: ``t`` alone
            (``"pll"``, the default), or ``t`` and the later tokens of its word.
        progress : bool, optional
            Show a progress bar over masked copies (default False).

        Returns
        -------
        EnergyTerms
            The ``E_norm`` and ``E_raw`` terms of every position, and the encoding.

        Raises
        ------
        ValueError
            For an unknown ``variant``, a sequence holding the mask token, or one that
            :meth:`~mlm_ppl.models.TokenCodec.encode` refuses.
        TypeError
            If ``sequences`` are not strings or an :class:`Encoding`.
        """
        return energy_terms(self, sequences, variant=variant, progress=progress)

    def score(
        self,
        sequences: str | Sequence[str] | Encoding,
        *,
        energy: str = "norm",
        variant: str = "pll",
        progress: bool = False,
    ) -> Tensor:
        """Energy of each sequence in nats, shape ``(B,)``; lower is more likely.

        Parameters
        ----------
        sequences : str, sequence of str, or Encoding
            Complete sequences (no mask tokens), as text or encoded.
        energy : {"norm", "raw"}, optional
            ``"norm"`` (the default) is the negative pseudo-log-likelihood
            ``E_norm(x) = -sum_t log p(x_t | x_\\t)``; ``"raw"`` is
            ``E_raw(x) = -sum_t logit_t(x_t | x_\\t)`` (Goyal et al. 2021).
        variant : {"pll", "within_word_l2r"}, optional
            ``"pll"`` (the default: mask one token at a time; Salazar et al. 2020) or
            ``"within_word_l2r"`` (also mask the later tokens of the same word; Kauf & Ivanova 2023).
        progress : bool, optional
            Show a progress bar over masked copies (default False).

        Returns
        -------
        torch.Tensor
            Shape ``(B,)``, the energy of each sequence in nats (:attr:`logits_dtype`).

        Raises
        ------
        ValueError
            For an unknown ``energy`` or ``variant``, a sequence holding the mask token, or one
            that :meth:`~mlm_ppl.models.TokenCodec.encode` refuses.
        TypeError
            If ``sequences`` are not strings or an :class:`Encoding`.

        Examples
        --------
        >>> from mlm_ppl.testing import tiny_bert
        >>> mlm = tiny_bert()
        >>> norm = mlm.score(["the cat sat", "a dog ran"])
        >>> norm.shape, bool((norm > 0).all())  # a negative log-probability per position: positive
        (torch.Size([2]), True)
        >>> mlm.score("the cat sat", energy="raw").shape
        torch.Size([1])
        """
        check_energy(energy)
        return self.energy_terms(sequences, variant=variant, progress=progress).total(energy)


class NonFiniteLogitsError(ValueError):
    """The model returned nan or inf logits: every energy, conditional and draw would be meaningless."""


# ---------------------------------------------------------------------- helpers
def _check_positions(positions: Sequence[int], enc: Encoding) -> list[int]:
    pos = list(positions)
    if not pos:
        raise ValueError("positions is empty; pass None for every scorable position")
    T = enc.input_ids.shape[1]
    for p in pos:
        check_type(p, "each position", int)
        if not 0 <= p < T:
            raise ValueError(f"position {p} is outside the encoded length {T}")
    return sorted(set(pos))


def _progress_bar(total: int, enabled: bool, unit: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=" " + unit.split()[-1], desc=unit, leave=False, dynamic_ncols=True)
