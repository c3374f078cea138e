"""The :class:`MaskedLM` wrapper: encoding, decoding and batched masked conditionals.

Everything expensive in this library is a forward pass over *masked copies* of a
sequence: copy ``x``, replace one (or a few) positions by ``[MASK]``, run the encoder,
read the prediction at the masked position. :class:`MaskedLM` owns that operation
(:meth:`MaskedLM.masked_log_probs` and the private reduction it shares with the
energies) and does it in chunks of copies whose size comes from a memory budget, sorted
by length so that padding is small, with the language-model head applied only at the
positions that are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

__all__ = ["Encoding", "MaskedConditionals", "MaskedLM"]

_SCORE_VARIANTS = ("pll", "within_word_l2r")


@dataclass(frozen=True)
class Encoding:
    """A padded batch of encoded sequences.

    Attributes
    ----------
    input_ids : Tensor
        ``(B, T)`` long, right-padded with the pad id; includes the model's special
        tokens (``[CLS]``/``[SEP]``, ``<s>``/``</s>`` ...).
    attention_mask : Tensor
        ``(B, T)`` long, 1 on real tokens, 0 on padding.
    scorable : Tensor
        ``(B, T)`` bool, True on ordinary tokens: the positions that are scored and may be
        sampled. Special tokens (``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]`` ...) are never
        scorable.
    word_ids : Tensor
        ``(B, T)`` long, index of the word each token belongs to, -1 on special tokens and
        padding. For residue-level models (AntiBERTy, ESM) every residue is a word.
    """

    input_ids: Tensor
    attention_mask: Tensor
    scorable: Tensor
    word_ids: Tensor

    @property
    def lengths(self) -> Tensor:
        """``(B,)`` number of real tokens (special tokens included) in each sequence."""
        return self.attention_mask.sum(-1)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class MaskedConditionals:
    """MLM conditionals at a set of (sequence, position) pairs, each read with only that
    position masked.

    Attributes
    ----------
    batch_index : Tensor
        ``(N,)`` long, which sequence of the batch each row belongs to.
    position : Tensor
        ``(N,)`` long, the token position (in the encoded sequence) that was masked.
    logits : Tensor
        ``(N, V)`` float32 logits over the whole vocabulary.
    """

    batch_index: Tensor
    position: Tensor
    logits: Tensor

    @property
    def log_probs(self) -> Tensor:
        """``(N, V)`` log-probabilities (log-softmax of :attr:`logits`)."""
        return torch.log_softmax(self.logits, dim=-1)


class MaskedLM:
    """A Hugging Face masked language model with its tokenizer, ready to score and sample.

    Build one with :func:`mlm_ppl.load_mlm` (or :mod:`mlm_ppl.testing` for tiny random
    models) rather than by hand.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        Any ``AutoModelForMaskedLM`` model, in eval mode.
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    name : str
        A label recorded in outputs (the name or path it was loaded from).
    residue_level : bool, optional
        Treat each non-space character of an input string as one token (protein and
        antibody models: AntiBERTy, ESM). Default: detected, True when every ordinary
        vocabulary entry is a single character.
    memory_budget_mb : float
        Approximate activation memory for one chunk of masked copies; sets how many
        copies go through the encoder together. The default suits CPUs (about 28 copies of
        a 100-residue sequence on AntiBERTy); raise it on a GPU.
    compile : bool
        Wrap the encoder in ``torch.compile`` (dynamic shapes). Approximate to float
        rounding; the first calls are slow while it compiles.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "<model>",
        residue_level: bool | None = None,
        memory_budget_mb: float = 64.0,
        compile: bool = False,
    ) -> None:
        if tokenizer.mask_token_id is None:
            raise ValueError(f"model {name!r}: its tokenizer has no mask token, so it is not a masked LM")
        if not memory_budget_mb > 0:
            raise ValueError(f"memory_budget_mb must be > 0, got {memory_budget_mb!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.memory_budget_mb = float(memory_budget_mb)
        self.mask_id: int = int(tokenizer.mask_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id: int = int(pad if pad is not None else model.config.pad_token_id or 0)
        self.unk_id: int | None = tokenizer.unk_token_id
        self.special_ids: frozenset[int] = frozenset(int(i) for i in tokenizer.all_special_ids)
        vocab = tokenizer.get_vocab()
        self.vocab_size: int = int(model.config.vocab_size)
        tokens = [""] * self.vocab_size
        for tok, idx in vocab.items():
            if idx < self.vocab_size:
                tokens[idx] = tok
        self.vocab: tuple[str, ...] = tuple(tokens)
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[sorted(i for i in self.special_ids if i < self.vocab_size)] = False
        for idx, tok in enumerate(tokens):
            if tok == "":  # ids the tokenizer never produces (padded embedding rows)
                ordinary[idx] = False
        self.ordinary_mask: Tensor = ordinary  # (V,) bool: tokens that may be scored/sampled
        self._prefix_ids, self._suffix_ids = _special_frame(tokenizer, int(ordinary.nonzero()[0]), tokens)
        if residue_level is None:
            residue_level = all(len(tokens[i]) == 1 for i in ordinary.nonzero().flatten().tolist())
        self.residue_level = bool(residue_level)
        self.max_length: int = _max_length(model, tokenizer)
        self._special_strings = sorted(
            (tokens[i] for i in self.special_ids if i < self.vocab_size and tokens[i]), key=len, reverse=True
        )
        self._residue_re = re.compile("|".join([re.escape(s) for s in self._special_strings] + [r"\S"]))
        self._char_cache: dict[str, bool] = {}
        self._base, self._head = _split_head(model)
        if compile:
            self._base = torch.compile(self._base, dynamic=True)
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

    def __repr__(self) -> str:
        kind = "residue-level" if self.residue_level else "subword"
        return (
            f"MaskedLM({self.name!r}, {type(self.model).__name__}, vocab={self.vocab_size}, {kind}, "
            f"max_length={self.max_length}, device={self.device}, dtype={self.dtype})"
        )

    # ------------------------------------------------------------------ encoding
    def encode(self, sequences: str | Sequence[str], *, allow_mask: bool = False) -> Encoding:
        """Encode strings into a padded batch, validating them first.

        Parameters
        ----------
        sequences : str or sequence of str
            Text (subword models) or residues (residue-level models; spaces between
            residues are optional). A single string is a batch of one.
        allow_mask : bool
            Accept the mask token inside sequences (templates for sampling). Masked
            positions are not scorable.

        Raises
        ------
        TypeError
            If ``sequences`` is not a string or a sequence of strings.
        ValueError
            For an empty batch, an empty sequence, a character or word the model cannot
            represent, a special token inside a sequence, or a sequence longer than the
            model's maximum; the message names the sequence and what to change.
        """
        seqs = _as_string_list(sequences)
        rows = [self._encode_one(i, s, allow_mask) for i, s in enumerate(seqs)]
        T = max(len(ids) for ids, _ in rows)
        B = len(rows)
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        attention = torch.zeros((B, T), dtype=torch.long)
        word_ids = torch.full((B, T), -1, dtype=torch.long)
        for b, (ids, words) in enumerate(rows):
            input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention[b, : len(ids)] = 1
            word_ids[b, : len(ids)] = torch.tensor(words, dtype=torch.long)
        scorable = self.ordinary_mask[input_ids] & attention.bool()
        return Encoding(input_ids, attention, scorable, word_ids)

    def _encode_one(self, index: int, text: str, allow_mask: bool) -> tuple[list[int], list[int]]:
        where = f"sequence {index}"
        if not text.strip():
            raise ValueError(f"{where} is empty; every sequence needs at least one token")
        if self.residue_level:
            content, words = self._encode_residues(where, text)
            ids = self._prefix_ids + content + self._suffix_ids
            word_ids = [-1] * len(self._prefix_ids) + words + [-1] * len(self._suffix_ids)
        else:
            ids, word_ids = self._encode_text(where, text)
        allowed_special = {self.mask_id} if allow_mask else set()
        for pos, (tok, w) in enumerate(zip(ids, word_ids)):
            if w >= 0 and tok in self.special_ids and tok not in allowed_special:
                what = "unknown" if tok == self.unk_id else "special"
                hint = self._alphabet_hint() if tok == self.unk_id else "remove it from the input"
                raise ValueError(
                    f"{where} contains the {what} token {self.vocab[tok]!r} at token position {pos}; {hint}"
                )
        if len(ids) > self.max_length:
            raise ValueError(
                f"{where} has {len(ids)} tokens (special tokens included) but model {self.name!r} accepts at "
                f"most {self.max_length}; shorten it or split it into windows"
            )
        return ids, word_ids

    def _encode_residues(self, where: str, text: str) -> tuple[list[int], list[int]]:
        vocab = self.tokenizer.get_vocab()
        ids: list[int] = []
        for m in self._residue_re.finditer(text):
            tok = m.group(0)
            idx = vocab.get(tok)
            if idx is None or idx >= self.vocab_size:
                raise ValueError(
                    f"{where} has character {tok!r} at offset {m.start()} that model {self.name!r} cannot "
                    f"represent; {self._alphabet_hint()}"
                )
            ids.append(idx)
        return ids, list(range(len(ids)))

    def _encode_text(self, where: str, text: str) -> tuple[list[int], list[int]]:
        tok = self.tokenizer
        if not getattr(tok, "is_fast", False):
            enc = tok(text, add_special_tokens=True)
            ids = list(enc["input_ids"])
            specials = set(self.special_ids)
            word_ids = []
            w = -1
            for i in ids:
                if i in specials and i != self.mask_id and i != self.unk_id:
                    word_ids.append(-1)
                else:
                    w += 1
                    word_ids.append(w)  # slow tokenizers: each token its own word
            return ids, word_ids
        enc = tok(text, add_special_tokens=True, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        # Byte-level BPE without a byte fallback silently drops characters it cannot encode:
        # the content tokens then cover fewer characters than the text has.
        covered = sum(max(0, end - start) for (start, end), w in zip(enc["offset_mapping"], enc.word_ids()) if w is not None)
        if covered < sum(not ch.isspace() for ch in text):
            where_ch = next(
                ((k, ch) for k, ch in enumerate(text) if not ch.isspace() and not self._char_representable(ch)), None
            )
            what = f"character {where_ch[1]!r} at offset {where_ch[0]}" if where_ch else "characters"
            raise ValueError(
                f"{where} has {what} that model {self.name!r}'s tokenizer drops (not in its vocabulary); "
                "remove or replace it"
            )
        word_ids = [-1 if w is None else int(w) for w in enc.word_ids()]
        return ids, word_ids

    def _char_representable(self, ch: str) -> bool:
        """Whether the tokenizer keeps ``ch`` on its own (byte-level BPE drops unknown bytes)."""
        ok = self._char_cache.get(ch)
        if ok is None:
            ids = self.tokenizer(ch, add_special_tokens=False)["input_ids"]
            ok = self._char_cache[ch] = bool(ids)
        return ok

    def _alphabet_hint(self) -> str:
        if self.residue_level:
            alphabet = "".join(self.vocab[i] for i in self.ordinary_mask.nonzero().flatten().tolist())
            return f"allowed characters are {alphabet!r} (case-sensitive)"
        return "the tokenizer maps it to its unknown token; use words in the model's vocabulary"

    def decode(self, input_ids: Tensor | Sequence[int] | Sequence[Sequence[int]]) -> list[str]:
        """Decode token ids back to strings, dropping special tokens and padding.

        Residue-level models give residues without separators (``"EVQL..."``).
        """
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        out = []
        for row in ids.tolist():
            keep = [i for i in row if 0 <= i < self.vocab_size and bool(self.ordinary_mask[i])]
            if self.residue_level:
                out.append("".join(self.vocab[i] for i in keep))
            else:
                out.append(self.tokenizer.decode(keep, skip_special_tokens=True))
        return out

    def encoding_from_ids(self, input_ids: Tensor) -> Encoding:
        """An :class:`Encoding` of complete, unpadded token-id sequences ``(N, L)``.

        Every position is attended; ordinary tokens are scorable; each token is its own word.
        """
        ids = torch.as_tensor(input_ids)
        if ids.dtype != torch.long:
            raise TypeError(f"token ids must be torch.long, got {ids.dtype}")
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (N, L), got {tuple(ids.shape)}")
        if ((ids < 0) | (ids >= self.vocab_size)).any():
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}); got min {ids.min()}, max {ids.max()}")
        ids = ids.cpu()
        scorable = self.ordinary_mask[ids]
        words = torch.where(scorable, scorable.long().cumsum(-1) - 1, torch.full_like(ids, -1))
        return Encoding(ids, torch.ones_like(ids), scorable, words)

    def block_logits(self, input_ids: Tensor, positions: Tensor, *, progress: bool = False) -> Tensor:
        """Logits at several positions read from one copy with all of them masked.

        Parameters
        ----------
        input_ids : Tensor
            ``(N, L)`` complete token ids.
        positions : Tensor
            ``(N, k)`` long, distinct positions per row to mask together and read.

        Returns
        -------
        Tensor
            ``(N, k, V)`` float32: row ``n``, slot ``j`` is the MLM's prediction at
            ``positions[n, j]`` given ``input_ids[n]`` with all of ``positions[n]`` masked.
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

        Returns
        -------
        Tensor
            ``(N, k, V)`` float32 logits; the copies go through the model in chunks sized
            by ``memory_budget_mb``, and the LM head runs only at the read positions.
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
        out = self._masked_reduce(enc, torch.arange(N), masks, pos, lambda lg, tgt: lg, progress=progress)
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
        positions : sequence of int, optional
            Token positions (in the encoded sequence, ``[CLS]`` is 0) to read in every
            sequence. Default: every scorable position of every sequence.
        progress : bool
            Show a progress bar over masked copies on stderr.

        Returns
        -------
        MaskedConditionals
            One row per (sequence, position) pair, sequences in order, positions ascending.
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
        logits = self._masked_reduce(enc, rows, masks, query, lambda lg, tgt: lg, progress=progress)
        return MaskedConditionals(rows, query, logits)

    def _masked_reduce(
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

        Copy ``n`` is sequence ``rows[n]`` with the positions in ``masks[n]`` replaced by
        the mask token; its float32 logits at position ``query[n]`` go with the original
        tokens there to ``reduce(logits, target_ids)``, whose outputs are concatenated in the
        original copy order. ``query`` is ``(N,)`` (logits ``(n, V)``) or ``(N, k)`` for
        several positions read from one copy (logits ``(n, k, V)``). Copies are sorted by
        length and trimmed to the longest in their chunk.
        """
        N = int(rows.numel())
        if N == 0:
            return torch.empty((0, self.vocab_size))
        lengths = enc.lengths[rows]  # (N,)
        order = torch.argsort(lengths, stable=True)
        device = self.device
        outputs: list[Tensor] = []
        bar = _progress_bar(N, progress, "masked copies")
        try:
            for chunk in self._chunks(lengths[order].tolist()):
                idx = order[chunk]
                T = int(lengths[idx].max())
                ids = enc.input_ids[rows[idx], :T]  # (n, T)
                q = query[idx] if query.dim() == 2 else query[idx, None]  # (n, k)
                targets = ids.gather(1, q)  # (n, k)
                ids = ids.masked_fill(masks[idx, :T], self.mask_id).to(device)
                attn = enc.attention_mask[rows[idx], :T].to(device)
                logits = self._logits_at(ids, attn, q.to(device))  # (n, k, V) float32
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

    def _chunks(self, sorted_lengths: list[int]) -> Iterator[slice]:
        """Greedy chunks of consecutive copies whose padded activations fit the budget."""
        budget = self.memory_budget_mb * 2**20
        elem = torch.finfo(self.dtype).bits // 8
        start = 0
        n = len(sorted_lengths)
        while start < n:
            end = start + 1
            while end < n:
                T = sorted_lengths[end]
                per_token = elem * (6 * self._hidden + self._intermediate + self._heads * T)
                if (end + 1 - start) * T * per_token > budget:
                    break
                end += 1
            yield slice(start, end)
            start = end

    @torch.inference_mode()
    def _logits_at(self, input_ids: Tensor, attention_mask: Tensor, query: Tensor) -> Tensor:
        """``(n, k, V)`` float32 logits at positions ``query[i]`` (n, k) of row ``i`` of ``input_ids`` (n, T)."""
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]  # (n, 1)
        if self._head is None:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (n, T, V)
            return logits[rows, query].float()
        hidden = self._base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (n, T, H)
        return self._head(hidden[rows, query]).float()[..., : self.vocab_size]  # (n, k, V)

    # ------------------------------------------------------------------ energies
    def energy_terms(
        self, sequences: str | Sequence[str] | Encoding, *, variant: str = "pll", progress: bool = False
    ):
        """Per-position energy terms of each sequence (see :func:`mlm_ppl.models.energy.energy_terms`)."""
        from .energy import energy_terms

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

        ``energy="norm"`` is the negative pseudo-log-likelihood
        ``E_norm(x) = -sum_t log p(x_t | x_\\t)``; ``energy="raw"`` is
        ``E_raw(x) = -sum_t logit_t(x_t | x_\\t)`` (Goyal et al. 2021). ``variant`` is
        ``"pll"`` (mask one token at a time; Salazar et al. 2020) or ``"within_word_l2r"``
        (also mask the later tokens of the same word; Kauf & Ivanova 2023).
        """
        from .energy import check_energy

        check_energy(energy)
        return self.energy_terms(sequences, variant=variant, progress=progress).total(energy)


# ---------------------------------------------------------------------- helpers
def _as_string_list(sequences) -> list[str]:
    if isinstance(sequences, str):
        return [sequences]
    if isinstance(sequences, (bytes, bytearray)):
        raise TypeError("sequences must be str, not bytes; decode them first (e.g. data.decode('utf-8'))")
    try:
        seqs = list(sequences)
    except TypeError:
        raise TypeError(f"sequences must be a string or a list of strings, got {type(sequences).__name__}") from None
    if not seqs:
        raise ValueError("no sequences given: pass at least one string")
    for i, s in enumerate(seqs):
        if not isinstance(s, str):
            raise TypeError(f"sequence {i} is a {type(s).__name__}, not a str")
    return seqs


def _check_positions(positions: Sequence[int], enc: Encoding) -> list[int]:
    pos = list(positions)
    if not pos:
        raise ValueError("positions is empty; pass None for every scorable position")
    T = enc.input_ids.shape[1]
    for p in pos:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"positions must be ints, got {p!r}")
        if not 0 <= p < T:
            raise ValueError(f"position {p} is outside the encoded length {T}")
    return sorted(set(pos))


def _special_frame(tokenizer, probe_id: int, tokens: list[str]) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a sequence (``[CLS]`` ... ``[SEP]``)."""
    probe = tokens[probe_id]
    bare = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(probe, add_special_tokens=True)["input_ids"])
    if bare:
        for start in range(len(full) - len(bare) + 1):
            if full[start : start + len(bare)] == bare:
                return full[:start], full[start + len(bare) :]
    return [], []  # the tokenizer adds nothing around a sequence


def _max_length(model, tokenizer) -> int:
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


def _split_head(model):
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


def _progress_bar(total: int, enabled: bool, unit: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=" " + unit.split()[-1], desc=unit, leave=False, dynamic_ncols=True)
