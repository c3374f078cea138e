"""The worked example of docs/architecture.md: a new kernel, declared once in this file and
registered with one line, reaches the Python API, the command line (its own flag), checkpoints
and resume, run.nc and Pyro (MLMKernel, MLMGibbs) without another file being touched; and it is
checked against exact enumeration like every kernel."""

import os
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import pyro
import pyro.distributions as pdist
import pytest
import torch
from pyro.infer import MCMC

import mlm_ppl
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel
from mlm_ppl._checks import count_at_least
from mlm_ppl.cli import main
from mlm_ppl.inference import Capabilities, KernelBase, Options, exact, option, register, unregister
from mlm_ppl.inference.base import accept, acceptance_probability, check_states, sample_tokens
from mlm_ppl.inference.exact import block_moves
from mlm_ppl.models.target import log_density
from mlm_ppl.rundir import load_checkpoint
from mlm_ppl.testing import save_tiny

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK]"


# ---------------------------------------------------------------------- the whole new kernel
@dataclass(frozen=True)
class UniformOptions(Options):
    lookahead: int = option(1, "positions changed per proposal", check=count_at_least(1))


class UniformState(NamedTuple):
    tokens: torch.Tensor  # (C, L)
    energy: torch.Tensor  # (C,)
    log_factor: torch.Tensor  # (C,)


class UniformInfo(NamedTuple):
    lp: torch.Tensor
    is_accepted: torch.Tensor
    acceptance_rate: torch.Tensor
    n_changed: torch.Tensor
    n_proposed: torch.Tensor  # a statistic of its own: positions the proposal changed


class UniformMH(KernelBase[UniformOptions]):
    """Metropolis with uniform proposals: ``lookahead`` free positions chosen at random, each
    redrawn uniformly over the ordinary tokens; symmetric, so ``log a = log p(x') - log p(x)``."""

    name = "uniform-mh"
    Options = UniformOptions
    State = UniformState
    Info = UniformInfo
    capabilities = Capabilities(log_factor=True, gibbs=True, complete_start=True, exact_matrix=True)

    def bind_target(self, target):
        if self.options.lookahead > target.num_free:
            raise ValueError("lookahead is larger than the free positions")

    def _lp(self, energy, log_factor):
        return log_density(energy, log_factor, self.target.temperature)

    def init(self, tokens):
        tokens = check_states(self.target, tokens)
        ev = self.target.evaluate(tokens)
        return UniformState(tokens, ev.energy, ev.log_factor)

    def with_log_factor(self, state, log_factor):
        return state._replace(log_factor=log_factor)

    def step(self, state, streams):
        C, F = state.tokens.shape[0], self.target.num_free
        sites = streams.rand((C, F)).argsort(-1)[:, : self.options.lookahead]
        pos = self.target.free_positions[sites]
        logq = torch.zeros(C, sites.shape[1], self.target.vocab_size).masked_fill(
            ~self.target.ordinary_mask, float("-inf")
        )
        proposed = state.tokens.scatter(1, pos, sample_tokens(torch.log_softmax(logq, -1), streams))
        ev = self.target.evaluate(proposed)
        log_a = (self._lp(ev.energy, ev.log_factor) - self._lp(state.energy, state.log_factor)).double()
        take = accept(log_a, streams)
        tokens = torch.where(take[:, None], proposed, state.tokens)
        new = UniformState(
            tokens, torch.where(take, ev.energy, state.energy), torch.where(take, ev.log_factor, state.log_factor)
        )
        info = UniformInfo(
            self._lp(new.energy, new.log_factor),
            take,
            acceptance_probability(log_a).float(),
            (tokens != state.tokens).sum(-1),
            (proposed != state.tokens).sum(-1),
        )
        return new, info

    def transition_matrix(self, states, evaluation, index):
        assert self.options.lookahead == 1, "the matrix is written for single-site proposals"
        S, F = states.shape[0], self.target.num_free
        lp = self._lp(evaluation.energy, evaluation.log_factor).double()
        logq = torch.log_softmax(
            torch.zeros(S, 1, self.target.vocab_size).masked_fill(~self.target.ordinary_mask, float("-inf")), -1
        )
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for f in range(F):
            pos = self.target.free_positions[torch.full((S, 1), f)]
            for log_q, dest in block_moves(self.target, states, pos, logq, index):
                a = acceptance_probability(lp[dest] - lp)
                P.index_put_((rows, dest), log_q.exp() * a / F, accumulate=True)
                P.index_put_((rows, rows), log_q.exp() * (1 - a) / F, accumulate=True)
        return P


