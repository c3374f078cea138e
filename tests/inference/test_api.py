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
