"""Batches, models and data under hostile edits (issue 22, second pass; docs/reliability.md).

Each test is a row a hostile tester found: a batch's config.json edited after some templates
finished, a foreign run dropped in as a template's folder, bad values in a batch's files, template
names that are the batch directory's own files, and a model or a pairs run's data file replaced
between a kill and a resume. Every one used to exit 0 (or fail late, or without naming the
file); each is now refused before any work, naming the file and the key, with nothing changed.
"""

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mlm_ppl.cli import main
from mlm_ppl.testing import save_tiny, tiny_residue_bert

TEMPLATES = "a\tA[MASK]C[MASK]\nb\tAC[MASK]E\n"


def _batch(model, templates, out, *extra):
    return ["sample", "--model", str(model), "--templates", str(templates), "--chains", "2", "--draws", "10",
            "--seed", "5", "--out", str(out), "--no-progress", "--checkpoint-seconds", "0", *extra]  # fmt: skip


def _tree(directory):
    """Every file under ``directory`` (name -> sha256) but the lock files (their holder's pid) and
    the temporary files a killed write left (removed when the directory is next opened): to show
    that nothing was written."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".mlm-ppl.lock" and not p.name.endswith(".tmp")
    }


def _error(capsys):
    """The one error line of a refused command (exit status 2 checked by the caller)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("mlm-ppl ")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def finished_batch(model_dir, tmp_path_factory):
    """A finished batch of two templates (seed 5), sampled once for the module's tests."""
    directory = tmp_path_factory.mktemp("finished")
    templates = directory / "templates.tsv"
    templates.write_text(TEMPLATES)
    out = directory / "batch"
    assert main(_batch(model_dir, templates, out)) == 0
    return out


@pytest.fixture
def batch(finished_batch, tmp_path, capsys):
    """A copy of the finished batch in tmp_path/batch, for a test to edit."""
    capsys.readouterr()
    return shutil.copytree(finished_batch, tmp_path / "batch", ignore=shutil.ignore_patterns(".mlm-ppl.lock"))


def _edit(file, change):
    config = json.loads(file.read_text())
    change(config)
    file.write_text(json.dumps(config, indent=1))


def _resume(directory):
    return main(["sample", "--resume", str(directory), "--no-progress"])


# ---------------------------------------------------------------------- row 3: the batch is its record
def test_an_edited_seed_in_a_batch_is_refused_and_each_template_still_resumes_alone(batch, capsys):
    _edit(batch / "config.json", lambda c: c["settings"].update(seed=7))
    before = _tree(batch)
    assert _resume(batch) == 2
    err = _error(capsys)
    assert f"{batch / 'config.json'} differs from the batch's record" in err
    assert "seed (7 in config.json, 5 in batch-record.json)" in err
    assert _tree(batch) == before  # no template's run rewritten with the edited settings
    assert _resume(batch / "a") == 0  # so a template's run still resumes on its own


def test_an_edited_template_in_a_batch_is_refused(batch, capsys):
    _edit(batch / "config.json", lambda c: c.update(templates=[["a", "A[MASK]C[MASK]"], ["b", "AC[MASK]C"]]))
    before = _tree(batch)
    assert _resume(batch) == 2
    assert "templates.b ('AC[MASK]C' in config.json, 'AC[MASK]E' in batch-record.json)" in _error(capsys)
    assert _tree(batch) == before


