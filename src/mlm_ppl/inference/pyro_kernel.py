"""The kernels inside ``pyro.infer.MCMC``: :class:`MLMKernel`, a real ``MCMCKernel``.

The model's latent sites are token sites, distributed as :class:`~mlm_ppl.MaskedLMDistribution`;
everything else that depends on the tokens (``pyro.factor`` constraints, observed likelihood
terms) enters the acceptance ratio: Metropolis-within-Gibbs on the full log joint, with observed
sites fixed. It moves one token site outside any ``pyro.plate`` (batched chains if asked); every
other model (several token sites, a site under a plate, other latent sites) is
:class:`~mlm_ppl.MLMGibbs`'s, and ``MLMKernel`` refuses it with a message that says so.

Pyro pitfalls handled here (pyro 1.9, ``pyro/infer/mcmc/api.py``):

* ``sample(params)`` is the only abstract method; ``initial_params`` has a getter and setter.
* ``end_warmup()`` is never called by MCMC: the kernel counts warm-up steps itself.
* ``logging()`` output goes through ``json.dumps`` every step: plain floats only.
* Sequential chains reuse one kernel object: ``setup`` resets all chain state and takes the
  random streams of Pyro's chain id (:func:`~mlm_ppl.inference.pyro_chains.pyro_chain_id`), which
  Pyro passes to no kernel.
* With ``num_chains > 1`` and more cores than chains, MCMC runs each chain in a worker process
  on a copy of the kernel: nothing a worker's kernel holds comes back but the draws and its
  ``diagnostics()``. Each chain's start and per-draw statistics travel there
  (:class:`~mlm_ppl.inference.pyro_chains.ChainRecord`), and ``transforms`` is None until the
  kernel was set up in this process, so MCMC sets the parent's kernel up to find it (a set-up
  that is no chain: :func:`~mlm_ppl.inference.pyro_chains.called_for_transforms`).
* ``MCMC.summary()``, ``MCMC.diagnostics()`` and ``az.from_pyro`` fail on integer draws: per-draw
  statistics are kept on the kernel (:attr:`MLMKernel.draw_stats`).
* With ``num_chains > 1`` MCMC uses worker processes only when ``num_chains <= cpu_count - 1``;
  each worker runs its own forward passes (and threads oversubscribe). Prefer
  ``MLMKernel(model, num_chains=C)`` with ``MCMC(num_chains=1)``: C chains in one batched
  forward pass. Their draws come out of ``get_samples()`` as ``(C * D, L)``, chain after chain
  (:class:`~mlm_ppl.inference.pyro_sites.AsTokenDraws`): one posterior draw per row, as
  ``Predictive`` reads them.
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
from .base import check_init, initial_tokens
from .pyro_chains import RECORD, ChainRecord, called_for_transforms, chain_streams, start_chain
from .pyro_sites import (
    AsTokenDraws,
    is_sample_site,
    other_sites_log_prob,
    site_weights,
    trace_model,
    weighted,
)
from .registry import KERNELS, kernel_class, make_kernel
from .runner import step_stats
from .streams import ChainStreams

__all__ = ["MLMKernel", "mcmc_kernels"]


def mcmc_kernels() -> tuple[str, ...]:
    """The kernels :class:`MLMKernel` runs: every registered one that moves complete states of a
    fixed template (a decoder from the masked template, mask-predict, is not an MCMC kernel, and
    gap-jump samples a variable gap, which no Pyro site holds)."""
    return tuple(name for name, cls in KERNELS.items() if cls.capabilities.complete_start and cls.capabilities.fixed)


class MLMKernel(MCMCKernel):
    """Run an mlm-ppl kernel (MH, pseudo-Gibbs) as a ``pyro.infer.mcmc.MCMCKernel``.

    Parameters
    ----------
    model : callable
        A Pyro model whose one latent site is a :class:`~mlm_ppl.MaskedLMDistribution` outside
        any ``pyro.plate``; observed sites and ``pyro.factor`` terms may depend on the tokens.
        Several token sites, one under a ``pyro.plate``, or other latent sites are refused with
        the kernel to use instead: ``MLMGibbs(model)`` (token and discrete sites) or
        ``MLMGibbs(NUTS(model))`` (continuous sites).
    kernel : {"mh", "surrogate-mh", "replica-mh", "pseudo-gibbs"}, optional
        Which kernel moves the tokens (default ``"mh"``); ``**kernel_options`` go to it.
    num_chains : int, optional
        Chains advanced together in one batched forward pass inside this one Pyro chain (one
        token site outside any plate). With ``num_chains > 1`` the site's value has shape
        ``(C, L)`` at each step; after the run ``mcmc.get_samples()`` lays the chains end to
        end, ``(P * C * D, L)`` for ``P`` Pyro chains of ``D`` draws, so ``Predictive`` takes it
        as it is, and ``get_samples(group_by_chain=True)`` is ``(P, C * D, L)``
        (:func:`mlm_ppl.from_pyro` separates the ``P * C`` chains again). Default 1.
    seed : int or None, optional
        Seed of the chains' random streams (:class:`~mlm_ppl.inference.ChainStreams`):
        batched chain ``c`` of Pyro chain ``i`` draws from the stream of chain ``i*C + c``, ``i``
        Pyro's chain id, so chains run one after another and chains in Pyro's worker processes
        draw the same, and a re-run of the same ``MCMC`` object repeats its draws. None (the
        default) draws each chain's seed from torch's global RNG, as NUTS does: then
        ``pyro.set_rng_seed`` before ``mcmc.run()`` makes a run reproducible (Pyro seeds each
        worker process with its own seed, so worker chains differ from sequential ones).
    init : {"sample", "greedy", "uniform"}, optional
        How the free positions are filled before warm-up (default ``"sample"``; never counted as
        draws): within the alphabets of the site's ``constraints``, and repaired where the fill
        breaks one of its rules (``mlm_ppl.inference.starts.repair_start``); ``initial_params``
        that break one are refused.
    **kernel_options
        Options of the token kernel (``scan``, ``block_size``, ``top_k`` ...), checked here.

    Raises
    ------
    TypeError
        Where ``model`` is not callable, or a count or the seed is not an integer.
    ValueError
        Where ``kernel`` is not an MCMC kernel of complete states of a fixed template (a decoder
        such as mask-predict, gap-jump, an unknown name), a kernel option is unknown or out of
        range, or ``num_chains``, ``seed`` or ``init`` is out of range.

    Notes
    -----
    :attr:`draw_stats` holds the per-draw statistics of every Pyro chain this kernel object ran
    in this process; :func:`mlm_ppl.from_pyro` reads every chain's, worker processes' included.

    Examples
    --------
    Two batched chains of a token site, with a soft constraint on the tokens, in one Pyro chain:

    >>> import pyro
    >>> from pyro.infer import MCMC
    >>> from mlm_ppl import MaskedLMDistribution, MLMKernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> def model():
    ...     loop = pyro.sample("loop", MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]"))
    ...     pyro.factor("fewer_a", -0.5 * (loop == mlm.vocab.index("A")).sum(-1).float())
    >>> mcmc = MCMC(MLMKernel(model, num_chains=2, seed=0), num_samples=5, warmup_steps=2, disable_progbar=True)
    >>> mcmc.run()
    >>> mcmc.get_samples()["loop"].shape  # (chains x draws, tokens with [CLS] and [SEP])
    torch.Size([10, 7])
    """

    def __init__(
        self,
        model: Callable,
        *,
        kernel: str = "mh",
        num_chains: int = 1,
        seed: int | None = None,
        init: str = "sample",
        **kernel_options: Any,
    ) -> None:
        if not callable(model):
            raise TypeError("model must be a callable Pyro model")
        if kernel in KERNELS and not KERNELS[kernel].capabilities.complete_start:
            raise ValueError(
                f"{kernel!r} is a decoder from the masked template, not an MCMC kernel; use "
                f"mlm_ppl.sample(kernel={kernel!r})"
            )
        if kernel in KERNELS and not KERNELS[kernel].capabilities.fixed:
            raise ValueError(
                f"{kernel!r} samples the lengths of a variable gap MASK{{a,b}}, which a MaskedLMDistribution site "
                "cannot hold (it refuses one); sample it with mlm-ppl sample --length-mode jump, or "
                "mlm_ppl.sample(mlm, template, kernel='gap-jump')"
            )
        check_choice(kernel, "kernel", mcmc_kernels())
        check_kernel_options(kernel, kernel_options)  # unknown kernels and options fail here, not at mcmc.run()
        self.model = model
        self.kernel_name = kernel
        self.kernel_options = kernel_options
        self.num_chains = check_count(num_chains, "num_chains")
        self.seed = None if seed is None else check_seed(seed)
        self.init = check_init(init)
        self._chains: list[dict[str, list[Tensor]]] = []
        self._initials: list[Tensor] = []
        self._chain_index = -1  # the Pyro chain being run (a counter when setup is called outside Pyro)
        self._initial_params: dict[str, Tensor] | None = None
        self._reset()

    def _reset(self) -> None:
        # what setup() finds and builds; typed Any because it is empty until setup() runs
        self.site: Any = None
        self.target: Any = None
        self._dist: Any = None
        self.kernel: Any = None
        self._state: Any = None
        self._streams: ChainStreams  # set by setup(): this Pyro chain's random streams
        self._warmup_steps = 0
        self._t = 0
        self._accepted = 0.0
        self._moved = 0.0

    # ------------------------------------------------------------------ setup
    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        """Find the token site, build the target and kernel, and start a chain from a filled template.

        The target is the MLM energy plus the model's other terms; the template is filled (or
        ``initial_params`` taken) and the starting state evaluated. Resets all chain state.
        Called by ``MCMC`` only to find :attr:`transforms` (after chains in worker processes), it
        builds the target and the kernel but starts no chain.

        Parameters
        ----------
        warmup_steps : int
            Warm-up steps of the chain: their statistics are not kept (MCMC never calls
            ``end_warmup``).
        *args
            The model's positional arguments.
        **kwargs
            The model's keyword arguments.

        Raises
        ------
        ValueError
            Where the model has no latent :class:`~mlm_ppl.MaskedLMDistribution` site, has other
            latent sites, several token sites or one under a ``pyro.plate`` (each message names
            the kernel to use), ``initial_params`` are given to chains in worker processes or
            hold another number of chains, or a start breaks a hard rule of the target.
        """
        probe = called_for_transforms()
        self._reset()
        worker = False
        if not probe:
            self._chain_index, worker = start_chain(self._chain_index)
        if self._initial_params is not None and worker:
            raise ValueError(
                "MCMC(initial_params=...) with chains in worker processes gives every worker the last chain's "
                "params (Pyro sets them on the one kernel object all workers copy); start each chain with "
                "MLMKernel(model, num_chains=C) and MCMC(num_chains=1, initial_params=...) instead"
            )
        self._warmup_steps = int(warmup_steps)
        self._args, self._kwargs = args, kwargs
        trace = trace_model(self.model, args, kwargs)
        sites = [
            name
            for name, s in trace.nodes.items()
            if s["type"] == "sample" and isinstance(s["fn"], MaskedLMDistribution) and not s["is_observed"]
        ]
        if not sites:
            raise ValueError(
                "the model has no latent MaskedLMDistribution site; wrap the MLM as "
                "pyro.sample(name, MaskedLMDistribution(...))"
            )
        other_latent = [
            name for name, s in trace.nodes.items() if is_sample_site(s) and not s["is_observed"] and name not in sites
        ]
        if other_latent:
            raise ValueError(
                f"MLMKernel samples only token sites {sites}, but the model has other latent sites {other_latent}; "
                "sample it with MLMGibbs(NUTS(model)) (continuous sites) or MLMGibbs(model) (discrete sites)"
            )
        dist = trace.nodes[sites[0]]["fn"]
        assert isinstance(dist, MaskedLMDistribution)  # the site was chosen for it
        if len(sites) > 1 or dist.batch_shape != torch.Size():
            shape = f"token sites {sites}" if len(sites) > 1 else f"token site {sites[0]!r} under a pyro.plate"
            use = self.kernel_name if kernel_class(self.kernel_name).capabilities.gibbs else "mh"
            raise ValueError(
                f"MLMKernel moves one token site outside any pyro.plate; this model has {shape}. Sample it with "
                f"MLMGibbs(model, kernel={use!r}), which updates each site (and each sequence of a plate) in turn "
                "given the others, and run MCMC(num_chains=C) for several chains"
            )
        self.site = sites[0]
        self._dist = dist
        base = weighted(dist, site_weights(self.site, trace.nodes[self.site]))  # poutine.scale / mask on the site
        has_other_terms = any(is_sample_site(s) and name != self.site for name, s in trace.nodes.items())
        self.target = ConstrainedTarget(base, self._log_factor) if has_other_terms else base
        self.kernel = make_kernel(self.kernel_name, self.target, **self.kernel_options)
        if probe:
            return
        self._streams = chain_streams(self.seed, self._chain_index, self.num_chains)
        init: str | Tensor = self.init
        if self._initial_params is not None:  # used once: MCMC sets them again before each chain it gives them to
            init = self._initial_params[self.site].reshape(-1, dist.event_shape[0])
            self._initial_params = None
            if init.shape[0] != self.num_chains:
                raise ValueError(f"initial_params has {init.shape[0]} chains, the kernel runs {self.num_chains}")
        # a fill within the alphabets, repaired where it breaks a rule; given starts checked against the rules
        tokens = initial_tokens(self.kernel, self.num_chains, self._streams, init)
        self._state = self.kernel.init(tokens)
        self._initials.append(self._state.tokens.clone())
        self._chains.append({})

    def _log_factor(self, tokens: Tensor) -> Tensor:
        """``(N,)`` log density of every site but the token site, with the tokens substituted
        (float64, as MLMGibbs's: the target casts it to its energy's dtype)."""
        terms = [
            other_sites_log_prob(self.model, self._args, self._kwargs, {self.site: row}, {self.site: self._dist})
            for row in tokens
        ]
        return torch.stack(terms).to(torch.float64)

    @property
    def transforms(self) -> dict | None:
        """What ``MCMC`` applies to the samples after a run, turning the token site's draws into token draws.

        ``{site: AsTokenDraws(num_chains)}``, which makes them ``TokenDraws``
        (``mlm_ppl.inference.pyro_sites``). None until the kernel was set up in this process
        (chains in worker processes set up copies of it): MCMC then sets it up to find them.
        """
        return None if self.site is None else {self.site: AsTokenDraws(self.num_chains)}

    # ------------------------------------------------------------------ params
    @property
    def initial_params(self) -> dict[str, Tensor]:
        """The token site's starting value ``{site: tokens}``, ``(L,)`` or ``(num_chains, L)`` batched.

        After :meth:`setup`, the state the chain starts from; before, the params ``MCMC`` set
        (``MCMC(initial_params=...)``), which the next :meth:`setup` uses once.

        Raises
        ------
        RuntimeError
            Where read before :meth:`setup` with no params set.
        """
        if self._state is None:
            if self._initial_params is not None:
                return self._initial_params
            raise RuntimeError("initial_params is known after setup(); run it through pyro.infer.MCMC")
        return {self.site: self._value(self._state.tokens)}

    @initial_params.setter
    def initial_params(self, params: dict[str, Tensor]) -> None:
        self._initial_params = params

    def _value(self, tokens: Tensor) -> Tensor:
        return tokens[0].clone() if self.num_chains == 1 else tokens.clone()

    # ------------------------------------------------------------------ sampling
    def sample(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """One kernel step; a change of the token site's value from outside restarts from it.

        Parameters
        ----------
        params : dict of str to torch.Tensor
            The current value of the token site, ``{site: tokens}``.

        Returns
        -------
        dict of str to torch.Tensor
            The token site's value after the step: ``(L,)``, or ``(num_chains, L)`` batched.
        """
        given = params[self.site].reshape(self.num_chains, -1)
        if not torch.equal(given, self._state.tokens):
            self._state = self.kernel.init(given)
        self._state, info = self.kernel.step(self._state, self._streams)
        stats = step_stats(info)
        self._t += 1
        self._accepted += float(stats["is_accepted"].float().mean())
        self._moved += float((stats["n_changed"] > 0).float().mean())
        if self._t > self._warmup_steps:
            for k, v in stats.items():
                self._chains[-1].setdefault(k, []).append(v)
        return {self.site: self._value(self._state.tokens)}

    @property
    def initial_states(self) -> list[Any]:
        """Per Pyro chain run so far in this process, the ``(num_chains, L)`` states it started from.

        The states after the fill-in, before warm-up.
        """
        return list(self._initials)

    @property
    def draw_stats(self) -> list[Any]:
        """Per Pyro chain run so far in this process, the per-draw statistics of the token kernel.

        Each a dict of the kernel's statistics (``kernel_class(kernel).stat_names()``) of each
        draw, tensors of shape ``(D, num_chains)`` (warm-up excluded).
        """
        return [{k: torch.stack(v) for k, v in chain.items()} for chain in self._chains]

    def logging(self) -> dict[str, Any]:
        """What Pyro's progress bar shows: the acceptance rate and the share of steps that moved.

        Returns
        -------
        dict of str to float
            ``"acc. rate"``: the share of accepted proposals (a proposal of the current state
            counts), and ``"moved"``: the share of steps that changed the state (0 for a stuck
            chain), over every step of the chain so far, each rounded to 3 decimals.
        """
        steps = max(self._t, 1)
        return {"acc. rate": round(self._accepted / steps, 3), "moved": round(self._moved / steps, 3)}

    def diagnostics(self) -> dict[str, Any]:
        """The chain's acceptance rate, share of moves, and record, which ``MCMC`` collects at its end.

        ``MCMC`` collects them at the chain's end, from worker processes too.

        Returns
        -------
        dict of str to object
            ``"acceptance rate"`` and ``"moved"`` (floats, over the chain's draws; NaN before
            any), and under ``RECORD`` the chain's ``ChainRecord``
            (``mlm_ppl.inference.pyro_chains``): its start and per-draw statistics.
        """
        stats = {k: torch.stack(v) for k, v in self._chains[-1].items()} if self._chains else {}  # this chain's
        nan = torch.tensor(float("nan"))
        accepted = stats["is_accepted"].float().mean() if "is_accepted" in stats else nan
        moved = (stats["n_changed"] > 0).float().mean() if "n_changed" in stats else nan
        initial = self._initials[-1] if self._initials else None
        record = ChainRecord(self._chain_index, initial, stats, max(self._t - self._warmup_steps, 0))
        return {"acceptance rate": float(accepted), "moved": float(moved), RECORD: record}

    def __repr__(self) -> str:
        return f"MLMKernel(kernel={self.kernel_name!r}, num_chains={self.num_chains}, seed={self.seed})"
