"""Real antibody sequences offline: IMGT germline genes shipped with ``anarci``."""

from __future__ import annotations

import random

__all__ = ["germline_sequences", "shuffled", "heavy_chain", "example_heavy_chain", "HEAVY_CHAINS"]

_SEGMENTS = ("V", "J")


def germline_sequences(
    species: str = "human", chain: str = "H", segment: str = "V", *, alleles: str = "first"
) -> dict[str, str]:
    """Germline amino-acid sequences from ``anarci``'s IMGT tables, gaps removed.

    Parameters
    ----------
    species : str, optional
        ``"human"`` (the default), ``"mouse"``, ``"rat"``, ``"rabbit"``, ``"rhesus"``, ``"pig"``,
        ``"alpaca"`` or ``"cow"`` (whichever the table has for the chain).
    chain : str, optional
        ``"H"`` (heavy, the default), ``"K"`` (kappa), ``"L"`` (lambda), or a T-cell receptor
        chain.
    segment : {"V", "J"}, optional
        The gene segment (default ``"V"``).
    alleles : {"first", "all"}, optional
        ``"first"`` (the default): one sequence per gene (its first listed allele, e.g.
        ``IGHV1-18*01``), keyed by gene name; ``"all"``: every allele, keyed by allele name.

    Returns
    -------
    dict of str to str
        Name to sequence, in the table's order.

    Raises
    ------
    ModuleNotFoundError
        When the optional ``anarci`` package is not installed (``pip install 'mlm-ppl[antibody]'``).
    ValueError
        When ``segment`` or ``alleles`` is not one of the values above, or the table has no such
        chain, or no genes of ``species`` for the chain.

    Examples
    --------
    >>> from mlm_ppl.data import germline_sequences
    >>> genes = germline_sequences("human", "H", "J")
    >>> genes["IGHJ4"]
    'FDYWGQGTLVTVSS'
    >>> germline_sequences()["IGHV3-23"].endswith("YYCAK")
    True
    """
    try:
        from anarci.germlines import all_germlines
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "germline sequences come from the anarci package: pip install 'mlm-ppl[antibody]'"
        ) from None
    if segment not in _SEGMENTS:
        raise ValueError(f"segment must be one of {_SEGMENTS}, got {segment!r}")
    if alleles not in ("first", "all"):
        raise ValueError(f"alleles must be 'first' or 'all', got {alleles!r}")
    chains = all_germlines[segment]
    if chain not in chains:
        raise ValueError(f"unknown chain {chain!r}; anarci has {sorted(chains)}")
    if species not in chains[chain]:
        raise ValueError(f"no {segment} genes for species {species!r}, chain {chain!r}; have {sorted(chains[chain])}")
    out: dict[str, str] = {}
    for allele, gapped in chains[chain][species].items():
        key = allele.split("*")[0] if alleles == "first" else allele
        if key not in out:
            out[key] = gapped.replace("-", "")
    return out


def shuffled(sequence: str, seed: int) -> str:
    """Permute the residues of a sequence at random (same composition), seeded.

    Parameters
    ----------
    sequence : str
        The sequence, one residue per character.
    seed : int
        Seed of the permutation (a private :class:`random.Random`; the global RNG is untouched).

    Returns
    -------
    str
        The residues of ``sequence`` in a random order: the same seed gives the same order.

    Examples
    --------
    >>> from mlm_ppl.data import shuffled
    >>> decoy = shuffled("EVQLVESGGG", seed=0)
    >>> sorted(decoy) == sorted("EVQLVESGGG")
    True
    >>> decoy == shuffled("EVQLVESGGG", seed=0)
    True
    """
    residues = list(sequence)
    random.Random(seed).shuffle(residues)
    return "".join(residues)


#: Heavy chains assembled from real human germline segments: (V gene, CDR-H3 body, J gene). The
#: bodies are D-gene derived (IGHD6-19, IGHD3-10, IGHD2-2, IGHD3-22 with N additions).
HEAVY_CHAINS = (
    ("IGHV3-23", "DRGYSSGW", "IGHJ4"),
    ("IGHV1-69", "GGYYGSGSYY", "IGHJ6"),
    ("IGHV4-34", "VGYCSSTSCY", "IGHJ5"),
    ("IGHV3-30", "DYYYDSSGYY", "IGHJ3"),
)


