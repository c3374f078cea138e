"""Real antibody sequences offline: IMGT germline genes shipped with ``anarci``."""

from __future__ import annotations

import random

__all__ = ["germline_sequences", "shuffled", "example_heavy_chain"]

_SEGMENTS = ("V", "J")


def germline_sequences(
    species: str = "human", chain: str = "H", segment: str = "V", *, alleles: str = "first"
) -> dict[str, str]:
    """Germline amino-acid sequences from ``anarci``'s IMGT tables, gaps removed.

    Parameters
    ----------
    species : str
        ``"human"``, ``"mouse"``, ``"rat"``, ``"rabbit"``, ``"rhesus"``, ``"pig"``,
        ``"alpaca"`` or ``"cow"`` (whichever the table has for the chain).
    chain : str
        ``"H"`` (heavy), ``"K"`` (kappa), ``"L"`` (lambda), or a T-cell receptor chain.
    segment : {"V", "J"}
    alleles : {"first", "all"}
        ``"first"``: one sequence per gene (its first listed allele, e.g. ``IGHV1-18*01``),
        keyed by gene name; ``"all"``: every allele, keyed by allele name.

    Returns
    -------
    dict
        Name to sequence, in the table's order.
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
    """A random permutation of the residues of ``sequence`` (same composition), seeded."""
    residues = list(sequence)
    random.Random(seed).shuffle(residues)
    return "".join(residues)


def example_heavy_chain() -> tuple[str, slice]:
    """A 120-residue human heavy-chain variable domain and the slice of its CDR-H3.

    Built from real germline segments: IGHV3-23*01 (98 residues, ending ``...YYCAK``), a
    CDR-H3 body ``DRGYSSGW``, and IGHJ4 as anarci's table has it (``FDYWGQGTLVTVSS``). The
    CDR-H3 (IMGT 105-117, between Cys104 and Trp118) is ``AKDRGYSSGWFDY``: 13 residues.
    """
    v = germline_sequences("human", "H", "V")["IGHV3-23"]
    j = germline_sequences("human", "H", "J")["IGHJ4"]
    seq = v + "DRGYSSGW" + j
    start = v.rindex("C") + 1  # after the conserved Cys104
    end = seq.index("WGQG", start)  # before Trp118
    return seq, slice(start, end)
