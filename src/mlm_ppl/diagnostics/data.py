"""InferenceData of runs: the token draws, their scalar functionals (``lp``, Hamming distances,
indicators, rules and experts, a variable gap's length) and reading ``run.nc`` back."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..models.tokens import loop_tokens
from .attrs import attr_list

if TYPE_CHECKING:  # pragma: no cover
    import arviz

    from ..inference.runner import Run
    from ..models.constraints import BoundConstraints
    from ..models.masked_lm import MaskedLM


def load_arviz():
    """ArviZ, imported on first use (without its FutureWarnings)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        import arviz

    return arviz


def constraint_functionals(constraints: "BoundConstraints", tokens: Tensor) -> dict[str, np.ndarray]:
    """Per draw: whether each rule holds, whether all do, and each expert's value.

    ``rule_<name>`` (1.0 where the rule holds), ``feasible`` (1.0 where every rule holds) and
    ``expert_<name>`` (the expert's unweighted value), names made identifiers
    (:func:`~mlm_ppl.diagnostics.functional_name`: ``n-glycosylation`` ->
    ``rule_n_glycosylation``). No forward pass: rules and experts read the tokens.

    Parameters
    ----------
    constraints : BoundConstraints
        A constraint spec bound to its target (:class:`~mlm_ppl.models.constraints.BoundConstraints`:
        a ``ConstraintTarget``'s ``constraints``).
    tokens : torch.Tensor
        Shape ``(C, D, L)``: the draws.

    Returns
    -------
    dict of str to numpy.ndarray
        Each functional by name, of shape ``(C, D)``, float64; ``feasible`` only where there are
        rules.

    Raises
    ------
    ValueError
        Where two rules or experts give the same functional name.
    """
    C, D, L = tokens.shape
    flat = tokens.reshape(-1, L)
    out: dict[str, np.ndarray] = {}

    def put(name: str, values: Tensor) -> None:
        if name in out:
            raise ValueError(f"two rules or experts give the functional {name!r}; rename one")
        out[name] = values.double().reshape(C, D).numpy()

    violations = constraints.violations(flat)
    for name, broke in violations.items():
        put(functional_name("rule", name), ~broke)
    if violations:
        put("feasible", constraints.feasible(flat))
    for name, values in constraints.expert_values(flat).items():
        put(functional_name("expert", name), values)
    return out


