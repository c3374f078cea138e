"""mlm-ppl sample --anneal FROM:TO (issue 23): tau geometrically from FROM at the first step to TO at
the last, recorded with the run (``anneal``; ``--anneal-terms`` in the kernel's options) and compared
on --resume; the run seeks the product's mode, and its summary, the batch's and the command line say
that its draws are not samples of the target. Bad values are one line before any work."""

import json
import os
import warnings

import numpy as np
import pytest
import torch
from cli_checks import one_line_error as _one_line_error
from cli_checks import recorded_settings as _settings

from mlm_ppl import campaign, summary
from mlm_ppl.cli import main
from mlm_ppl.diagnostics import read_run
from mlm_ppl.inference import GeometricAnnealing, MetropolisHastings, SurrogateMH, exact
from mlm_ppl.inference.mh import TruncatedProposalWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"
EXPERT = '[[experts]]\nname = "e"\nkind = "residue-count"\nweight = 1.5\nparams = { residues = "E" }\n'
NOTE = "annealed (tau {}, {}): mode-seeking, draws are not samples of the target; R-hat/ESS describe the annealed chain"


def _sample(model_dir, out, *extra, chains="2", draws="12", warmup="0"):
    return ["sample", "--model", str(model_dir), "--template", TEMPLATE, "--chains", chains, "--draws", draws,
            "--warmup", warmup, "--seed", "3", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def test_an_annealed_run_records_its_schedule_seeks_the_products_mode_and_says_so(model_dir, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(EXPERT)  # rewards E: the product's mode is not the MLM's
    out = tmp_path / "run"
    argv = _sample(model_dir, out, "--anneal", "1.0:0.050", "--constraints", str(spec), "--init", "uniform",
                   chains="16", draws="16", warmup="16")  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    note = NOTE.format("1 -> 0.05", "all terms")
    assert err.count(note) == 1  # once, as the run starts
    # the record: anneal as one canonical FROM:TO, the kernel's schedule rebuilt from it reaches TO at the last step
    settings = _settings(out)
    assert settings.anneal == "1:0.05" and settings.kernel_options.anneal_terms == "all"
    _, target, kernel = campaign.build(settings)
    schedule = kernel.options.temperature_schedule
    assert schedule == GeometricAnnealing(1.0, 0.05, 31) and schedule(0) == 1.0 and schedule(31) == pytest.approx(0.05)
    data = az.from_netcdf(os.path.join(out, "run.nc"))
    assert json.loads(data.attrs["annealing"]) == {
        "schedule": "geometric", "start": 1.0, "end": 0.05, "num_steps": 31, "terms": "all"
    }  # fmt: skip
    # the chains end at the product's mode, not at the MLM's
    states = exact.enumerate_states(target)
    product_mode = states[exact.exact_log_probs(target).argmax()]
    mlm_mode = states[exact.exact_log_probs(target.base).argmax()]
    assert not torch.equal(product_mode, mlm_mode)
    last = torch.as_tensor(data.posterior["tokens"].values[:, -1])
    at_product, at_mlm = int((last == product_mode).all(-1).sum()), int((last == mlm_mode).all(-1).sum())
    # the exact law of this annealed chain puts 0.82 of each chain's last state at the product's mode, 0.17 at
    # the MLM's (the uniform start, then 32 steps of the exact matrices at each step's tau)
    assert at_product >= 10 and at_product > 2 * at_mlm, (at_product, at_mlm)
    # the summary says the draws are not samples of the target; no chain is "converged"
    text = (out / "summary.txt").read_text()
    assert text.splitlines()[0] == note
    report = summary(read_run(str(out)))
    assert report.annealing == note and not report.converged
    assert set(report.chains) <= {"annealed", "stuck"} and "converged" not in text.replace("not converged", "")


def _interrupt_at_step(monkeypatch, kernel_class, n):
    """Make the n-th call of ``kernel_class.step`` raise KeyboardInterrupt (Ctrl-C mid-run): the
    run keeps its checkpoint at step n - 1 (``monkeypatch.undo()`` restores the step)."""
    step = kernel_class.step
    calls = []

    def interrupted(self, state, streams):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return step(self, state, streams)

    monkeypatch.setattr(kernel_class, "step", interrupted)


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_an_annealed_run_resumes_to_the_uninterrupted_draws(model_dir, tmp_path, capsys, monkeypatch):
    extra = ("--kernel", "surrogate-mh", "--inner-steps", "2", "--anneal", "2:0.5", "--anneal-terms", "mlm")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(_sample(model_dir, whole, *extra)) == 0
    out = capsys.readouterr()
    starts = "2 -> 0.5, each chain stops cooling where under 20% of its moves pass the exact correction"
    assert NOTE.format(starts, "the MLM term") in out.err  # surrogate-MH's thermostat, said at the start
    assert NOTE.format("2 -> 0.5, no chain stopped cooling", "the MLM term") in out.out  # and what it did
    _interrupt_at_step(monkeypatch, SurrogateMH, 6)
    assert main(_sample(model_dir, cut, *extra)) == 130
    monkeypatch.undo()
    assert torch.load(cut / "checkpoint.pt", weights_only=True)["step"] == 5 and not (cut / "run.nc").exists()
    capsys.readouterr()
    # another schedule is refused; the same one, written otherwise, is the run's own
    assert main(["sample", "--resume", str(cut), "--no-progress", "--anneal", "2:0.4"]) == 2
    assert "--anneal '2:0.4' (run has '2:0.5')" in _one_line_error(capsys)
    assert main(["sample", "--resume", str(cut), "--no-progress", "--anneal", "2.0:0.50"]) == 0
    assert capsys.readouterr().err.count("note: annealed") == 1
    a, b = az.from_netcdf(cut / "run.nc"), az.from_netcdf(whole / "run.nc")
    np.testing.assert_array_equal(a.posterior["tokens"].values, b.posterior["tokens"].values)
    np.testing.assert_allclose(a.sample_stats["lp"].values, b.sample_stats["lp"].values)
    assert (cut / "summary.txt").read_text() == (whole / "summary.txt").read_text()
    assert _settings(cut).kernel_options.anneal_terms == "mlm"


def test_a_run_recorded_before_anneal_resumes_again_after_one_resume(model_dir, tmp_path, capsys, monkeypatch):
    """A run whose config.json predates the anneal and constraints settings, resumed once, has
    checkpoints in today's form beside it: a second resume compares the two as today's records
    (the missing settings at their defaults, a stray anneal_terms read as "all"), not as edits."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(_sample(model_dir, whole)) == 0
    _interrupt_at_step(monkeypatch, MetropolisHastings, 6)
    assert main(_sample(model_dir, cut)) == 130
    monkeypatch.undo()
    config = json.loads((cut / "config.json").read_text())
    del config["anneal"], config["constraints"]  # as a run of 0.2.0 wrote it
    config["kernel_options"]["anneal_terms"] = "mlm"  # an option that did nothing without a schedule
    (cut / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["sample", "--resume", str(cut), "--no-progress"]) == 0, capsys.readouterr().err
    a, b = az.from_netcdf(cut / "run.nc"), az.from_netcdf(whole / "run.nc")
    np.testing.assert_array_equal(a.posterior["tokens"].values, b.posterior["tokens"].values)
    config["seed"] = 4  # a real edit is still refused
    (cut / "config.json").write_text(json.dumps(config))
    assert main(["sample", "--resume", str(cut), "--no-progress"]) == 2
    assert "seed (4 in config.json, 3 in checkpoint.pt)" in _one_line_error(capsys)


def test_a_batchs_summary_says_it_annealed(model_dir, tmp_path, capsys):
    templates = tmp_path / "templates.tsv"
    templates.write_text("one\tA[MASK]C[MASK][MASK]\ntwo\tD[MASK]C[MASK]E\n")
    out = tmp_path / "batch"
    argv = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "4",
            "--seed", "5", "--out", str(out), "--no-progress", "--anneal", "1:0.1"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    note = NOTE.format("1 -> 0.1", "all terms")
    assert captured.err.count(note) == 1
    lines = (out / "summary.txt").read_text().splitlines()
    assert lines[0] == f"# {note}" and lines[1].startswith("template\tr_hat_lp") and len(lines) == 4
    assert (out / "one" / "summary.txt").read_text().startswith(note)


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--anneal", "1"], "anneal must be FROM:TO, two numbers"),
        (["--anneal", "1:0.05:3"], "anneal must be FROM:TO"),
        (["--anneal", "hot:cold"], "anneal must be FROM:TO"),
        (["--anneal", "1:0"], "anneal '1:0': FROM and TO must be finite numbers > 0"),
        (["--anneal", "inf:0.1"], "FROM and TO must be finite numbers > 0"),
        (["--anneal", "nan:0.1"], "FROM and TO must be finite numbers > 0"),
        (["--anneal", "1:0.05", "--kernel", "pseudo-gibbs"], "anneal applies to kernel mh or surrogate-mh, not"),
        (["--anneal", "1:0.05", "--kernel", "mask-predict"], "not mask-predict"),
        (["--anneal-terms", "mlm"], "anneal_terms applies to an annealed run; give anneal='FROM:TO' too"),
        (["--anneal", "1:0.05", "--anneal-terms", "energy"], "unknown anneal_terms 'energy'"),
        (["--kernel", "surrogate-mh", "--anneal-floor", "0.3"], "anneal_floor is where an annealing schedule stops"),
        (["--kernel", "surrogate-mh", "--anneal", "1:0.05", "--anneal-floor", "-1"], "anneal_floor must be a finite"),
        (["--anneal", "1:0.05", "--anneal-floor", "0.3"], "(--anneal-floor) is an option of kernel surrogate"),
    ],
)
def test_bad_annealing_flags_are_one_line_before_any_work(model_dir, tmp_path, capsys, flags, match):
    out = tmp_path / "out"
    assert main(_sample(model_dir, out, *flags)) == 2
    assert match in _one_line_error(capsys)
    assert not out.exists()


@pytest.mark.slow
def test_a_fixed_floor_from_the_command_line_and_warnings_in_one_line(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    extra = ("--kernel", "surrogate-mh", "--inner-steps", "2", "--anneal", "1:0.05", "--anneal-floor", "0.3")
    with warnings.catch_warnings():
        warnings.simplefilter("always", TruncatedProposalWarning)  # shown though an earlier test showed it
        assert main(_sample(model_dir, out, *extra, "--top-k", "2")) == 0
    err = capsys.readouterr().err.splitlines()
    assert NOTE.format("1 -> 0.05, never below tau 0.3", "all terms") in err[-1]
    assert _settings(out).kernel_options.anneal_floor == 0.3
    # the library's own warnings (here: top_k's) are one line each, as its notes are
    warned = [line for line in err if "warning" in line]
    assert len(warned) == 1 and warned[0].startswith("mlm-ppl sample: warning: top_k/top_p truncate")
