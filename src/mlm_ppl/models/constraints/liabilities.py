"""Antibody sequence liabilities, each a rule or an expert selectable by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .experts import Expert, residue_count
from .fields import FieldTypeError, FieldValueError
from .rules import Forbid, OddCount, Rule

LIABILITIES: dict[str, Callable[[], Rule | Expert]] = {
    "n-glycosylation": lambda: Forbid("n-glycosylation", "N[^P][ST]"),
    "deamidation": lambda: Forbid("deamidation", "N[GS]"),
    "isomerisation": lambda: Forbid("isomerisation", "D[GS]"),
    "unpaired-cysteine": lambda: OddCount("unpaired-cysteine", "C"),
    "dp-cleavage": lambda: Forbid("dp-cleavage", "DP"),
    "met-trp-oxidation": lambda: residue_count("MW", name="met-trp-oxidation", weight=-1.0),
}
"""Common antibody sequence-liability motifs, each selectable by name.

Hard rules (a designed match makes a state infeasible; a framework match is only reported):

``n-glycosylation``  ``N[^P][ST]``, the N-linked glycosylation sequon N-X-S/T (X not P);
``deamidation``      ``N[GS]``, asparagine deamidation hot spots;
``isomerisation``    ``D[GS]``, aspartate isomerisation hot spots;
``dp-cleavage``      ``DP``, acid-labile Asp-Pro peptide bond (fragmentation);
``unpaired-cysteine`` an odd number of cysteines among the designed residues (:class:`OddCount`).

Soft: ``met-trp-oxidation``, an :func:`residue_count` expert of M and W among the designed
residues with weight -1 nat each.

These are the motifs that sequence-based developability screens commonly flag; see for
example Satława et al. (2024), "LAP: Liability Antibody Profiler by sequence & structural
mapping of natural and therapeutic antibodies", PLoS Comput Biol 20(3):e1011881, which also
shows that such annotation over-predicts (many flagged motifs are benign), and, for
developability guidelines beyond motifs, Raybould et al. (2019), "Five computational
developability guidelines for therapeutic antibody profiling", PNAS 116(10):4025-4030.
"""


def liability_constraints(names: Sequence[str] | bool = True) -> tuple[list[Rule], list[Expert]]:
    """The rules and experts of the named liabilities (``True``: all, ``False``: none).

    Parameters
    ----------
    names : sequence of str or bool, optional
        Names of :data:`~mlm_ppl.models.constraints.LIABILITIES` (a name given twice counts
        once), ``True`` (the default) for all of them, or ``False`` for none.

    Returns
    -------
    rules : list of Rule
        The hard rules among them, in the order of ``names`` (of the table for ``True``).
    experts : list of Expert
        The soft experts among them, in the order of ``names`` (of the table for ``True``).

    Raises
    ------
    TypeError
        When ``names`` is neither a bool nor a sequence of names (a single string is refused).
    ValueError
        When a name is not one of :data:`~mlm_ppl.models.constraints.LIABILITIES`.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import liability_constraints
    >>> rules, experts = liability_constraints(["deamidation", "met-trp-oxidation"])
    >>> [rule.name for rule in rules], [expert.name for expert in experts]
    (['deamidation'], ['met-trp-oxidation'])
    >>> len(liability_constraints()[0])  # every hard rule of LIABILITIES
    5
    """
    chosen = liability_names(names)
    rules: list[Rule] = []
    experts: list[Expert] = []
    for n in chosen:
        item = LIABILITIES[n]()
        (experts if isinstance(item, Expert) else rules).append(item)  # type: ignore[arg-type]
    return rules, experts


def liability_names(names: Any) -> tuple[str, ...]:
    if names is True:
        return tuple(LIABILITIES)
    if names is False:
        return ()
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise FieldTypeError(
            f"liabilities must be true, false or a list of names, got {type(names).__name__} {names!r}", "liabilities"
        )
    out = []
    for n in names:
        if n not in LIABILITIES:
            raise FieldValueError(
                f"unknown liability {n!r}; choose from {', '.join(map(repr, LIABILITIES))}", "liabilities"
            )
        if n not in out:
            out.append(n)
    return tuple(out)