def heavy_chain(v_gene: str = "IGHV3-23", cdr3_body: str = "DRGYSSGW", j_gene: str = "IGHJ4") -> tuple[str, slice]:
    """Assemble a human heavy-chain variable domain ``V + body + J`` and the slice of its CDR-H3.

    The CDR-H3 (IMGT 105-117) runs from after the V gene's conserved Cys104 to before the J
    gene's Trp118 (``WG.G``): the V-encoded ``AR``/``AK``, the body, and the J-encoded start.
    The genes are the first alleles of ``anarci``'s human heavy-chain tables
    (:func:`germline_sequences`).

    Parameters
    ----------
    v_gene : str, optional
        Name of a human IGHV gene (default ``"IGHV3-23"``).
    cdr3_body : str, optional
        The residues between the V and J genes, upper-case one-letter codes (default
        ``"DRGYSSGW"``).
    j_gene : str, optional
        Name of a human IGHJ gene (default ``"IGHJ4"``).

    Returns
    -------
    sequence : str
        The variable domain.
    cdr3 : slice
        The CDR-H3's positions in ``sequence``.

    Raises
    ------
    ValueError
        When a gene is not in the table, or ``cdr3_body`` is empty or holds a letter other than
        the 20 amino acids' codes.
    ModuleNotFoundError
        When the optional ``anarci`` package is not installed.

    See Also
    --------
    HEAVY_CHAINS : Four such (V gene, CDR-H3 body, J gene) triples.

    Examples
    --------
    >>> from mlm_ppl.data import heavy_chain
    >>> sequence, cdr3 = heavy_chain("IGHV1-69", "GGYYGSGSYY", "IGHJ6")
    >>> sequence[cdr3]
    'ARGGYYGSGSYYMDV'
    """
    vs, js = germline_sequences("human", "H", "V"), germline_sequences("human", "H", "J")
    for name, table in ((v_gene, vs), (j_gene, js)):
        if name not in table:
            raise ValueError(f"unknown gene {name!r}; anarci has {sorted(table)}")
    if not cdr3_body or set(cdr3_body) - set("ACDEFGHIKLMNPQRSTVWY"):  # not B, J, O, U, X, Z nor other letters
        raise ValueError(
            f"cdr3_body must be the 20 amino acids' one-letter codes (ACDEFGHIKLMNPQRSTVWY), got {cdr3_body!r}"
        )
    v, j = vs[v_gene], js[j_gene]
    seq = v + cdr3_body + j
    start = v.rindex("C") + 1  # after the conserved Cys104
    end = len(v) + len(cdr3_body) + j.index("WG")  # before Trp118
    return seq, slice(start, end)


def example_heavy_chain() -> tuple[str, slice]:
    """A 120-residue human heavy-chain variable domain and the slice of its CDR-H3.

    Built from real germline segments: IGHV3-23*01 (98 residues, ending ``...YYCAK``), a
    CDR-H3 body ``DRGYSSGW``, and IGHJ4 as anarci's table has it (``FDYWGQGTLVTVSS``). The
    CDR-H3 (IMGT 105-117, between Cys104 and Trp118) is ``AKDRGYSSGWFDY``: 13 residues. It is
    :func:`heavy_chain` of the first entry of :data:`HEAVY_CHAINS`.

    Returns
    -------
    sequence : str
        The 120-residue variable domain.
    cdr3 : slice
        The CDR-H3's positions in ``sequence``.

    Raises
    ------
    ModuleNotFoundError
        When the optional ``anarci`` package is not installed.

    Examples
    --------
    >>> from mlm_ppl.data import example_heavy_chain
    >>> sequence, cdr3 = example_heavy_chain()
    >>> len(sequence), sequence[cdr3]
    (120, 'AKDRGYSSGWFDY')
    """
    return heavy_chain(*HEAVY_CHAINS[0])
