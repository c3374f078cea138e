"""Run directories under a hostile tester, second pass (docs/reliability.md).

Each test is a way a tester made mlm-ppl remove or write a file that was not its own, leave a
folder behind, or give the wrong advice: names outside the directory written into the marker,
a hard link or a user's own file at the lock file's name, parent folders of a refused run, the
hint of a refusal. The last tests run the command without privileges (permission denied on
``--out``, ``--resume`` and ``run.nc``), which a tester running as root never met.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mlm_ppl import rundir
from mlm_ppl.cli import main
from mlm_ppl.testing import save_tiny, tiny_residue_bert

TEMPLATE = "A[MASK]C[MASK][MASK]"
OTHER_UID = 4242  # owner of the files the unprivileged command must not write or read: neither root nor nobody


def _sample(model_dir, out, *extra):
    return ["sample", "--model", str(model_dir), "--template", TEMPLATE, "--chains", "2", "--draws", "20",
            "--seed", "7", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _pairs(model_dir, data, out, *extra):
    return ["pairs", "--model", str(model_dir), "--data", str(data), "--n", "1", "--methods", "naive",
            "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _cli(*args, prefix=(), env=None):
    """The console script as a process of its own; its exit status and stderr."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "mlm_ppl.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return done.returncode, done.stderr


def _error_line(err):
    """The one error line of a failed command (no traceback; progress or notes may precede it)."""
    lines = [line for line in err.splitlines() if line.startswith("mlm-ppl ")]
    assert "Traceback" not in err and len(lines) == 1 and err.endswith(lines[0] + "\n"), err
    return lines[0]


