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
    """A variable gap's lengths as they will be sampled (what :func:`plan_gap` chose).

    Parameters
    ----------
    mode : str
        How the lengths are sampled, one of :data:`LENGTH_MODES`: ``"jump"`` (one run whose chains
        move between lengths) or ``"strata"`` (a batch of one run per length).
    gap : GapTemplate
        The parsed gap (``mlm_ppl.models.gaps.GapTemplate``).
    prior : LengthPrior
        Its prior ``pi(L)`` over the gap's lengths (``mlm_ppl.models.gaps.LengthPrior``).
    kernel : str or None
        For ``jump``, the kernel that moves lengths; for ``strata``, the kernel given, or None.
    template : str
        The template with the variable gap, as given.

    Examples
    --------
    >>> from mlm_ppl.campaign import plan_gap
    >>> plan = plan_gap("AC[MASK]{2,3}E", "jump")
    >>> plan.mode, plan.kernel, list(plan.gap.lengths)
    ('jump', 'gap-jump', [2, 3])
    """

    mode: str
    gap: GapTemplate
    prior: LengthPrior
    kernel: str | None
    template: str

    def strata(self) -> tuple[list[tuple[str, str]], dict[str, Any]]:
        """The batch of strata of the plan's template (:func:`strata`).

        Returns
        -------
        templates : list of tuple of (str, str)
            One ``(name, template)`` per length of prior weight > 0.
        lengths : dict of str to object
            The batch's ``lengths`` record.
        """
        return strata(self.template, self.gap, self.prior)


def plan_gap(
    template: str, mode: str | None, prior: str | LengthPrior | None = None, kernel: str | None = None
) -> GapPlan:
    """Check and choose how a template's variable gap is sampled, before any model loads.

    Parameters
    ----------
    template : str
        A template with a variable gap ``MASK{a,b}``.
    mode : str or None
        ``"jump"`` (one run whose chains move between lengths) or ``"strata"`` (one run per length);
        None is refused with what to give.
    prior : str or LengthPrior or None, optional
        ``"uniform"`` (None), a file of lines ``L<TAB>weight``, or a ``LengthPrior`` over the gap's
        lengths.
    kernel : str or None, optional
        For ``"jump"``, a kernel that moves lengths (default: the first of
        :func:`~mlm_ppl.inference.length_kernels`); for ``"strata"``, a kernel that samples a fixed
        template, or None.

    Returns
    -------
    GapPlan
        The mode, the parsed gap, its prior and the kernel.

    Raises
    ------
    ValueError
        Where the template has no variable gap, ``mode`` is None or unknown, the prior's lengths lie
        outside the gap or its file is bad, or the kernel does not sample the mode's targets; the
        message says what to give instead, naming the arguments by the command line's flags
        (``--length-mode``, ``--length-prior``, ``--kernel``).

    Examples
    --------
    >>> from mlm_ppl.campaign import plan_gap
    >>> plan = plan_gap("AC[MASK]{2,3}E", "strata")
    >>> plan.prior.weights
    {2: 0.5, 3: 0.5}
    >>> plan_gap("AC[MASK]{2,3}E", None)
    Traceback (most recent call last):
    ...
    ValueError: the template's variable gap gives loops of several lengths: give --length-mode jump ...
    """
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
    """The template name (and run directory) of a gap length in a batch of strata.

    Parameters
    ----------
    length : int
        The gap's length.

    Returns
    -------
    str
        ``L`` and the length, two digits at least: ``L08``.

    Examples
    --------
    >>> from mlm_ppl.campaign import strata_name
    >>> strata_name(8), strata_name(12)
    ('L08', 'L12')
    """
    return f"L{length:02d}"


def strata(text: str, gap: GapTemplate, prior: LengthPrior) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The batch of strata of a template with a variable gap: one run per length of prior weight > 0.

    Each length is its own run; in the mixture ``sum_L pi(L) p_L`` a draw of length ``L`` weighs
    ``pi(L) / N_L`` (``LengthPrior.draw_weights``).

    Parameters
    ----------
    text : str
        The template with its variable gap, as given.
    gap : GapTemplate
        Its parsed gap (``mlm_ppl.models.gaps.find_gap``).
    prior : LengthPrior
        ``pi(L)`` over the gap's lengths.

    Returns
    -------
    templates : list of tuple of (str, str)
        One ``(name, template)`` per length of prior weight > 0, in order of length, named by
        :func:`strata_name`.
    lengths : dict of str to object
        The batch's ``lengths`` record: ``template`` (``text``), ``prior`` (``pi(L)`` by length as
        text, ``LengthPrior.record``) and ``source`` (where the prior came from).

    Examples
    --------
    >>> from mlm_ppl.campaign import plan_gap, strata
    >>> plan = plan_gap("AC[MASK]{2,3}E", "strata")
    >>> templates, lengths = strata(plan.template, plan.gap, plan.prior)
    >>> templates
    [('L02', 'AC[MASK][MASK]E'), ('L03', 'AC[MASK][MASK][MASK]E')]
    >>> lengths["prior"]
    {'2': 0.5, '3': 0.5}
    """
    templates = [(strata_name(L), gap.template(L)) for L in sorted(prior.weights)]
    return templates, {"template": text, "prior": prior.record(), "source": prior.source}
