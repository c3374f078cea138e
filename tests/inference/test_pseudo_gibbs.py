"""Pseudo-Gibbs against its own exact transition matrix (and not the energy's)."""

import itertools
import math

import pytest
import torch

from exactness import TEMPLATE, after, check_fit, empirical
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import (
    PSEUDO_GIBBS_SCANS,
    SCANS,
    ChainStreams,
    MetropolisHastings,
    PseudoGibbs,
    exact,
    fill_template,
    run_chains,
)
from mlm_ppl.testing import goyal_counterexample


@pytest.mark.slow  # about 5 s (make test-fast keeps under 3 minutes)
def test_pseudo_gibbs_matches_its_own_transition_matrix_not_the_energy(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = PseudoGibbs(dist, scan="random", proposal_temperature=2.0)
    own = exact.stationary_distribution(exact.transition_matrix(kernel))
    energy = exact.exact_log_probs(dist).exp()
    assert exact.total_variation(own, energy) > 0.2
    p_n = after(kernel, 40)
    assert exact.total_variation(p_n, own) < 0.01
    run = run_chains(kernel, 3000, 1, warmup_steps=39, seed=5, init="uniform")
    check_fit(p_n, empirical(dist, run.tokens[:, 0]))


def test_goyal_counterexample_stationary_distributions():
    target = goyal_counterexample()
    states = exact.enumerate_states(target)
    index, ev = exact.state_index(target), target.evaluate(states)
    kernel = PseudoGibbs(target, scan="left_to_right")
    first, second = kernel.block_matrix(states, ev, (0,), index), kernel.block_matrix(states, ev, (1,), index)
    expect = {
        "left_to_right": [0.25, 0.25, 0.25, 0.25],
        "right_to_left": [0.495, 0.005, 0.005, 0.495],
        "random": [0.3725, 0.1275, 0.1275, 0.3725],
    }
    got = {
        "left_to_right": exact.stationary_distribution(exact.transition_matrix(kernel)),
        "right_to_left": exact.stationary_distribution(second @ first),
        "random": exact.stationary_distribution(exact.transition_matrix(PseudoGibbs(target, scan="random"))),
    }
    assert torch.allclose(first @ second, exact.transition_matrix(kernel))
    for name, values in expect.items():
        assert torch.allclose(got[name], torch.tensor(values, dtype=torch.float64), atol=1e-6), name
    # MH on E_norm of the same conditionals samples exp(-E_norm), whatever the scan
    energy = exact.exact_log_probs(target).exp()
    for scan in SCANS:
        P = exact.transition_matrix(MetropolisHastings(target, scan=scan))
        assert torch.allclose(exact.stationary_distribution(P), energy, atol=1e-6)


# ---------------------------------------------------------------------- bert-gen's generation modes
def _bert_gen(mlm, ids, scan, *, temperature=1.0, top_k=None):
    """The transition matrix of one step of nyu-dl/bert-gen's modes, built here from the model's
    own forward passes (not through the kernel or the masked-copy engine): ``random`` is
    ``parallel_sequential_generation`` (mask one uniformly chosen position, redraw it),
    ``parallel_unmasked`` is ``parallel_generation`` (one forward pass of the sequence as it is,
    every position redrawn from it), ``parallel_masked`` redraws every position from its own
    singly-masked copy. Draws are renormalised over the ordinary tokens, as the kernel does.
    ``ids``: the template's token ids."""
    mask_id = mlm.tokenizer.mask_token_id
    free = (ids == mask_id).nonzero().flatten().tolist()
    ordinary = mlm.tokenizer.convert_tokens_to_ids(list("ACDE"))
    states = [list(c) for c in itertools.product(ordinary, repeat=len(free))]
    row = {tuple(c): n for n, c in enumerate(states)}

    def forward(x):
        with torch.no_grad():
            return mlm.model(input_ids=x[None], attention_mask=torch.ones_like(x)[None]).logits[0].double()

    def probs(logits):  # (V,) -> (4,) over the ordinary tokens, bert-gen's temperature and top-k
        kept = logits[ordinary] / temperature
        if top_k is not None:
            kept = kept.masked_fill(kept < kept.topk(top_k).values[-1], float("-inf"))
        return torch.softmax(kept, 0)

    P = torch.zeros(len(states), len(states), dtype=torch.float64)
    for s, combo in enumerate(states):
        x = ids.clone()
        x[free] = torch.tensor(combo)
        unmasked = forward(x)
        q = []
        for p in free:
            m = x.clone()
            m[p] = mask_id
            q.append(probs(unmasked[p] if scan == "parallel_unmasked" else forward(m)[p]))
        if scan == "random":
            for i in range(len(free)):
                for t, tok in enumerate(ordinary):
                    to = list(combo)
                    to[i] = tok
                    P[s, row[tuple(to)]] += q[i][t] / len(free)
        else:
            for to in itertools.product(range(len(ordinary)), repeat=len(free)):
                P[s, row[tuple(ordinary[t] for t in to)]] = math.prod(float(q[i][t]) for i, t in enumerate(to))
    return P


@pytest.mark.parametrize(
    "scan, options",
    [
        ("random", dict(proposal_temperature=0.7)),
        ("random", dict(top_k=2)),
        ("parallel_unmasked", dict(proposal_temperature=0.7)),
        ("parallel_unmasked", dict(top_k=3)),
        ("parallel_masked", dict()),
    ],
)
def test_the_kernel_s_transition_matrix_is_bert_gen_s(tiny4_64, scan, options):
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    own = exact.transition_matrix(PseudoGibbs(dist, scan=scan, **options))
    expect = _bert_gen(
        tiny4_64, dist.template, scan, temperature=options.get("proposal_temperature", 1.0), top_k=options.get("top_k")
    )
    assert torch.allclose(own, expect, rtol=0, atol=1e-12)


def test_bert_gen_s_parallel_mode_is_another_chain_than_parallel_masked(tiny4_64):
    """The model sees the token it predicts in bert-gen's parallel mode: on this 64-state model
    the two one-step matrices differ by up to 0.81 and their stationary laws by 0.67 in total
    variation (measured in float64; the random scan's law is 0.02 from parallel_masked's)."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    P_unmasked = exact.transition_matrix(PseudoGibbs(dist, scan="parallel_unmasked"))
    P_masked = exact.transition_matrix(PseudoGibbs(dist, scan="parallel_masked"))
    gap = float((P_unmasked - P_masked).abs().max())
    tv = exact.total_variation(exact.stationary_distribution(P_unmasked), exact.stationary_distribution(P_masked))
    assert gap > 0.5 and tv > 0.3, (gap, tv)


def test_parallel_unmasked_runs_follow_its_transition_matrix(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = PseudoGibbs(dist, scan="parallel_unmasked")
    run = run_chains(kernel, 3000, 1, warmup_steps=2, seed=3, init="uniform")
    check_fit(after(kernel, 3), empirical(dist, run.tokens[:, 0]))


def test_bert_gen_s_sequential_mode_is_the_left_to_right_fill(tiny4_64):
    """bert-gen's ``sequential_generation``: one left-to-right pass from all [MASK], each position
    drawn with the positions to its right still masked: exactly ``fill_template``'s law."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    ids = dist.template
    mask_id = tiny4_64.tokenizer.mask_token_id
    free = dist.free_positions.tolist()
    ordinary = tiny4_64.tokenizer.convert_tokens_to_ids(list("ACDE"))
    states = exact.enumerate_states(dist)
    law = torch.ones(states.shape[0], dtype=torch.float64)
    for n, x in enumerate(states):
        seq = ids.clone()
        for p in free:  # positions left of p are filled, p and those right of it still [MASK]
            with torch.no_grad():
                logits = tiny4_64.model(input_ids=seq[None], attention_mask=torch.ones_like(seq)[None]).logits[0, p]
            law[n] *= torch.softmax(logits.double()[ordinary], 0)[ordinary.index(int(x[p]))]
            seq[p] = x[p]
    assert abs(float(law.sum()) - 1) < 1e-12 and bool((ids[free] == mask_id).all())
    drawn = fill_template(dist, 4000, ChainStreams(11, range(4000)))
    check_fit(law, empirical(dist, drawn))


def test_the_scans_are_named_after_what_they_do(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    with pytest.raises(ValueError, match="unknown scan 'parallel'"):  # the name removed in 0.3
        PseudoGibbs(dist, scan="parallel")
    assert set(PSEUDO_GIBBS_SCANS) == {
        "random",
        "random_sweep",
        "left_to_right",
        "parallel_masked",
        "parallel_unmasked",
    }


@pytest.mark.slow
def test_pseudo_gibbs_chains_that_mix_are_called_mixed_never_converged(tiny4):
    """By enumeration: the chains reach pseudo-Gibbs' own stationary law (the exact matrix's),
    which is far from exp(-E/T); their summary says "mixed" with a note, MH's says "converged"."""
    from mlm_ppl.diagnostics import CONVERGED, MIXED, summary, to_inference_data

    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=3.0)
    kernel = PseudoGibbs(dist, scan="random")
    own = exact.stationary_distribution(exact.transition_matrix(kernel))
    energy = exact.exact_log_probs(dist).exp()
    assert exact.total_variation(own, energy) > 0.7  # its law is not the energy's (0.746)
    run = run_chains(kernel, 4, 1500, warmup_steps=50, seed=0)
    pooled = empirical(dist, run.tokens.reshape(-1, run.tokens.shape[-1]))
    assert exact.total_variation(own, pooled / pooled.sum()) < 0.05  # the chains did reach it
    report = summary(to_inference_data(run))
    assert run.attrs["stationary_law"] == "own"
    assert report.chains == [MIXED] * 4 and report.mixed and not report.converged
    assert "no guaranteed target" in str(report) and "not exp(-E/T)" in report.reasons[0]
    mh = summary(to_inference_data(run_chains(MetropolisHastings(dist), 4, 1500, warmup_steps=50, seed=0)))
    assert mh.chains == [CONVERGED] * 4 and mh.stationary_law is None


@pytest.mark.slow
def test_a_run_recorded_before_its_kernel_declared_no_target_reads_the_declaration(tiny4):
    from mlm_ppl.diagnostics import CONVERGED, MIXED, summary, to_inference_data

    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=3.0)
    run = run_chains(PseudoGibbs(dist, scan="random"), 4, 1500, warmup_steps=50, seed=0)
    del run.attrs["stationary_law"]  # as a run.nc of before
    assert summary(to_inference_data(run)).chains == [MIXED] * 4
    run.attrs["kernel"] = "MLMKernel(pseudo-gibbs)"  # a Pyro run names its token kernel so
    assert summary(to_inference_data(run)).chains == [MIXED] * 4
    run.attrs["kernel"] = "mh"
    assert summary(to_inference_data(run)).chains == [CONVERGED] * 4  # the same draws, told apart by name alone