def functional_name(kind: str, name: str) -> str:
    """The name of a rule's or an expert's functional in ``run.nc``: ``<kind>_<name>``, made an identifier.

    Every character of ``name`` that is neither alphanumeric nor ``_`` becomes ``_``.

    Parameters
    ----------
    kind : str
        ``"rule"`` or ``"expert"``.
    name : str
        The rule's or expert's name.

    Returns
    -------
    str
        ``<kind>_<name>``, ``name`` made an identifier.

    Examples
    --------
    >>> from mlm_ppl.diagnostics import functional_name
    >>> functional_name("rule", "n-glycosylation")
    'rule_n_glycosylation'
    """
    return kind + "_" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def to_inference_data(
    run: "Run",
    *,
    mlm: "MaskedLM | None" = None,
    reference: str | Tensor | None = None,
    indicators: Sequence[tuple[int, str | int]] = (),
    functions: Mapping[str, Callable[[str], float]] | None = None,
    other_sites: Mapping[str, np.ndarray] | None = None,
    constraints: "BoundConstraints | None" = None,
    sites: bool = False,
    progress: bool = False,
    known: "arviz.InferenceData | None" = None,
    site_budget: int | None = None,
) -> "arviz.InferenceData":
    """An ``arviz.InferenceData`` of a run, built with ``arviz.from_dict``.

    Parameters
    ----------
    run : Run
        From :func:`mlm_ppl.sample` / :func:`mlm_ppl.run_chains`, or
        :func:`mlm_ppl.inference.run_from_mcmc` for a ``pyro.infer.MCMC`` run.
    mlm : MaskedLM or None, optional
        Needed to decode sequences (``functions``), to read a string ``reference`` and token
        names in ``indicators``; its name goes to the attributes.
    reference : str or torch.Tensor or None, optional
        A complete sequence (string, or ids ``(L,)``): adds ``hamming_reference``, each draw's
        Hamming distance to it (e.g. the template's own sequence before its loop was masked).
        Without one, a constraint spec's ``reference`` loop serves (``constraints``); without
        either, ``hamming_chain0_start`` is the distance to chain 0's start, and says so in its name.
    indicators : sequence of (int, str or int), optional
        Pairs ``(position, token)``; each adds ``indicator_<position>_<token>``: 1.0 where the
        draw has ``token`` at ``position`` (token position in the encoded sequence; a token id or
        a string).
    functions : mapping of str to callable, optional
        Scalar functions of the decoded sequence, one variable each, named by its key (an
        identifier).
    other_sites : mapping of str to numpy.ndarray, optional
        Draws ``(C, D, ...)`` of the model's other latent sites (continuous or discrete), added
        to the posterior as they are (see :func:`~mlm_ppl.from_pyro`).
    constraints : BoundConstraints or None, optional
        The run's constraint spec bound to its target (a ``ConstraintTarget``'s
        ``constraints``): adds, per draw, ``rule_<name>`` (1.0 where the draw satisfies the
        rule), ``feasible`` (1.0 where it satisfies every rule) and ``expert_<name>`` (each
        expert's unweighted value), so the summary gives their R-hat and ESS
        (:func:`~mlm_ppl.diagnostics.constraint_functionals`).
    sites : bool, optional
        Adds ``site_prob``, ``site_energy`` and ``memorized`` (:func:`~mlm_ppl.diagnostics.site_scores`:
        the designed positions' mean conditional probability and own terms, one masked copy per
        designed position of each distinct state); needs ``mlm``. Default False.
    progress : bool, optional
        A progress bar over the masked copies of ``sites`` (default False).
    known : arviz.InferenceData or None, optional
        An earlier InferenceData of the same run (an older ``run.nc``): its ``site_prob`` and
        ``site_energy`` are reused for the states it holds.
    site_budget : int or None, optional
        With ``sites``: the most masked copies to run (``None``: no limit); a run that needs more
        gets no site columns, and its ``site_scores`` attribute says why.

    Returns
    -------
    arviz.InferenceData
        ``posterior``: ``tokens`` (int, dims chain, draw, position), ``hamming_start`` (to each
        chain's own start: shows chains leaving their starts, but depends on the start, so it
        is left out of convergence verdicts), ``hamming_reference`` or ``hamming_chain0_start``
        (a distance to a common state: a functional of the state alone), ``length`` (a variable gap's:
        the draw's gap length; its states are padded after the loop, so the Hamming distances
        count a residue against a pad as a difference) and the other functionals;
        ``sample_stats``: ``lp``, ``is_accepted``, ``acceptance_rate``, ``n_changed``,
        ``n_moves`` and a kernel's extras (surrogate-MH: ``inner_acceptance``,
        ``masked_copies``); attributes
        record model, kernel, energy, temperature, template, seed.

    Raises
    ------
    ValueError
        Where ``functions``, ``sites`` or a string ``reference`` or token name needs ``mlm`` and
        none is given, an indicator's position lies outside the sequence or its token is unknown,
        ``reference`` is not a complete sequence, a function name is not an identifier, two
        variables would have one name, or another site's draws are not ``(C, D, ...)``.
    TypeError
        Where an indicator's token is neither a string nor an int id.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> idata = to_inference_data(run, mlm=mlm, reference="ADCEE", indicators=[(2, "D")])
    >>> idata.posterior["tokens"].shape
    (2, 20, 7)
    >>> list(idata.posterior.data_vars)
    ['tokens', 'hamming_start', 'hamming_reference', 'indicator_2_D']
    """
    az = load_arviz()
    tokens = run.tokens  # (C, D, L)
    C, D, L = tokens.shape
    free = _free_mask(run)
    posterior: dict[str, np.ndarray] = {"tokens": tokens.numpy().astype(np.int64)}
    start = run.initial if run.initial is not None else tokens[:, 0]
    posterior["hamming_start"] = _hamming(tokens, start[:, None, :], free)
    # A common reference makes a functional of the state alone (comparable across chains): the one
    # given, else a constraint spec's reference loop; without one, chain 0's start, and the name says so.
    named = None
    spec_reference = getattr(getattr(constraints, "spec", None), "reference", None)
    if reference is None and spec_reference is not None and constraints is not None:
        state = getattr(constraints, "reference_state", None)  # a variable gap's constraints have none
        if state is not None:
            reference, named = state(), spec_reference
    if reference is not None:
        posterior["hamming_reference"] = _hamming(tokens, _reference_ids(reference, mlm, L)[None, None, :], free)
    else:
        posterior["hamming_chain0_start"] = _hamming(tokens, start[0][None, None, :], free)
    gap = attr_list(run.attrs, "gap_positions")
    if gap is not None:  # a variable gap: states padded after the loop (GapTarget)
        posterior["length"] = (tokens[..., gap] != int(run.attrs["pad_id"])).sum(-1).double().numpy()
    for position, token in indicators:
        tok_id = _token_id(token, mlm)
        if not 0 <= int(position) < L:
            raise ValueError(f"indicator position {position} is outside 0..{L - 1}")
        name = f"indicator_{position}_{mlm.vocab[tok_id] if mlm is not None else tok_id}"
        posterior[name] = (tokens[:, :, int(position)] == tok_id).double().numpy()
    if functions:
        if mlm is None:
            raise ValueError("functions of the decoded sequence need mlm= to decode the draws")
        decoded = [mlm.decode(tokens[c]) for c in range(C)]
        for name, fn in functions.items():
            if not name.isidentifier():
                raise ValueError(f"function name {name!r} must be an identifier")
            posterior[name] = np.array([[float(fn(s)) for s in chain] for chain in decoded])
    for name, values in (constraint_functionals(constraints, tokens) if constraints is not None else {}).items():
        if name in posterior:
            raise ValueError(f"the constraints' functional {name!r} clashes with another; rename the function")
        posterior[name] = values
    if sites:
        if mlm is None:
            raise ValueError("sites=True reads the designed positions' conditionals: give mlm=")
        from .sites import site_scores

        pad = run.attrs.get("pad_id")
        positions = torch.nonzero(free).flatten().tolist()
        pad_id = None if pad is None else int(pad)
        scores = site_scores(tokens, positions, mlm, pad_id=pad_id, progress=progress, known=known, budget=site_budget)
        if scores is not None:
            posterior.update(scores)
    for name, values in (other_sites or {}).items():
        values = np.asarray(values)
        if name in posterior or values.shape[:2] != (C, D):
            raise ValueError(f"other site {name!r}: a new name with draws of shape ({C}, {D}, ...) expected")
        posterior[name] = values
    stats = {k: v.numpy() for k, v in run.stats.items()}
    attrs = {k: v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in run.attrs.items() if v is not None}
    if sites and "site_prob" in posterior:
        from .sites import MEMORIZED_PROB

        attrs["memorized_threshold"] = MEMORIZED_PROB
    elif sites:
        attrs["site_scores"] = (
            f"not read: the run's distinct states need more than {site_budget} masked copies; mlm-ppl diagnose "
            "--deep K reads its deepest states, mlm-ppl designs its picks"
        )
    if mlm is not None:
        attrs["model"] = mlm.name
        attrs["vocab"] = json.dumps(list(mlm.vocab))
    if named is not None:
        attrs["hamming_reference"] = named  # the spec's reference loop
    with warnings.catch_warnings():  # fewer draws than chains is a short run, not a transposed array
        warnings.filterwarnings("ignore", "More chains", UserWarning)
        return az.from_dict(
            posterior=posterior,
            sample_stats=stats,
            dims={"tokens": ["position"]},
            coords={"position": np.arange(L)},
            attrs=attrs,
        )


