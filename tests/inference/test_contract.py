"""Every kernel keeps the same contract, and the old import paths still work (with a warning)."""

import importlib
import sys

import pytest
import torch

from exactness import TEMPLATE
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import (
    ChainStreams,
    MaskPredict,
    MaskPredictInfo,
    MetropolisHastings,
    MHInfo,
    PseudoGibbs,
    PseudoGibbsInfo,
    SurrogateInfo,
    SurrogateMH,
    exact,
    initial_tokens,
    run_chains,
)
from mlm_ppl.models import ConstrainedTarget, Target
from mlm_ppl.testing import goyal_counterexample


def test_targets_implement_the_protocol(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    for target in (dist, ConstrainedTarget(dist, lambda x: torch.zeros(x.shape[0])), goyal_counterexample()):
        assert isinstance(target, Target)
        states = exact.enumerate_states(target)[:2]
        target.validate_tokens(states)
        ev = target.evaluate(states)
        assert ev.energy.shape == (2,) and ev.cond_logits.shape == (2, target.num_free, target.vocab_size)


@pytest.mark.parametrize(
    "kernel_cls, info_cls",
    [
        (MetropolisHastings, MHInfo),
        (SurrogateMH, SurrogateInfo),
        (PseudoGibbs, PseudoGibbsInfo),
        (MaskPredict, MaskPredictInfo),
    ],
)
def test_every_kernel_inits_from_tokens_and_steps_with_random_streams(tiny4, kernel_cls, info_cls):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = kernel_cls(dist)
    gen = ChainStreams(0, 3)
    state = kernel.init(initial_tokens(kernel, 3, gen, "sample"))
    state, info = kernel.step(state, gen)
    assert type(info) is info_cls and info.lp.shape == (3,) and info.n_changed.shape == (3,)
    assert state.tokens.shape == (3, dist.template.numel())
    # only a kernel with an accept step reports acceptance
    assert hasattr(info, "is_accepted") == (kernel_cls in (MetropolisHastings, SurrogateMH))


def test_runs_record_the_same_statistics_for_every_kernel(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    for kernel in (MetropolisHastings(dist), PseudoGibbs(dist), MaskPredict(dist, iterations=2)):
        run = run_chains(kernel, 2, 3, seed=0)
        assert set(run.stats) == {"lp", "is_accepted", "acceptance_rate", "n_changed", "n_moves"}
        assert torch.equal(run.stats["n_moves"], run.stats["n_changed"])
        if not isinstance(kernel, MetropolisHastings):  # no accept step: every move is taken
            assert run.stats["is_accepted"].all() and (run.stats["acceptance_rate"] == 1).all()


def test_deprecated_names_warn_and_still_work(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    with pytest.warns(DeprecationWarning, match="proposal_temperature"):
        pg = PseudoGibbs(dist, temperature=2.0)
    assert pg.proposal_temperature == 2.0
    with pytest.warns(DeprecationWarning, match="proposal_temperature"):
        assert pg.temperature == 2.0
    with pytest.raises(TypeError, match="proposal_temperature only"):
        PseudoGibbs(dist, temperature=2.0, proposal_temperature=3.0)
    with pytest.warns(DeprecationWarning, match="init\\(tokens\\)"):
        state = MaskPredict(dist).init(2)
    assert (state.tokens[:, dist.free_positions] == tiny4.mask_id).all()
    sys.modules.pop("mlm_ppl.inference.kernels", None)
    with pytest.warns(DeprecationWarning, match="mlm_ppl.inference.kernels is deprecated"):
        old = importlib.import_module("mlm_ppl.inference.kernels")
    assert old.MetropolisHastings is MetropolisHastings and old.ConstrainedTarget is ConstrainedTarget
    from mlm_ppl.inference import api, runner

    with pytest.warns(DeprecationWarning, match="moved to mlm_ppl.inference.api"):
        assert runner.make_kernel is api.make_kernel
    with pytest.raises(AttributeError):
        runner.no_such_name  # noqa: B018
    import mlm_ppl.inference

    with pytest.warns(DeprecationWarning, match="moved to mlm_ppl.models"):
        assert mlm_ppl.inference.ConstrainedTarget is ConstrainedTarget


def test_mask_predict_starts_from_the_masked_template(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = MaskPredict(dist)
    filled = exact.enumerate_states(dist)[:2]
    state = kernel.init(filled)  # whatever the free positions held, decoding starts masked
    assert torch.equal(state.tokens, dist.template.expand(2, -1))
    with pytest.raises(TypeError, match="torch.long tensor"):
        kernel.init([1, 2, 3])
    with pytest.raises(ValueError, match="shape"):
        kernel.init(filled[:, :3])
    with pytest.raises(ValueError, match="fixed position"):
        kernel.init(filled.roll(1, dims=1))