def _digest(directory):
    """Every file under ``directory`` (links as their target's name, not followed) and its content."""
    out = {}
    for p in sorted(Path(directory).rglob("*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir"
    return out


# ---------------------------------------------------------------------- 1. the marker's file names
@pytest.mark.slow  # about 8-9 s: left out of make test-fast, run in CI
def test_marker_names_outside_the_directory_are_refused_and_nothing_is_removed(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x").write_text("x\n")
    (tmp_path / "up.txt").write_text("up\n")
    (tmp_path / "abs.txt").write_text("abs\n")
    (out / "link").symlink_to(elsewhere)
    marker = json.loads((out / rundir.MARKER).read_text())
    for entry in (str(tmp_path / "abs.txt"), "../up.txt", "link/x", "..", ""):
        (out / rundir.MARKER).write_text(json.dumps({**marker, "files": [*marker["files"], entry]}))
        before = _digest(tmp_path)
        code, err = _cli(*_sample(model_dir, out, "--overwrite"))
        assert code == 2, err
        line = _error_line(err)
        assert str(out / rundir.MARKER) in line and repr(entry) in line and "nothing was removed" in line, line
        assert _digest(tmp_path) == before, entry
        capsys.readouterr()
        assert main(["sample", "--resume", str(out)]) == 2  # read by a resume: refused the same way
        assert repr(entry) in _error_line(capsys.readouterr().err)
        assert _digest(tmp_path) == before, entry


def test_a_batch_whose_template_run_lists_an_outside_name_is_refused_whole(model_dir, tmp_path, capsys):
    templates = tmp_path / "templates.tsv"
    templates.write_text("one\tA[MASK]C\ntwo\tD[MASK]E\n")
    batch = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "5",
             "--out", str(tmp_path / "batch"), "--no-progress"]  # fmt: skip
    assert main(batch) == 0
    (tmp_path / "victim.txt").write_text("victim\n")
    inner = tmp_path / "batch" / "two" / rundir.MARKER
    marker = json.loads(inner.read_text())
    inner.write_text(json.dumps({**marker, "files": [*marker["files"], "../../victim.txt"]}))
    before = _digest(tmp_path)
    capsys.readouterr()
    assert main([*batch, "--overwrite"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(inner) in line and "'../../victim.txt'" in line
    assert _digest(tmp_path) == before  # not even the first template's run was removed


# ---------------------------------------------------------------------- 2. the lock file
@pytest.mark.slow  # about 5 s (make test-fast keeps under 3 minutes)
def test_a_hard_link_planted_as_the_lock_file_is_never_written(model_dir, tmp_path):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    outside = tmp_path / "precious.txt"
    outside.write_text("precious\n")
    (out / rundir.LOCK).unlink(missing_ok=True)
    os.link(outside, out / rundir.LOCK)
    (out / "trace_lp.png").unlink()  # diagnose would redraw it under the lock
    code, err = _cli("diagnose", out)
    assert code == 2, err
    assert "hard link" in _error_line(err) and str(out / rundir.LOCK) in err
    assert outside.read_text() == "precious\n" and os.stat(outside).st_nlink == 2
    assert not (out / "trace_lp.png").exists()


@pytest.mark.slow
def test_a_users_own_file_named_like_the_lock_is_never_written_over(model_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / rundir.LOCK).write_text("my notes, under an unlucky name\n")
    code, err = _cli(*_sample(model_dir, out))
    assert code == 2, err
    line = _error_line(err)
    assert "was not written by mlm-ppl" in line and "move it away" in line, line
    assert os.listdir(out) == [rundir.LOCK] and (out / rundir.LOCK).read_text() == "my notes, under an unlucky name\n"
    # something that is not a regular file there is refused too
    (out / rundir.LOCK).unlink()
    os.mkfifo(out / rundir.LOCK)
    assert main(_sample(model_dir, out)) == 2
    assert "is not a regular file" in _error_line(capsys.readouterr().err)
    assert os.listdir(out) == [rundir.LOCK]
    # the record an mlm-ppl process leaves there (pid and host; empty if it was killed at once) is its own
    for record in ("4242 elsewhere\n", ""):
        shutil.rmtree(out)
        out.mkdir()
        (out / rundir.LOCK).write_text(record)
        assert main(_sample(model_dir, out)) == 0
        assert (out / rundir.LOCK).read_text() == f"{os.getpid()} {os.uname().nodename}\n"


# ---------------------------------------------------------------------- 14. nothing made on a refused run
def test_a_refused_run_leaves_no_parent_folders(nan_model_dir, tmp_path, capsys):
    (tmp_path / "kept").mkdir()
    assert main(_sample(nan_model_dir, tmp_path / "deep" / "a" / "b")) == 2
    assert "non-finite logits" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "deep").exists()
    assert main(_sample(nan_model_dir, tmp_path / "kept" / "a" / "b")) == 2  # a folder that was there stays
    assert "non-finite logits" in _error_line(capsys.readouterr().err)
    assert os.listdir(tmp_path / "kept") == []
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEACDEAC\n")
    assert main(_pairs(nan_model_dir, data, tmp_path / "deep" / "p" / "q")) == 2
    assert "non-finite logits" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "deep").exists()


# ---------------------------------------------------------------------- 15. the hint names the right remedy
def test_a_run_of_another_kind_is_refused_with_the_right_remedy(model_dir, tmp_path, capsys):
    sampling = tmp_path / "sampling"
    assert main(_sample(model_dir, sampling)) == 0
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEACDEAC\n")
    capsys.readouterr()
    assert main(_pairs(model_dir, data, sampling, "--overwrite")) == 2
    line = _error_line(capsys.readouterr().err)
    assert "holds an mlm-ppl sample run, not a pairs run" in line and "--overwrite" not in line, line
    assert "use another --out, or remove it yourself" in line, line
    pairs = tmp_path / "pairs"
    assert main(_pairs(model_dir, data, pairs)) == 0
    capsys.readouterr()
    assert main(_sample(model_dir, pairs, "--overwrite")) == 2
    line = _error_line(capsys.readouterr().err)
    assert "holds an mlm-ppl pairs run, not a sample run" in line and "--resume" not in line, line
    assert "use another --out, or remove it yourself" in line, line


# ---------------------------------------------------------------------- permission denied
@pytest.fixture(scope="module")
def unprivileged():
    """``(prefix, base, env)``: a command prefix that runs the CLI without privileges, a
    world-readable folder holding a tiny model, and the environment for the command.

    The command runs as uid 65534 (nobody) where that user can start this interpreter with its
    own library; where it cannot (an interpreter under a folder closed to other users, such as
    /root), it runs as root
    with every capability dropped, which the kernel refuses exactly like an ordinary user on files
    another user owns. Either way the files it must not write or read belong to ``OTHER_UID``.
    """
    if os.geteuid() != 0:
        pytest.skip("the permission tests drop root's privileges for the command; run them as root")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("the permission tests need setpriv(1) (util-linux) to drop privileges")
    base = Path(tempfile.mkdtemp(prefix="mlm-ppl-unprivileged-"))
    try:
        base.chmod(0o755)
        home = base / "home"
        home.mkdir()
        home.chmod(0o777)
        for file in save_tiny(tiny_residue_bert("ACDE", seed=1), base / "model").iterdir():
            file.chmod(0o644)  # the weights are written 0600
        env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
        probe = [sys.executable, "-c", "import sys, mlm_ppl.cli; print(sys.version)"]
        reasons = []
        for prefix in (
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"],
            [setpriv, "--inh-caps=-all", "--bounding-set=-all"],
        ):
            done = subprocess.run([*prefix, *probe], env=env, capture_output=True, text=True, cwd=base)
            if done.returncode == 0 and done.stdout.strip() == sys.version:  # not another Python's library
                break
            reasons.append(f"{' '.join(prefix[1:])}: {done.stderr.strip()[-200:]}")
        else:
            pytest.skip(f"cannot start this interpreter without privileges ({'; '.join(reasons)})")
        yield prefix, base, env
    finally:
        shutil.rmtree(base)


def _give_away(path, mode):
    os.chown(path, OTHER_UID, OTHER_UID)
    os.chmod(path, mode)


@pytest.mark.slow  # about 8-9 s: left out of make test-fast, run in CI
def test_out_in_a_folder_the_user_cannot_write_is_a_message(unprivileged):
    prefix, base, env = unprivileged
    closed = base / "closed"
    closed.mkdir()
    _give_away(closed, 0o755)
    for out in (closed / "run", closed / "a" / "run"):
        code, err = _cli(*_sample(base / "model", out), prefix=prefix, env=env)
        assert code == 2, err
        assert "Permission denied" in _error_line(err)
        assert os.listdir(closed) == []


@pytest.mark.slow
def test_resume_of_a_run_the_user_cannot_write_is_a_message(unprivileged):
    prefix, base, env = unprivileged
    out = base / "run"
    assert main(_sample(base / "model", out, "--draws", "5")) == 0
    (out / "run.nc").unlink()  # the resume would write it again
    for lock_there in (True, False):
        if not lock_there:
            (out / rundir.LOCK).unlink()
        for p in [out, *out.iterdir()]:
            _give_away(p, 0o755 if p.is_dir() else 0o644)
        before = _digest(out)
        code, err = _cli("sample", "--resume", out, prefix=prefix, env=env)
        assert code == 2, err
        assert "Permission denied" in _error_line(err)
        assert _digest(out) == before


@pytest.mark.slow
def test_diagnose_of_an_unreadable_run_is_a_message(unprivileged):
    prefix, base, env = unprivileged
    out = base / "unreadable"
    assert main(_sample(base / "model", out, "--draws", "5")) == 0
    (out / "trace_lp.png").unlink()
    for p in [out, *out.iterdir()]:
        _give_away(p, 0o777 if p.is_dir() else 0o666)
    os.chmod(out / "run.nc", 0o600)
    before = _digest(out)
    code, err = _cli("diagnose", out, prefix=prefix, env=env)
    assert code == 2, err
    assert "Permission denied" in _error_line(err) and "run.nc" in err
    assert _digest(out) == before


@pytest.mark.slow
def test_diagnose_plots_never_replace_a_users_files_or_another_runs(model_dir, tmp_path, capsys):
    """Issue 47, row 8: ``diagnose F --plots DIR`` replaced the user's ``trace_lp.png`` in DIR without
    a word, and with DIR another run took its lock and overwrote its plots; both refused now, before
    anything is touched. A directory of diagnose's own plots is redrawn; the run's own is as before."""
    run, other = tmp_path / "F", tmp_path / "G"
    assert main(_sample(model_dir, run)) == 0
    assert main(_sample(model_dir, other, "--seed", "8")) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "trace_lp.png").write_bytes(b"the user's figure")
    capsys.readouterr()
    for target in (mine, other):
        before = _digest(target)
        assert main(["diagnose", str(run), "--plots", str(target)]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith("mlm-ppl diagnose: error: --plots") and "another directory" in line, line
        assert _digest(target) == before
    fresh = tmp_path / "plots"
    fresh.mkdir()
    (fresh / "summary.md").write_text("the user's notes")  # other files may be there
    for _ in range(2):  # a new directory, then its own plots again
        assert main(["diagnose", str(run), "--plots", str(fresh)]) == 0
        assert (fresh / "trace_lp.png").stat().st_size > 1000
    assert (fresh / "summary.md").read_text() == "the user's notes"
    assert main(["diagnose", str(run), "--plots", str(run)]) == 0  # the run's own directory, named


@pytest.mark.slow
def test_a_resume_never_overwrites_a_plot_name_the_user_wrote_after_a_kill(model_dir, tmp_path, capsys, monkeypatch):
    """Issue 47, row 7: a run killed while writing its plots had all four names in its marker, so the
    user's ``acceptance.png`` written there was overwritten by ``--resume``. Each name now enters the
    marker as its file is written: the resume refuses, naming it, and writes its plots once it is gone."""
    from mlm_ppl.diagnostics import plots

    out = tmp_path / "run"
    saved, real = [], plots._save

    def cut(fig, out_dir, name):
        if saved:
            raise KeyboardInterrupt
        saved.append(name)
        return real(fig, out_dir, name)

    monkeypatch.setattr(plots, "_save", cut)
    assert main(_sample(model_dir, out)) == 130
    monkeypatch.undo()
    assert saved == ["trace_lp.png"] and not (out / "acceptance.png").exists()
    (out / "acceptance.png").write_bytes(b"the user's figure")
    capsys.readouterr()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "acceptance.png' exists and was not written by the run" in line, line
    assert (out / "acceptance.png").read_bytes() == b"the user's figure"
    (out / "acceptance.png").unlink()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 0
    assert (out / "acceptance.png").stat().st_size > 1000


def _within_a_minute(*args):
    """The console script as a process of its own, killed after 60 s (a hang is a failure, not a stall)."""
    done = subprocess.run(
        [sys.executable, "-m", "mlm_ppl.cli", *map(str, args)], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stderr


@pytest.mark.slow
def test_fifos_devices_and_giant_lines_are_refused_before_they_are_read(model_dir, tmp_path):
    """Issue 47, rows 9 and 10: ``--templates /dev/zero`` ran until killed, a one-line templates file of
    1 GB was tokenised whole, and a FIFO in place of ``config.json`` or ``checkpoint.pt`` blocked
    ``--resume``; each is one line now, at once."""
    argv = ["sample", "--model", model_dir, "--chains", "2", "--draws", "2", "--no-progress"]
    code, err = _within_a_minute(*argv, "--templates", "/dev/zero", "--out", tmp_path / "z")
    assert code == 2 and "/dev/zero is not a regular file" in _error_line(err)
    giant = tmp_path / "giant.txt"
    giant.write_text("A" * (2 << 20) + "\n")
    code, err = _within_a_minute(*argv, "--templates", giant, "--out", tmp_path / "g")
    assert code == 2 and "line 1 holds 2097152 characters, more than 1048576" in _error_line(err)
    for name in ("config.json", "checkpoint.pt"):
        run = tmp_path / name.split(".")[0]
        assert main(_sample(model_dir, run)) == 0
        (run / name).unlink()
        os.mkfifo(run / name)
        code, err = _within_a_minute("sample", "--resume", run, "--no-progress")
        assert code == 2 and f"{name} is not a regular file" in _error_line(err)


@pytest.mark.slow
def test_records_nested_too_deeply_are_one_line(model_dir, tmp_path, capsys):
    """Issue 47, row 12: 100,000-deep JSON in ``config.json`` or the marker, or TOML in a spec, was a
    RecursionError reported as a bug; now one line naming the file."""
    deep_json = "[" * 100_000 + "]" * 100_000
    for name in ("config.json", ".mlm-ppl"):
        run = tmp_path / name.strip(".").replace(".", "_")
        assert main(_sample(model_dir, run)) == 0
        (run / name).write_text(deep_json)
        capsys.readouterr()
        assert main(["sample", "--resume", str(run), "--no-progress"]) == 2
        line = _error_line(capsys.readouterr().err)
        assert name in line and "Traceback" not in line, line
    spec = tmp_path / "spec.toml"
    spec.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main(_sample(model_dir, tmp_path / "s", "--constraints", str(spec))) == 2
    assert "nested too deeply" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "name, value, problem",
    [
        ("free_positions", [3] * 1_000_000, "a list of at most 65536 positions"),  # row 11: ran past 120 s
        ("free_positions", [2, 2], "a position twice"),
        ("free_positions", [True], "positions are integers >= 0"),
        ("vocab", {"A": 1}, "a list of at most 2097152 tokens"),
        ("vocab", ["A", "\x1b[31mC"], "tokens are text without control characters"),  # row 13: ANSI escapes
        ("length_prior", [1, 2], "a table of lengths and their weights"),
    ],
)
@pytest.mark.slow
def test_a_tampered_run_nc_attribute_is_one_line(model_dir, tmp_path, capsys, name, value, problem):
    """Issue 47, rows 11 to 13: attributes of a run.nc changed by hand were tracebacks, a two-minute hang
    or control characters on the terminal; each is now one line naming the attribute."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    run = tmp_path / "run"
    assert main(_sample(model_dir, run)) == 0
    idata = az.from_netcdf(run / "run.nc")
    idata.load()
    idata.attrs[name] = json.dumps(value)
    (run / "run.nc").unlink()
    idata.to_netcdf(run / "run.nc")
    capsys.readouterr()
    for command in (["diagnose", str(run / "run.nc")], ["designs", str(run), "--top", "3"]):
        assert main(command) == 2
        line = _error_line(capsys.readouterr().err)
        assert f"the run's attribute {name!r} is damaged ({problem}" in line and "\x1b" not in line, line
