import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from mlm_ppl import MaskedLMDistribution, testing
from mlm_ppl.inference import exact

torch.set_num_threads(min(2, os.cpu_count() or 1))

TEXT = ["the cat sat on the mat", "a big red dog runs", "the dog jumped and ran"]
RESIDUES = ["ACDEFGHIK", "MNPQRSTVWYAC", "KLLV"]


@pytest.fixture(scope="session")
def tiny_models():
    """The three tiny architectures with inputs each can encode."""
    return {
        "bert": (testing.tiny_bert(), TEXT),
        "roberta": (testing.tiny_roberta(), TEXT),
        "esm": (testing.tiny_esm(), RESIDUES),
        "antibody-bert": (testing.tiny_antibody_bert(), RESIDUES),
    }


@pytest.fixture(params=["bert", "roberta", "esm", "antibody-bert"])
def tiny(request, tiny_models):
    return tiny_models[request.param]


@pytest.fixture(scope="session")
def antiberty():
    from mlm_ppl import load_mlm

    return load_mlm("antiberty")


@pytest.fixture(scope="session")
def human_heavy_v():
    from mlm_ppl.data import germline_sequences

    return germline_sequences("human", "H", "V")


@pytest.fixture(scope="session")
def tiny4():
    """A tiny BERT over four residues (A, C, D, E): templates with 3 free positions have 64 states."""
    return testing.tiny_residue_bert("ACDE", seed=1)


@pytest.fixture(scope="session")
def tiny4_64():
    """``tiny4`` in float64, for exactness checks that must not depend on float32 rounding."""
    return testing.tiny_residue_bert("ACDE", seed=1, dtype=torch.float64)


@pytest.fixture(scope="session")
def rules_dist():
    """A?C?? over ACDE in float64 (std 0.2): the 64 states the hard rules' exactness tests enumerate."""
    model = testing.tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64)
    return MaskedLMDistribution(model, "A[MASK]C[MASK][MASK]")


@pytest.fixture(scope="session")
def rules_states(rules_dist):
    return exact.enumerate_states(rules_dist)


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The documentation site, built once with warnings as errors (tests/docs_site.py)."""
    from docs_site import site

    return site(tmp_path_factory)
