"""Inputs refused with a message that says what to do, found while the public API was documented
(issue 48): each used to pass silently or fail inside another library."""

import arviz as az
import numpy as np
import pyro
import pytest
import torch

from mlm_ppl import MaskedLMDistribution, MLMKernel
from mlm_ppl.diagnostics import DeepStates, loop_distribution
from mlm_ppl.inference import draw_from_distribution, exact
from mlm_ppl.testing import tiny_residue_bert

MLM = tiny_residue_bert("ACDE", seed=1)
PRIOR = MaskedLMDistribution(MLM, "C[MASK][MASK][MASK]D")


def test_an_unknown_scan_is_refused_by_the_exact_scan_cycles():
    """It used to be read as 'random_sweep'."""
    assert len(exact.scan_cycles("random_sweep", 3, 1)) == 6
    with pytest.raises(ValueError, match="scan must be 'random', 'left_to_right' or 'random_sweep', got 'sweep'"):
        exact.scan_cycles("sweep", 3, 1)


def test_the_loop_distribution_of_draws_under_pyro_names_says_what_it_needs():
    """It used to be a bare KeyError: 'tokens'."""
    idata = az.from_dict(posterior={"heavy": np.zeros((2, 3, 5), dtype=np.int64)})
    with pytest.raises(ValueError, match="holds no 'tokens' \\(a Pyro run keeps its sites' names\\)"):
        loop_distribution(idata)


def test_a_library_of_no_deep_state_says_there_is_none():
    """It used to say that every deep state was memorized."""
    none = DeepStates(states=[], chains=2, draws=10, disagreement=None, by="E")
    with pytest.raises(ValueError, match="no deep state to make a library of"):
        none.library()


def test_draws_of_a_distribution_check_their_number():
    """n was not checked: a string failed inside range(), 0 further down."""
    assert draw_from_distribution(PRIOR, 2, num_steps=1, seed=0).shape == (2, 7)  # [CLS] and [SEP] included
    with pytest.raises(TypeError, match="n must be an integer"):
        draw_from_distribution(PRIOR, "2", num_steps=1, seed=0)
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        draw_from_distribution(PRIOR, 0, num_steps=1, seed=0)


def test_a_log_prob_of_a_list_of_ids_asks_for_a_tensor():
    """It used to be AttributeError: 'list' object has no attribute 'shape'."""
    ids = PRIOR.encode("CAADD")
    with pytest.raises(TypeError, match="must be a tensor of token ids, got list: torch.tensor\\(ids\\)"):
        PRIOR.log_prob(ids.tolist())
    assert torch.isfinite(PRIOR.log_prob(ids))


def test_an_mlm_kernel_on_a_site_observed_as_text_names_the_call_that_encodes_it():
    """The kernel's trace turned the text into a tensor first: torch's "new(): invalid data type"."""

    def model():
        pyro.sample("x", PRIOR, obs="CAADD")
        pyro.sample("y", MaskedLMDistribution(MLM, "C[MASK]D"))

    mcmc = pyro.infer.MCMC(MLMKernel(model), num_samples=1, warmup_steps=0, disable_progbar=True)
    with pytest.raises(TypeError, match=r"prior.encode\('CAADD'\)"):
        mcmc.run()


def test_a_cdr3_body_of_letters_that_are_not_amino_acids_is_refused():
    """Any upper-case letters used to pass (B, J, O, U, X, Z)."""
    from mlm_ppl.data import heavy_chain

    sequence, cdr3 = heavy_chain(cdr3_body="DRGYSSGW")
    assert sequence[cdr3].startswith("AKDRGYSSGW")
    for body in ("DRGXSSGW", "", "drgy"):
        with pytest.raises(ValueError, match="cdr3_body must be the 20 amino acids' one-letter codes"):
            heavy_chain(cdr3_body=body)


def test_the_reference_state_of_a_spec_without_a_reference_says_how_to_give_one():
    """An assert used to stop it (and nothing at all under python -O)."""
    from mlm_ppl import ConstraintSpec

    bound = ConstraintSpec().bind(PRIOR)
    with pytest.raises(ValueError, match="the spec has no reference loop: give one"):
        bound.reference_state()
    assert (
        ConstraintSpec(reference="AAA").bind(PRIOR).reference_state().tolist()[2:5]
        == PRIOR.encode("CAAAD")[2:5].tolist()
    )


def test_random_states_of_another_width_are_refused_with_why():
    """torch's own error named a C++ state size and not the checkpoint."""
    from mlm_ppl.inference import ChainStreams

    streams = ChainStreams(0, 2)
    state = streams.get_state()
    streams.set_state(state)
    with pytest.raises(ValueError, match="are not this torch's generator states"):
        streams.set_state(state[:, :100])
    with pytest.raises(ValueError, match="are not this torch's generator states"):
        streams.set_state(state.long())


def test_more_candidates_than_ordinary_tokens_are_refused():
    """Called directly, candidate_sets used to repeat tokens and take special ones."""
    from mlm_ppl.models.pairs.conditionals import candidate_sets

    ordinary = torch.tensor([False, True, True, True, True, False])
    logits = torch.arange(6.0)
    assert candidate_sets(1, logits, logits, 4, ordinary).tolist() == [1, 4, 3, 2]
    with pytest.raises(ValueError, match="size must be an integer from 1 to the 4 tokens"):
        candidate_sets(1, logits, logits, 5, ordinary)
