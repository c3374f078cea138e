"""The plots of a run: traces and ranks of ``lp``, acceptance, token frequencies, a variable gap's lengths."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._files import save_figure
from .data import attr_list, load_arviz
from .lengths import length_marginal, reference_for

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from ..models.gaps import LengthReference
    from ..models.masked_lm import MaskedLM


def plot_diagnostics(
    idata: "arviz.InferenceData",
    out_dir: str,
    *,
    mlm: "MaskedLM | None" = None,
    length_reference: "LengthReference | None" = None,
    record: Callable[[str], Any] | None = None,
) -> list[str]:
    """Save a run's diagnostic plots as PNGs in ``out_dir``: traces, ranks, acceptance, tokens, lengths.

    ``trace_lp.png`` and ``rank_lp.png`` (trace and rank plots of ``lp``, where the kernel computes
    it), ``acceptance.png`` (each chain's running acceptance rate), ``token_frequency.png`` (a
    heatmap of the tokens at the sampled positions), ``deep_states.png`` (each chain's ``lp``, the
    run's 5 deepest states marked: :func:`~mlm_ppl.diagnostics.deep_states`; where the run records
    its free positions), and for a variable gap ``length.png`` (each chain's length and the length
    marginal beside the prior, and ``length_reference`` when given). Figures are drawn without
    showing them and closed after saving; the user's matplotlib backend and open figures are left
    alone.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData (:func:`~mlm_ppl.to_inference_data`, ``run.nc``).
    out_dir : str
        The directory the PNGs are written to, made if missing.
    mlm : MaskedLM or None, optional
        The run's model, for the token names of the heatmap (default None: the run's recorded
        vocabulary, or token ids).
    length_reference : LengthReference or None, optional
        For a run over a variable gap's lengths: a length distribution over the same lengths,
        drawn beside the marginal (default None).
    record : callable or None, optional
        Called with each file's name just before it is written (a run directory records it then:
        a plot cut off by a kill leaves the later names unclaimed). Default None.

    Returns
    -------
    list of str
        The paths written, in the order above.

    Raises
    ------
    ValueError
        Where ``length_reference`` is given for a run of one length or covers other lengths than
        the run's, or a list attribute of the run is damaged.

    Examples
    --------
    >>> import os
    >>> from mlm_ppl import MaskedLMDistribution, plot_diagnostics, run_chains, to_inference_data
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> paths = plot_diagnostics(to_inference_data(run, mlm=mlm), "plots")
    >>> sorted(os.path.basename(path) for path in paths)
    ['acceptance.png', 'deep_states.png', 'rank_lp.png', 'token_frequency.png', 'trace_lp.png']
    """
    import os

    import matplotlib.pyplot as plt  # ArviZ draws through pyplot; the other plots use standalone Figures
    from matplotlib.figure import Figure

    az = load_arviz()
    os.makedirs(out_dir, exist_ok=True)
    paths = []

    def save(fig: Any, name: str) -> str:
        if record is not None:
            record(name)
        return _save(fig, out_dir, name)

    lp = idata.sample_stats["lp"]
    if not np.isnan(lp.values).all():
        for kind, fn in (("trace", az.plot_trace), ("rank", az.plot_rank)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # ArviZ 0.23 on matplotlib 3.11
                warnings.simplefilter("ignore", UserWarning)  # KDE of a constant lp (stuck chains)
                axes = fn(idata.sample_stats, var_names=["lp"])
            fig = np.ravel(axes)[0].figure
            try:
                paths.append(save(fig, f"{kind}_lp.png"))
            finally:  # only the figure ArviZ made (a notebook's own figures stay open), even on Ctrl-C
                plt.close(fig)
    acc = idata.sample_stats["is_accepted"].values.astype(float)  # (C, D)
    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    running = np.cumsum(acc, axis=1) / np.arange(1, acc.shape[1] + 1)
    for c in range(acc.shape[0]):
        ax.plot(running[c], label=f"chain {c}")
    ax.set(xlabel="draw", ylabel="running acceptance rate", ylim=(0, 1.02), title="Acceptance")
    ax.legend(fontsize="small")
    paths.append(save(fig, "acceptance.png"))
    tokens = idata.posterior["tokens"].values  # (C, D, L)
    free = attr_list(idata.attrs, "free_positions")
    if free is not None:
        positions = np.asarray(free)
    else:  # the positions that vary, or all
        varying = np.nonzero((tokens != tokens[:1, :1, :]).any(axis=(0, 1)))[0]
        positions = varying if len(varying) else np.arange(tokens.shape[-1])
    vocab_ids = np.unique(tokens[..., positions])
    freq = np.stack([(tokens[..., positions] == v).mean(axis=(0, 1)) for v in vocab_ids])  # (K, P)
    fig = Figure(figsize=(max(5, 0.35 * len(positions) + 2), max(3, 0.3 * len(vocab_ids) + 1)))
    ax = fig.subplots()
    im = ax.imshow(freq, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(positions)), [str(p) for p in positions], fontsize="small")
    vocab = list(mlm.vocab) if mlm is not None else attr_list(idata.attrs, "vocab")
    labels = [vocab[v] if vocab is not None else str(v) for v in vocab_ids]
    ax.set_yticks(range(len(vocab_ids)), labels, fontsize="small")
    ax.set(xlabel="token position (sampled positions)", ylabel="token", title="Token frequency over all draws")
    fig.colorbar(im, ax=ax, label="frequency")
    paths.append(save(fig, "token_frequency.png"))
    if not np.isnan(lp.values).all() and "free_positions" in idata.attrs:
        paths.append(_plot_deep_states(idata, save))
    rows = length_marginal(idata)
    reference = reference_for(idata, length_reference)
    if rows is not None:
        paths.append(_plot_lengths(idata, rows, save, reference))
    return paths


DEEP_SHOWN = 5


def _plot_deep_states(idata: "arviz.InferenceData", save: Callable[[Any, str], str]) -> str:
    """``deep_states.png``: each chain's ``lp`` by draw, marked where the chain sits in one of the
    run's 5 deepest states (:func:`~mlm_ppl.diagnostics.deep_states`), and beside it, chain by
    chain, which of them it is in: where a chain stays, and whether the others ever go there."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    from .deep import deep_states, state_index

    report = deep_states(idata, DEEP_SHOWN)
    which = state_index(idata, report.states)  # (C, D)
    lp = np.asarray(idata.sample_stats["lp"].values, dtype=float)
    C, D = lp.shape
    colors = ["tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown"][: len(report.states)]
    fig = Figure(figsize=(11, 3.5 + 0.25 * C))
    trace, raster = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for c in range(C):
        trace.plot(np.arange(D), lp[c], lw=0.8, color="0.6" if C > 1 else "tab:blue", zorder=1)
    for i, (state, color) in enumerate(zip(report.states, colors)):
        rows, cols = np.nonzero(which == i)
        label = f"{i + 1}: {state.loop} ({state.visits} draws)"
        trace.scatter(cols, lp[rows, cols], s=6, color=color, zorder=2, label=label)
    trace.set(xlabel="draw", ylabel="lp", title="lp of each chain; the deepest states marked")
    if report.states:
        trace.legend(fontsize="x-small", loc="lower right")
    cmap = ListedColormap(["0.92", *colors])
    raster.imshow(which + 1, aspect="auto", cmap=cmap, vmin=0, vmax=len(colors), interpolation="nearest")
    raster.set_yticks(range(C), [f"chain {c}" for c in range(C)], fontsize="small")
    raster.set(xlabel="draw", title="Which deep state each chain is in (grey: none)")
    return save(fig, "deep_states.png")


