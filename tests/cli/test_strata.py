"""mlm-ppl sample --length-mode strata: a variable gap [MASK]{a,b} run as one run per length, weighted."""

import csv
import os
import re
import sys
import warnings

import pytest
import torch
from cli_checks import one_line_error, recorded_settings

from mlm_ppl import campaign
from mlm_ppl.cli import main
from mlm_ppl.inference import exact

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "inference"))
from exactness import check_fit

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

GAP = "A[MASK]{1,3}C"


def _args(model_dir, out, *extra):
    """Temperature 10, proposals at 10: the tiny model's peaked conditionals flattened, so that MH
    mixes (|lambda_2| 0.17, 0.63 and 0.77 for 1, 2 and 3 positions); every 8th step kept, so that
    the draws are nearly independent for Pearson's test; a uniform start, so that the draws' law
    is known exactly at every step."""
    args = ["sample", "--model", model_dir, "--template", GAP, "--temperature", "10", "--proposal-temperature"]
    args += ["10", "--chains", "8", "--draws", "250", "--thin", "8", "--warmup", "16", "--init", "uniform"]
    return [*args, "--seed", "2", "--out", str(out), "--no-progress", *extra]


@pytest.mark.slow
def test_strata_run_each_length_and_weigh_its_draws_by_the_prior(model_dir, tmp_path, capsys):
    """Each length's draws follow that length's exact law (by enumeration, with the chains' own
    exact matrix: its |lambda_2| sizes the effective draws, and the law of the draws after a
    uniform start gives the known offset), and a draw of length L weighs pi(L) / N_L."""
    prior = tmp_path / "prior.tsv"
    prior.write_text("# lengths\n1\t1\n2\t2\n3\t1\n")
    out = tmp_path / "strata"
    assert main(_args(model_dir, out, "--length-mode", "strata", "--length-prior", str(prior))) == 0
    summary = (out / "summary.txt").read_text()
    assert summary.startswith(f"# strata of {GAP}: one run per gap length, prior {prior}")
    assert "# mixture: mean MLM energy" in summary and summary.splitlines()[1].startswith("template\tlength\tprior")
    with open(out / "designs.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == 3 * 8 * 250 and {r["template"] for r in rows} == {"L01", "L02", "L03"}
    weights = {L: {float(r["weight"]) for r in rows if r["length"] == str(L)} for L in (1, 2, 3)}
    assert all(len(w) == 1 for w in weights.values())  # pi(L) / N_L, N_L = 8 x 250
    assert [w.pop() for w in weights.values()] == pytest.approx([0.25 / 2000, 0.5 / 2000, 0.25 / 2000])
    assert sum(float(r["weight"]) for r in rows) == pytest.approx(1.0)
    for L in (1, 2, 3):
        run = out / f"L{L:02d}"
        settings = recorded_settings(run)
        assert settings.template == "A" + "[MASK]" * L + "C"
        _, target, kernel = campaign.build(settings)
        states = exact.enumerate_states(target)
        P = exact.transition_matrix(kernel, states)
        pi = exact.exact_log_probs(target, states).exp()
        rho = float(torch.linalg.eigvals(P).abs().sort(descending=True).values[1]) ** 8  # per kept draw
        P8 = torch.linalg.matrix_power(P, 8)
        p = torch.full((len(pi),), 1.0 / len(pi), dtype=torch.float64) @ torch.linalg.matrix_power(P, 16)
        law = torch.zeros_like(pi)
        for _ in range(250):  # the mean law of the 250 draws after 16 warm-up steps, every 8th step
            p = p @ P8
            law += p / 250
        tokens = torch.as_tensor(az.from_netcdf(run / "run.nc").posterior["tokens"].values).reshape(-1, len(states[0]))
        counts = torch.bincount(exact.state_index(target)(tokens), minlength=len(pi)).double()
        n = counts.sum()
        check_fit(pi, counts, offset=exact.total_variation(law, pi), n_eff=float(n) * (1 - rho) / (1 + rho))


@pytest.mark.parametrize(
    "extra, match",
    [
        ([], r"variable gap gives loops of several lengths: give --length-mode jump .* or strata"),
        (["--length-mode", "strata", "--length-prior", "nofile.tsv"], r"length prior 'nofile.tsv': cannot read it"),
    ],
)
def test_bad_strata_requests_are_one_line_errors_before_any_work(model_dir, tmp_path, capsys, extra, match):
    out = tmp_path / "bad"
    assert main(_args(model_dir, out, *extra)) == 2
    assert re.search(match, one_line_error(capsys))
    assert not out.exists()


@pytest.mark.parametrize(
    "template, match",
    [
        ("A[MASK]{0,3}C", r"may be empty; a gap has at least 1 position"),
        ("A[MASK]{5,2}C", r"ends before it starts; give \{2,5\}"),
        ("A[MASK]{1,2}C[MASK]{1,2}", r"2 variable gaps"),
        ("A[MASK]{1,600}C", r"at its longest \(600 gap positions\) it is 604 tokens, .*lower the gap's upper bound"),
    ],
)
def test_bad_gaps_are_one_line_errors_before_any_work(model_dir, tmp_path, capsys, template, match):
    out = tmp_path / "bad"
    args = ["sample", "--model", model_dir, "--template", template, "--length-mode", "strata", "--out", str(out)]
    assert main([*args, "--no-progress"]) == 2
    assert re.search(match, one_line_error(capsys))
    assert not out.exists()


def test_length_options_need_a_variable_gap_and_a_new_run(model_dir, tmp_path, capsys):
    base = ["sample", "--model", model_dir, "--no-progress", "--draws", "3"]
    assert main([*base, "--template", "A[MASK]C", "--length-mode", "strata", "--out", str(tmp_path / "a")]) == 2
    assert re.search(r"apply to one template with a variable gap", one_line_error(capsys))
    done = tmp_path / "done"
    assert main([*base, "--template", "A[MASK]{2}C", "--out", str(done)]) == 0  # a fixed count is an ordinary run
    assert recorded_settings(done).template == "A[MASK]{2}C"
    capsys.readouterr()
    assert main(["sample", "--resume", str(done), "--length-prior", "uniform"]) == 2
    assert "give --resume DIR without --length-mode and --length-prior" in one_line_error(capsys)


@pytest.mark.slow
def test_a_batch_of_strata_resumes_to_the_same_designs_and_keeps_its_prior(model_dir, tmp_path, capsys):
    out = tmp_path / "strata"
    args = ["sample", "--model", model_dir, "--template", GAP, "--length-mode", "strata", "--draws", "12"]
    assert main([*args, "--chains", "2", "--seed", "1", "--out", str(out), "--no-progress"]) == 0
    before = (out / "designs.tsv").read_text()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 0
    assert (out / "designs.tsv").read_text() == before
    capsys.readouterr()
    config = out / "config.json"
    text = config.read_text()
    config.write_text(text.replace('"1": 0.3333333333333333', '"1": 0.5'))
    assert config.read_text() != text
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    assert re.search(r"differs from the batch's record .*lengths\.prior", one_line_error(capsys))
