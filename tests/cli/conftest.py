"""What the command-line tests share: a saved tiny model over four residues."""

import pytest

from mlm_ppl.testing import save_tiny, tiny_residue_bert


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny BERT over A, C, D, E saved to a directory (``--model DIR``); test_cli_score has its own."""
    return str(save_tiny(tiny_residue_bert("ACDE", seed=1), tmp_path_factory.mktemp("m") / "model"))
