"""Every kernel keeps the same contract; the names removed in 0.3 fail with clear errors."""

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
from mlm_ppl.inference.spec import STAT_NAMES
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


def test_runs_record_the_statistics_each_kernel_declares(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    for kernel in (MetropolisHastings(dist), PseudoGibbs(dist), MaskPredict(dist, iterations=2)):
        run = run_chains(kernel, 2, 3, seed=0)
        assert set(run.stats) == set(type(kernel).stat_names()) >= set(STAT_NAMES)
        assert torch.equal(run.stats["n_moves"], run.stats["n_changed"])
        if not isinstance(kernel, MetropolisHastings):  # no accept step: every move is taken
            assert run.stats["is_accepted"].all() and (run.stats["acceptance_rate"] == 1).all()
    assert MetropolisHastings.stat_names() == (*STAT_NAMES, "evaluated")


def test_the_names_removed_in_0_3_fail_with_clear_errors(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    with pytest.raises(TypeError, match="'pseudo-gibbs' takes no option 'temperature'; its options are"):
        PseudoGibbs(dist, temperature=2.0)
    with pytest.raises(ValueError, match="unknown scan 'parallel'; choose one of .*'parallel_masked'"):
        PseudoGibbs(dist, scan="parallel")
    with pytest.raises(TypeError, match="initial tokens must be|tokens must be"):
        MaskPredict(dist).init(2)
    sys.modules.pop("mlm_ppl.inference.kernels", None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mlm_ppl.inference.kernels")
    import mlm_ppl.inference
    from mlm_ppl.inference import runner

    for module, name in ((runner, "make_kernel"), (mlm_ppl.inference, "ConstrainedTarget")):
        with pytest.raises(AttributeError):
            getattr(module, name)


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


def test_every_kernel_that_samples_no_log_factor_refuses_one(tiny4):
    """A constraint or likelihood term would be silently ignored (mask-predict used to ignore it)."""
    from mlm_ppl.inference import KERNELS

    constrained = ConstrainedTarget(MaskedLMDistribution(tiny4, TEMPLATE), lambda x: torch.zeros(x.shape[0]))
    # gap-jump refuses every fixed-length target, constrained or not (tests/inference/test_jump.py)
    refusing = [name for name, c in KERNELS.items() if not c.capabilities.log_factor and not c.capabilities.lengths]
    assert refusing == ["pseudo-gibbs", "mask-predict"]
    for name in refusing:
        with pytest.raises(ValueError, match=f"{name} would ignore the log-factor.*use kernel='mh'"):
            KERNELS[name](constrained)
