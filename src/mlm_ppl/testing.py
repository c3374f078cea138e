"""Tiny random masked LMs for tests, docs and quick experiments.

Each builder makes a real Hugging Face model from a config (BERT, RoBERTa, ESM) and a
real tokenizer over a small vocabulary (WordPiece, byte-level BPE, ESM residues), offline,
in well under a second, with weights drawn from a seeded generator that leaves the global
RNG untouched. The weights are initialised with a large spread so that the conditionals are
far from uniform and energy differences are visible.

>>> from mlm_ppl.testing import tiny_bert
>>> mlm = tiny_bert()
>>> mlm.score(["the cat sat on the mat"]).shape
torch.Size([1])
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from .models.masked_lm import MaskedLM
from .models.pairs import PairConditionals
from .models.target import Evaluation

__all__ = [
    "TEXT_WORDS",
    "AMINO_ACIDS",
    "tiny_bert",
    "tiny_roberta",
    "tiny_esm",
    "tiny_antibody_bert",
    "tiny_residue_bert",
    "save_tiny",
    "TableTarget",
    "goyal_counterexample",
    "table_from_joint",
    "table_pair_conditionals",
]

TEXT_WORDS = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat", "and", "big", "red", "runs", "jumped")
"""Words every tiny text model can encode (some split into several subword tokens)."""

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
"""The 20 amino acids, one letter each: the alphabet of :func:`tiny_antibody_bert`."""

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _keeps_global_rng(builder):
    """Model constructors draw from torch's global RNG; restore it so builders have no side effects."""

    @functools.wraps(builder)
    def wrapper(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return builder(*args, **kwargs)

    return wrapper


def _init(model, seed: int, std: float, dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.to(dtype).eval()  # weights drawn in float32 either way: the same model at another precision


def _wordpiece_vocab() -> list[str]:
    pieces = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "and", "big", "red", "run", "jump", "##s", "##ed"]
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + pieces


@_keeps_global_rng
def tiny_bert(seed: int = 0, *, std: float = 0.5, max_length: int = 64) -> MaskedLM:
    """Build a tiny random 2-layer BERT with a 20-entry WordPiece vocabulary.

    The vocabulary covers :data:`TEXT_WORDS` (some words split into subword pieces) besides the
    five special tokens. The weights are drawn from a generator seeded with ``seed``; torch's
    global RNG is left as it was.

    Parameters
    ----------
    seed : int, optional
        Seed of the weights (default 0): the same seed gives the same model.
    std : float, optional
        Standard deviation of the normal weights (default 0.5, large, so that the conditionals
        are far from uniform); layer norms keep their initial values.
    max_length : int, optional
        Longest tokenized input, special tokens included (default 64).

    Returns
    -------
    MaskedLM
        The model, named ``"tiny-bert"``, in eval mode on the CPU.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_bert
    >>> mlm = tiny_bert()
    >>> mlm.vocab_size
    20
    >>> mlm.score(["the cat sat on the mat", "a dog ran"]).shape
    torch.Size([2])
    """
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(_wordpiece_vocab()) + "\n")
        tok = BertTokenizerFast(str(vocab_file), do_lower_case=True, model_max_length=max_length)
    cfg = BertConfig(vocab_size=len(tok), max_position_embeddings=max_length, pad_token_id=tok.pad_token_id, **_SIZES)
    return MaskedLM(_init(BertForMaskedLM(cfg), seed, std), tok, name="tiny-bert")


