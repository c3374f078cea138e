"""Real germline genes against shuffles of themselves: does the model prefer real sequences?

A sanity check of a protein or antibody MLM (``mlm-ppl germlines``): score IMGT germline V
genes (from ``anarci``) and a seeded residue shuffle of each; a good model gives the real gene
the lower ``E_norm``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .._checks import check_count
from ..data import germline_sequences, shuffled
from ..models.masked_lm import MaskedLM

__all__ = ["GermlineComparison", "compare_germlines"]

_GROUP = 8  # genes scored together (with their shuffles)


@dataclass
class GermlineComparison:
    """Energies of real genes and their shuffles.

    Attributes
    ----------
    names, sequences : list of str
        The genes, in anarci's order.
    real, shuffled : list of float
        ``E_norm`` (nats) of each gene and of its shuffle.
    seconds : float
        Time spent scoring.
    """

    model: str
    dtype: str
    species: str
    chain: str
    names: list[str]
    sequences: list[str]
    real: list[float]
    shuffled: list[float]
    seconds: float

    @property
    def wins(self) -> int:
        """Genes scored lower than their shuffle."""
        return sum(r < s for r, s in zip(self.real, self.shuffled))

    def report(self) -> str:
        """The table and the verdict, as ``mlm-ppl germlines`` prints them."""
        lines = [
            f"model {self.model}  |  {self.species} {self.chain}-chain germline V genes vs residue shuffles  |  "
            "E_norm = negative pseudo-log-likelihood (nats, lower = more likely)",
            "",
        ]
        header = (
            f"{'gene':<12} {'len':>4} {'E_norm real':>12} {'E_norm shuf':>12} {'per res real':>13} {'per res shuf':>13}"
        )
        lines += [header, "-" * len(header)]
        for name, seq, e_real, e_shuf in zip(self.names, self.sequences, self.real, self.shuffled):
            lines.append(
                f"{name:<12} {len(seq):>4} {e_real:>12.2f} {e_shuf:>12.2f} "
                f"{e_real / len(seq):>13.3f} {e_shuf / len(seq):>13.3f}"
            )
        n = len(self.names)
        n_copies = 2 * sum(len(s) for s in self.sequences)
        lines += [
            "",
            f"real gene scored lower than its shuffle: {self.wins}/{n} ({100 * self.wins / n:.1f}%)",
            f"{n * 2} sequences, {n_copies} masked copies in {self.seconds:.1f} s "
            f"({n_copies / self.seconds:.1f} copies/s, dtype {self.dtype})",
        ]
        return "\n".join(lines) + "\n"


def compare_germlines(
    mlm: MaskedLM, species: str = "human", chain: str = "H", n: int = 12, *, seed: int = 0, progress: bool | None = None
) -> GermlineComparison:
    """Score the first ``n`` germline V genes (0: all) and a residue shuffle of each.

    Every sequence is validated before any forward pass; ``progress`` shows a bar on stderr
    (default: for 8 or more sequences).
    """
    n = check_count(n, "n", 0)
    genes = germline_sequences(species, chain, "V")
    names = list(genes)[: n or None]
    real = [genes[g] for g in names]
    controls = [shuffled(s, seed + i) for i, s in enumerate(real)]
    mlm.encode(real + controls)
    from tqdm.auto import tqdm

    show = progress if progress is not None else 2 * len(real) >= 8
    t0 = time.perf_counter()
    e_real: list[float] = []
    e_shuf: list[float] = []
    with tqdm(total=2 * len(real), unit=" seq", disable=not show, dynamic_ncols=True) as bar:
        for start in range(0, len(real), _GROUP):
            batch = real[start : start + _GROUP] + controls[start : start + _GROUP]
            e = mlm.score(batch).tolist()
            half = len(batch) // 2
            e_real.extend(e[:half])
            e_shuf.extend(e[half:])
            bar.update(len(batch))
    return GermlineComparison(
        mlm.name,
        str(mlm.dtype).replace("torch.", ""),
        species,
        chain,
        names,
        real,
        e_real,
        e_shuf,
        time.perf_counter() - t0,
    )
