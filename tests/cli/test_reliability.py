"""Run directories and commands under careless or hostile use (docs/reliability.md).

Each test is one of the failures a user met before these guarantees existed: --overwrite on a
directory mlm-ppl did not make, two processes in one directory, a resume after config.json was
edited, a model that returns NaN, a traceback instead of a message, a half-made directory left
behind, and a few smaller ones. Processes are real processes where the behaviour is a process
(concurrent runs, kills, a closed pipe); full and read-only filesystems are real tmpfs mounts,
skipped with a reason where the test cannot mount one.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from cli_checks import one_line_error as _one_line_error

from mlm_ppl import load_mlm, rundir
from mlm_ppl.cli import main
from mlm_ppl.testing import save_tiny, tiny_bert

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"


def _sample(model_dir, out, *extra):
    return ["sample", "--model", str(model_dir), "--template", TEMPLATE, "--chains", "2", "--draws", "20",
            "--seed", "7", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _cli(*args):
    """The console script as a process of its own (SIGINT restored: a background shell job ignores it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mlm_ppl.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _tokens(directory):
    return az.from_netcdf(os.path.join(directory, "run.nc")).posterior["tokens"].values


def _wait(predicate, proc, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        assert proc.poll() is None, f"the process ended before {what}: {proc.communicate()}"
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _checkpoint_step(directory):
    try:
        return torch.load(os.path.join(directory, "checkpoint.pt"), weights_only=True)["step"]
    except Exception:  # not written yet, or being replaced
        return -1


# ---------------------------------------------------------------------- 1. ownership
def test_overwrite_never_touches_a_directory_mlm_ppl_did_not_make(model_dir, tmp_path, capsys):
    victim = tmp_path / "some_model_dir"
    shutil.copytree(model_dir, victim)
    before = _digest(victim)
    assert main(["sample", "--model", model_dir, "--length", "3", "--out", str(victim), "--overwrite"]) == 2
    assert "not an mlm-ppl sample run directory" in _one_line_error(capsys)
    assert _digest(victim) == before
    load_mlm(str(victim))  # still a model

    data = tmp_path / "seqs.txt"
    data.write_text("ACDEACDEAC\nCADECADEEA\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.txt").write_text("my own notes\n")
    pairs = ["pairs", "--model", model_dir, "--data", str(data), "--n", "2", "--methods", "naive", "--no-progress"]
    assert main([*pairs, "--out", str(mine), "--overwrite"]) == 2
    assert "not an mlm-ppl pairs run" in _one_line_error(capsys)
    assert (mine / "summary.txt").read_text() == "my own notes\n" and len(os.listdir(mine)) == 1


def test_overwrite_removes_only_the_files_the_run_wrote(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    (out / "notes.txt").write_text("mine\n")
    written = json.loads((out / rundir.MARKER).read_text())["files"]
    assert set(written) == {"config.json", "checkpoint.pt", *rundir.OUTPUTS}
    assert main(_sample(model_dir, out, "--seed", "8", "--overwrite")) == 0
    assert (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "config.json").read_text())["seed"] == 8
    # a run of another kind is not taken for this one
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEACDEAC\n")
    capsys.readouterr()
    pairs = ["pairs", "--model", model_dir, "--data", str(data), "--n", "1", "--methods", "naive", "--no-progress"]
    assert main([*pairs, "--out", str(out), "--overwrite"]) == 2
    assert "holds an mlm-ppl sample run, not a pairs run" in _one_line_error(capsys)


# ---------------------------------------------------------------------- 2. locks and temporary files
def test_a_second_process_is_refused_while_a_run_holds_the_directory(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    proc = _cli(*_sample(model_dir, out, "--draws", "100000", "--checkpoint-seconds", "0"))
    try:
        _wait(lambda: _checkpoint_step(out) >= 1, proc, "the first checkpoint")
        for argv in (_sample(model_dir, out, "--seed", "2", "--overwrite"), ["sample", "--resume", str(out)]):
            assert main(argv) == 2
            assert f"is in use by process {proc.pid}" in _one_line_error(capsys)
        assert json.loads((out / "config.json").read_text())["seed"] == 7  # the running run's files are intact
    finally:
        proc.kill()
        proc.communicate()
    # the kill released the lock: the run resumes (and the overwrite is possible again)
    assert main(_sample(model_dir, out, "--draws", "20", "--seed", "2", "--overwrite")) == 0


def test_two_runs_started_at_the_same_instant_leave_one_consistent_run(model_dir, tmp_path):
    out = tmp_path / "run"
    procs = [_cli(*_sample(model_dir, out, "--seed", str(seed))) for seed in (1, 2)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    # the holder is named once it has written its pid; in the instant between its flock and that
    # write the loser says "another process"
    assert "is in use by" in loser or "exists and is not empty" in loser, loser
    seed = json.loads((out / "config.json").read_text())["seed"]
    attrs = az.from_netcdf(out / "run.nc").attrs
    assert json.loads(attrs["config"])["seed"] == seed and int(attrs["seed"]) == seed
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


def test_a_run_being_created_at_this_instant_is_named_as_in_use_and_a_stale_start_is_taken(model_dir, tmp_path, capsys):
    """The instant in which another process holds the new directory's lock and is writing its marker
    (a temporary file beside the lock): a second run is refused as in use by that process, never as
    a foreign directory. The same two files left by a process killed then start a run as usual."""
    from mlm_ppl.rundir.lock import release_lock, take_lock

    out = tmp_path / "run"
    out.mkdir()
    fd = take_lock(out)
    (out / "..mlm-ppl.k3j9x2.tmp").write_text('{"format": ')  # the marker as it is written
    try:
        assert main(_sample(model_dir, out)) == 2
        assert f"is in use by process {os.getpid()}" in _one_line_error(capsys)
    finally:
        release_lock(out, fd, remove=False)
    assert main(_sample(model_dir, out, "--draws", "5")) == 0  # killed before its marker: the directory is free
    assert json.loads((out / rundir.MARKER).read_text())["kind"] == "sample"


def test_links_planted_in_a_run_directory_are_never_written_through(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    outside = tmp_path / "precious.txt"
    outside.write_text("precious\n")
    for name in ("samples.txt", "config.json.tmp", ".samples.txt.x.tmp", "checkpoint.tmp"):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
        (out / name).symlink_to(outside)
    assert main(_sample(model_dir, out, "--overwrite")) == 0
    assert outside.read_text() == "precious\n"
    assert not (out / "samples.txt").is_symlink() and (out / "samples.txt").read_text().startswith("chain\t")
    (out / rundir.LOCK).unlink()
    (out / rundir.LOCK).symlink_to(outside)
    capsys.readouterr()
    assert main(["sample", "--resume", str(out)]) == 2
    assert "is a symbolic link" in _one_line_error(capsys)
    assert outside.read_text() == "precious\n"


# ---------------------------------------------------------------------- 3. the checkpoint is the record
@pytest.mark.parametrize(
    "key, value",
    [("warmup", 3), ("thin", 2), ("seed", 8), ("temperature", 2.0), ("energy", "raw"), ("kernel", "pseudo-gibbs"),
     ("template", "D[MASK]C[MASK][MASK]"), ("draws", 25)],
)  # fmt: skip
def test_a_resume_refuses_an_edited_config_naming_the_key(model_dir, tmp_path, capsys, key, value):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    before = _digest(out)
    config = json.loads((out / "config.json").read_text())
    config[key] = value
    (out / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["sample", "--resume", str(out)]) == 2
    err = _one_line_error(capsys)
    assert "differs from the settings the run's checkpoint was made with" in err and f"{key} (" in err
    assert {k: v for k, v in _digest(out).items() if k != "config.json"} == {
        k: v for k, v in before.items() if k != "config.json"
    }


def test_a_resume_names_missing_settings_and_refuses_a_damaged_checkpoint(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    cmd = _sample(model_dir, out, "--draws", "100000", "--checkpoint-seconds", "0")
    proc = _cli(*cmd)
    _wait(lambda: _checkpoint_step(out) >= 3, proc, "a checkpoint")
    proc.kill()
    proc.communicate()
    config = json.loads((out / "config.json").read_text())
    del config["seed"]
    (out / "config.json").write_text(json.dumps(config))
    assert main(["sample", "--resume", str(out)]) == 2
    assert "seed (missing in config.json, 7 in checkpoint.pt)" in _one_line_error(capsys)
    # without a checkpoint config.json is the only record: it is checked like the flags
    cp_bytes = (out / "checkpoint.pt").read_bytes()
    (out / "checkpoint.pt").unlink()
    assert main(["sample", "--resume", str(out)]) == 2
    assert "config.json: missing seed" in _one_line_error(capsys)
    config["seed"] = 7
    (out / "config.json").write_text(json.dumps(config))
    # a checkpoint past the end of the run, or with a damaged random state: refused, nothing written
    payload = torch.load(io.BytesIO(cp_bytes), weights_only=True)
    for field, bad, match in (
        ("step", 10**6, "checkpoint is at step 1000000"),
        ("streams", torch.zeros(3, dtype=torch.uint8), "random-number state is damaged"),
    ):
        torch.save({**payload, field: bad}, out / "checkpoint.pt")
        assert main(["sample", "--resume", str(out)]) == 2
        assert match in _one_line_error(capsys)
        assert not (out / "run.nc").exists()


# ---------------------------------------------------------------------- 4. NaN logits
def test_nan_logits_stop_every_command_with_nothing_written(nan_model_dir, tmp_path, capsys):
    seqs = tmp_path / "seqs.txt"
    seqs.write_text("ACDEACDEAC\nCADECADEEA\n")
    assert main(["score", "--model", nan_model_dir, "--no-progress", str(seqs)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "non-finite logits (nan) at token position" in captured.err
    assert captured.err.count("\n") == 1 and "nan_model" in captured.err
    for kernel in ("mh", "surrogate-mh", "pseudo-gibbs", "mask-predict"):
        out = tmp_path / kernel
        assert main(_sample(nan_model_dir, out, "--kernel", kernel)) == 2
        assert "non-finite logits" in _one_line_error(capsys)
        assert not out.exists(), f"{kernel}: a failed run leaves no directory"
    pairs_out = tmp_path / "pairs"
    argv = ["pairs", "--model", nan_model_dir, "--data", str(seqs), "--n", "2", "--out", str(pairs_out)]
    assert main([*argv, "--no-progress"]) == 2
    assert "non-finite logits" in _one_line_error(capsys) and not pairs_out.exists()


def test_germlines_on_a_nan_model_is_an_error_not_a_lost_comparison(nan_model_dir, capsys):
    pytest.importorskip("anarci")
    assert main(["germlines", "--model", nan_model_dir, "--n", "2", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "non-finite logits" in captured.err and "0/2" not in captured.out


# ---------------------------------------------------------------------- 5. messages, not tracebacks
def test_expected_failures_are_one_line_and_status_2(model_dir, tmp_path, capsys):
    broken = tmp_path / "truncated"
    shutil.copytree(model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(model_dir, no_tokenizer)
    for p in no_tokenizer.iterdir():
        if "token" in p.name or "vocab" in p.name:
            p.unlink()
    pickled = tmp_path / "pickled"
    shutil.copytree(model_dir, pickled)
    (pickled / "model.safetensors").unlink()

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    torch.save({"weight": Payload()}, pickled / "pytorch_model.bin")
    seqs = tmp_path / "seqs.txt"
    seqs.write_text("ACDE\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    cases = [
        (["score", "--model", model_dir, str(tmp_path)], "is a directory"),
        (["score", "--model", str(broken), str(seqs)], "SafetensorError"),
        (["score", "--model", str(no_tokenizer), str(seqs)], "tokenizer has only special tokens"),
        (["score", "--model", str(pickled), str(seqs)], "pickle that would run code, refused"),
        (_sample(model_dir, tmp_path / "meta", "--device", "meta"), "device 'meta' cannot run a model here"),
        (_sample(model_dir, dangling), "symbolic link to nothing"),
        (_sample(model_dir, tmp_path / "huge", "--draws", "1000000000"), "more than half of this machine's"),
        (_sample(model_dir, tmp_path / "seed", "--seed", str(2**70)), "seed must lie in"),
        (["diagnose", str(tmp_path / "absent")], "does not exist"),
    ]
    for argv, match in cases:
        assert main(argv) == 2, argv
        assert match in _one_line_error(capsys), argv
    assert not (tmp_path / "pwned").exists()
    for name in ("meta", "huge", "seed"):
        assert not (tmp_path / name).exists(), f"{name}: nothing is written for a refused run"


def test_an_unexpected_bug_shows_its_traceback_and_asks_for_a_report(monkeypatch, capsys):
    from mlm_ppl.cli import score

    def broken(args, out):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(score, "run", broken)
    assert main(["score", "-"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err and "this is a bug in mlm-ppl" in err


def test_a_reader_that_goes_away_ends_the_command_quietly(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    proc = _cli("diagnose", out)
    proc.stdout.close()  # before the command has written anything (it is still importing)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == "", err


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB tmpfs mounted under tmp_path (root only), unmounted afterwards."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8); this machine's tests run without them")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path):
    """Fill the filesystem of ``path`` to its last block (unbuffered: the error comes from write)."""
    with open(path, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)


def test_a_full_disk_is_a_message_and_a_resume_finishes_the_run(model_dir, tmp_path, tmpfs, capsys):
    whole = tmp_path / "whole"
    assert main(_sample(model_dir, whole)) == 0
    out = tmpfs / "run"
    assert main(_sample(model_dir, out)) == 0
    for name in rundir.OUTPUTS:
        (out / name).unlink()
    filler = tmpfs / "filler"
    _fill(filler)
    capsys.readouterr()
    assert main(["sample", "--resume", str(out)]) == 2
    assert "the disk is full" in _one_line_error(capsys)
    assert not (out / "run.nc").exists() and not [p for p in os.listdir(out) if p.endswith(".tmp")]
    filler.unlink()
    assert main(["sample", "--resume", str(out)]) == 0
    np.testing.assert_array_equal(_tokens(out), _tokens(whole))
    # a new run on a full disk leaves nothing behind
    _fill(filler)
    capsys.readouterr()
    assert main(_sample(model_dir, tmpfs / "new")) == 2
    _one_line_error(capsys)
    assert not (tmpfs / "new").exists()


def test_a_read_only_filesystem_is_a_message(model_dir, tmpfs, capsys):
    out = tmpfs / "run"
    assert main(_sample(model_dir, out)) == 0
    (out / "trace_lp.png").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    capsys.readouterr()
    for argv in (["sample", "--resume", str(out)], _sample(model_dir, tmpfs / "new"), ["diagnose", str(out)]):
        assert main(argv) == 2, argv
        assert "Read-only file system" in _one_line_error(capsys), argv
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert main(["diagnose", str(out)]) == 0 and (out / "trace_lp.png").exists()


# ---------------------------------------------------------------------- 6. a kill during the final writes
def test_a_kill_during_the_final_writes_resumes_to_the_same_outputs(model_dir, tmp_path, capsys):
    whole = tmp_path / "whole"
    assert main(_sample(model_dir, whole)) == 0
    capsys.readouterr()
    out = tmp_path / "cut"
    proc = _cli(*_sample(model_dir, out))
    _wait(lambda: out.exists() and any(p.startswith((".run.nc.", "run.nc")) for p in os.listdir(out)), proc, "run.nc")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert main(["sample", "--resume", str(out)]) == 0
    np.testing.assert_array_equal(_tokens(out), _tokens(whole))
    assert (out / "samples.txt").read_text() == (whole / "samples.txt").read_text()
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


# ---------------------------------------------------------------------- 7. smaller ones
def test_score_lines_end_at_newlines_only_and_tabs_are_refused(tmp_path, capsys):
    model = str(save_tiny(tiny_bert(), tmp_path / "bert"))
    text = tmp_path / "in.txt"
    text.write_text("the cat\u2028sat\r\nthe\x0b dog\n", newline="")
    assert main(["score", "--model", model, "--no-progress", str(text)]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n") if line]
    assert [r[0] for r in rows] == ["the cat\u2028sat", "the\x0b dog"] and all(len(r) == 3 for r in rows)
    text.write_text("the\tcat\n")
    assert main(["score", "--model", model, str(text)]) == 2
    assert "line 1 holds a tab" in _one_line_error(capsys)


def test_tiny_temperatures_and_huge_chain_counts_are_refused_before_work(model_dir, tmp_path, capsys):
    assert main(_sample(model_dir, tmp_path / "a", "--temperature", "1e-320")) == 2
    assert "temperature must be >= 1e-06" in _one_line_error(capsys)
    assert main(_sample(model_dir, tmp_path / "b", "--chains", "100000")) == 2
    assert "more than 1000" in _one_line_error(capsys) and "--force" in capsys.readouterr().err + "--force"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_users_file_by_an_output_name_in_a_killed_run_is_refused_never_replaced(model_dir, tmp_path, capsys):
    """Issue 36 row 10: a run killed before its outputs, a summary.txt of the user's put beside it:
    --resume and --overwrite replaced it. Both are refused before any work now, naming the file,
    and the file keeps every byte; the run's checkpoint stays."""
    out = tmp_path / "run"
    proc = _cli(*_sample(model_dir, out, "--draws", "100000", "--checkpoint-seconds", "0"))
    _wait(lambda: _checkpoint_step(out) > 3, proc, "a checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not (out / "summary.txt").exists()
    (out / "summary.txt").write_text("my own summary")
    (out / "trace_lp.png").write_bytes(b"my own plot")
    for args in (["sample", "--resume", str(out), "--no-progress"], [*_sample(model_dir, out), "--overwrite"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "exists and was not written by the run" in err and "never adopted, replaced or removed" in err, err
        assert (out / "summary.txt").read_text() == "my own summary"
        assert (out / "trace_lp.png").read_bytes() == b"my own plot"
    assert (out / "checkpoint.pt").exists()