@_keeps_global_rng
def tiny_roberta(seed: int = 0, *, std: float = 0.5, max_length: int = 64) -> MaskedLM:
    """Build a tiny random 2-layer RoBERTa with a small byte-level BPE vocabulary.

    The vocabulary holds the letters of :data:`TEXT_WORDS` (with and without the leading-space
    marker ``Ġ``) and a few merges. The weights are drawn from a generator seeded with ``seed``;
    torch's global RNG is left as it was.

    Parameters
    ----------
    seed : int, optional
        Seed of the weights (default 0): the same seed gives the same model.
    std : float, optional
        Standard deviation of the normal weights (default 0.5); layer norms keep their initial
        values.
    max_length : int, optional
        Longest tokenized input, special tokens included (default 64).

    Returns
    -------
    MaskedLM
        The model, named ``"tiny-roberta"``, in eval mode on the CPU.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_roberta
    >>> mlm = tiny_roberta()
    >>> mlm.name
    'tiny-roberta'
    >>> mlm.score(["the cat sat on the mat"]).shape
    torch.Size([1])
    """
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    letters = sorted(set("".join(TEXT_WORDS)))
    vocab: dict[str, int] = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "Ġ": 4}
    for c in letters + ["Ġ" + c for c in letters]:
        vocab[c] = len(vocab)
    merges = []
    for a, b in [
        ("Ġ", "t"),
        ("Ġt", "h"),
        ("Ġth", "e"),
        ("t", "h"),
        ("th", "e"),
        ("Ġ", "c"),
        ("Ġc", "a"),
        ("Ġca", "t"),
        ("a", "t"),
        ("Ġ", "s"),
        ("Ġs", "at"),
        ("Ġ", "m"),
        ("Ġm", "at"),
        ("o", "n"),
        ("Ġ", "on"),
        ("Ġ", "d"),
        ("Ġd", "o"),
        ("Ġdo", "g"),
    ]:
        merges.append(f"{a} {b}")
        vocab.setdefault(a + b, len(vocab))
    vocab["<mask>"] = len(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vocab.json").write_text(json.dumps(vocab))
        (Path(tmp) / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
        tok = RobertaTokenizerFast(
            str(Path(tmp) / "vocab.json"), str(Path(tmp) / "merges.txt"), model_max_length=max_length
        )
    cfg = RobertaConfig(
        vocab_size=len(vocab),
        max_position_embeddings=max_length + 2,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
        **_SIZES,
    )
    return MaskedLM(_init(RobertaForMaskedLM(cfg), seed, std), tok, name="tiny-roberta")


@_keeps_global_rng
def tiny_esm(seed: int = 0, *, std: float = 0.5, alphabet: str = AMINO_ACIDS, max_length: int = 64) -> MaskedLM:
    """Build a tiny random 2-layer ESM (rotary positions) over an amino-acid alphabet.

    The vocabulary is ESM's four leading special tokens, one token per letter of ``alphabet``,
    and ``<mask>``. The weights are drawn from a generator seeded with ``seed``; torch's global
    RNG is left as it was.

    Parameters
    ----------
    seed : int, optional
        Seed of the weights (default 0): the same seed gives the same model.
    std : float, optional
        Standard deviation of the normal weights (default 0.5); layer norms keep their initial
        values.
    alphabet : str, optional
        The ordinary tokens, one character each (default :data:`AMINO_ACIDS`).
    max_length : int, optional
        Longest tokenized input, special tokens included (default 64).

    Returns
    -------
    MaskedLM
        The model, named ``"tiny-esm"``, in eval mode on the CPU.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_esm
    >>> mlm = tiny_esm()
    >>> mlm.vocab_size  # 4 special tokens, 20 amino acids, <mask>
    25
    >>> mlm.score(["ACDEF", "KLMNPQ"]).shape
    torch.Size([2])
    """
    from transformers import EsmConfig, EsmForMaskedLM, EsmTokenizer

    tokens = ["<cls>", "<pad>", "<eos>", "<unk>"] + list(alphabet) + ["<mask>"]
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(tokens) + "\n")
        tok = EsmTokenizer(str(vocab_file), model_max_length=max_length)
    cfg = EsmConfig(
        vocab_size=len(tokens),
        pad_token_id=tok.pad_token_id,
        mask_token_id=tok.mask_token_id,
        max_position_embeddings=max_length + 2,
        position_embedding_type="rotary",
        token_dropout=True,
        emb_layer_norm_before=False,
        **_SIZES,
    )
    return MaskedLM(_init(EsmForMaskedLM(cfg), seed, std), tok, name="tiny-esm")


@_keeps_global_rng
def tiny_residue_bert(
    alphabet: Sequence[str],
    seed: int = 0,
    *,
    std: float = 0.5,
    max_length: int = 64,
    name: str = "tiny-residue-bert",
    dtype: torch.dtype = torch.float32,
) -> MaskedLM:
    """Build a tiny random 2-layer BERT whose ordinary tokens are the given single characters.

    The token layout is AntiBERTy's: ``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]``, then
    the alphabet, one residue per token. Tiny alphabets (3-6 letters) give state spaces small
    enough to enumerate exactly; with ``dtype=torch.float64`` its energies and conditionals are
    float64, so exact transition matrices and stationary laws are free of float32 rounding (which
    differs between CPUs). The weights are drawn from a generator seeded with ``seed`` (in
    float32 whatever the ``dtype``); torch's global RNG is left as it was.

    Parameters
    ----------
    alphabet : sequence of str
        The ordinary tokens: distinct single characters (a string such as ``"ACDE"`` will do).
    seed : int, optional
        Seed of the weights (default 0): the same seed gives the same model.
    std : float, optional
        Standard deviation of the normal weights (default 0.5); layer norms keep their initial
        values.
    max_length : int, optional
        Longest tokenized input, special tokens included (default 64).
    name : str, optional
        The model's name (default ``"tiny-residue-bert"``).
    dtype : torch.dtype, optional
        The model's precision (default ``torch.float32``).

    Returns
    -------
    MaskedLM
        The residue-level model, in eval mode on the CPU.

    Raises
    ------
    ValueError
        When ``alphabet`` is empty, or holds a string that is not one character, or a character
        twice.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> mlm.vocab
    ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'A', 'C', 'D', 'E')
    >>> mlm.score(["ACD", "EEA"]).shape
    torch.Size([2])
    """
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    alphabet = list(alphabet)
    if not alphabet or any(len(a) != 1 for a in alphabet) or len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet must be distinct single characters, got {alphabet!r}")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + alphabet
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(tokens) + "\n")
        tok = BertTokenizer(str(vocab_file), do_lower_case=False, model_max_length=max_length)
    cfg = BertConfig(vocab_size=len(tokens), max_position_embeddings=max_length, pad_token_id=0, **_SIZES)
    return MaskedLM(_init(BertForMaskedLM(cfg), seed, std, dtype), tok, name=name, residue_level=True)


