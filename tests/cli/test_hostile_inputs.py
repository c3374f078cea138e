"""Inputs a hostile tester gave the commands and the API (issue 22, second pass): each is refused
with one line before any work, or stops the run with a message, never a traceback, a hang or a
silent result (docs/reliability.md)."""

import math
import subprocess
import sys
import time
import warnings

import pytest
import torch
from cli_checks import one_line_error as _one_line_error

import mlm_ppl
from mlm_ppl import load_mlm
from mlm_ppl.cli import main

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"


def _sample(model_dir, out, *extra):
    return ["sample", "--model", str(model_dir), "--template", TEMPLATE, "--chains", "2", "--draws", "5",
            "--seed", "7", "--out", str(out), "--no-progress", *extra]  # fmt: skip


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
# ---------------------------------------------------------------------- row 11: a \r inside an input line
def test_a_carriage_return_inside_a_line_is_refused_and_crlf_endings_are_read(model_dir, tmp_path, capsys):
    inside = tmp_path / "inside.txt"
    inside.write_bytes(b"AC\rDE\n")
    assert main(["score", "--model", model_dir, "--no-progress", str(inside)]) == 2
    line = _one_line_error(capsys)
    assert "line 1 holds a carriage return" in line and capsys.readouterr().out == ""
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"AC\r\nDE\r\n")
    assert main(["score", "--model", model_dir, "--no-progress", str(crlf)]) == 0
    assert [row.split("\t")[0] for row in capsys.readouterr().out.splitlines()] == ["AC", "DE"]
    # and on stdin, which a text reader would translate the same way
    done = subprocess.run(
        [sys.executable, "-m", "mlm_ppl.cli", "score", "--model", model_dir, "-"],
        input=b"AC\rDE\n",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == b"", done.stderr
    assert b"stdin, line 1 holds a carriage return" in done.stderr and b"Traceback" not in done.stderr


# ---------------------------------------------------------------------- row 12: a token id outside the vocabulary
def test_diagnose_refuses_a_token_id_outside_the_vocabulary(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    capsys.readouterr()
    idata = az.from_netcdf(out / "run.nc")
    tokens = idata.posterior["tokens"].values.copy()
    free = idata.attrs["free_positions"]
    tokens[1, 2, int(free.strip("[]").split(",")[0])] = 10**6
    idata.posterior["tokens"] = (idata.posterior["tokens"].dims, tokens)
    bad = tmp_path / "bad.nc"
    idata.to_netcdf(str(bad))
    assert main(["diagnose", str(bad), "--plots", str(tmp_path / "plots")]) == 2
    line = _one_line_error(capsys)
    assert "token id 1000000 at chain 1, draw 2" in line and "outside the vocabulary" in line, line


# ---------------------------------------------------------------------- row 13: --checkpoint-seconds
@pytest.mark.parametrize("value", ["nan", "-5", "inf"])
def test_a_checkpoint_interval_that_is_not_a_finite_number_of_seconds_is_refused(model_dir, tmp_path, capsys, value):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--checkpoint-seconds", value)) == 2
    assert "checkpoint_seconds must be a finite number >= 0" in _one_line_error(capsys)
    assert not out.exists()


def test_run_chains_refuses_a_checkpoint_interval_of_nan(model_dir):
    kernel = mlm_ppl.MetropolisHastings(mlm_ppl.MaskedLMDistribution(load_mlm(model_dir), TEMPLATE))
    with pytest.raises(ValueError, match="checkpoint_seconds must be a finite number >= 0, got nan"):
        mlm_ppl.run_chains(kernel, 2, 3, checkpoint_seconds=math.nan, on_checkpoint=lambda cp: None)
    assert torch.is_tensor(mlm_ppl.run_chains(kernel, 2, 3, checkpoint_seconds=0).tokens)


# ---------------------------------------------------------------------- row 16: a log-factor of NaN or -inf
def _nan_after(calls):
    """A log-factor that is 0 for its first ``calls`` calls, then NaN for every state."""
    seen = []

    def log_factor(tokens):
        seen.append(1)
        return torch.full((tokens.shape[0],), math.nan if len(seen) > calls else 0.0)

    return log_factor


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh"])
def test_a_log_factor_of_nan_stops_the_run_where_it_appears(model_dir, kernel):
    mlm = load_mlm(model_dir)
    for calls in (0, 6):  # NaN at the start, and a few steps in
        with pytest.raises(ValueError, match=r"log_factor returned nan for \d+ of \d+ states .* or -inf for"):
            mlm_ppl.sample(mlm, TEMPLATE, kernel=kernel, num_chains=2, num_samples=50, log_factor=_nan_after(calls))


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh"])
def test_a_log_factor_of_minus_inf_at_every_start_is_refused(model_dir, kernel):
    """Before: the run completed, every lp -inf. Now the start search (inference/starts.py) finds
    no allowed state and stops before the first step; a given start that is forbidden is refused,
    naming the chain."""
    mlm = load_mlm(model_dir)
    with pytest.raises(ValueError, match="no sequence satisfying 'finite log_factor' found after"):
        mlm_ppl.sample(
            mlm,
            TEMPLATE,
            kernel=kernel,
            num_chains=2,
            num_samples=5,
            log_factor=lambda t: torch.full((len(t),), -math.inf),
        )
    start = mlm.encode(["ADCEE", "ACCEE"]).input_ids
    d_id = int(start[0, 2])
    forbid_d = lambda t: torch.where(t[:, 2] == d_id, -math.inf, 0.0)
    with pytest.raises(ValueError, match="init: the start of chain 0 breaks rule"):
        mlm_ppl.sample(mlm, TEMPLATE, kernel=kernel, num_chains=2, num_samples=20, init=start, log_factor=forbid_d)
    filled = mlm_ppl.sample(mlm, TEMPLATE, kernel=kernel, num_chains=2, num_samples=20, log_factor=forbid_d)
    assert (filled.tokens[:, :, 2] != d_id).all() and torch.isfinite(filled.stats["lp"]).all()


@pytest.mark.parametrize("which", ["MLMKernel", "MLMGibbs"])
def test_a_pyro_model_whose_other_terms_are_nan_stops_with_the_message(model_dir, which):
    import pyro
    from pyro.infer import MCMC

    mlm = load_mlm(model_dir)
    d = mlm_ppl.MaskedLMDistribution(mlm, TEMPLATE)

    def model():
        pyro.sample("x", d)
        pyro.factor("broken", torch.tensor(math.nan))

    kernel = mlm_ppl.MLMKernel(model, seed=0) if which == "MLMKernel" else mlm_ppl.MLMGibbs(model, seed=0)
    with pytest.raises(ValueError, match="log_factor returned nan"):
        MCMC(kernel, num_samples=3, warmup_steps=0, disable_progbar=True).run()


# ---------------------------------------------------------------------- row 9: a few steps, each of them huge
def test_a_run_of_few_steps_with_a_huge_inner_chain_is_refused_before_it_starts(model_dir, tmp_path, capsys):
    huge = ("--kernel", "surrogate-mh", "--inner-steps", "100000000000", "--draws", "2")
    t0 = time.monotonic()
    assert main(_sample(model_dir, tmp_path / "run", *huge)) == 2
    line = _one_line_error(capsys)
    assert "2 chains x 2 steps x 6e+10 evaluations per step" in line and "more than a day" in line, line
    assert not (tmp_path / "run").exists()
    templates = tmp_path / "templates.tsv"  # a batch is estimated as well, all its templates
    templates.write_text(f"{TEMPLATE}\nD[MASK]C[MASK]E\n")
    batch = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--no-progress",
             "--out", str(tmp_path / "batch"), *huge]  # fmt: skip
    assert main(batch) == 2
    assert "x 2 templates" in _one_line_error(capsys) and not (tmp_path / "batch").exists()
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize(
    "flags", [("--replicas", "5000"), ("--replicas", "100000"), ("--replicas", "200", "--replica-spacing", "100")]
)
def test_replica_settings_past_the_hottest_bound_are_one_line_not_an_overflow(model_dir, tmp_path, capsys, flags):
    """Issue 47, row 12: 1.5 ** 4999 overflowed a float (OverflowError reported as a bug)."""
    assert main(_sample(model_dir, tmp_path / "out", "--kernel", "replica-mh", *flags)) == 2
    assert "times the temperature (at most 1000); fewer replicas or a smaller spacing" in _one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_ctrl_c_while_the_package_imports_is_one_line(monkeypatch, capsys):
    """Issue 47, row 12: Ctrl-C during the imports (torch, transformers: seconds) was Python's traceback;
    the console script's entry point lives outside the package and says it in one line. The interrupt
    is raised where the import is (deterministic, not a signal timed against the import)."""
    import importlib.metadata
    import types

    import mlm_ppl_launch

    (script,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "mlm-ppl"]
    assert script.value == "mlm_ppl_launch:main"

    class Interrupted(types.ModuleType):
        def __getattr__(self, name):
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "mlm_ppl.cli", Interrupted("mlm_ppl.cli"))
    assert mlm_ppl_launch.main() == 130
    assert capsys.readouterr().err == "mlm-ppl: interrupted while starting\n"


def test_error_lines_name_what_happened_without_errno_and_escape_control_characters():
    """Issue 47, row 13: ``[Errno 28] No space left on device`` and raw ANSI escapes in error lines."""
    import errno

    from mlm_ppl.cli import _one_line

    line = _one_line(OSError(errno.ENOSPC, "No space left on device", "/runs/x/run.nc"))
    assert line.startswith("No space left on device: '/runs/x/run.nc' (the disk is full") and "Errno" not in line
    assert _one_line(ValueError("token '\x1b[31mA' unknown")) == "token '\\x1b[31mA' unknown"
    assert _one_line(FileNotFoundError("input file 'x' does not exist")) == "input file 'x' does not exist"
