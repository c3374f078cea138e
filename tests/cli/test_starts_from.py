"""``mlm-ppl sample --starts-from RUN``: a new run whose chains start where an earlier run's chains are."""

import dataclasses
import json
import os
import warnings

import numpy as np
import pytest
import torch

from mlm_ppl import campaign, rundir
from mlm_ppl.cli import main
from mlm_ppl.inference import run_chains
from mlm_ppl.settings import RunSettings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK]"


def _args(model_dir, out, *extra, template=TEMPLATE, chains="2"):
    return [
        "sample",
        "--model",
        model_dir,
        "--template",
        template,
        "--temperature",
        "10",
        "--chains",
        chains,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def earlier(model_dir, tmp_path_factory):
    """A finished MH run of 2 chains: the run later runs start from."""
    out = tmp_path_factory.mktemp("earlier") / "run"
    assert main(_args(model_dir, out, "--draws", "6", "--seed", "3", "--proposal-temperature", "10")) == 0
    return out


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_a_run_starts_where_the_earlier_runs_chains_are_with_the_draws_of_those_starts(model_dir, earlier, tmp_path):
    """The new run (another kernel, seed and length) records the earlier run and its states' sha256, its
    chains start at the earlier run's last states (its checkpoint's), and its draws are those of
    ``run_chains`` started there: the same as a run given those tokens as ``init``."""
    states, _ = rundir.chain_states(earlier)
    last = torch.as_tensor(az.from_netcdf(earlier / "run.nc").posterior["tokens"].values[:, -1])
    assert torch.equal(states, last)  # thin 1: the state after the last step is the last draw
    out = tmp_path / "next"
    kernel = ("--kernel", "surrogate-mh", "--inner-steps", "3")
    assert main(_args(model_dir, out, "--starts-from", str(earlier), *kernel, "--draws", "5")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["starts"] == {"run": str(earlier), "sha256": rundir.states_digest(states)}
    assert torch.equal(torch.load(out / "checkpoint.pt", weights_only=True)["initial"], states)
    settings = RunSettings.from_dict({k: v for k, v in config.items() if k != "format"})
    _, _, kernel = campaign.build(settings)
    expected = run_chains(kernel, 2, 5, seed=settings.seed, init=states)
    np.testing.assert_array_equal(az.from_netcdf(out / "run.nc").posterior["tokens"].values, expected.tokens.numpy())
    # a resume of the finished run reads its own checkpoint, and changes nothing
    before = (out / "samples.txt").read_text()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 0
    assert (out / "samples.txt").read_text() == before


def test_starts_from_a_run_that_went_on_since_is_refused(model_dir, earlier, tmp_path):
    """A run recorded with starts whose earlier run has moved (a resume before its first checkpoint
    would read them again) refuses to start anywhere else."""
    config = json.loads((earlier / "config.json").read_text())
    settings = RunSettings.from_dict({k: v for k, v in config.items() if k != "format"})
    started = campaign.starts_record(settings, str(earlier))
    assert torch.equal(campaign.start_states(started), rundir.chain_states(earlier)[0])
    moved = dataclasses.replace(started, starts={"run": str(earlier), "sha256": "0" * 64})
    with pytest.raises(ValueError, match="are no longer where this run was to start from"):
        campaign.start_states(moved)
    assert campaign.start_states(settings) == "sample"  # no starts: the fill of init


@pytest.mark.parametrize(
    "extra, kwargs, message",
    [
        ((), dict(template="A[MASK][MASK]C"), "is not of this model and template: template ('A[MASK][MASK]C' here"),
        ((), dict(chains="3"), "has 2 chains and this run 3; give --num-chains 2"),
        (
            ("--init", "greedy"),
            {},
            "init (--init) fills the template; starts_from (--starts-from) starts from an earlier",
        ),
    ],
)
def test_starts_from_a_run_of_another_task_is_refused_before_any_work(
    model_dir, earlier, tmp_path, capsys, extra, kwargs, message
):
    out = tmp_path / "next"
    assert main(_args(model_dir, out, "--starts-from", str(earlier), *extra, **kwargs)) == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(out)


def test_starts_from_what_is_not_a_run_or_with_resume_or_a_batch_is_refused(model_dir, earlier, tmp_path, capsys):
    out = tmp_path / "next"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(_args(model_dir, out, "--starts-from", str(plain))) == 2
    assert "is not an mlm-ppl sampling run directory" in capsys.readouterr().err
    assert main(["sample", "--resume", str(earlier), "--starts-from", str(earlier)]) == 2
    assert "--starts-from starts a new run (give --out)" in capsys.readouterr().err
    templates = tmp_path / "templates.txt"
    templates.write_text(TEMPLATE + "\n")
    argv = ["sample", "--model", model_dir, "--templates", str(templates), "--out", str(out)]
    assert main([*argv, "--starts-from", str(earlier)]) == 2
    assert "a batch (templates, length_mode strata) starts each template's run" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_the_starts_record_is_checked(model_dir, earlier):
    config = json.loads((earlier / "config.json").read_text())
    settings = RunSettings.from_dict({k: v for k, v in config.items() if k != "format"})
    assert settings.starts is None  # a run started from fills
    with pytest.raises(ValueError, match="starts must hold 'run'"):
        dataclasses.replace(settings, starts={"run": str(earlier), "sha256": "xyz"})
    started = dataclasses.replace(settings, starts={"run": str(earlier), "sha256": "0" * 64})
    with pytest.raises(ValueError, match="run in one process for now; drop --ray"):
        dataclasses.replace(started, workers=2)
    with pytest.raises(ValueError, match="a batch's runs start from fills of their own templates"):
        started.for_template("A[MASK]")  # what each run of a batch is made with


def _files(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_out_where_the_starts_are_is_refused_before_anything_is_touched(model_dir, earlier, tmp_path, capsys):
    """Issue 47, row 1: ``--starts-from S --out S --overwrite`` (also through a link to S) emptied S;
    now refused in one line, S as it was."""
    import shutil

    source = tmp_path / "S"
    shutil.copytree(earlier, source)
    before = _files(source)
    (tmp_path / "link").symlink_to(source)
    for out in (source, tmp_path / "link"):
        assert main(_args(model_dir, out, "--starts-from", str(source), "--overwrite")) == 2
        err = capsys.readouterr().err
        assert "is where the run this one starts from is" in err and "give another out" in err, err
        assert _files(source) == before
    assert main(_args(model_dir, tmp_path / "T", "--starts-from", str(tmp_path / "link"), "--draws", "2")) == 0