def tiny_antibody_bert(seed: int = 0, *, std: float = 0.5, max_length: int = 160) -> MaskedLM:
    """Build a tiny random BERT with AntiBERTy's exact vocabulary and token layout (25 tokens).

    It is :func:`tiny_residue_bert` over :data:`AMINO_ACIDS`: a stand-in for the real AntiBERTy
    (``load_mlm("antiberty")``) in tests and examples.

    Parameters
    ----------
    seed : int, optional
        Seed of the weights (default 0): the same seed gives the same model.
    std : float, optional
        Standard deviation of the normal weights (default 0.5); layer norms keep their initial
        values.
    max_length : int, optional
        Longest tokenized input, special tokens included (default 160, room for a heavy chain).

    Returns
    -------
    MaskedLM
        The residue-level model, named ``"tiny-antibody-bert"``, in eval mode on the CPU.

    Examples
    --------
    >>> from mlm_ppl.testing import tiny_antibody_bert
    >>> mlm = tiny_antibody_bert()
    >>> mlm.vocab_size
    25
    >>> mlm.score(["EVQLVESGGGLVQPGGSLRLSCAAS"]).shape
    torch.Size([1])
    """
    return tiny_residue_bert(AMINO_ACIDS, seed, std=std, max_length=max_length, name="tiny-antibody-bert")