def from_pyro(
    mcmc: Any,
    *,
    site: str | None = None,
    element: int | None = None,
    mlm: "MaskedLM | None" = None,
    reference: str | Tensor | None = None,
    indicators: Sequence[tuple[int, str | int]] = (),
    functions: Mapping[str, Callable[[str], float]] | None = None,
) -> "arviz.InferenceData":
    """InferenceData of a finished ``pyro.infer.MCMC`` run of an MLM kernel, whose token draws ArviZ cannot read.

    The run is of :class:`~mlm_ppl.MLMKernel` or :class:`~mlm_ppl.MLMGibbs`, where
    ``az.from_pyro`` and ``MCMC.summary`` stop on token draws.

    Every token site keeps its Pyro name, all of them in one InferenceData: a site ``heavy``
    gives the draws ``heavy`` (dims chain, draw, ``heavy_position``) and its functionals named after
    it (``heavy_hamming_start``, ``heavy_hamming_chain0_start``, and, for a site with constraints,
    ``heavy_rule_<name>``, ``heavy_feasible``, ``heavy_expert_<name>``: :func:`~mlm_ppl.to_inference_data`,
    :func:`~mlm_ppl.diagnostics.constraint_functionals`). Each sequence of a site under a
    ``pyro.plate`` is its own variable, ``x_0``, ``x_1`` ..., with its own functionals. An
    ``MLMGibbs`` run's other latent sites (continuous and discrete) are added as they are, so
    :func:`~mlm_ppl.summary` gives R-hat and ESS for every site. ``sample_stats`` hold each
    sequence's statistics as ``<name>_lp``, ``<name>_is_accepted`` ..., and, as
    :func:`~mlm_ppl.summary` reads them, ``lp`` (the sum of the token sites' log densities),
    ``is_accepted`` (any of them moved), ``n_changed`` and ``n_moves`` (summed) and
    ``acceptance_rate`` (their mean); one sequence keeps its statistics as they are. A run of
    :func:`mlm_ppl.sample` or the command line (:func:`~mlm_ppl.to_inference_data`, ``run.nc``)
    names its one sequence ``tokens``.

    Parameters
    ----------
    mcmc : pyro.infer.MCMC
        A finished run of an ``MLMKernel`` or an ``MLMGibbs``.
    site : str or None, optional
        Keep only this token site (default None: every token site).
    element : int or None, optional
        With ``site`` under a ``pyro.plate``: keep only this sequence of the plate (default None:
        every sequence); None for a site outside any plate.
    mlm : MaskedLM or None, optional
        The model that decodes the draws (``functions``, token names in ``indicators``, a string
        ``reference``); None (the default): each site's own model.
    reference : str or torch.Tensor or None, optional
        A complete sequence; adds each sequence's Hamming distance to it
        (:func:`~mlm_ppl.to_inference_data`). Applies to every sequence.
    indicators : sequence of (int, str or int), optional
        ``(position, token)`` pairs, each an indicator functional
        (:func:`~mlm_ppl.to_inference_data`). Apply to every sequence.
    functions : mapping of str to callable, optional
        Scalar functions of the decoded sequence, one functional each
        (:func:`~mlm_ppl.to_inference_data`). Apply to every sequence.

    Returns
    -------
    arviz.InferenceData
        ``posterior``: each token sequence's draws and functionals (and an ``MLMGibbs`` run's
        other sites); ``sample_stats``: the per-draw statistics; attributes as
        :func:`~mlm_ppl.to_inference_data`'s, with ``token_sites`` naming the sequences.

    Raises
    ------
    TypeError
        Where ``mcmc`` did not run an ``MLMKernel`` or an ``MLMGibbs``, or an indicator's token
        is neither a string nor an int id.
    ValueError
        Where ``mcmc`` holds no finished run, ``site`` is not a token site, ``element`` is given
        for a site outside any plate, two variables would have one name, or an argument is one
        :func:`~mlm_ppl.to_inference_data` refuses.

    Examples
    --------
    >>> import pyro
    >>> from pyro.infer import MCMC
    >>> from mlm_ppl import MaskedLMDistribution, MLMKernel, from_pyro
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = MLMKernel(lambda: pyro.sample("loop", dist), num_chains=2, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=5, disable_progbar=True)
    >>> mcmc.run()
    >>> idata = from_pyro(mcmc)
    >>> idata.posterior["loop"].shape  # (chains, draws, positions)
    (2, 5, 7)
    >>> list(idata.posterior.data_vars)
    ['loop', 'loop_hamming_start', 'loop_hamming_chain0_start']
    """
    from ..inference.gibbs import MLMGibbs
    from ..inference.pyro_chains import chain_records
    from ..inference.pyro_kernel import MLMKernel
    from ..inference.pyro_runs import run_from_gibbs, run_from_mcmc
    from ..inference.starts import target_constraints

    kernel = mcmc.kernel
    if not isinstance(kernel, (MLMKernel, MLMGibbs)):
        raise TypeError(f"from_pyro reads MCMC runs of MLMKernel or MLMGibbs, not {type(kernel).__name__}")
    chain_records(mcmc)  # a run that has not finished is refused, saying so
    samples = mcmc.get_samples(group_by_chain=True)
    sites = [kernel.site] if isinstance(kernel, MLMKernel) else list(kernel.mlm_sites)
    if site is not None and site not in sites:
        raise ValueError(f"{site!r} is not a token site of the model; they are {sites}")
    pairs: list[tuple[str, int | None]] = []
    for name in sites if site is None else [site]:
        plated = isinstance(kernel, MLMGibbs) and kernel.is_plated(name)
        if not plated:
            if element is not None:
                raise ValueError(f"site {name!r} is one sequence; element= applies to sites under a pyro.plate")
            pairs.append((name, None))
        elif element is not None:
            pairs.append((name, element))
        else:
            pairs += [(name, e) for e in range(int(samples[name].shape[2]))]
    posterior: dict[str, np.ndarray] = {}
    per_sequence: list[dict[str, np.ndarray]] = []
    dims: dict[str, list[str]] = {}
    attrs: dict[str, Any] = {}
    for name, e in pairs:
        label = name if e is None else f"{name}_{e}"
        if isinstance(kernel, MLMKernel):
            run, target = run_from_mcmc(mcmc, kernel, name, e), kernel.target
        else:
            run, target = run_from_gibbs(mcmc, kernel, name, e), kernel.site_target(name, e)
        own = to_inference_data(
            run,
            mlm=mlm if mlm is not None else getattr(target, "mlm", None),
            reference=reference,
            indicators=indicators,
            functions=functions,
            constraints=target_constraints(target),
        )
        for var, values in own.posterior.data_vars.items():
            key = label if var == "tokens" else f"{label}_{var}"
            _put(posterior, key, values.values)
        dims[label] = [f"{label}_position"]
        stats = {k: v.values for k, v in own.sample_stats.data_vars.items()}
        per_sequence.append(stats)
        attrs = attrs or dict(own.attrs)
    stats_out = _combined_stats(pairs, per_sequence)
    if isinstance(kernel, MLMGibbs):
        for name, values in samples.items():
            if name not in kernel.mlm_sites:
                _put(posterior, name, values.detach().cpu().numpy())
    attrs["token_sites"] = json.dumps([name if e is None else f"{name}_{e}" for name, e in pairs])
    az = load_arviz()
    with warnings.catch_warnings():  # fewer draws than chains is a short run, not a transposed array
        warnings.filterwarnings("ignore", "More chains", UserWarning)
        return az.from_dict(posterior=posterior, sample_stats=stats_out, dims=dims, attrs=attrs)


