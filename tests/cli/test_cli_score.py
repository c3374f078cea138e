import io
import subprocess
import sys

import pytest
import torch

from mlm_ppl import load_mlm
from mlm_ppl.cli import main
from mlm_ppl.testing import save_tiny


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_models):
    return str(save_tiny(tiny_models["antibody-bert"][0], tmp_path_factory.mktemp("model")))


def _rows(text):
    return [line.split("\t") for line in text.splitlines()]


def test_score_file_writes_tsv_matching_the_api(model_dir, tmp_path, capsys):
    seqs = ["ACDEFGHIK", "WYWY", "MNPQRSTVWYAC"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(seqs) + "\n")
    for energy in ("norm", "raw"):
        assert main(["score", "--model", model_dir, "--energy", energy, "--no-progress", str(path)]) == 0
        rows = _rows(capsys.readouterr().out)
        expected = load_mlm(model_dir).score(seqs, energy=energy)
        assert [r[0] for r in rows] == seqs
        assert torch.allclose(torch.tensor([float(r[1]) for r in rows]), expected, atol=1e-5)
        assert [int(r[2]) for r in rows] == [len(s) for s in seqs]


def test_score_reads_stdin(model_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("ACD\nKLM\n"))
    assert main(["score", "--model", model_dir, "-"]) == 0
    assert [r[0] for r in _rows(capsys.readouterr().out)] == ["ACD", "KLM"]


@pytest.mark.parametrize(
    "content, match",
    [
        ("ACD\nACB\n", "sequence 1 has character 'B'"),
        ("ACD\n\nKLM\n", "line 2 is blank"),
        ("", "no sequences"),
    ],
)
def test_bad_input_writes_nothing_and_exits_2(model_dir, tmp_path, capsys, content, match):
    path = tmp_path / "in.txt"
    path.write_text(content)
    assert main(["score", "--model", model_dir, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert match in captured.err


def test_missing_file_and_unknown_model(model_dir, capsys, tmp_path, monkeypatch):
    assert main(["score", "--model", model_dir, str(tmp_path / "nope.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "in.txt").write_text("ACD\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert main(["score", "--model", "no-such-model", str(tmp_path / "in.txt")]) == 2
    assert "never downloads" in capsys.readouterr().err


def test_bad_flag_values_are_rejected_by_argparse(model_dir):
    with pytest.raises(SystemExit) as info:
        main(["score", "--model", model_dir, "--energy", "nrom", "-"])
    assert info.value.code == 2


@pytest.mark.slow
def test_console_script_shows_progress_on_stderr(model_dir, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(["ACDEFG"] * 20) + "\n")
    exe = [sys.executable, "-m", "mlm_ppl.cli", "score", "--model", model_dir, str(path)]
    done = subprocess.run(exe, capture_output=True, text=True, check=True)
    assert len(done.stdout.splitlines()) == 20
    assert "20/20" in done.stderr