def save_tiny(mlm: MaskedLM, directory: str | Path) -> Path:
    """Save a tiny model and its tokenizer so that :func:`~mlm_ppl.load_mlm` can load the directory.

    Parameters
    ----------
    mlm : MaskedLM
        The model to save (any :class:`~mlm_ppl.MaskedLM`, in practice one of this module's).
    directory : str or path
        Where to write the weights, config and tokenizer files (made if missing).

    Returns
    -------
    pathlib.Path
        ``directory``, as a path.

    Examples
    --------
    >>> import tempfile
    >>> from mlm_ppl import load_mlm
    >>> from mlm_ppl.testing import save_tiny, tiny_esm
    >>> directory = save_tiny(tiny_esm(), tempfile.mkdtemp())
    >>> load_mlm(directory).vocab_size
    25
    """
    directory = Path(directory)
    mlm.model.save_pretrained(directory)
    mlm.tokenizer.save_pretrained(directory)
    return directory


class TableTarget:
    """A target whose MLM conditionals come from a function, for exactly solvable examples.

    It implements the :class:`~mlm_ppl.models.Target` protocol. Token ids ``0 .. K-1`` are
    ordinary, ``K`` is the mask; every position is free. The energy is
    ``E_norm(x) = -sum_t log p(x_t | x_\\t)``, so the kernels run on it unchanged.

    Parameters
    ----------
    conditional : callable
        ``conditional(tokens, position)`` returns ``(N, K)`` probabilities of the ``K`` ordinary
        tokens at ``position`` (0 .. L-1) given the other tokens of ``tokens`` ``(N, L)``. Filling
        a template from the model (``init="sample"`` or ``"greedy"``) calls it with the mask ``K``
        at the positions not yet filled; the conditionals of :func:`table_from_joint` and
        :func:`goyal_counterexample` take ordinary tokens only, so start their chains with
        ``init="uniform"`` or given tokens.
    length : int
        Number of positions ``L``, all free.
    num_tokens : int
        Number of ordinary tokens ``K``.
    temperature : float, optional
        The target's temperature (default 1.0).

    Attributes
    ----------
    vocab_size : int
        ``K + 1``: the ordinary tokens and the mask.
    mask_id : int
        ``K``, the mask token's id.
    template : torch.Tensor
        Shape ``(L,)``, every position the mask.
    free_positions : torch.Tensor
        Shape ``(L,)``, ``0 .. L-1``.
    energy_name : str
        ``"norm"``.

    See Also
    --------
    goyal_counterexample : Goyal et al.'s two-token example.
    table_from_joint : A table whose conditionals are those of a joint distribution.

    Examples
    --------
    Two binary tokens, each uniform whatever the other:

    >>> import torch
    >>> from mlm_ppl.testing import TableTarget
    >>> target = TableTarget(lambda tokens, position: torch.full((len(tokens), 2), 0.5), length=2, num_tokens=2)
    >>> round(float(target.evaluate(torch.tensor([[0, 1]])).energy[0]), 2)  # 2 log 2
    1.39
    """

    def __init__(self, conditional, length: int, num_tokens: int, temperature: float = 1.0) -> None:
        self.conditional = conditional
        self.vocab_size = num_tokens + 1
        self.mask_id = num_tokens
        self.template = torch.full((length,), num_tokens, dtype=torch.long)
        self.free_positions = torch.arange(length)
        self.num_free = length
        self.temperature = float(temperature)
        self.energy_name = "norm"
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[num_tokens] = False
        self.ordinary_mask = ordinary

    def _logits(self, tokens: Tensor, position: int) -> Tensor:
        probs = torch.as_tensor(self.conditional(tokens, position), dtype=torch.float64)
        logits = torch.full((tokens.shape[0], self.vocab_size), float("-inf"), dtype=torch.float64)
        logits[:, : self.mask_id] = probs.log()
        return logits.float()

    def site_logits(self, tokens: Tensor, positions: Tensor, *, masked: bool = True) -> Tensor:
        """Log-probabilities of the ordinary tokens at one masked position of each state.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, the states.
        positions : torch.Tensor
            Shape ``(N, 1)``, one position per state (a table defines single-site conditionals only).
        masked : bool, optional
            Must be True (the default): a table has no logits of unmasked tokens.

        Returns
        -------
        torch.Tensor
            Shape ``(N, 1, K + 1)``, float32: ``log conditional(tokens, position)`` for the ordinary
            tokens and ``-inf`` for the mask.

        Raises
        ------
        ValueError
            When ``masked`` is False, or ``positions`` has more than one column.
        """
        if not masked:
            raise ValueError("a TableTarget defines masked conditionals only; it has no logits of unmasked tokens")
        if positions.shape[1] != 1:
            raise ValueError("a TableTarget defines single-site conditionals only (block_size=1)")
        rows = [self._logits(tokens[i : i + 1], int(positions[i, 0])) for i in range(tokens.shape[0])]
        return torch.cat(rows)[:, None]

    def validate_tokens(self, tokens: Tensor) -> None:
        """Check that ``tokens`` are complete states of the table.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(..., L)``, ``torch.long`` token ids.

        Raises
        ------
        ValueError
            Unless ``tokens`` are ``torch.long`` with last dimension ``L`` and hold ordinary token
            ids only (``0 .. K-1``).
        """
        if tokens.dtype != torch.long or tokens.shape[-1:] != self.template.shape:
            raise ValueError(f"tokens must be torch.long ids ending in shape {tuple(self.template.shape)}")
        if ((tokens < 0) | (tokens >= self.mask_id)).any():
            raise ValueError(f"a table target's tokens are 0 .. {self.mask_id - 1}")

    @property
    def allowed(self) -> Tensor:
        """``(F, V)`` bool: the ordinary tokens at every position."""
        return self.ordinary_mask.expand(self.num_free, -1)

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which states are known to have log-factor ``-inf``: none, as a table target has no log-factor.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, the states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, bool, all False.
        """
        return torch.zeros(tokens.shape[0], dtype=torch.bool)

    def evaluate(self, tokens: Tensor) -> Evaluation:
        """Energies, log-factors and free-position conditionals of complete states.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, the states.

        Returns
        -------
        Evaluation
            The energies ``-sum_t log p(x_t | x_\\t)`` ``(N,)``, zero log-factors ``(N,)``, and
            the conditional logits at every position ``(N, L, K + 1)`` (see
            :class:`~mlm_ppl.models.Evaluation`).
        """
        cond = torch.stack([self._logits(tokens, p) for p in range(self.num_free)], dim=1)  # (N, F, V)
        logp = torch.log_softmax(cond, -1).gather(-1, tokens[:, :, None])[..., 0]
        return Evaluation(-logp.sum(-1), torch.zeros(tokens.shape[0]), cond)


def table_from_joint(joint) -> TableTarget:
    """Build a two-token :class:`TableTarget` whose conditionals are those of a joint distribution.

    The conditionals are compatible: they are those of one joint distribution.

    Parameters
    ----------
    joint : numpy.ndarray or torch.Tensor or sequence of sequence of float
        Shape ``(K, K)``, ``joint[i, j] = p(x_1 = i, x_2 = j)``, all entries > 0 (normalised here
        if they do not sum to 1).

    Returns
    -------
    TableTarget
        The two-position target over ``K`` ordinary tokens.

    Raises
    ------
    ValueError
        When ``joint`` is not a square matrix of positive entries.

    Examples
    --------
    >>> from mlm_ppl.testing import table_from_joint
    >>> target = table_from_joint([[0.4, 0.1], [0.2, 0.3]])
    >>> target.vocab_size, target.num_free
    (3, 2)
    """
    p = torch.as_tensor(joint, dtype=torch.float64)
    if p.dim() != 2 or p.shape[0] != p.shape[1] or not bool((p > 0).all()):
        raise ValueError("joint must be a square matrix of positive probabilities")
    p = p / p.sum()
    given_2 = p / p.sum(0, keepdim=True)  # p(x1 | x2), columns
    given_1 = p / p.sum(1, keepdim=True)  # p(x2 | x1), rows

    def conditional(tokens, position):
        if position == 0:
            return given_2[:, tokens[:, 1]].T
        return given_1[tokens[:, 0]]

    return TableTarget(conditional, length=2, num_tokens=p.shape[0])


def table_pair_conditionals(target: TableTarget, observed: tuple[int, int] = (0, 0), marginals=None):
    """Build the :class:`~mlm_ppl.PairConditionals` of a two-token :class:`TableTarget`.

    ``P_a(x_a | x_b)`` and ``P_b(x_b | x_a)`` come from ``target.conditional`` (the logits are
    the log-probabilities). A table has no reads with both positions masked: the marginals are
    uniform unless ``marginals`` gives them.

    Parameters
    ----------
    target : TableTarget
        A table with two positions.
    observed : tuple of int, optional
        The observed pair ``(x_a, x_b)`` (default ``(0, 0)``); the single-site logits are read
        beside it.
    marginals : tuple of numpy.ndarray or None, optional
        ``(p_a, p_b)``, the marginal probabilities of each position, each shape ``(K,)``;
        None (the default) for uniform ones.

    Returns
    -------
    PairConditionals
        The conditionals of positions ``(0, 1)`` over all ``K`` ordinary tokens, in float64.

    Raises
    ------
    ValueError
        When ``target`` does not have exactly two positions.

    Examples
    --------
    >>> from mlm_ppl.testing import table_from_joint, table_pair_conditionals
    >>> pair = table_pair_conditionals(table_from_joint([[0.4, 0.1], [0.2, 0.3]]))
    >>> pair.logits_a.shape, pair.observed
    (torch.Size([2, 2]), (0, 0))
    """
    K = target.mask_id
    if target.template.numel() != 2:
        raise ValueError("table_pair_conditionals needs a two-token TableTarget")
    values = torch.arange(K)
    masked = torch.full((K,), K)
    given_b = torch.as_tensor(
        target.conditional(torch.stack([masked, values], 1), 0), dtype=torch.float64
    )  # (K_b, K_a)
    given_a = torch.as_tensor(
        target.conditional(torch.stack([values, masked], 1), 1), dtype=torch.float64
    )  # (K_a, K_b)
    logits_a, logits_b = given_b.T.log(), given_a.log()
    if marginals is None:
        marg_a = marg_b = torch.zeros(K, dtype=torch.float64)
    else:
        marg_a, marg_b = (torch.as_tensor(m, dtype=torch.float64).log() for m in marginals)
    i, j = observed
    return PairConditionals(
        positions=(0, 1),
        candidates_a=values,
        candidates_b=values,
        logits_a=logits_a,
        logits_b=logits_b,
        marginal_a=marg_a,
        marginal_b=marg_b,
        single_a=logits_a[:, j],
        single_b=logits_b[i],
        observed=(int(i), int(j)),
    )


def goyal_counterexample() -> TableTarget:
    """Build Goyal et al. (2021)'s two binary tokens with incompatible conditionals.

    ``p(X1 | X2) = [[.99, .01], [.01, .99]]`` (row: value of X2) and ``p(X2 | X1)`` uniform: no
    joint distribution has both as its conditionals.

    Returns
    -------
    TableTarget
        The two-position target over two ordinary tokens.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.testing import goyal_counterexample
    >>> target = goyal_counterexample()
    >>> energy = target.evaluate(torch.tensor([[0, 0], [1, 0]])).energy  # -log p(x1|x2) - log 0.5
    >>> bool(energy[0] < energy[1])
    True
    """
    table = torch.tensor([[0.99, 0.01], [0.01, 0.99]])

    def conditional(tokens, position):
        if position == 0:
            return table[tokens[:, 1]]
        return torch.full((tokens.shape[0], 2), 0.5)

    return TableTarget(conditional, length=2, num_tokens=2)
