"""What the command-line tests share: a saved tiny model over four residues."""

import pytest
import torch

from mlm_ppl.testing import save_tiny, tiny_antibody_bert, tiny_residue_bert


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny BERT over A, C, D, E saved to a directory (``--model DIR``); test_cli_score has its own."""
    return str(save_tiny(tiny_residue_bert("ACDE", seed=1), tmp_path_factory.mktemp("m") / "model"))


@pytest.fixture(scope="module")
def nan_model_dir(tmp_path_factory):
    """A tiny antibody model whose embedding LayerNorm weight is NaN: every logit it returns is NaN."""
    mlm = tiny_antibody_bert(seed=1)
    with torch.no_grad():
        mlm.model.bert.embeddings.LayerNorm.weight.fill_(float("nan"))
    return str(save_tiny(mlm, tmp_path_factory.mktemp("m") / "nan_model"))