# ---------------------------------------------------------------------- the one registration line
@pytest.fixture
def uniform_mh():
    register(UniformMH)
    yield UniformMH
    unregister("uniform-mh")


def test_it_samples_its_target_exactly(uniform_mh, tiny4_64):
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    P = exact.transition_matrix(uniform_mh(dist))
    target = exact.exact_log_probs(dist).exp()
    assert torch.allclose(target @ P, target, atol=1e-12)


def test_it_reaches_the_python_api_with_its_own_statistic(uniform_mh, tiny4):
    run = mlm_ppl.sample(tiny4, TEMPLATE, kernel="uniform-mh", num_chains=2, num_samples=5, seed=0)
    assert run.stats["n_proposed"].shape == (2, 5) and set(run.stats) == set(uniform_mh.stat_names())
    with pytest.raises(TypeError, match="'uniform-mh' takes no option 'lookahed'"):
        mlm_ppl.sample(tiny4, TEMPLATE, kernel="uniform-mh", lookahed=2)
    with pytest.raises(ValueError, match="lookahead must be an integer >= 1"):
        mlm_ppl.sample(tiny4, TEMPLATE, kernel="uniform-mh", lookahead=0)


def test_it_reaches_the_command_line_checkpoints_and_run_nc(uniform_mh, tiny4, tmp_path, capsys):
    model = str(save_tiny(tiny4, tmp_path / "model"))
    out = tmp_path / "run"
    args = ["sample", "--model", model, "--template", TEMPLATE, "--kernel", "uniform-mh", "--lookahead", "2",
            "--chains", "2", "--draws", "6", "--seed", "1", "--no-progress"]  # fmt: skip
    assert main([*args, "--out", str(out)]) == 0
    cp = load_checkpoint(out)
    assert type(cp.state) is UniformState and set(cp.stats) == set(uniform_mh.stat_names())
    idata = az.from_netcdf(os.path.join(out, "run.nc"))
    assert idata.sample_stats["n_proposed"].shape == (2, 6)
    assert main(["sample", "--resume", str(out), "--lookahead", "2", "--no-progress"]) == 0  # already complete
    assert main([*args[:-1], "--kernel", "mh", "--out", str(tmp_path / "x")]) == 2
    assert "lookahead (--lookahead) is an option of kernel uniform-mh, not of mh" in capsys.readouterr().err


def test_it_reaches_pyro(uniform_mh, tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)

    def one_site():
        pyro.sample("x", dist)

    kernel = MLMKernel(one_site, kernel="uniform-mh", num_chains=2, seed=0)
    MCMC(kernel, num_samples=4, warmup_steps=1, disable_progbar=True).run()
    assert kernel.draw_stats[-1]["n_proposed"].shape == (4, 2)

    def with_discrete():
        z = pyro.sample("z", pdist.Bernoulli(0.5))
        x = pyro.sample("x", dist)
        pyro.factor("f", z * (x == 5).sum().double())

    gibbs = MLMGibbs(with_discrete, kernel="uniform-mh", seed=0)
    mcmc = MCMC(gibbs, num_samples=4, warmup_steps=1, disable_progbar=True)
    mcmc.run()
    assert mcmc.get_samples()["x"].shape == (4, dist.template.numel())
