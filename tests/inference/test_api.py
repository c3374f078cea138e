"""The sampling API: per-draw statistics and argument checks."""

import pytest
import torch

from exactness import TEMPLATE
from mlm_ppl import sample


def test_draw_stats_have_arviz_names_and_shapes(tiny4):
    run = sample(tiny4, TEMPLATE, num_chains=2, num_samples=7, warmup_steps=3, thin=2, seed=0)
    assert run.tokens.shape == (2, 7, 7)
    assert set(run.stats) == {"lp", "is_accepted", "acceptance_rate", "n_changed", "n_moves", "evaluated"}
    assert all(v.shape == (2, 7) for v in run.stats.values())
    assert run.stats["is_accepted"].dtype == torch.bool
    assert ((run.stats["acceptance_rate"] >= 0) & (run.stats["acceptance_rate"] <= 1)).all()
    assert run.attrs["seed"] == 0 and run.attrs["warmup_steps"] == 3 and run.attrs["model"] == tiny4.name


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(kernel="gibbs"), ValueError, "unknown kernel 'gibbs'"),
        (dict(scan="sideways"), ValueError, "unknown scan 'sideways'"),
        (dict(block_size=4), ValueError, "block_size=4 is larger than the 3 free positions"),
        (dict(block_size=0), ValueError, "block_size must be an integer >= 1"),
        (dict(temperature=0.0), ValueError, "temperature must be > 0"),
        (dict(temperature=-1.0), ValueError, "temperature must be > 0"),
        (dict(proposal_temperature=0), ValueError, "proposal_temperature must be > 0"),
        (dict(top_k=0), ValueError, "top_k must be an integer >= 1"),
        (dict(top_p=0.0), ValueError, r"top_p must lie in \(0, 1\]"),
        (dict(top_p=1.5), ValueError, r"top_p must lie in \(0, 1\]"),
        (dict(seed=1.5), TypeError, "seed must be an int"),
        (dict(seed=None), TypeError, "seed must be an int"),
        (dict(num_chains=0), ValueError, "num_chains must be an integer >= 1"),
        (dict(num_samples=-1), ValueError, "num_samples must be an integer >= 1"),
        (dict(kernel="pseudo-gibbs", scan="nope"), ValueError, "unknown scan"),
        (dict(kernel="mh", banana=1), TypeError, "kernel 'mh'.*banana"),
    ],
)
def test_bad_sampler_arguments_fail_before_sampling(tiny4, monkeypatch, kwargs, error, match):
    calls = []
    monkeypatch.setattr(tiny4, "logits_at", lambda *a: calls.append(1))
    with pytest.raises(error, match=match):
        sample(tiny4, TEMPLATE, **kwargs)
    assert not calls, "work started before the error"


class _Started(Exception):
    """Raised by a stand-in for run_chains: the run got past its estimate."""


def test_sample_estimates_the_run_as_the_command_line_does(tiny4, monkeypatch):
    """The command line's estimate (1 s per timed evaluation of 4 chains, timed from the first
    chain-evaluation here): a run past a day is refused before any step unless force=True; one past
    an hour warns and runs."""
    import mlm_ppl.campaign.run as campaign_run
    from mlm_ppl.inference import LongRunWarning, estimate

    monkeypatch.setattr(estimate, "time_per_evaluation", lambda kernel, chains: 1.0)
    monkeypatch.setattr(estimate, "TIMED_FROM", 1)
    started = []

    def run_chains(kernel, chains, draws, **options):
        started.append(draws)
        raise _Started

    monkeypatch.setattr(campaign_run, "run_chains", run_chains)
    with pytest.raises(
        ValueError, match=r"4 chains x 100000 steps: .*about 27\.8 h .*more than a day; .*or force=True"
    ):
        sample(tiny4, "A[MASK]C", num_chains=4, num_samples=100000, seed=0)
    assert started == []
    with (
        pytest.warns(LongRunWarning, match=r"estimate: 4 chains x 4000 steps: .*about 1\.1 h"),
        pytest.raises(_Started),
    ):
        sample(tiny4, "A[MASK]C", num_chains=4, num_samples=4000, seed=0)
    with pytest.warns(LongRunWarning, match=r"about 27\.8 h"), pytest.raises(_Started):
        sample(tiny4, "A[MASK]C", num_chains=4, num_samples=100000, seed=0, force=True)
    assert started == [4000, 100000]
