"""Reading an MLM's conditionals at two positions: :class:`PairConditionals`.

Mask two positions ``a`` and ``b`` of a sequence, keep the rest observed, and read the MLM's
conditionals ``P_a(x_a | x_b)`` (only ``a`` masked, ``b`` set to ``x_b``) and
``P_b(x_b | x_a)`` for every candidate of the other position, plus the marginals read with
both masked (Torroba Hennigen & Kim 2023). The joints built from them are in
:mod:`mlm_ppl.models.pairs.joints`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..._checks import check_type
from .joints import SIDES, PairJoint, build_joint, index_of, joint_options, pair_joint

if TYPE_CHECKING:  # pragma: no cover
    from ..masked_lm import MaskedLM

__all__ = ["PairConditionals", "pair_conditionals", "derive_pair_joint", "candidate_sets"]


@dataclass(frozen=True)
class PairConditionals:
    """An MLM's conditionals at two positions ``a`` and ``b`` of one sequence, over a support.

    Rows index the candidates of ``a``, columns the candidates of ``b``. All logits are
    float64 and restricted to the support. Made by :func:`~mlm_ppl.pair_conditionals`; the
    fields are kept as attributes.

    Parameters
    ----------
    positions : tuple of int
        ``(a, b)``, token positions in the encoded sequence (``[CLS]`` is 0).
    candidates_a, candidates_b : torch.Tensor
        Shapes ``(K_a,)`` and ``(K_b,)``, long token ids, distinct: ordinary tokens, or with
        ``support="all"`` every token id of the vocabulary.
    logits_a : torch.Tensor
        Shape ``(K_a, K_b)``: entry ``[i, j]`` is the logit of ``candidates_a[i]`` at ``a``, read
        with ``a`` masked and ``b`` set to ``candidates_b[j]``.
    logits_b : torch.Tensor
        Shape ``(K_a, K_b)``: entry ``[i, j]`` is the logit of ``candidates_b[j]`` at ``b``, read
        with ``b`` masked and ``a`` set to ``candidates_a[i]``.
    marginal_a, marginal_b : torch.Tensor
        Shapes ``(K_a,)``, ``(K_b,)``, logits read with both positions masked.
    single_a, single_b : torch.Tensor
        Shapes ``(K_a,)``, ``(K_b,)``, logits read with only that position masked and the other
        at its observed token.
    observed : tuple of int
        The observed token ids at ``a`` and ``b``.
    copies : int, optional
        Masked copies of the sequence that went through the model (default 0).

    Examples
    --------
    >>> from mlm_ppl import pair_conditionals
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> cond = pair_conditionals(tiny_residue_bert("ACDE", seed=1), "ACDEA", 2, 3)
    >>> cond.positions, cond.observed  # C and D of [CLS] A C D E A [SEP]
    ((2, 3), (6, 7))
    >>> cond.candidates_a  # every ordinary token: A, C, D, E
    tensor([5, 6, 7, 8])
    >>> cond.log_cond_a.shape, cond.observed_index
    (torch.Size([4, 4]), (1, 2))
    >>> cond.joint("ag").log_joint.shape
    torch.Size([4, 4])
    """

    positions: tuple[int, int]
    candidates_a: Tensor
    candidates_b: Tensor
    logits_a: Tensor
    logits_b: Tensor
    marginal_a: Tensor
    marginal_b: Tensor
    single_a: Tensor
    single_b: Tensor
    observed: tuple[int, int]
    copies: int = 0

    @property
    def log_cond_a(self) -> Tensor:
        """``(K_a, K_b)`` ``log P_a(x_a | x_b)``, each column normalised over the candidates of ``a``."""
        return torch.log_softmax(self.logits_a, dim=0)

    @property
    def log_cond_b(self) -> Tensor:
        """``(K_a, K_b)`` ``log P_b(x_b | x_a)``, each row normalised over the candidates of ``b``."""
        return torch.log_softmax(self.logits_b, dim=1)

    @property
    def observed_index(self) -> tuple[int, int] | None:
        """Indices of the observed tokens among the candidates, or None if either is outside the support."""
        i, j = index_of(self.candidates_a, self.observed[0]), index_of(self.candidates_b, self.observed[1])
        return None if i is None or j is None else (i, j)

    def joint(self, method: str, **options: Any) -> PairJoint:
        """The joint of ``method`` built from these conditionals (:func:`~mlm_ppl.models.pair_joint`).

        Parameters
        ----------
        method : {"naive", "mrf", "mrf_logit", "hcb", "ag"}
            How to combine the conditionals (:data:`~mlm_ppl.PAIR_METHODS`).
        **options
            The method's options: ``pivot``, ``pivot_side`` for ``hcb``; ``tol``, ``max_iter``,
            ``accelerate`` for ``ag``; None for an option takes its default.

        Returns
        -------
        PairJoint
            The normalised joint over the candidate pairs.

        Raises
        ------
        ValueError, TypeError
            When ``method`` is unknown or an option is unknown, belongs to another method or is
            invalid (:func:`~mlm_ppl.models.pairs.joint_options`), or an ``hcb`` pivot token id
            is not a candidate.
        """
        return pair_joint(self, method, **options)


def candidate_sets(observed: int, single: Tensor, marginal: Tensor, size: int, ordinary: Tensor) -> Tensor:
    """A restricted support of one position: ``size`` token ids chosen by the paper's code's rule.

    The rule is that of ``ltorroba/lms-from-mlms`` (``generate_sets``, its ``--joint-size K``):
    the observed token first, then the ``(size - 1) // 2`` most likely other tokens of the
    single-masked conditional ``single``, then the most likely remaining tokens of the
    both-masked marginal ``marginal``; ordinary tokens only (the reference code ranks the
    whole vocabulary, so special tokens can be among its candidates). Ties go to the lower id.

    Parameters
    ----------
    observed : int
        The observed token id at the position, the first candidate.
    single : torch.Tensor
        Shape ``(V,)``, logits read with only this position masked.
    marginal : torch.Tensor
        Shape ``(V,)``, logits read with both positions masked.
    size : int
        ``K``, the number of candidates: at least 1 and at most the number of ordinary tokens.
    ordinary : torch.Tensor
        Shape ``(V,)`` bool, the ordinary tokens, the only ones chosen besides ``observed``.

    Returns
    -------
    torch.Tensor
        Shape ``(size,)``, long token ids, ``observed`` first.

    Raises
    ------
    ValueError
        Where ``size`` is not an integer from 1 to the number of ordinary tokens (with
        ``observed``, where it is not one of them).

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.models.pairs import candidate_sets
    >>> single = torch.tensor([0.0, 3.0, 2.0, 1.0, 0.0])
    >>> marginal = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0])
    >>> ordinary = torch.tensor([False, True, True, True, True])  # token 0 is special
    >>> candidate_sets(1, single, marginal, 3, ordinary)  # 1, then the best of single, then of marginal
    tensor([1, 2, 4])
    """
    available = int(ordinary.sum()) + int(not bool(ordinary[int(observed)]))
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= available:
        raise ValueError(
            f"size must be an integer from 1 to the {available} tokens a candidate can be, got {size!r}: more would "
            "repeat tokens and take special ones"
        )
    chosen = [int(observed)]
    taken = ~ordinary.clone()
    taken[int(observed)] = True
    for logits, count in ((single, (size - 1) // 2), (marginal, size - 1 - (size - 1) // 2)):
        if count == 0:
            continue
        order = torch.argsort(logits.masked_fill(taken, float("-inf")), descending=True, stable=True)[:count]
        chosen.extend(order.tolist())
        taken[order] = True
    return torch.tensor(chosen, dtype=torch.long)


def pair_conditionals(
    mlm: "MaskedLM",
    sequence: str | Tensor,
    a: int,
    b: int,
    *,
    support: int | str | tuple[Sequence[int], Sequence[int]] | None = None,
    progress: bool = False,
) -> PairConditionals:
    """Read the MLM's conditionals at positions ``a`` and ``b`` of ``sequence`` over a support.

    Parameters
    ----------
    mlm : MaskedLM
        The masked language model to read.
    sequence : str or torch.Tensor
        A sequence (encoded with the model's special tokens) or its token ids, shape ``(L,)``.
    a, b : int
        Distinct ordinary token positions of the encoded sequence (``[CLS]`` is 0, so residue
        ``i`` of an AntiBERTy sequence is position ``i + 1``).
    support : None, int, "all", or (list, list), optional
        None (the default): every ordinary token of the vocabulary at both positions (``2V + 1`` masked
        copies). An int ``K``: ``K`` candidates per position chosen by the reference code's rule (see
        :func:`candidate_sets`). ``"all"``: every token id, special tokens included, as the
        reference code's whole-vocabulary mode (``ltorroba/lms-from-mlms``) does; its
        conditionals are normalised over the whole vocabulary, ours (None) over the ordinary
        tokens. A pair of token-id lists: those candidates (ordinary tokens).
    progress : bool, optional
        Progress bar over the masked copies (default False).

    Returns
    -------
    PairConditionals
        The conditionals, marginals and candidates of the two positions.

    Raises
    ------
    ValueError
        When ``a`` or ``b`` is not the position of an ordinary token of the sequence, ``a == b``,
        token ids are not of shape ``(L,)``, or ``support`` is out of range (``K`` outside
        ``[1, number of ordinary tokens]``; a list empty, with repeats or with a non-ordinary id).
    TypeError
        When ``a`` or ``b`` is not an int, or ``support`` has none of the forms above.

    Notes
    -----
    Copies are batched through :meth:`~mlm_ppl.MaskedLM.masked_logits`; each distinct context is
    run once (the context with one position masked and the other at its observed token serves
    both the candidate selection and the conditional matrix).

    Examples
    --------
    >>> from mlm_ppl import pair_conditionals
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> cond = pair_conditionals(mlm, "ACDEA", 2, 3)  # the C and D of [CLS] A C D E A [SEP]
    >>> cond.logits_a.shape, cond.copies  # 4 x 4 candidates; 3 + 3 + 3 masked copies
    (torch.Size([4, 4]), 9)
    >>> pair_conditionals(mlm, "ACDEA", 2, 3, support=2).candidates_a.shape  # K = 2 per position
    torch.Size([2])
    """
    ids = _sequence_ids(mlm, sequence)
    L = ids.numel()
    for name, p in (("a", a), ("b", b)):
        check_type(p, f"position {name}", int)
        if not 0 <= p < L or not bool(mlm.ordinary_mask[ids[p]]):
            ok = mlm.ordinary_mask[ids].nonzero().flatten().tolist()
            raise ValueError(
                f"position {name}={p} is not an ordinary token of the sequence; positions run from 0 ([CLS]) "
                f"and the ordinary ones are {ok[0]}..{ok[-1]}"
            )
    if a == b:
        raise ValueError(f"positions a and b must differ, got {a} twice")
    ordinary = mlm.ordinary_mask.cpu()
    n_ordinary = int(ordinary.sum())
    fixed = _check_support(support, ordinary, n_ordinary)
    obs_a, obs_b = int(ids[a]), int(ids[b])
    both = torch.tensor([a, b])

    def copy(mask_at: list[int], set_at: int | None = None, value: int = 0) -> tuple[Tensor, Tensor]:
        x = ids.clone()
        if set_at is not None:
            x[set_at] = value
        m = torch.zeros(L, dtype=torch.bool)
        m[mask_at] = True
        return x, m

    # stage 1: both masked, a alone masked, b alone masked (3 copies, each read at a and b)
    first = [copy([a, b]), copy([a]), copy([b])]
    x1 = torch.stack([c[0] for c in first])
    m1 = torch.stack([c[1] for c in first])
    out1 = mlm.masked_logits(x1, m1, both.expand(3, 2)).double()  # (3, 2, V)
    marg_a, marg_b = out1[0, 0], out1[0, 1]
    single_a, single_b = out1[1, 0], out1[2, 1]
    if fixed is not None:
        cand_a, cand_b = fixed
    elif support is None:
        cand_a = cand_b = ordinary.nonzero().flatten()
    elif support == "all":
        cand_a = cand_b = torch.arange(mlm.vocab_size)
    else:
        assert isinstance(support, int)  # _check_support returned None: an int K
        cand_a = candidate_sets(obs_a, single_a, marg_a, support, ordinary)
        cand_b = candidate_sets(obs_b, single_b, marg_b, support, ordinary)

    # stage 2: a masked with b = each candidate, b masked with a = each candidate; skip the
    # contexts equal to stage 1's single-masked copies
    need_a = [j for j, t in enumerate(cand_b.tolist()) if t != obs_b]
    need_b = [i for i, t in enumerate(cand_a.tolist()) if t != obs_a]
    copies = [copy([a], b, int(cand_b[j])) for j in need_a] + [copy([b], a, int(cand_a[i])) for i in need_b]
    V = mlm.vocab_size
    col_a = single_a.expand(len(cand_b), V).clone()  # (K_b, V): logits at a for each b candidate
    row_b = single_b.expand(len(cand_a), V).clone()  # (K_a, V): logits at b for each a candidate
    if copies:
        x2 = torch.stack([c[0] for c in copies])
        m2 = torch.stack([c[1] for c in copies])
        read = torch.tensor([a] * len(need_a) + [b] * len(need_b))[:, None]
        out2 = mlm.masked_logits(x2, m2, read, progress=progress)[:, 0].double()  # (n, V)
        col_a[need_a] = out2[: len(need_a)]
        row_b[need_b] = out2[len(need_a) :]
    return PairConditionals(
        positions=(a, b),
        candidates_a=cand_a,
        candidates_b=cand_b,
        logits_a=col_a[:, cand_a].T.contiguous(),
        logits_b=row_b[:, cand_b].contiguous(),
        marginal_a=marg_a[cand_a],
        marginal_b=marg_b[cand_b],
        single_a=single_a[cand_a],
        single_b=single_b[cand_b],
        observed=(obs_a, obs_b),
        copies=3 + len(copies),
    )


def derive_pair_joint(
    mlm: "MaskedLM",
    sequence: str | Tensor,
    a: int,
    b: int,
    *,
    method: str,
    support: int | str | tuple[Sequence[int], Sequence[int]] | None = None,
    pivot: str | int | None = None,
    pivot_side: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    accelerate: bool | None = None,
    progress: bool = False,
) -> PairJoint:
    """An explicit, normalised joint over positions ``a`` and ``b`` of ``sequence``.

    Reads the MLM's conditionals with :func:`~mlm_ppl.pair_conditionals` and combines them with
    ``method`` (see :func:`~mlm_ppl.models.pair_joint`). To compare several
    methods on the same pair, call :func:`~mlm_ppl.pair_conditionals` once and then
    :meth:`~mlm_ppl.PairConditionals.joint` per method: the forward passes are the expensive part.
    The method and its options are checked before any forward pass.

    Parameters
    ----------
    mlm : MaskedLM
        The masked language model to read.
    sequence : str or torch.Tensor
        A sequence (encoded with the model's special tokens) or its token ids, shape ``(L,)``.
    a, b : int
        Distinct ordinary token positions of the encoded sequence (``[CLS]`` is 0).
    method : {"naive", "mrf", "mrf_logit", "hcb", "ag"}
        How to combine the conditionals (:data:`~mlm_ppl.PAIR_METHODS`).
    support : None, int, "all", or (list, list), optional
        The candidates of each position, as in :func:`~mlm_ppl.pair_conditionals` (default
        None: every ordinary token).
    pivot : {"both", "one"} or int, optional
        ``hcb`` only: how the pivot is chosen, or its token id
        (:class:`~mlm_ppl.models.pairs.HCBOptions`; None: ``"both"``).
    pivot_side : {"a", "b"}, optional
        ``hcb`` only: the position whose value is pivoted (None: ``"a"``).
    tol : float, optional
        ``ag`` only: the tolerance of the fixed-point equation
        (:class:`~mlm_ppl.models.pairs.AGOptions`; None: 1e-6).
    max_iter : int, optional
        ``ag`` only: the cap on evaluations of the fixed-point map (None: 20000).
    accelerate : bool, optional
        ``ag`` only: SQUAREM or the plain iteration (None: True, SQUAREM).
    progress : bool, optional
        Progress bar over the masked copies (default False).

    Returns
    -------
    PairJoint
        The normalised joint over the candidate pairs of ``a`` and ``b``.

    Raises
    ------
    ValueError, TypeError
        When ``method`` or an option is unknown or invalid, an option belongs to another method
        (:func:`~mlm_ppl.models.pairs.joint_options`), an ``hcb`` pivot token id is not a
        candidate, or the positions or the support are invalid (:func:`~mlm_ppl.pair_conditionals`).

    Examples
    --------
    >>> from mlm_ppl import derive_pair_joint
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> joint = derive_pair_joint(tiny_residue_bert("ACDE", seed=1), "ACDEA", 2, 3, method="ag")
    >>> joint.log_joint.shape, joint.converged
    (torch.Size([4, 4]), True)
    >>> joint.tokens(joint.sample((5,))).shape  # five (x_a, x_b) pairs of token ids
    torch.Size([5, 2])
    """
    options = joint_options(
        method, pivot=pivot, pivot_side=pivot_side, tol=tol, max_iter=max_iter, accelerate=accelerate
    )  # checked once, before any forward pass
    cond = pair_conditionals(mlm, sequence, a, b, support=support, progress=progress)
    return build_joint(cond, method, options)


def _sequence_ids(mlm: "MaskedLM", sequence: str | Tensor) -> Tensor:
    if isinstance(sequence, str):
        enc = mlm.encode(sequence)
        return enc.input_ids[0, : int(enc.lengths[0])].clone()
    ids = torch.as_tensor(sequence)
    if ids.dim() != 1:
        raise ValueError(f"token ids must have shape (L,), got {tuple(ids.shape)}")
    return mlm.encoding_from_ids(ids[None]).input_ids[0].clone()


def _check_support(support, ordinary: Tensor, n_ordinary: int):
    if support is None or (isinstance(support, str) and support == "all"):
        return None
    if isinstance(support, bool):
        raise TypeError("support must be None, an int K, 'all' or a pair of token-id lists, got a bool")
    if isinstance(support, int):
        if not 1 <= support <= n_ordinary:
            raise ValueError(f"support K must be in [1, {n_ordinary}] (the ordinary tokens), got {support}")
        return None
    if not (isinstance(support, (tuple, list)) and len(support) == 2):
        raise TypeError(f"support must be None, an int K, 'all' or a pair of token-id lists, got {support!r}")
    out = []
    for name, tokens in zip(SIDES, support):
        t = torch.as_tensor(list(tokens), dtype=torch.long)
        if t.dim() != 1 or t.numel() == 0:
            raise ValueError(f"support of position {name} must be a non-empty list of token ids")
        if t.unique().numel() != t.numel():
            raise ValueError(f"support of position {name} repeats a token id: {t.tolist()}")
        if ((t < 0) | (t >= ordinary.numel())).any() or not bool(ordinary[t].all()):
            raise ValueError(f"support of position {name} must hold ordinary token ids only, got {t.tolist()}")
        out.append(t)
    return tuple(out)
