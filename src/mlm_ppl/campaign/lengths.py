"""A template with a variable gap ``MASK{a,b}``: how its lengths are sampled, chosen once here for the
command line and any other caller. ``jump``: one run whose chains move between lengths (a kernel
that declares ``capabilities.lengths``), its prior recorded in the run's settings; ``strata``: a
batch of one run per length of prior weight > 0 (a kernel that samples a fixed template), the
prior in the batch's record. The gap is parsed once (:func:`~mlm_ppl.models.gaps.find_gap`) and
the prior read once (:meth:`~mlm_ppl.models.gaps.LengthPrior.read`); what a run records of it is
:meth:`~mlm_ppl.models.gaps.LengthPrior.record`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..inference.registry import kernel_class, length_kernels
from ..models.gaps import GapTemplate, LengthPrior, find_gap

__all__ = ["LENGTH_MODES", "GapPlan", "plan_gap", "strata", "strata_name"]

LENGTH_MODES = ("jump", "strata")
"""How a variable gap's lengths are sampled (``--length-mode``)."""


@dataclass(frozen=True)
class GapPlan:
    """A variable gap's lengths as they will be sampled: ``mode`` (:data:`LENGTH_MODES`), the parsed
    ``gap``, its ``prior`` and, for ``jump``, the ``kernel`` that moves lengths."""

    mode: str
    gap: GapTemplate
    prior: LengthPrior
    kernel: str | None
    template: str

    def strata(self) -> tuple[list[tuple[str, str]], dict[str, Any]]:
        """The batch of strata (:func:`strata`)."""
        return strata(self.template, self.gap, self.prior)


def plan_gap(
    template: str, mode: str | None, prior: str | LengthPrior | None = None, kernel: str | None = None
) -> GapPlan:
    """Check and choose how ``template``'s variable gap is sampled: ``mode`` ``"jump"`` (``kernel``, by
    default the first of :func:`~mlm_ppl.inference.registry.length_kernels`, must move lengths) or
    ``"strata"`` (``kernel`` must sample a fixed template); ``prior``: ``"uniform"`` (None), a file
    of lines ``L<TAB>weight``, or a :class:`~mlm_ppl.models.gaps.LengthPrior` over the gap's
    lengths. A ValueError says what to give instead, before any model loads, naming the arguments
    by the command line's flags (``--length-mode``, ``--length-prior``, ``--kernel``)."""
    gap = find_gap(template)
    if gap is None:
        raise ValueError(
            "--length-mode and --length-prior apply to a template with a variable gap, e.g. 'CAR[MASK]{10,16}WGQG'"
        )
    if mode is None:
        raise ValueError(
            "the template's variable gap gives loops of several lengths: give --length-mode jump (one run whose "
            f"chains move between lengths, kernel {' or '.join(length_kernels())}) or strata (one run per length), "
            "each weighted by --length-prior"
        )
    if mode not in LENGTH_MODES:
        raise ValueError(f"--length-mode must be one of {', '.join(LENGTH_MODES)}, got {mode!r}")
    if isinstance(prior, LengthPrior):
        outside = sorted(set(prior.weights) - set(range(gap.lo, gap.hi + 1)))
        if outside:
            raise ValueError(f"length_prior: lengths {outside} are outside the gap's {gap.lo} to {gap.hi}")
        weights = prior
    else:
        weights = LengthPrior.read(prior or "uniform", gap)
    if mode == "jump":
        chosen = kernel or length_kernels()[0]
        if not kernel_class(chosen).capabilities.lengths:
            raise ValueError(
                f"--length-mode jump samples with a kernel that moves lengths ({', '.join(length_kernels())}: "
                f"gap-jump's update, insert and delete moves, or surrogate-mh around them); drop --kernel {chosen}, "
                "or use --length-mode strata to run it on each length"
            )
        return GapPlan(mode, gap, weights, chosen, template)
    if kernel is not None and not kernel_class(kernel).capabilities.fixed:
        raise ValueError(
            f"--length-mode strata runs each length as a fixed template, which kernel {kernel} does not sample; "
            "choose another --kernel, or --length-mode jump"
        )
    return GapPlan(mode, gap, weights, kernel, template)


def strata_name(length: int) -> str:
    """The template name (and run directory) of gap length ``length`` in a batch of strata: ``L08``."""
    return f"L{length:02d}"


def strata(text: str, gap: GapTemplate, prior: LengthPrior) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The batch of strata of a template ``text`` with a variable gap: one ``(name, template)`` per
    length of prior weight > 0, and the batch's ``lengths`` record (``template``: ``text``;
    ``prior``: ``pi(L)`` by length, :meth:`~mlm_ppl.models.gaps.LengthPrior.record`; ``source``:
    where the prior came from). Each length is its own run; in the mixture ``sum_L pi(L) p_L`` a
    draw of length ``L`` weighs ``pi(L) / N_L`` (:meth:`~mlm_ppl.models.gaps.LengthPrior.draw_weights`)."""
    templates = [(strata_name(L), gap.template(L)) for L in sorted(prior.weights)]
    return templates, {"template": text, "prior": prior.record(), "source": prior.source}
