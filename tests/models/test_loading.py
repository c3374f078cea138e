import importlib.util
import subprocess
import sys
import textwrap

import pytest
import torch

import mlm_ppl
from mlm_ppl import load_mlm
from mlm_ppl.testing import save_tiny


@pytest.mark.parametrize("arch", ["bert", "roberta", "esm"])
def test_local_directory_round_trip(tmp_path, tiny_models, arch):
    mlm, seqs = tiny_models[arch]
    loaded = load_mlm(save_tiny(mlm, tmp_path / arch))
    assert loaded.residue_level == mlm.residue_level
    assert loaded.special_ids == mlm.special_ids
    assert torch.allclose(loaded.score(seqs), mlm.score(seqs), atol=1e-6)
    half = load_mlm(tmp_path / arch, dtype="bf16")
    assert half.dtype == torch.bfloat16
    assert torch.allclose(half.score(seqs), mlm.score(seqs), rtol=0.1, atol=1.0)


def test_model_id_from_the_hugging_face_cache(tmp_path, monkeypatch, tiny_models):
    mlm, seqs = tiny_models["bert"]
    repo = tmp_path / "hub" / "models--acme--tiny-bert"
    save_tiny(mlm, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_mlm("acme/tiny-bert")
    assert torch.allclose(loaded.score(seqs), mlm.score(seqs), atol=1e-6)


@pytest.mark.parametrize(
    "name, match",
    [
        (
            "bert-base-uncased",
            "not found: it is not 'antiberty', not a local directory, and not in the Hugging Face cache",
        ),
        ("./no/such/dir", "model directory './no/such/dir' does not exist"),
        ("", "empty"),
    ],
)
def test_unknown_models_are_clear_errors(name, match, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match=match):
        load_mlm(name)


def test_a_file_or_a_non_mlm_directory_is_an_error(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ValueError, match="is a file"):
        load_mlm(f)
    with pytest.raises(ValueError, match="could not load"):
        load_mlm(tmp_path)
    with pytest.raises(TypeError, match="name_or_path must be"):
        load_mlm(3)


def test_a_checkpoint_without_trained_mlm_head_warns(tmp_path, tiny_models):
    mlm, _ = tiny_models["bert"]
    mlm.model.bert.save_pretrained(tmp_path)  # encoder only: no masked-LM head
    mlm.tokenizer.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="not in the checkpoint and are random"):
        load_mlm(tmp_path)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(dtype="int8"), ValueError, "unknown dtype 'int8'"),
        (dict(dtype=torch.int64), ValueError, "floating dtype"),
        (dict(device="gpu0"), ValueError, "invalid device"),
        (dict(device=0.5), TypeError, "device must be"),
    ],
)
def test_bad_dtype_or_device(kwargs, error, match):
    with pytest.raises(error, match=match):
        load_mlm("antiberty", **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        load_mlm("antiberty", device="cuda")


def test_antiberty_without_the_package_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "antiberty" else real(n, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'mlm-ppl\[antibody\]'"):
        load_mlm("antiberty")


@pytest.mark.slow
def test_import_has_no_side_effects():
    code = textwrap.dedent(
        """
        import logging, sys, torch
        state = torch.random.get_rng_state()
        handlers = list(logging.getLogger().handlers)
        import mlm_ppl, mlm_ppl.testing, mlm_ppl.cli
        assert torch.equal(state, torch.random.get_rng_state()), "RNG touched"
        assert logging.getLogger().handlers == handlers, "logging changed"
        assert "antiberty" not in sys.modules, "model package imported"
        from mlm_ppl.testing import tiny_bert
        tiny_bert()
        assert torch.equal(state, torch.random.get_rng_state()), "tiny model touched the global RNG"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_loading_restores_transformers_verbosity(tmp_path, tiny_models):
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    load_mlm(save_tiny(tiny_models["esm"][0], tmp_path))
    assert hf_logging.get_verbosity() == before


def test_public_api():
    assert {"load_mlm", "MaskedLM", "EnergyTerms", "energy_terms"} <= set(mlm_ppl.__all__)
    for name in mlm_ppl.__all__:
        assert hasattr(mlm_ppl, name)
