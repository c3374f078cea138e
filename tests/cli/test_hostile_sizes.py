"""Issue 36 (third hostile pass), rows 3, 4, 5 and 9: every bad size is a one-line error before any
work, in bounded time, never a traceback, a hang or a frozen chain (docs/reliability.md)."""

import json
import time

import pytest
from cli_checks import one_line_error

import mlm_ppl
from mlm_ppl import load_mlm
from mlm_ppl.cli import main

TEMPLATE = "A[MASK]C[MASK][MASK]"


def _sample(model_dir, out, *extra):
    return ["sample", "--model", str(model_dir), "--template", TEMPLATE, "--chains", "2", "--draws", "4",
            "--seed", "7", "--out", str(out), "--no-progress", *extra]  # fmt: skip


@pytest.mark.parametrize(
    "extra, match",
    [
        (("--anneal", "1:1e-300"), "FROM and TO must be >= 1e-06"),  # row 3: every tau the schedule reaches
        (("--anneal", "1e-7:1"), "FROM and TO must be >= 1e-06"),
        (("--template", "A[MASK]{99999999999999999999}C"), "asks for 99999999999999999999 positions"),  # row 4
        (
            ("--template", "A[MASK]{1,99999999999999999999999}C", "--length-mode", "jump"),
            "asks for 99999999999999999999999 positions",
        ),
        (("--template", "A[MASK]{1,10000000}C", "--length-mode", "jump"), "asks for 10000000 positions"),  # row 9
        (("--template", "A[MASK]{1,5000}C", "--length-mode", "jump"), "more than the model accepts"),
        (("--template", "A[MASK]{5000}C"), "more than the model accepts"),
    ],
)
def test_bad_sizes_are_one_line_errors_in_bounded_time(model_dir, tmp_path, capsys, extra, match):
    out = tmp_path / "run"
    start = time.monotonic()
    assert main(_sample(model_dir, out, *extra)) == 2
    assert time.monotonic() - start < 30
    line = one_line_error(capsys)
    assert match in line, line
    assert not out.exists()


def test_a_schedule_that_reaches_a_tiny_temperature_stops_at_that_step(model_dir):
    """Row 3 for a Python schedule (any callable): the step whose tau is below the bound says so."""
    mlm = load_mlm(model_dir)
    with pytest.raises(ValueError, match=r"gave tau=1e-300; it must return a finite number >= 1e-06"):
        mlm_ppl.sample(mlm, TEMPLATE, kernel="mh", num_chains=1, num_samples=4, progress=False,
                       temperature_schedule=_falls_to_nothing)  # fmt: skip


def _falls_to_nothing(step):
    return 1.0 if step < 2 else 1e-300


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_huge_weights_in_a_length_prior_or_reference_are_normalised_not_overflowed(model_dir, tmp_path, capsys):
    """Row 5: weights of 1e308 overflowed fsum (a traceback); they are scaled before they are summed."""
    table = tmp_path / "huge.tsv"
    table.write_text("1\t1e308\n2\t1e308\n")
    out = tmp_path / "run"
    args = ["sample", "--model", model_dir, "--template", "A[MASK]{1,2}C", "--length-mode", "jump",
            "--length-prior", str(table), "--chains", "2", "--draws", "4", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["length_prior"] == {"1": 0.5, "2": 0.5}
    assert main(["diagnose", str(out), "--length-reference", str(table)]) == 0
    assert "length" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["strata", "jump"])
def test_a_weight_too_small_to_tell_from_zero_is_refused_not_dropped(model_dir, tmp_path, capsys, mode):
    """Issue 47, row 13: a prior weight of 1e-308 beside 1 underflowed to 0 once normalised: strata
    dropped the length without a word and jump mode reported a hole the user did not leave."""
    table = tmp_path / "faint.tsv"
    table.write_text("1\t1\n2\t1e-308\n")
    out = tmp_path / "run"
    args = ["sample", "--model", model_dir, "--template", "A[MASK]{1,2}C", "--length-mode", mode,
            "--length-prior", str(table), "--chains", "2", "--draws", "4", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 2
    line = one_line_error(capsys)
    assert "length 2's weight 1e-308 is positive but more than 1e+300 times smaller than the largest" in line, line
    assert not out.exists()


def test_a_pattern_that_backtracks_for_ever_in_re_is_matched_in_linear_time(model_dir, tmp_path, capsys):
    """Row 7: --forbid '(A+)+C' on a 28-residue template hung in Python's re (no output in 60 s).
    Patterns are matched by RE2 (linear time); one RE2 cannot match in bounded time (a lookaround,
    a backreference) is refused with one line before any work."""
    template = "A" * 27 + "[MASK]D"
    out = tmp_path / "run"
    args = ["sample", "--model", model_dir, "--template", template, "--chains", "2", "--draws", "4",
            "--seed", "3", "--out", str(out), "--no-progress"]  # fmt: skip
    start = time.monotonic()
    assert main([*args, "--forbid", "(A+)+C"]) == 0
    assert time.monotonic() - start < 60
    capsys.readouterr()
    for pattern in ("(?=A)C", r"(A)\1"):
        assert main([*args, "--overwrite", "--forbid", pattern]) == 2
        line = one_line_error(capsys)
        assert "cannot be matched in bounded time" in line and "no lookarounds or backreferences" in line, line


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_run_file_with_an_lp_of_inf_or_nan_is_refused_by_diagnose_and_designs(model_dir, tmp_path, capsys, value):
    """Row 11: an lp of +inf in run.nc was dropped from the verdicts (diagnose exited 0) and ranked
    first by designs (energy -inf). Both name the draw now; -inf (an infeasible draw) stays valid."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    out = tmp_path / "run"
    assert main(_sample(model_dir, out)) == 0
    capsys.readouterr()
    idata = az.from_netcdf(out / "run.nc")
    lp = idata.sample_stats["lp"].values.copy()
    lp[1, 2] = value
    idata.sample_stats["lp"] = (idata.sample_stats["lp"].dims, lp)
    idata.to_netcdf(str(tmp_path / "bad.nc"))
    (out / "run.nc").unlink()
    (tmp_path / "bad.nc").rename(out / "run.nc")
    for command in (["diagnose", str(out / "run.nc")], ["designs", str(out), "--top", "3"]):
        assert main(command) == 2
        line = one_line_error(capsys)
        assert f"lp at chain 1, draw 2 is {value}" in line, line
