"""One front door (issue 43): a job is the same job from keyword arguments, a TOML job file and the
flags; the library runs it (run directories, resume, gaps, constraints, batches), the command line
only parses and prints."""

import json
import os

import numpy as np
import pytest
import torch
from cli_checks import one_line_error

import mlm_ppl
from mlm_ppl.cli import build_parser, main
from mlm_ppl.inference import KERNELS
from mlm_ppl.jobs import JOB_KEYS, JobSpec
from mlm_ppl.settings import RunSettings

GAP = "A[MASK]{1,3}C"
SPEC = '[[rules]]\nkind = "forbid"\nname = "no-dd"\npattern = "DD"\n'


def _draws(directory):
    """The tokens and lp of a run directory's run.nc, and its config.json's bytes."""
    run = mlm_ppl.load_run(directory)
    return run.tokens.numpy(), run.stats["lp"].numpy(), (directory / "config.json").read_bytes()


def _same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


@pytest.mark.slow  # 5-6 s: three surrogate-MH runs over a variable gap (make test-fast keeps under 3 minutes)
def test_a_job_is_the_same_from_keyword_arguments_a_job_file_and_the_flags(model_dir, tmp_path):
    """A constrained variable gap sampled by surrogate-MH around gap-jump's moves, with options of
    its own: byte-identical draws and config.json three ways (the flags in their short spellings)."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    keys = dict(
        template=GAP, length_mode="jump", kernel="surrogate-mh", num_chains=3, num_samples=12, warmup_steps=2,
        seed=5, constraints=str(spec),
    )  # fmt: skip
    options = dict(inner_steps=3, p_insert=0.3, p_delete=0.3, p_update=0.4)
    run = mlm_ppl.sample(model_dir, **keys, kernel_options=options, out=tmp_path / "py")
    assert run.directory == tmp_path / "py" and run.summary() is run.report
    assert run.attrs["kernel"] == "surrogate-mh" and run.tokens.shape == (3, 12, 7)

    job = tmp_path / "job.toml"
    job.write_text(
        f'model = "{model_dir}"\ntemplate = "{GAP}"\nlength_mode = "jump"\nkernel = "surrogate-mh"\nnum_chains = 3\n'
        'num_samples = 12\nwarmup_steps = 2\nseed = 5\nconstraints = "spec.toml"\n'
        f'out = "{tmp_path / "file"}"\n\n[kernel_options]\ninner_steps = 3\np_insert = 0.3\np_delete = 0.3\n'
        "p_update = 0.4\n"
    )
    assert main(["sample", str(job), "--no-progress"]) == 0
    flags = ["sample", "--model", model_dir, "--template", GAP, "--length-mode", "jump", "--kernel", "surrogate-mh",
             "--chains", "3", "--draws", "12", "--warmup", "2", "--seed", "5", "--constraints", str(spec),
             "--inner-steps", "3", "--p-insert", "0.3", "--p-delete", "0.3", "--p-update", "0.4",
             "--out", str(tmp_path / "flags"), "--no-progress"]  # fmt: skip
    assert main(flags) == 0
    py, file, flag = (_draws(tmp_path / name) for name in ("py", "file", "flags"))
    _same(py, file)
    _same(py, flag)
    config = json.loads(py[2])
    assert {"num_chains", "num_samples", "warmup_steps"} <= set(config) and "chains" not in config
    feasible = mlm_ppl.load_run(tmp_path / "py").inference_data().posterior["feasible"].values
    assert feasible.all()  # the rule held in every draw


def test_the_same_job_spec_from_each_door(model_dir, tmp_path):
    """The spec's record is one value whichever door read it; a job file's keys give way to flags."""
    job = tmp_path / "job.toml"
    job.write_text(
        f'model = "{model_dir}"\ntemplate = "A[MASK]C"\nnum_chains = 2\nout = "x"\n'
        '[kernel_options]\nscan = "random_sweep"\n'
    )
    args = build_parser().parse_args(["sample", str(job), "--draws", "7", "--block-size", "1"])
    from mlm_ppl.cli.sample import job_from_flags

    from_file = job_from_flags(args)
    direct = JobSpec(
        model=model_dir, template="A[MASK]C", num_chains=2, num_samples=7, out="x",
        kernel_options={"scan": "random_sweep", "block_size": 1},
    )  # fmt: skip
    assert from_file.settings == direct.settings and from_file.settings.num_samples == 7
    assert set(JOB_KEYS) >= {"num_chains", "num_samples", "warmup_steps", "kernel_options", "constraints", "out"}
    shared = {f: getattr(RunSettings, f) for f in ("num_chains", "num_samples", "warmup_steps", "thin", "seed")}
    assert {f: getattr(JobSpec, f) for f in shared} == shared  # one set of defaults


@pytest.mark.slow  # 2-3 s, five runs
def test_a_run_the_command_line_started_resumes_from_python_and_the_reverse(model_dir, tmp_path, capsys):
    """Each door continues the other's run to a raised cap, and both give the uninterrupted run's draws."""
    base = ["sample", "--model", model_dir, "--template", "A[MASK]C[MASK][MASK]", "--chains", "2", "--seed", "4",
            "--no-progress"]  # fmt: skip
    assert main([*base, "--draws", "20", "--out", str(tmp_path / "whole")]) == 0
    assert main([*base, "--draws", "8", "--out", str(tmp_path / "cli")]) == 0
    again = mlm_ppl.resume(tmp_path / "cli", num_samples=20)
    assert again.tokens.shape == (2, 20, 7)
    mlm_ppl.sample(model_dir, "A[MASK]C[MASK][MASK]", num_chains=2, num_samples=8, seed=4, out=tmp_path / "py")
    assert main(["sample", "--resume", str(tmp_path / "py"), "--num-samples", "20", "--no-progress"]) == 0
    capsys.readouterr()
    whole = _draws(tmp_path / "whole")
    for name in ("cli", "py"):
        _same(whole, _draws(tmp_path / name))


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_an_old_run_directory_resumes_under_the_new_names(model_dir, tmp_path, capsys):
    """A record of before 0.4 (chains, draws, warmup; in config.json and the checkpoint) reads under
    Pyro's names, and resuming it gives the uninterrupted run's draws."""
    base = ["sample", "--model", model_dir, "--template", "A[MASK]C[MASK]", "--chains", "2", "--seed", "1",
            "--no-progress"]  # fmt: skip
    assert main([*base, "--draws", "12", "--out", str(tmp_path / "whole")]) == 0
    assert main([*base, "--draws", "12", "--out", str(tmp_path / "old")]) == 0
    old = tmp_path / "old"
    config = json.loads((old / "config.json").read_text())
    renamed = {"num_chains": "chains", "num_samples": "draws", "warmup_steps": "warmup"}
    config = {renamed.get(k, k): v for k, v in config.items()}
    (old / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    payload = torch.load(old / "checkpoint.pt", weights_only=True)
    payload["settings"] = {renamed.get(k, k): v for k, v in payload["settings"].items()}
    torch.save(payload, old / "checkpoint.pt")
    (old / "run.nc").unlink()
    assert main(["sample", "--resume", str(old), "--chains", "2", "--no-progress"]) == 0
    capsys.readouterr()
    whole, resumed = _draws(tmp_path / "whole"), _draws(old)
    np.testing.assert_array_equal(whole[0], resumed[0])
    np.testing.assert_array_equal(whole[1], resumed[1])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("chains = 2\n", "unknown key 'chains'; write num_chains"),
        ("num_chains = 'four'\n", "num_chains must be an integer"),
        ("nm_samples = 3\n", "unknown key 'nm_samples'; did you mean 'num_samples'"),
        ("inner_steps = 3\n", "unknown key 'inner_steps'; it is an option of kernel surrogate-mh"),
        ("[kernel_options]\ninner_steps = 3\n", "(--inner-steps) is an option of kernel surrogate-mh, not of mh"),
        ('[[constraints.experts]]\nname = "e"\nkind = "os:getcwd"\n', "names Python code ('os:getcwd')"),
        ('kernel = "gibbs"\n', "unknown kernel 'gibbs'"),
    ],
)
def test_a_bad_job_file_is_one_line_before_any_model_loads(model_dir, tmp_path, capsys, monkeypatch, text, expected):
    import mlm_ppl.campaign.run as campaign_run

    monkeypatch.setattr(campaign_run, "load_mlm", lambda *a, **k: pytest.fail("the model loaded"))
    job = tmp_path / "job.toml"
    head, _, table = text.partition("[")
    body = f'model = "{model_dir}"\ntemplate = "A[MASK]C"\nout = "{tmp_path / "run"}"\n'
    job.write_text(body + head + ("[" + table if table else ""))
    assert main(["sample", str(job), "--no-progress"]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"mlm-ppl sample: error: {job}: ") and expected in line, line
    assert not (tmp_path / "run").exists()


def test_help_groups_the_options_by_kernel_from_the_registry(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    text = capsys.readouterr().out
    for name in KERNELS:
        assert f"\nkernel {name}:\n" in text
    assert f"--kernel {{{','.join(KERNELS)}}}" in text
    assert "--num-chains N, --chains N" in text and "--num-samples N, --draws N" in text
    surrogate = text[text.index("\nkernel surrogate-mh:") : text.index("\nkernel replica-mh:")]
    assert "--inner-steps" in surrogate and "--iterations" not in surrogate


def test_sample_in_memory_takes_a_constraint_spec_and_a_batch_needs_a_directory(model_dir, tmp_path):
    from mlm_ppl.models.constraints import ConstraintSpec, Forbid

    mlm = mlm_ppl.load_mlm(model_dir)
    spec = ConstraintSpec([Forbid("no-dd", "DD")])
    run = mlm_ppl.sample(mlm, "A[MASK][MASK][MASK]C", constraints=spec, num_chains=2, num_samples=30, seed=2)
    assert run.directory is None and run.inference_data().posterior["feasible"].values.all()
    assert all("DD" not in s for s in mlm.decode(run.tokens.reshape(-1, run.tokens.shape[-1])))
    assert run.summary().table is not None
    with pytest.raises(ValueError, match="give out=DIR"):
        mlm_ppl.sample(mlm, templates=[("a", "A[MASK]C"), ("b", "[MASK]DC")], num_chains=1, num_samples=2)
    with pytest.raises(ValueError, match="log_factor cannot be recorded"):
        mlm_ppl.sample(mlm, "A[MASK]C", log_factor=lambda t: t.sum(-1) * 0.0, out=tmp_path / "x")
    batch = mlm_ppl.sample(
        model_dir, templates=[("a", "A[MASK]C"), ("b", "[MASK]DC")], num_chains=2, num_samples=4, out=tmp_path / "b"
    )
    assert isinstance(batch, mlm_ppl.BatchRun) and batch.summary.startswith("template\t")
    assert batch.run("b").tokens.shape == (2, 4, 5)
    assert isinstance(mlm_ppl.load_run(tmp_path / "b"), mlm_ppl.BatchRun)


@pytest.mark.slow  # 8-9 s: four runs and a resume (make test-fast keeps under 3 minutes)
def test_threads_are_set_for_the_run_said_at_its_start_and_restored(model_dir, tmp_path, capsys, monkeypatch):
    """threads=1 (a job key, --threads 1, resume(threads=)): torch runs the job on one thread, says so
    as the run starts, and is set back after; the draws are those of a run on torch's default."""
    seen = []
    before = torch.get_num_threads()
    keys = dict(template="A[MASK]C[MASK][MASK]", num_chains=2, num_samples=4, seed=2)
    default = mlm_ppl.sample(model_dir, **keys)
    one = mlm_ppl.sample(model_dir, **keys, threads=1)
    assert torch.equal(default.tokens, one.tokens) and torch.get_num_threads() == before
    out = tmp_path / "run"
    flags = ["sample", "--model", model_dir, "--template", "A[MASK]C[MASK][MASK]", "--num-chains", "2",
             "--num-samples", "4", "--seed", "2", "--threads", "1", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(flags) == 0
    assert f"threads: 1 of {os.cpu_count()} CPUs (set by threads / --threads)" in capsys.readouterr().err
    assert torch.equal(mlm_ppl.load_run(out).tokens, one.tokens)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(("set", n)))
    mlm_ppl.resume(out, 6, threads=1)
    assert ("set", 1) in seen and ("set", before) == seen[-1]
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        mlm_ppl.sample(model_dir, **keys, threads=0)
    assert "threads" in JOB_KEYS
