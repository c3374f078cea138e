"""MLM sequence sites inside a Pyro model with continuous latents: :class:`MLMGibbs`.

Metropolis-within-Gibbs in the spirit of NumPyro's ``HMCGibbs``: each iteration

1. moves the continuous latent sites with a Pyro ``HMC``/``NUTS`` kernel whose potential is the
   model's with every token and discrete site held at its current value, and the MLM energy
   left out (it is constant in the continuous sites, so no leapfrog step runs the MLM);
2. redraws every latent discrete site with enumerable support (``Categorical``, ``Bernoulli``
   ...) from its exact full conditional;
3. moves every latent :class:`~mlm_ppl.MaskedLMDistribution` site with the MLM kernel
   (Metropolis-Hastings, exact) on ``-E(x)/T + log_factor(x)``, where ``log_factor`` is the log
   density of every other site of the model given the current values of the others.

Each update leaves the joint posterior invariant, so the chain samples it. The MH state caches
the MLM energy and conditionals of the current tokens; when the continuous or discrete values
change only its ``log_factor`` (no MLM forward) is recomputed, so the next ratio is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from torch import Tensor

from .._checks import check_choice, check_count, check_seed
from ..models.distribution import MaskedLMDistribution
from ..models.target import ConstrainedTarget
from .api import check_kernel_options
from .base import check_init, fill_template
from .pyro_chains import RECORD, ChainRecord, called_for_transforms, chain_streams, start_chain
from .pyro_sites import (
    AS_TOKEN_DRAWS,
    AsSupportDtype,
    HoldSites,
    is_sample_site,
    other_sites_log_prob,
    site_log_factor,
    site_weights,
    trace_model,
    weighted,
)
from .registry import KERNELS, make_kernel
from .runner import step_stats
from .starts import repair_start
from .streams import ChainStreams

__all__ = ["MLMGibbs", "gibbs_kernels"]


def gibbs_kernels() -> tuple[str, ...]:
    """The kernels that may move a token site inside :class:`MLMGibbs` (``capabilities.gibbs``)."""
    return tuple(name for name, cls in KERNELS.items() if cls.capabilities.gibbs)


class MLMGibbs(MCMCKernel):
    """Gibbs over a Pyro model: ``HMC``/``NUTS`` for continuous sites, MH for MLM sequence sites.

    Parameters
    ----------
    inner_kernel : pyro.infer.HMC, pyro.infer.NUTS or callable
        Built on the model (``NUTS(model)``); it moves the continuous latent sites. Its step
        size and mass matrix adapt during warm-up across iterations, as in a plain NUTS run.
        A model without continuous latent sites (only token and enumerable discrete sites) is
        passed itself: ``MLMGibbs(model)``.
    kernel : {"mh", "surrogate-mh"}
        The kernel of the token sites: Metropolis-Hastings with MLM proposals, or its
        surrogate-transition form (both exact; any registered kernel whose
        ``capabilities.gibbs`` is true). Pseudo-Gibbs has no target and would ignore the
        rest of the model, so it is refused.
    seed : int, optional
        Seed of the token and discrete updates: Pyro chain ``i`` draws from stream ``i`` of it,
        whether Pyro runs the chains one after another or in worker processes, and a re-run of
        the same ``MCMC`` object repeats its token draws (the inner NUTS draws from torch's
        global RNG: ``pyro.set_rng_seed`` before ``mcmc.run()`` fixes it). None draws a seed from
        torch's global RNG at each ``setup`` (so ``pyro.set_rng_seed`` governs it).
    token_steps : int
        MH steps per token site per iteration (default 1).
    init : {"sample", "greedy", "uniform"}
        How the free positions are first filled: within the alphabets of a site's
        ``constraints``, and repaired where the fill breaks one of its rules
        (``mlm_ppl.inference.starts.repair_start``).
    **kernel_options
        Options of the token kernel (:class:`~mlm_ppl.inference.MetropolisHastings`: ``scan``,
        ``block_size``, ``top_k`` ...; :class:`~mlm_ppl.inference.SurrogateMH`: ``inner_steps``,
        ``surrogate_window`` ...), checked here.

    Attributes
    ----------
    mlm_sites : list of str
        The model's latent token sites, as :meth:`setup` found them (empty before).
    discrete_sites : list of str
        The model's latent discrete sites with enumerable support, as :meth:`setup` found them
        (empty before).
    continuous_sites : list of str
        The model's continuous latent sites, as :meth:`setup` found them (empty before).

    Raises
    ------
    TypeError
        Where ``inner_kernel`` is neither an ``HMC``/``NUTS`` kernel nor callable, ``seed`` or
        ``token_steps`` is not an integer, or a token kernel option is unknown or of the wrong type.
    ValueError
        Where the inner kernel was built with ``jit_compile=True``, ``kernel`` cannot move a token
        site (no ``capabilities.gibbs``) or is unknown, ``token_steps`` is below 1, ``seed`` is out
        of range, ``init`` is unknown, or a token kernel option is out of range.

    Notes
    -----
    Every latent :class:`~mlm_ppl.MaskedLMDistribution` site is updated in turn; under one
    ``pyro.plate`` it is a batch of independent sequences, each updated in turn given the others
    (so factors coupling them stay exact). Its template and temperature must not depend on
    another latent site (that would need the intractable normaliser of the MLM distribution).
    :attr:`draw_stats` holds, per Pyro chain and token site, the token kernel's per-draw
    statistics (:func:`~mlm_ppl.inference.step_stats`): ``lp`` (the MH target: MLM term plus
    every other term), ``is_accepted``, ``acceptance_rate``, ``n_changed``, ``n_moves`` and the
    other fields of its Info.

    Examples
    --------
    >>> import pyro
    >>> import pyro.distributions as dist
    >>> import torch
    >>> from pyro.infer import MCMC, NUTS
    >>> from mlm_ppl import MaskedLMDistribution, MLMGibbs
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> seqs = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> A = seqs.mlm.vocab.index("A")
    >>> def model():
    ...     w = pyro.sample("w", dist.Normal(0.0, 1.0))
    ...     x = pyro.sample("x", seqs)
    ...     pyro.sample("y", dist.Normal(w * (x == A).sum(), 1.0), obs=torch.tensor(1.0))
    >>> kernel = MLMGibbs(NUTS(model), seed=0)  # a model without continuous sites: MLMGibbs(model)
    >>> mcmc = MCMC(kernel, num_samples=5, warmup_steps=2, disable_progbar=True)
    >>> mcmc.run()
    >>> samples = mcmc.get_samples()
    >>> samples["x"].shape, samples["x"].dtype, samples["w"].shape
    (torch.Size([5, 7]), torch.int64, torch.Size([5]))
    >>> kernel.mlm_sites, kernel.continuous_sites
    (['x'], ['w'])
    >>> rate = kernel.draw_stats[0]["x"]["acceptance_rate"]  # Pyro chain 0, token site x
    >>> rate.shape, bool(((rate >= 0) & (rate <= 1)).all())
    (torch.Size([5]), True)
    """

    def __init__(
        self,
        inner_kernel: Any,
        *,
        kernel: str = "mh",
        seed: int | None = None,
        token_steps: int = 1,
        init: str = "sample",
        **kernel_options: Any,
    ) -> None:
        is_hmc = getattr(inner_kernel, "model", None) is not None and hasattr(inner_kernel, "clear_cache")
        if not is_hmc and not callable(inner_kernel):
            raise TypeError(
                "inner_kernel must be a pyro.infer.HMC or NUTS built on the model, e.g. NUTS(model), or the model "
                "itself when it has no continuous latent sites"
            )
        if is_hmc and getattr(inner_kernel, "_jit_compile", False):
            raise ValueError(
                "MLMGibbs cannot run NUTS/HMC with jit_compile=True: the compiled potential keeps the token sites' "
                "values it was traced with, so the continuous sites would be sampled given the first tokens whatever "
                "the chain does to them (a wrong posterior, silently). Build the inner kernel without it: "
                "NUTS(model) (jit_compile=False, the default)"
            )
        if kernel in KERNELS and not KERNELS[kernel].capabilities.gibbs:
            raise ValueError(
                f"kernel {kernel!r} cannot move a token site inside MLMGibbs: it does not sample the rest of the "
                f"model (other latent sites, likelihood terms); use one of {', '.join(map(repr, gibbs_kernels()))}"
            )
        check_choice(kernel, "kernel", gibbs_kernels())
        self.kernel_name = kernel
        check_kernel_options(kernel, kernel_options)  # unknown options fail here, not at mcmc.run()
        self.kernel_options = kernel_options
        self.seed = None if seed is None else check_seed(seed)
        self.token_steps = check_count(token_steps, "token_steps")
        self.init = check_init(init)
        self.inner: Any = inner_kernel if is_hmc else None
        self.model: Callable = inner_kernel.model if is_hmc else inner_kernel
        if self.inner is not None:
            self.inner.model = self._inner_model
        self._values: dict[str, Tensor] = {}  # current values of every token and discrete site
        self._chains: list[dict[str, dict[str, list[Tensor]]]] = []
        self._initials: list[dict[str, Tensor]] = []
        self._setup_args: tuple = ()
        self._setup_kwargs: dict = {}
        self.mlm_sites: list[str] = []
        self._mlm_fns: dict[str, MaskedLMDistribution] = {}  # each token site's distribution, as set up
        self.discrete_sites: list[str] = []
        self.continuous_sites: list[str] = []
        # one MH kernel per unit: a token site, or one sequence of a site under a pyro.plate
        self._kernels: dict[tuple[str, int | None], Any] = {}
        self._targets: dict[tuple[str, int | None], ConstrainedTarget] = {}
        self._states: dict[tuple[str, int | None], Any] = {}
        self._streams: ChainStreams  # set by setup(): this Pyro chain's random streams
        self._chain_index = -1
        self._supports: dict[str, Tensor] = {}
        self._z: dict[str, Tensor] = {}
        self._warmup_steps = 0
        self._t = 0
        self._accepted = 0.0
        self._moved = 0.0  # token steps that changed a sequence (accepted proposals of the same tokens do not)

    # ------------------------------------------------------------------ models
    def _inner_model(self, *args: Any, **kwargs: Any) -> Any:
        """The model the inner kernel sees: token and discrete sites held, MLM energy left out."""
        with HoldSites(self._values, zero_density=self.mlm_sites):
            return self.model(*args, **kwargs)

    def log_joint(self, values: dict[str, Tensor]) -> Tensor:
        """Compute the log density of every site but the MLM terms, at ``values`` and the data.

        The full conditionals of the discrete sites, and the token sites' log-factors, read it.
        The model runs with the arguments :meth:`setup` was given.

        Parameters
        ----------
        values : dict of str to torch.Tensor
            Values of the latent sites, substituted for them (continuous sites constrained).

        Returns
        -------
        torch.Tensor
            A scalar: the summed log probabilities of every sample site but the token sites.

        Raises
        ------
        ValueError
            Where a token site's distribution differs from the one set up (its template or
            temperature depends on another latent site).
        """
        return other_sites_log_prob(self.model, self._setup_args, self._setup_kwargs, values, self._mlm_fns)

    def _continuous_values(self) -> dict[str, Tensor]:
        """Constrained values of the continuous sites, from the inner kernel's current point."""
        z = self._z
        return {k: self.inner.transforms[k].inv(v) if k in self.inner.transforms else v for k, v in z.items()}

    def _factor(self, site: str, element: int | None) -> Callable[[Tensor], Tensor]:
        """``tokens (N, L) -> (N,)``: the rest of the model's log density with ``site`` (or its
        sequence ``element`` under a plate) at each row."""

        def with_row(row: Tensor) -> Tensor:
            if element is None:
                return row
            value = self._values[site].clone()
            value[element] = row
            return value

        def log_factor(tokens: Tensor) -> Tensor:
            base = {**self._values, **self._continuous_values()}
            return torch.stack([self.log_joint({**base, site: with_row(row)}) for row in tokens]).to(torch.float64)

        return log_factor

    # ------------------------------------------------------------------ setup
    def setup(self, warmup_steps: int, *args: Any, **kwargs: Any) -> None:
        """Find the sites, fill the token sites, set up the inner kernel and evaluate the starting tokens.

        The inner kernel is set up once (adaptation then carries on across iterations). Discrete
        sites start uniformly over their support, token sites filled by ``init`` (seeded). Called
        by ``MCMC`` only to find :attr:`transforms` (after chains in worker processes), it builds
        the sites' targets but starts no chain.

        Parameters
        ----------
        warmup_steps : int
            Iterations of warm-up: neither recorded in :attr:`draw_stats` nor returned as draws.
        *args
            The model's positional arguments.
        **kwargs
            The model's keyword arguments.

        Raises
        ------
        ValueError
            Where the model has no latent :class:`~mlm_ppl.MaskedLMDistribution` site, a discrete
            latent site without enumerable support (e.g. ``Poisson``), continuous latent sites but
            no inner kernel, a token site under more than one ``pyro.plate`` or a discrete site
            under any; or where the token kernel refuses a site's target (e.g. a ``block_size``
            larger than its free positions).
        """
        probe = called_for_transforms()
        self._setup_args, self._setup_kwargs = args, kwargs
        self._warmup_steps = int(warmup_steps)
        self._t, self._accepted, self._moved = 0, 0.0, 0.0
        if not probe:
            self._chain_index, _ = start_chain(self._chain_index)
        self._streams = chain_streams(self.seed, max(self._chain_index, 0), 1)  # a probe may come first
        self._values = {}
        trace = trace_model(self.model, args, kwargs)
        latent = {name: s for name, s in trace.nodes.items() if is_sample_site(s) and not s["is_observed"]}
        fns: dict[str, Any] = {name: s["fn"] for name, s in latent.items()}  # the sites' distributions
        self.mlm_sites = [n for n, s in latent.items() if isinstance(s["fn"], MaskedLMDistribution)]
        discrete = [n for n in latent if n not in self.mlm_sites and fns[n].support.is_discrete]
        self.discrete_sites = [n for n in discrete if fns[n].has_enumerate_support]
        if not self.mlm_sites:
            raise ValueError("the model has no latent MaskedLMDistribution site; use NUTS alone")
        infinite = [n for n in discrete if n not in self.discrete_sites]
        if infinite:
            raise ValueError(
                f"discrete latent sites {infinite} have no finite support to draw from (e.g. Poisson), and NUTS cannot "
                "move discrete sites: MLMGibbs updates only token sites and discrete sites with enumerable support "
                "(Bernoulli, Categorical, ...); bound the site (e.g. a Categorical over 0..K) or marginalise it"
            )
        self._mlm_fns = {name: fns[name] for name in self.mlm_sites}
        self.continuous_sites = [n for n in latent if n not in self.mlm_sites and n not in self.discrete_sites]
        if self.continuous_sites and self.inner is None:
            raise ValueError(
                f"the model has continuous latent sites {self.continuous_sites}; pass an inner kernel that moves "
                "them: MLMGibbs(NUTS(model))"
            )
        for name in self.mlm_sites:
            plates, batch = latent[name]["cond_indep_stack"], fns[name].batch_shape
            if batch != torch.Size() and (len(batch) != 1 or len(plates) != 1):
                raise ValueError(
                    f"MLM site {name!r} has batch shape {tuple(batch)}; MLMGibbs updates a site under at most one "
                    "pyro.plate (a batch of independent sequences)"
                )
        # starting values: MLM fills, discrete sites uniformly over their support (seeded)
        self._supports = {}
        for name in self.discrete_sites:
            fn = fns[name]
            if fn.batch_shape != torch.Size() or latent[name]["cond_indep_stack"]:
                raise ValueError(
                    f"discrete site {name!r} sits in a pyro.plate; MLMGibbs updates unbatched discrete sites"
                )
            support = fn.enumerate_support(expand=False).reshape((-1,) + tuple(fn.event_shape))
            self._supports[name] = support
            self._values[name] = support[int(self._streams.randint(support.shape[0])[0])].clone()
        self._kernels, self._states, self._targets = {}, {}, {}
        for name in self.mlm_sites:
            weights = site_weights(name, latent[name])  # poutine.scale / mask: (B,) under a plate, else ()
            batch = fns[name].batch_shape
            base = fns[name].expand(torch.Size()) if batch else fns[name]  # one sequence of the site
            # the elements of a plate one after another, all from the chain's one stream: each filled
            # within the site's alphabets and repaired where it breaks one of its rules
            elements: list[int | None] = list(range(batch[0])) if batch else [None]
            sites = {e: weighted(base, weights if e is None else weights[e]) for e in elements}
            filled = torch.cat(
                [
                    repair_start(sites[e], fill_template(sites[e], 1, self._streams, self.init), self._streams)
                    for e in elements
                ]
            )
            self._values[name] = filled if batch else filled[0]
            for element in elements:
                unit = (name, element)
                self._targets[unit] = ConstrainedTarget(sites[element], self._factor(name, element))
                self._kernels[unit] = make_kernel(self.kernel_name, self._targets[unit], **self.kernel_options)
        self._z = {}
        if self.continuous_sites:
            self.inner.cleanup()  # a fresh inner chain: step count, adaptation and cache reset
            self.inner.setup(warmup_steps, *args, **kwargs)
            self._z = dict(self.inner.initial_params)
        if probe:
            return
        for (name, element), kernel in self._kernels.items():
            tokens = self._values[name] if element is None else self._values[name][element]
            self._states[name, element] = kernel.init(tokens[None])
        self._chains.append({name: {} for name in self.mlm_sites})
        self._initials.append({name: v.clone() for name, v in self._values.items() if name in self.mlm_sites})

    # ------------------------------------------------------------------ params
    @property
    def initial_params(self) -> dict[str, Tensor]:
        """The starting values of every latent site, the inner kernel's continuous ones and the token and discrete ones.

        Set by :meth:`setup`; setting it is a ValueError (the kernel fills the token sites itself,
        and the inner kernel's ``init_strategy`` starts the continuous sites).
        """
        return {**self._z, **{k: v.clone() for k, v in self._values.items()}}

    @initial_params.setter
    def initial_params(self, params: dict[str, Tensor]) -> None:
        raise ValueError(
            "MLMGibbs fills the token sites itself (init=...); start the continuous sites with the inner "
            "kernel's init_strategy"
        )

    @property
    def transforms(self) -> dict | None:
        """The transforms ``MCMC`` applies to the samples, the inner kernel's and one per token and discrete site.

        The token sites' (``AS_TOKEN_DRAWS``, ``mlm_ppl.inference.pyro_sites``) apply after a run:
        Pyro packs each draw's sites into one tensor, so ids beside continuous sites travel as
        floats; they come out of ``get_samples`` as ``torch.long`` ``TokenDraws``, and discrete
        sites in their support's dtype (``AsSupportDtype``). None until the kernel was
        set up in this process (chains in worker processes set up copies of it): MCMC then sets it
        up to find them. Setting it sets the inner kernel's.
        """
        if not self.mlm_sites:
            return None
        inner = getattr(self.inner, "transforms", None) or {}
        discrete = {name: AsSupportDtype(self._supports[name].dtype) for name in self.discrete_sites}
        return {**inner, **discrete, **{name: AS_TOKEN_DRAWS for name in self.mlm_sites}}

    @transforms.setter
    def transforms(self, value: dict) -> None:
        if self.inner is not None:
            self.inner.transforms = value

    # ------------------------------------------------------------------ sampling
    def sample(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """Make one Gibbs iteration: continuous sites, then discrete sites, then every token site.

        Parameters
        ----------
        params : dict of str to torch.Tensor
            The current values ``MCMC`` passes; the continuous sites' (the inner kernel's
            unconstrained values) are read, the token and discrete sites are the kernel's own.

        Returns
        -------
        dict of str to torch.Tensor
            The new values of every latent site: the continuous sites' (unconstrained), and the
            token and discrete sites'.
        """
        if self.continuous_sites:
            self._z = self.inner.sample({k: params[k] for k in self._z})
        changed = False
        for name in self.discrete_sites:
            changed |= self._gibbs_discrete(name)
        record = self._t >= self._warmup_steps
        per_site: dict[str, list[dict[str, Tensor]]] = {name: [] for name in self.mlm_sites}
        for unit, kernel in self._kernels.items():
            name, element = unit
            state = self._states[unit]
            target = self._targets[unit]
            # the other terms moved with the held values, the site's own constraints did not; no MLM forward
            factor = target.log_factor(state.tokens) + site_log_factor(target.base, state.tokens)
            state = kernel.with_log_factor(state, factor.to(state.log_factor.dtype))
            for _ in range(self.token_steps):
                state, info = kernel.step(state, self._streams)
                stats = step_stats(info)
                share = len(self._kernels) * self.token_steps
                self._accepted += float(stats["is_accepted"].float().mean()) / share
                self._moved += float((stats["n_changed"] > 0).float().mean()) / share
            per_site[name].append(stats)
            current = self._values[name] if element is None else self._values[name][element]
            if not torch.equal(state.tokens[0], current):
                changed = True
                if element is None:
                    self._values[name] = state.tokens[0].clone()
                else:
                    self._values[name][element] = state.tokens[0]
            self._states[unit] = state
        if record:
            for name, units in per_site.items():
                for k in units[0]:
                    self._chains[-1][name].setdefault(k, []).append(torch.cat([u[k] for u in units]))  # (sequences,)
        if changed and self.continuous_sites:
            self.inner.clear_cache()  # the potential of the continuous sites changed with the held values
        self._t += 1
        return {**self._z, **{k: v.clone() for k, v in self._values.items()}}

    def _gibbs_discrete(self, name: str) -> bool:
        """Redraw a discrete site from its exact full conditional; True if it changed."""
        support = self._supports[name]
        base = {**self._values, **self._continuous_values()}
        logp = torch.stack([self.log_joint({**base, name: v}) for v in support])  # (K,)
        pick = self._streams.categorical(torch.softmax(logp.double(), 0)[None])[0]
        new = support[pick].clone()
        changed = not torch.equal(new, self._values[name])
        self._values[name] = new
        return changed

    # ------------------------------------------------------------------ the conditionals, for exact checks
    def discrete_support(self, name: str) -> Tensor:
        """Give the support of a latent discrete site, in the order its full conditional is drawn from.

        Parameters
        ----------
        name : str
            A latent discrete site of the model (one of ``discrete_sites``).

        Returns
        -------
        torch.Tensor
            Shape ``(K,) + event_shape``: the site's values.

        Raises
        ------
        ValueError
            Where ``name`` is not a discrete site of the model (as set up).
        """
        if name not in self._supports:
            raise ValueError(f"{name!r} is not a discrete site of the model; they are {self.discrete_sites}")
        return self._supports[name]

    def hold(self, name: str, value: Tensor, element: int | None = None) -> None:
        """Hold a token or discrete site (or sequence ``element`` of a plated token site) at ``value``.

        The next updates of the other sites condition on it (exact checks build the Gibbs sweep's
        transition matrix from them).

        Parameters
        ----------
        name : str
            A token or discrete site of the model.
        value : torch.Tensor
            Its value: token ids ``(L,)`` (``(B, L)`` for a whole plated site), or a value of the
            discrete site's support.
        element : int, optional
            The sequence of a plated token site to hold (default None: the whole site).

        Raises
        ------
        ValueError
            Where ``name`` is not a token or discrete site of the model (as set up).
        """
        if name not in self._values:
            raise ValueError(f"{name!r} is not a token or discrete site of the model")
        if element is None:
            self._values[name] = value.clone()
        else:
            self._values[name][element] = value

    def site_kernel(self, site: str, element: int | None = None) -> Any:
        """Give the token kernel that moves ``site`` (or its sequence ``element`` under a plate).

        It runs on :meth:`site_target`: its ``transition_matrix`` is the site's exact conditional
        update.

        Parameters
        ----------
        site : str
            A token site of the model.
        element : int, optional
            The sequence of a plated site (default None: the site, or its first sequence).

        Returns
        -------
        KernelBase
            The token kernel (a :class:`~mlm_ppl.MetropolisHastings` by default).

        Raises
        ------
        ValueError
            Where ``site`` is not a token site of the model, or has no sequence ``element``.
        """
        self.site_target(site, element)  # a clear error for an unknown site or element
        return self._kernels[site, element]

    def site_state(self, site: str, element: int | None = None) -> Any:
        """Give the current state of the token kernel of ``site`` (or of its sequence ``element``).

        Parameters
        ----------
        site : str
            A token site of the model.
        element : int, optional
            The sequence of a plated site (default None: the site, or its first sequence).

        Returns
        -------
        NamedTuple
            The kernel's state (an :class:`~mlm_ppl.inference.MHState` for MH): tokens, energy,
            the log-factor of the rest of the model, cached conditionals.

        Raises
        ------
        ValueError
            Where ``site`` is not a token site of the model, or has no sequence ``element``.
        """
        self.site_target(site, element)
        return self._states[site, element]

    # ------------------------------------------------------------------ reporting
    def site_target(self, site: str, element: int | None = None) -> ConstrainedTarget:
        """Give the MH target of a token site (or of its sequence ``element`` under a plate).

        Parameters
        ----------
        site : str
            A token site of the model.
        element : int, optional
            The sequence of a plated site (default None: the site, or its first sequence, since
            every sequence of a plated site has the same MLM distribution).

        Returns
        -------
        ConstrainedTarget
            Its MLM distribution plus the rest of the model (the log-factor, read at the other
            sites' current values).

        Raises
        ------
        ValueError
            Where ``site`` is not a token site of the model, or has no sequence ``element``.
        """
        if site not in self.mlm_sites:
            raise ValueError(f"{site!r} is not a token site of the model; they are {self.mlm_sites}")
        plated = (site, 0) in self._targets
        if plated and element is None:
            element = 0  # every sequence of a plated site has the same MLM distribution
        if (site, element) not in self._targets:
            raise ValueError(f"site {site!r} has no sequence {element!r}")
        return self._targets[site, element]

    def is_plated(self, site: str) -> bool:
        """Say whether a token site is a batch of sequences under a ``pyro.plate``.

        Parameters
        ----------
        site : str
            A token site of the model.

        Returns
        -------
        bool
            True for a plated site (False too for a name that is no token site).
        """
        return (site, 0) in self._targets

    @property
    def initial_states(self) -> list[dict[str, Tensor]]:
        """The starting tokens of each token site per Pyro chain run so far, ``(L,)`` (``(B, L)`` under a plate)."""
        return list(self._initials)

    @property
    def draw_stats(self) -> list[dict[str, dict[str, Tensor]]]:
        """The token kernel's per-draw statistics per Pyro chain and token site, each ``(D,)``.

        ``lp``, ``is_accepted``, ``acceptance_rate``, ``n_changed``, ``n_moves`` and the other
        fields of the kernel's Info (:func:`~mlm_ppl.inference.step_stats`), each ``(D,)``
        (``(D, B)`` for a site of B sequences under a plate), for the draws after warm-up.
        """
        return [self._stacked(chain) for chain in self._chains]

    def _stacked(self, chain: dict[str, dict[str, list[Tensor]]]) -> dict[str, dict[str, Tensor]]:
        """One chain's per-draw statistics as :attr:`draw_stats` gives them."""
        sites = {}
        for site, stats in chain.items():
            stacked = {k: torch.stack(v) for k, v in stats.items() if v}  # (D, B or 1)
            sites[site] = stacked if self.is_plated(site) else {k: v[:, 0] for k, v in stacked.items()}
        return sites

    def logging(self) -> dict[str, Any]:
        """Give what Pyro's progress bar shows of the chain so far.

        Returns
        -------
        dict of str to object
            The inner kernel's (with continuous sites), ``"token acc."`` (the token steps'
            acceptance rate) and ``"token moved"`` (the share of token steps that changed a
            sequence), each rounded to 3 decimals.
        """
        out = dict(self.inner.logging()) if self.continuous_sites else {}
        out["token acc."] = round(self._accepted / max(self._t, 1), 3)
        out["token moved"] = round(self._moved / max(self._t, 1), 3)
        return out

    def diagnostics(self) -> dict[str, Any]:
        """Give the chain's diagnostics, which ``MCMC`` collects at its end (from worker processes too).

        Returns
        -------
        dict of str to object
            The inner kernel's diagnostics (with continuous sites), ``"token acceptance rate"``,
            ``"token moved"`` (the share of token steps that changed a sequence) and the chain's
            record, a ``ChainRecord`` (starting tokens and per-draw statistics) that
            :func:`~mlm_ppl.from_pyro` reads.
        """
        out = dict(self.inner.diagnostics()) if self.continuous_sites else {}
        out["token acceptance rate"] = self._accepted / max(self._t, 1)
        out["token moved"] = self._moved / max(self._t, 1)
        initial = self._initials[-1] if self._initials else None
        stats = self._stacked(self._chains[-1]) if self._chains else {}  # this chain's alone
        out[RECORD] = ChainRecord(self._chain_index, initial, stats, max(self._t - self._warmup_steps, 0))
        return out

    def __repr__(self) -> str:
        inner = type(self.inner).__name__ if self.inner is not None else "model"
        return f"MLMGibbs({inner}, kernel={self.kernel_name!r}, seed={self.seed})"
