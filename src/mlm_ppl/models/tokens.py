"""Token sequences: the :class:`Encoding` of a batch and the codec between text and token ids.

:class:`TokenCodec` knows a tokenizer's vocabulary, its special tokens and the frame it puts
around a sequence; it validates and encodes text (words for subword models, residues for
protein models), and decodes ids back. It runs no model: :class:`~mlm_ppl.models.MaskedLM`
is a codec plus the forward-pass engine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["Encoding", "TokenCodec", "loop_tokens"]


@dataclass(frozen=True)
class Encoding:
    """A padded batch of encoded sequences.

    What :meth:`TokenCodec.encode` and :meth:`TokenCodec.encoding_from_ids` return.

    Parameters
    ----------
    input_ids : torch.Tensor
        Shape ``(B, T)``, long, right-padded with the pad id; includes the model's special
        tokens (``[CLS]``/``[SEP]``, ``<s>``/``</s>`` ...).
    attention_mask : torch.Tensor
        Shape ``(B, T)``, long, 1 on real tokens, 0 on padding.
    scorable : torch.Tensor
        Shape ``(B, T)``, bool, True on ordinary tokens: the positions that are scored and may be
        sampled. Special tokens (``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]`` ...) are never
        scorable.
    word_ids : torch.Tensor
        Shape ``(B, T)``, long, index of the word each token belongs to, -1 on special tokens and
        padding. For residue-level models (AntiBERTy, ESM) every residue is a word.
    position_ids : torch.Tensor or None, optional
        Shape ``(B, T)``, long, the position ids the model reads the tokens at; None (the
        default): the model's own, as for a whole sequence. A cropped copy of a longer sequence
        keeps the columns' original ids (:meth:`~mlm_ppl.MaskedLM.position_ids`).
    frame : FrozenFrame or None, optional
        The rest of a longer sequence, frozen: every row's tokens also attend, at every layer,
        to these keys and values of a fixed reference's other columns
        (:meth:`~mlm_ppl.MaskedLM.frozen_frame`). None (the default): the rows are whole.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> enc = mlm.encode(["ACD", "CE"])  # an Encoding
    >>> enc.input_ids  # [CLS] is 2, [SEP] 3, [PAD] 0
    tensor([[2, 5, 6, 7, 3],
            [2, 6, 8, 3, 0]])
    >>> len(enc), enc.lengths.tolist(), enc.scorable.sum(-1).tolist()
    (2, [5, 4], [3, 2])
    """

    input_ids: Tensor
    attention_mask: Tensor
    scorable: Tensor
    word_ids: Tensor
    position_ids: Tensor | None = None
    frame: Any = None  # a frozen.FrozenFrame (masked_lm, which reads it, imports this module)

    @property
    def lengths(self) -> Tensor:
        """``(B,)`` number of real tokens (special tokens included) in each sequence."""
        return self.attention_mask.sum(-1)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def loop_tokens(loop: str) -> tuple[str, ...]:
    """A loop as users write it (a reference, a library entry, a known loop): tokens separated by
    spaces where it has any (text models), else one token per character (residues)."""
    return tuple(loop.split()) if " " in loop else tuple(loop)


class TokenCodec:
    """Encode and decode token sequences of one tokenizer, validating them first.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        The model's tokenizer; it must have a mask token.
    vocab_size : int
        Rows of the model's output layer (may exceed the tokenizer's vocabulary: ids the
        tokenizer never produces are never ordinary).
    max_length : int
        Longest encoded sequence, special tokens included.
    name : str
        A label for messages.
    pad_id : int, optional
        Padding id when the tokenizer has none.
    residue_level : bool, optional
        Treat each non-space character of an input string as one token (protein and
        antibody models). Default: True when every ordinary vocabulary entry is one character.

    Attributes
    ----------
    vocab : tuple of str
        The token of each id, ``""`` for ids the tokenizer never produces.
    ordinary_mask : torch.Tensor
        Shape ``(V,)``, bool, the ordinary tokens: the ones that may be scored and sampled
        (never special tokens, nor ids the tokenizer never produces).
    mask_id : int
        The mask token's id.
    special_ids : frozenset of int
        The tokenizer's special token ids.
    unk_id : int or None
        The unknown token's id, None where the tokenizer has none.

    Raises
    ------
    ValueError
        If the tokenizer has no mask token, or only special tokens (its vocabulary files are
        missing or empty).

    Examples
    --------
    A :class:`~mlm_ppl.MaskedLM` is a codec; one can be made from its tokenizer alone:

    >>> from mlm_ppl.models import TokenCodec
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> tokenizer = tiny_residue_bert("ACDE", seed=1).tokenizer
    >>> codec = TokenCodec(tokenizer, vocab_size=9, max_length=16)
    >>> codec.residue_level, codec.vocab[codec.mask_id]
    (True, '[MASK]')
    >>> codec.decode(codec.encode(["ACD", "C E"]).input_ids)  # spaces between residues are optional
    ['ACD', 'CE']
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        max_length: int,
        name: str = "<model>",
        pad_id: int | None = None,
        residue_level: bool | None = None,
    ) -> None:
        if tokenizer.mask_token_id is None:
            raise ValueError(f"model {name!r}: its tokenizer has no mask token, so it is not a masked LM")
        self.tokenizer = tokenizer
        self.name = name
        self.mask_id: int = int(tokenizer.mask_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id: int = int(pad if pad is not None else pad_id or 0)
        self.unk_id: int | None = tokenizer.unk_token_id
        self.special_ids: frozenset[int] = frozenset(int(i) for i in tokenizer.all_special_ids)
        self.vocab_size: int = int(vocab_size)
        tokens = [""] * self.vocab_size
        for tok, idx in tokenizer.get_vocab().items():
            if idx < self.vocab_size:
                tokens[idx] = tok
        self.vocab: tuple[str, ...] = tuple(tokens)
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[sorted(i for i in self.special_ids if i < self.vocab_size)] = False
        for idx, tok in enumerate(tokens):
            if tok == "":  # ids the tokenizer never produces (padded embedding rows)
                ordinary[idx] = False
        if not ordinary.any():
            raise ValueError(
                f"model {name!r}: its tokenizer has only special tokens ({len(tokenizer)} in all); "
                "the tokenizer files (vocab.txt, tokenizer.json, ...) are missing or empty"
            )
        self.ordinary_mask: Tensor = ordinary  # (V,) bool: tokens that may be scored/sampled
        self._prefix_ids, self._suffix_ids = _special_frame(tokenizer, int(ordinary.nonzero()[0]), tokens)
        if residue_level is None:
            residue_level = all(len(tokens[i]) == 1 for i in ordinary.nonzero().flatten().tolist())
        self.residue_level = bool(residue_level)
        self.max_length: int = int(max_length)
        self._special_strings = sorted(
            (tokens[i] for i in self.special_ids if i < self.vocab_size and tokens[i]), key=len, reverse=True
        )
        self._residue_re = re.compile("|".join([re.escape(s) for s in self._special_strings] + [r"\S"]))
        self._char_cache: dict[str, bool] = {}

    def encode(self, sequences: str | Sequence[str], *, allow_mask: bool = False) -> Encoding:
        """Encode strings into a padded batch, validating them first.

        Parameters
        ----------
        sequences : str or sequence of str
            Text (subword models) or residues (residue-level models; spaces between
            residues are optional). A single string is a batch of one.
        allow_mask : bool, optional
            Accept the mask token inside sequences (templates for sampling). Masked
            positions are not scorable. Default False.

        Returns
        -------
        Encoding
            The batch, right-padded to its longest sequence, special tokens included.

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
        covered = sum(
            max(0, end - start) for (start, end), w in zip(enc["offset_mapping"], enc.word_ids()) if w is not None
        )
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

        Residue-level models give residues without separators (``"EVQL..."``). Ids outside the
        vocabulary are dropped too.

        Parameters
        ----------
        input_ids : torch.Tensor, sequence of int, or sequence of sequence of int
            Shape ``(L,)`` (one sequence) or ``(N, L)``, token ids.

        Returns
        -------
        list of str
            One string per sequence (a list of one for a single sequence).
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
        """An :class:`Encoding` of complete, unpadded token-id sequences.

        Every position is attended; ordinary tokens are scorable, and each ordinary token is its
        own word (special tokens, the mask token included, have word id -1).

        Parameters
        ----------
        input_ids : torch.Tensor
            Shape ``(N, L)``, long token ids within the vocabulary.

        Returns
        -------
        Encoding
            The encoding, on the CPU.

        Raises
        ------
        TypeError
            If ``input_ids`` are not ``torch.long``.
        ValueError
            If ``input_ids`` are not 2-D, or hold an id outside ``[0, vocab_size)``.

        Examples
        --------
        >>> import torch
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> mlm = tiny_residue_bert("ACDE", seed=1)
        >>> enc = mlm.encoding_from_ids(torch.tensor([[2, 5, 4, 7, 3]]))  # [CLS] A [MASK] D [SEP]
        >>> enc.scorable.tolist(), enc.word_ids.tolist()
        ([[False, True, False, True, False]], [[-1, 0, -1, 1, -1]])
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