def _plot_lengths(
    idata: "arviz.InferenceData", rows: list, save: Callable[[Any, str], str], reference: "LengthReference | None"
) -> str:
    """``length.png`` of a run over a variable gap's lengths: each chain's length at every draw (do
    the chains visit the same lengths?) and the length marginal, +- 2 MCSE, beside the prior (and
    the reference, when given)."""
    import os

    from matplotlib.figure import Figure

    lengths = np.asarray(idata.posterior["length"].values)  # (C, D)
    fig = Figure(figsize=(10, 3.5))
    trace, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for c in range(lengths.shape[0]):
        trace.step(np.arange(lengths.shape[1]), lengths[c], where="post", lw=1, label=f"chain {c}")
    trace.set(xlabel="draw", ylabel="gap length", title="Gap length of each chain")
    trace.legend(fontsize="small")
    L = np.array([r[0] for r in rows])
    freq, mcse = np.array([r[3] for r in rows]), np.array([r[4] for r in rows])
    bars.bar(L, freq, color="tab:blue", label="draws (+- 2 MCSE)")
    bars.errorbar(L, freq, yerr=2 * np.nan_to_num(mcse), fmt="none", ecolor="black", capsize=2)
    bars.plot(L, [r[1] for r in rows], "o", color="tab:orange", label="prior pi(L)")
    if reference is not None:
        label = f"reference ({os.path.basename(reference.source)}, renormalised)"
        bars.plot(L, [reference.weights[int(x)] for x in L], "s-", color="tab:green", ms=4, lw=1, label=label)
    bars.set(xlabel="gap length", ylabel="probability", title="Length marginal")
    bars.set_xticks(L)
    bars.legend(fontsize="small")
    return save(fig, "length.png")


def _save(fig, out_dir: str, name: str) -> str:
    import os

    return save_figure(fig, os.path.join(out_dir, name), dpi=100, bbox_inches="tight")
