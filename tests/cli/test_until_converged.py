"""Stopping when converged: run_chains' stopping rule, and ``mlm-ppl sample --until-converged``."""

import dataclasses
import json
import os
import re
import warnings

import numpy as np
import pytest
import torch

from mlm_ppl import MaskedLMDistribution
from mlm_ppl.cli import main
from mlm_ppl.inference import make_kernel, run_chains
from mlm_ppl.testing import tiny_residue_bert

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"


@pytest.fixture(scope="module")
def kernel():
    return make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), TEMPLATE))


def test_a_stopping_rule_is_asked_every_k_draws_and_ends_the_run_with_the_first_draws(kernel):
    whole = run_chains(kernel, 3, 60, warmup_steps=2, seed=5)
    asked = []

    def rule(run):
        asked.append(run.num_draws)
        assert torch.equal(run.tokens, whole.tokens[:, : run.num_draws])
        assert torch.equal(run.stats["lp"], whole.stats["lp"][:, : run.num_draws])
        return "enough" if run.num_draws >= 30 else None

    cps = []
    run = run_chains(
        kernel, 3, 60, warmup_steps=2, seed=5, stop=rule, stop_every=10, on_checkpoint=cps.append, checkpoint_seconds=0
    )
    assert asked == [10, 20, 30]
    assert run.num_draws == 30 and run.attrs["num_samples"] == 30
    assert run.attrs["stopped"] == "enough: stopped at draw 30 of 60 (asked every 10 draws)"
    assert torch.equal(run.tokens, whole.tokens[:, :30])
    for name, values in whole.stats.items():
        assert torch.equal(run.stats[name], values[:, :30]), name
    # the last checkpoint is the stopped run's: resumed, it asks again at once and stops there
    assert cps[-1].step == 2 + 30
    asked.clear()
    again = run_chains(kernel, 3, 60, warmup_steps=2, seed=5, stop=rule, stop_every=10, resume=cps[-1])
    assert asked == [30] and torch.equal(again.tokens, run.tokens) and again.attrs["stopped"] == run.attrs["stopped"]
    # a checkpoint between draws 20 and 30: the resumed run stops where the uninterrupted one did
    middle = next(cp for cp in cps if cp.step == 2 + 25)
    asked.clear()
    resumed = run_chains(kernel, 3, 60, warmup_steps=2, seed=5, stop=rule, stop_every=10, resume=middle)
    assert asked == [30] and torch.equal(resumed.tokens, run.tokens)


def test_the_rule_is_not_asked_at_the_last_draw_so_a_full_run_is_never_called_stopped(kernel):
    asked = []
    run = run_chains(kernel, 2, 20, seed=1, stop=lambda r: asked.append(r.num_draws) or "yes", stop_every=10)
    assert asked == [10] and run.num_draws == 10  # asked at 10 (< 20), and it said stop
    asked.clear()
    run = run_chains(kernel, 2, 20, seed=1, stop=lambda r: asked.append(r.num_draws), stop_every=10)
    assert asked == [10] and run.num_draws == 20 and "stopped" not in run.attrs
    with pytest.raises(ValueError, match="stop_every must be an integer >= 1"):
        run_chains(kernel, 2, 20, stop=lambda r: None, stop_every=0)