def _put(out: dict[str, np.ndarray], name: str, values: np.ndarray) -> None:
    """``out[name] = values``, refusing a name already taken (a site named like another's functional)."""
    if name in out:
        raise ValueError(
            f"two variables would be named {name!r} (a site named like another site's functional); rename one"
        )
    out[name] = values


def _combined_stats(pairs: list[tuple[str, int | None]], stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Sample statistics of several token sequences: each as ``<label>_<stat>``, and the ones
    :func:`summary` reads over all of them: ``lp`` summed, ``is_accepted`` any, ``n_changed`` and
    ``n_moves`` summed, ``acceptance_rate`` averaged. One sequence: its own statistics as they are."""
    if len(stats) == 1:
        return dict(stats[0])
    out: dict[str, np.ndarray] = {}
    for (name, e), own in zip(pairs, stats):
        label = name if e is None else f"{name}_{e}"
        for k, v in own.items():
            out[f"{label}_{k}"] = v
    combine: dict[str, Callable[..., np.ndarray]] = {
        "lp": np.sum,
        "n_changed": np.sum,
        "n_moves": np.sum,
        "acceptance_rate": np.mean,
        "is_accepted": np.any,
    }
    for k, how in combine.items():
        if all(k in own for own in stats):
            out[k] = how(np.stack([own[k] for own in stats]), axis=0)
    return out


def read_run(path: str) -> "arviz.InferenceData":
    """The InferenceData of a run: ``run.nc``, or a run directory holding one.

    Parameters
    ----------
    path : str
        A ``run.nc`` file, or a run directory that holds one.

    Returns
    -------
    arviz.InferenceData
        The run's draws, functionals, statistics and attributes, checked.

    Raises
    ------
    FileNotFoundError
        Where there is no such file.
    ValueError
        Where the file is not an mlm-ppl run (no ``tokens`` draws or no ``is_accepted``
        statistics) or holds what no run writes: a token id outside the model's vocabulary
        (recorded in the file), a free position outside the sequence, an ``lp`` of nan or
        ``+inf`` (``-inf`` is an infeasible draw's), named by chain and draw.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.diagnostics import read_run
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> to_inference_data(run, mlm=mlm).to_netcdf("run.nc")
    'run.nc'
    >>> read_run("run.nc").posterior["tokens"].shape
    (2, 20, 7)
    """
    import os

    if os.path.isdir(path):
        path = os.path.join(path, "run.nc")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    try:
        idata = load_arviz().from_netcdf(path)
        if "tokens" not in idata.posterior or "is_accepted" not in idata.sample_stats:
            raise ValueError("no tokens or is_accepted")
        _check_tokens(idata)
        _check_log_density(idata)
    except Exception as err:
        raise ValueError(f"{path} is not an mlm-ppl run file ({err})") from None
    return idata


def _check_tokens(idata: "arviz.InferenceData") -> None:
    """A ValueError unless the draws are ``(C, D, L)`` integer ids of the recorded vocabulary and
    the recorded free positions lie in ``0 .. L-1``."""
    tokens = idata.posterior["tokens"].values
    if tokens.ndim != 3 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens are {tokens.dtype} of shape {tokens.shape}, not integer ids (chain, draw, position)")
    vocab = attr_list(idata.attrs, "vocab")
    size = len(vocab) if vocab is not None else None
    bad = (tokens < 0) if size is None else (tokens < 0) | (tokens >= size)
    if bad.any():
        c, d, p = (int(i) for i in np.argwhere(bad)[0])
        where = "outside the vocabulary" + (f" of {size} tokens" if size is not None else "")
        raise ValueError(f"token id {int(tokens[c, d, p])} at chain {c}, draw {d}, position {p} is {where}")
    free = attr_list(idata.attrs, "free_positions")
    L = tokens.shape[-1]
    if free is not None and any(not isinstance(i, int) or not 0 <= i < L for i in free):
        raise ValueError(f"free positions {free} lie outside the {L} positions of the draws")


def _check_log_density(idata: "arviz.InferenceData") -> None:
    """A ValueError naming the first draw whose ``lp`` is nan or ``+inf``: a log density is finite,
    or ``-inf`` for a draw that breaks a rule; verdicts and rankings would silently drop or favour it."""
    if "lp" not in idata.sample_stats:
        return
    lp = np.asarray(idata.sample_stats["lp"].values, dtype=float)
    bad = np.isnan(lp) | (lp == np.inf)
    if bad.any():
        c, d = (int(i) for i in np.argwhere(bad)[0][:2])
        raise ValueError(
            f"lp at chain {c}, draw {d} is {lp[c, d]}; a run writes a finite log density, or -inf for an "
            "infeasible draw"
        )


def _free_mask(run: "Run") -> Tensor:
    """``(L,)`` bool: the sampled positions (all positions if the run does not say)."""
    L = run.tokens.shape[-1]
    free = attr_list(run.attrs, "free_positions")
    mask = torch.zeros(L, dtype=torch.bool)
    if free is None:
        return ~mask
    mask[torch.as_tensor(free, dtype=torch.long)] = True
    return mask


def _hamming(tokens: Tensor, other: Tensor, free: Tensor) -> np.ndarray:
    return ((tokens != other) & free).sum(-1).double().numpy()


def _reference_ids(reference, mlm, L: int) -> Tensor:
    if isinstance(reference, str):
        if mlm is None:
            raise ValueError("a string reference needs mlm= to encode it")
        ids = mlm.encode([reference]).input_ids[0]
    else:
        ids = torch.as_tensor(reference, dtype=torch.long)
    if ids.shape != (L,):
        raise ValueError(f"reference has {ids.shape[-1]} tokens, the draws have {L}; give a complete sequence")
    return ids


def _token_id(token, mlm) -> int:
    if isinstance(token, str):
        if mlm is None or token not in mlm.vocab:
            raise ValueError(f"unknown token {token!r}" + ("" if mlm is not None else " (pass mlm= to name tokens)"))
        return mlm.vocab.index(token)
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"indicator token must be a str or int id, got {token!r}")
    return int(token)


def with_reference(idata: "arviz.InferenceData", loop: str) -> "arviz.InferenceData":
    """``idata`` with ``hamming_reference``: each draw's Hamming distance to a reference loop.

    The distance counts the designed positions whose token differs from ``loop``'s, read with the
    run's recorded vocabulary. The attribute ``hamming_reference`` records the loop.

    Parameters
    ----------
    idata : arviz.InferenceData
        A run's InferenceData that records its vocabulary and free positions (``run.nc``).
    loop : str
        The designed positions' tokens in a reference (e.g. the template's own loop before it was
        masked): residues as one string, or tokens separated by spaces.

    Returns
    -------
    arviz.InferenceData
        A copy of ``idata`` with ``hamming_reference`` of shape ``(C, D)`` in its posterior.

    Raises
    ------
    ValueError
        Where the run does not record its vocabulary and free positions, is over a variable gap
        (its loops differ in length), or ``loop`` has another length or a token outside the
        vocabulary.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, run_chains, to_inference_data
    >>> from mlm_ppl.diagnostics import with_reference
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = run_chains(make_kernel("mh", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")), 2, 20, seed=0)
    >>> idata = with_reference(to_inference_data(run, mlm=mlm), "DEE")
    >>> idata.posterior["hamming_reference"].shape, idata.attrs["hamming_reference"]
    ((2, 20), 'DEE')
    """
    vocab = attr_list(idata.attrs, "vocab")
    free = attr_list(idata.attrs, "free_positions")
    if vocab is None or free is None:
        raise ValueError("the run does not record its vocabulary and free positions; a reference loop needs both")
    if "length" in idata.posterior:
        raise ValueError(
            "the run's loops vary in length (a variable gap): a reference loop of one length cannot be compared"
        )
    parts = loop_tokens(loop.strip())
    if len(parts) != len(free):
        raise ValueError(f"the reference loop {loop!r} has {len(parts)} tokens; the run designs {len(free)} positions")
    index = {str(tok): i for i, tok in enumerate(vocab)}
    unknown = [p for p in parts if p not in index]
    if unknown:
        raise ValueError(f"the reference loop's token {unknown[0]!r} is not in the run's vocabulary")
    ref = np.array([index[p] for p in parts])
    tokens = np.asarray(idata.posterior["tokens"].values)[..., [int(i) for i in free]]
    distance = (tokens != ref).sum(-1).astype(np.float64)
    out = idata.copy()
    out.posterior = out.posterior.assign(hamming_reference=(("chain", "draw"), distance))
    out.attrs["hamming_reference"] = "".join(parts) if all(len(p) == 1 for p in parts) else " ".join(parts)
    return out
