"""mlm-ppl sample --templates: a batch of runs, one per template, resumable."""

import signal
import subprocess
import sys
import time

import pytest

from mlm_ppl.cli import main

TEMPLATES = "h1\tA[MASK]C[MASK][MASK]\nD[MASK]C[MASK]E\nlast\tAC[MASK]E[MASK]\n"


def _batch(model_dir, templates, out, *extra):
    return ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "40",
            "--seed", "5", "--out", str(out), "--no-progress", "--checkpoint-seconds", "0", *extra]  # fmt: skip


@pytest.mark.slow
def test_a_batch_interrupted_and_resumed_gives_the_same_table(model_dir, tmp_path, capsys):
    templates = tmp_path / "templates.tsv"
    templates.write_text(TEMPLATES)
    whole = tmp_path / "whole"
    assert main(_batch(model_dir, templates, whole)) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("template\tr_hat_lp") and "t002\t" in printed
    table = (whole / "designs.tsv").read_text().splitlines()
    assert table[0] == "template\tchain\tdraw\tenergy\tsequence" and len(table) == 1 + 3 * 2 * 40
    assert {line.split("\t")[0] for line in table[1:]} == {"h1", "t002", "last"}
    assert all((whole / name / "run.nc").exists() for name in ("h1", "t002", "last"))

    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlm_ppl.cli", *_batch(model_dir, templates, cut)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 300
    while not (cut / "t002" / "checkpoint.pt").exists():  # the first template done, the second under way
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not (cut / "designs.tsv").exists()
    assert main(["sample", "--resume", str(cut), "--no-progress"]) == 0
    assert (cut / "designs.tsv").read_text() == (whole / "designs.tsv").read_text()
    assert (cut / "summary.txt").read_text() == (whole / "summary.txt").read_text()
    # an overwrite removes the batch's runs, and only them
    (cut / "notes.txt").write_text("mine\n")
    assert main(_batch(model_dir, templates, cut, "--overwrite", "--draws", "5")) == 0
    assert (cut / "notes.txt").exists() and len((cut / "designs.tsv").read_text().splitlines()) == 1 + 3 * 2 * 5


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "is empty"),
        ("A[MASK]C\n\nAC[MASK]\n", "line 2"),
        ("a\tb\tc\n", "is not TEMPLATE or NAME<TAB>TEMPLATE"),
        ("../up\tA[MASK]C\n", "must be letters, digits"),
        ("x\tA[MASK]C\nx\tAC[MASK]\n", "name 'x' is used twice"),
        ("A[MASK]C\nAXC[MASK]\n", "template 't002'"),
    ],
)
def test_bad_templates_files_are_refused_before_any_work(model_dir, tmp_path, capsys, content, match):
    templates = tmp_path / "templates.tsv"
    templates.write_text(content)
    out = tmp_path / "out"
    assert main(_batch(model_dir, templates, out)) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


def test_every_templates_kernel_is_checked_before_any_work(model_dir, tmp_path, capsys):
    """--block-size 3 fits the first template (3 free positions) but not the second (2): the batch
    used to run the first template, then fail on the second."""
    templates = tmp_path / "templates.tsv"
    templates.write_text("three\tA[MASK]C[MASK][MASK]\ntwo\tAD[MASK]E[MASK]\n")
    out = tmp_path / "batch"
    argv = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "5",
            "--block-size", "3", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "template 'two': block_size=3 is larger than the 2 free positions" in err and not out.exists()


@pytest.mark.slow  # a constrained batch of one template: about 5 s
def test_a_template_with_no_feasible_draw_names_no_best_design(model_dir, tmp_path, monkeypatch):
    """summary.txt's best_energy and best_sequence are of feasible draws only: where a rule held
    for no draw (forced here), they say so (nan, "-") instead of naming an infeasible draw."""
    from mlm_ppl.models.constraints import BoundConstraints

    monkeypatch.setattr(BoundConstraints, "feasible", lambda self, tokens: tokens.new_zeros(len(tokens), dtype=bool))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rules]]\nkind = "forbid"\nname = "no-w"\npattern = "W"\n')
    templates = tmp_path / "templates.tsv"
    templates.write_text("only\tA[MASK]C[MASK][MASK]\n")
    out = tmp_path / "batch"
    assert main([*_batch(model_dir, templates, out, "--constraints", str(spec)), "--draws", "4"]) == 0
    row = (out / "summary.txt").read_text().splitlines()[-1].split("\t")
    assert row[0] == "only" and row[-2] == "nan" and row[-1] == "-"