@pytest.mark.parametrize("kernel", ["pseudo-gibbs", "mh"])
def test_a_foreign_run_dropped_in_as_a_template_is_refused_never_adopted(batch, model_dir, tmp_path, capsys, kernel):
    # a run of the same template, with another kernel, or even with all the batch's own settings
    foreign = tmp_path / "foreign"
    assert main(["sample", "--model", model_dir, "--template", "AC[MASK]E", "--chains", "2", "--draws", "10",
                 "--seed", "5", "--kernel", kernel, "--out", str(foreign), "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    shutil.rmtree(batch / "b")
    shutil.copytree(foreign, batch / "b")
    before = _tree(batch)
    assert _resume(batch) == 2
    err = _error(capsys)
    if kernel == "mh":
        assert f"{batch / 'b'} holds a run this batch did not start" in err
    else:
        assert "kernel ('pseudo-gibbs' in b/config.json, 'mh' in batch-record.json)" in err
    assert _tree(batch) == before


def test_a_template_run_edited_without_a_checkpoint_is_refused(batch, capsys):
    # a template's run killed before its first checkpoint has only its config.json: the record is the batch's
    for name in ("checkpoint.pt", "run.nc"):
        (batch / "b" / name).unlink()
    _edit(batch / "b" / "config.json", lambda c: c.update(temperature=2.0))
    assert _resume(batch) == 2
    assert "temperature (2.0 in b/config.json, 1.0 in batch-record.json)" in _error(capsys)


# ---------------------------------------------------------------------- row 4: errors name the file and the key
@pytest.mark.parametrize(
    "change, key",
    [
        (lambda c: c["settings"].update(dtype="int8"), "dtype ('int8' in config.json"),
        (lambda c: c["settings"]["kernel_options"].update(surrogate_dtype="float16"), "kernel_options.surrogate_dtype"),
        (lambda c: c.update(templates=[["a", "AXC[MASK]"], ["b", "AC[MASK]E"]]), "templates.a ('AXC[MASK]'"),
        (lambda c: c.update(templates=[[1, 2]]), "templates[0] must be a pair of strings"),
    ],
    ids=["dtype", "option-of-another-kernel", "template-text", "template-pair"],
)
def test_bad_values_in_a_batch_config_name_the_file_and_the_key(batch, capsys, change, key):
    _edit(batch / "config.json", change)
    before = _tree(batch)
    assert _resume(batch) == 2
    err = _error(capsys)
    assert str(batch / "config.json") in err and key in err
    assert _tree(batch) == before


# ---------------------------------------------------------------------- row 5: reserved template names
@pytest.mark.parametrize("name", ["designs.tsv", "config.json", "summary.txt", "batch-record.json", "Config.JSON"])
def test_a_template_named_like_a_file_of_the_batch_is_refused_before_any_work(model_dir, tmp_path, capsys, name):
    templates = tmp_path / "templates.tsv"
    templates.write_text(f"a\tA[MASK]C\n{name}\tAC[MASK]\n")
    out = tmp_path / "out"
    assert main(_batch(model_dir, templates, out)) == 2
    assert f"line 2: name {name!r} is a file of the batch directory" in _error(capsys)
    assert not out.exists()


def test_a_reserved_name_written_into_a_batch_record_is_refused_before_any_work(batch, capsys):
    # both files edited alike (the record agrees with config.json): the names are still checked first
    for file in ("config.json", "batch-record.json"):
        _edit(batch / file, lambda c: c.update(templates=[["a", "A[MASK]C[MASK]"], ["designs.tsv", "AC[MASK]E"]]))
    before = _tree(batch)
    assert _resume(batch) == 2
    assert "name 'designs.tsv' is a file of the batch directory" in _error(capsys)
    assert _tree(batch) == before and not (batch / "designs.tsv").is_dir()


@pytest.mark.parametrize(
    "change, refusal",
    [
        ({"num_chains": 100000}, "the batch has 100000 chains per template, more than 1000"),
        ({"num_chains": 1000, "num_samples": 100000000}, "more than half of this machine's"),
    ],
    ids=["chains", "size"],
)
def test_a_batch_edited_before_its_runs_checkpoint_is_held_to_new_batch_limits(batch, capsys, change, refusal):
    """Issue 47: a batch's runs with no checkpoint yet are held to a new batch's limits on resume
    (a single run's resume was; a batch's ran the edited record until out of memory)."""
    for name in ("a", "b"):  # cut off before any template's first checkpoint
        shutil.rmtree(batch / name)
    for file in ("config.json", "batch-record.json"):  # both files edited alike: they agree
        _edit(batch / file, lambda c: c["settings"].update(change))
    before = _tree(batch)
    assert _resume(batch) == 2
    error = _error(capsys)
    assert refusal in error and "--force" in error, error
    assert _tree(batch) == before and not (batch / "a").exists()


# ---------------------------------------------------------------------- row 10: model and data recorded
@pytest.fixture
def own_model(model_dir, tmp_path):
    """A copy of the tiny model, and the weights of another tiny model to put in its place."""
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    other = save_tiny(tiny_residue_bert("ACDE", seed=2), tmp_path / "other")
    return copy, other / "model.safetensors"


@pytest.mark.slow  # about 5 s (make test-fast keeps under 3 minutes)
def test_a_model_replaced_between_a_kill_and_resume_is_refused_naming_the_file(own_model, tmp_path, capsys):
    model, other_weights = own_model
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlm_ppl.cli", "sample", "--model", str(model), "--template", "A[MASK]C[MASK][MASK]",
         "--chains", "2", "--draws", "20000", "--checkpoint-seconds", "0", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    shutil.copyfile(other_weights, model / "model.safetensors")
    before = _tree(out)
    assert _resume(out) == 2
    err = _error(capsys)
    assert f"{model / 'model.safetensors'} changed (sha256 " in err
    assert _tree(out) == before


def test_a_batch_refuses_a_replaced_model_before_any_work(own_model, tmp_path, capsys):
    model, other_weights = own_model
    templates = tmp_path / "templates.tsv"
    templates.write_text(TEMPLATES)
    out = tmp_path / "batch"
    assert main(_batch(model, templates, out)) == 0
    capsys.readouterr()
    shutil.rmtree(out / "b")  # the second template not started yet
    shutil.copyfile(other_weights, model / "model.safetensors")
    before = _tree(out)
    assert _resume(out) == 2
    assert f"{model / 'model.safetensors'} changed" in _error(capsys)
    assert _tree(out) == before and not (out / "b").exists()


def test_a_pairs_run_refuses_a_changed_data_file_or_model(own_model, tmp_path, capsys):
    model, other_weights = own_model
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEACDEAC\nCADECADEEA\n")
    out = tmp_path / "pairs"
    command = ["pairs", "--model", str(model), "--data", str(data), "--n", "2", "--methods", "naive",
               "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(command) == 0
    capsys.readouterr()
    data.write_text("ACDEACDEAC\nCADECADEEE\n")
    before = _tree(out)
    assert main(command) == 2
    assert f"other settings (data_files.{data})" in _error(capsys)
    assert _tree(out) == before

    data.write_text("ACDEACDEAC\nCADECADEEA\n")  # the data restored: the same run again
    assert main(command) == 0
    capsys.readouterr()
    shutil.copyfile(other_weights, model / "model.safetensors")
    before = _tree(out)
    assert main(command) == 2
    assert "other settings (model_files.model.safetensors)" in _error(capsys)
    assert _tree(out) == before


def test_an_overwrite_whose_new_template_names_a_folder_of_the_users_is_refused_before_any_change(
    batch, model_dir, tmp_path, capsys
):
    """Issue 36 row 6: the new template's folder held the user's files; --overwrite failed with a
    KeyError and left the batch's marker listing the user's folder. Refused before any change now,
    naming the folder; the batch and the user's files unchanged."""
    mine = batch / "c"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    before = _tree(batch)
    templates = tmp_path / "new.tsv"
    templates.write_text("a\tA[MASK]C[MASK]\nc\tAC[MASK]E\n")
    assert main(_batch(model_dir, templates, batch, "--overwrite")) == 2
    line = _error(capsys)
    assert f"{str(mine)!r} exists and was not written by the run" in line, line
    assert _tree(batch) == before
    assert _resume(batch) == 0  # the old batch is whole


@pytest.mark.slow
def test_a_batch_of_ten_thousand_templates_starts_sampling_within_seconds(model_dir, tmp_path):
    """Issue 36 row 8: a 10,000-template batch created every template's folder, rewriting its record
    twice and its marker once per folder, before sampling any (about 45 minutes by extrapolation).
    The marker and the record are written once for all; each run is created just before it runs."""
    import random

    from test_reliability import _cli, _wait

    rng = random.Random(0)
    templates = tmp_path / "many.tsv"
    templates.write_text(
        "".join(f"t{i:05d}\tA[MASK]C{''.join(rng.choice('ACDE') for _ in range(3))}[MASK]\n" for i in range(10_000))
    )
    out = tmp_path / "batch"
    start = time.monotonic()
    proc = _cli(*_batch(model_dir, templates, out))
    try:
        _wait(lambda: (out / "t00000" / "run.nc").exists(), proc, "the first template's outputs", timeout=120)
        assert time.monotonic() - start < 120
        assert json.loads((out / "batch-record.json").read_text())["runs"]["t09999"] is None  # not created yet
        assert not (out / "t09999").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