def _args(model_dir, out, *extra):
    """Two chains on two positions at temperature 10 with proposals at 10: the tiny model's peaked
    conditionals flattened, so that MH mixes in a few hundred steps."""
    return [
        "sample",
        "--model",
        model_dir,
        "--template",
        "A[MASK]C[MASK]",
        "--temperature",
        "10",
        "--proposal-temperature",
        "10",
        "--chains",
        "2",
        "--seed",
        "7",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.mark.slow
def test_until_converged_ends_a_run_whose_summary_says_converged(model_dir, tmp_path, capsys):
    """These chains converge (R-hat <= 1.01, ESS >= 200) long before 2000 draws: the run
    stops at the first multiple of 10 draws where the summary says so, its draws are the first draws
    of the same run without the rule, and a resume of the finished run changes nothing."""
    out = tmp_path / "run"
    assert main(_args(model_dir, out, "--draws", "2000", "--until-converged")) == 0
    printed = capsys.readouterr().out
    n = az.from_netcdf(out / "run.nc").posterior.sizes["draw"]
    assert 100 <= n < 2000 and n % 10 == 0
    text = (out / "summary.txt").read_text()
    assert text.startswith(
        f"stopped early: every chain converged (R-hat <= 1.01, ESS >= 200): stopped at draw {n} of 2000"
    )
    assert printed.startswith(text.splitlines()[0])
    assert re.findall(r"chain \d: (\w+)", text) == ["converged"] * 2
    assert json.loads((out / "config.json").read_text())["until_converged"] is True
    assert len((out / "samples.txt").read_text().splitlines()) == 1 + 2 * n
    # the draws before it are not converged: the rule asked at n - 10 and heard no
    plain = tmp_path / "plain"
    assert main(_args(model_dir, plain, "--draws", str(n - 10))) == 0
    assert "not converged" in (plain / "summary.txt").read_text()
    capsys.readouterr()
    tokens = az.from_netcdf(out / "run.nc").posterior["tokens"].values
    np.testing.assert_array_equal(az.from_netcdf(plain / "run.nc").posterior["tokens"].values, tokens[:, : n - 10])
    before = (out / "samples.txt").read_text()
    assert main(["sample", "--resume", str(out), "--no-progress", "--until-converged"]) == 0
    assert (out / "samples.txt").read_text() == before
    assert capsys.readouterr().out.startswith("stopped early: every chain converged")
    assert main(["diagnose", str(out)]) == 0
    assert capsys.readouterr().out.startswith("stopped early: every chain converged")


def test_until_converged_is_part_of_the_record_and_refused_where_it_cannot_work(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(model_dir, out, "--draws", "20")) == 0
    capsys.readouterr()
    assert main(["sample", "--resume", str(out), "--until-converged"]) == 2
    assert "settings differ from the run's: --until-converged True (run has False)" in capsys.readouterr().err
    bad = tmp_path / "bad"
    assert main(_args(model_dir, bad, "--draws", "20", "--until-converged", "--anneal", "1:0.1")) == 2
    assert "an annealed run seeks a mode and never converges" in capsys.readouterr().err
    assert not os.path.exists(bad)


@pytest.mark.slow
def test_a_finished_run_goes_on_to_a_raised_cap_with_the_draws_of_a_longer_run(model_dir, tmp_path, capsys):
    """``--resume DIR --draws N`` with N above the run's cap: the run (finished, not converged)
    continues to N draws, exactly the draws of a run started with N; both records say N, so a plain
    resume afterwards only writes the outputs. A lower cap, and a raise of an annealed run, are refused
    before anything changes."""
    out, longer = tmp_path / "run", tmp_path / "longer"
    assert main(_args(model_dir, out, "--draws", "12", "--until-converged")) == 0
    assert "not converged" in (out / "summary.txt").read_text()
    assert main(_args(model_dir, longer, "--draws", "30", "--until-converged")) == 0
    assert main(["sample", "--resume", str(out), "--no-progress", "--draws", "30", "--until-converged"]) == 0
    assert json.loads((out / "config.json").read_text())["num_samples"] == 30
    tokens = [az.from_netcdf(d / "run.nc").posterior["tokens"].values for d in (out, longer)]
    assert tokens[0].shape[1] == 30
    np.testing.assert_array_equal(*tokens)
    assert (out / "samples.txt").read_text() == (longer / "samples.txt").read_text()
    capsys.readouterr()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 0
    assert "already complete" in capsys.readouterr().err
    assert main(["sample", "--resume", str(out), "--no-progress", "--draws", "20"]) == 2
    assert "the run's checkpoint has room for 30 draws" in capsys.readouterr().err
    annealed = tmp_path / "annealed"
    assert main(_args(model_dir, annealed, "--draws", "5", "--anneal", "1:0.1")) == 0
    before = (annealed / "config.json").read_text(), (annealed / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    assert main(["sample", "--resume", str(annealed), "--no-progress", "--draws", "10"]) == 2
    assert "its cap cannot be changed" in capsys.readouterr().err
    assert ((annealed / "config.json").read_text(), (annealed / "checkpoint.pt").read_bytes()) == before


def _record(directory):
    return (directory / "config.json").read_bytes(), (directory / "checkpoint.pt").read_bytes()


@pytest.mark.slow
def test_a_resume_is_held_to_a_new_runs_size_limits_before_its_cap_is_written(model_dir, tmp_path, capsys):
    """Issue 47, rows 2 to 4: ``--resume F --draws 1000000000`` wrote the cap, then ran out of memory,
    and the run could never finish; a huge ``--draws`` on an unfinished run ran until killed (or a
    torch stack dump); a ``config.json`` edited to 100000 chains ran out of memory. Each is refused
    now as a new run would be, the record as it was; a run an earlier version left with an impossible
    cap is lowered back to what its checkpoint holds, and finishes."""
    from mlm_ppl import rundir

    out = tmp_path / "run"
    assert main(_args(model_dir, out, "--draws", "12")) == 0
    before = _record(out)
    capsys.readouterr()
    for draws in ("1000000000", "99999999999999999999"):
        assert main(["sample", "--resume", str(out), "--no-progress", "--draws", draws]) == 2
        err = capsys.readouterr().err
        assert "more than half of this machine's" in err and "Traceback" not in err, err
        assert _record(out) == before
    # a run left with an impossible cap (as a raise of an earlier version wrote it): lowered back, finished
    run_dir, settings, checkpoint = rundir.resume_run(out)
    with run_dir:
        rundir.raise_cap(run_dir, checkpoint, dataclasses.replace(settings, num_samples=10**9))
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    assert "more than half of this machine's" in capsys.readouterr().err
    assert main(["sample", "--resume", str(out), "--no-progress", "--draws", "12"]) == 0
    assert json.loads((out / "config.json").read_text())["num_samples"] == 12
    # a record edited by hand before the first checkpoint: the new run's limit on chains
    (out / "checkpoint.pt").unlink()
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "num_chains": 100000}))
    capsys.readouterr()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    assert "the run has 100000 chains, more than 1000; resume with force (--force)" in capsys.readouterr().err
