"""mlm-ppl sample --length-mode jump: one run whose chains move between the lengths of a variable gap."""

import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from cli_checks import one_line_error, recorded_settings, wait_for_checkpoint

from mlm_ppl import campaign
from mlm_ppl.cli import main
from mlm_ppl.diagnostics import loop_distribution, read_run, summary
from mlm_ppl.inference.jump import MOVES

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

GAP = "A[MASK]{1,3}C"


def _args(model_dir, out, *extra):
    args = ["sample", "--model", model_dir, "--template", GAP, "--length-mode", "jump", "--temperature", "2"]
    return [*args, "--chains", "3", "--draws", "60", "--warmup", "10", "--seed", "4", "--out", str(out), *extra]


@pytest.mark.slow
def test_a_jump_run_records_every_draw_with_its_length_and_move(model_dir, tmp_path, capsys):
    prior = tmp_path / "prior.tsv"
    prior.write_text("1\t1\n2\t2\n3\t1\n")
    out = tmp_path / "jump"
    assert (
        main(
            _args(
                model_dir,
                out,
                "--length-prior",
                str(prior),
                "--p-update",
                "0.4",
                "--p-insert",
                "0.3",
                "--p-delete",
                "0.3",
                "--no-progress",
            )
        )
        == 0
    )
    printed = capsys.readouterr().out
    settings = recorded_settings(out)
    assert settings.kernel == "gap-jump" and settings.template == GAP
    assert settings.length_prior == {"1": 0.25, "2": 0.5, "3": 0.25}
    assert settings.kernel_options.p_update == 0.4
    # run.nc: padded tokens (pads after the loop), the length as a functional, the move per draw
    idata = read_run(str(out))
    tokens = idata.posterior["tokens"].values  # (3, 60, 5): [CLS] A gap(3) C [SEP]
    _, target, _ = campaign.build(settings)
    lengths = target.length_of(torch.as_tensor(tokens.reshape(-1, tokens.shape[-1]))).reshape(3, 60).numpy()
    np.testing.assert_array_equal(idata.posterior["length"].values, lengths)
    np.testing.assert_array_equal(idata.sample_stats["length"].values, lengths)
    assert set(np.unique(lengths)) == {1, 2, 3}
    moves = idata.sample_stats["move"].values
    accepted = idata.sample_stats["is_accepted"].values
    assert set(np.unique(moves[accepted])) == {0, 1, 2} and MOVES[:3] == ("update", "insert", "delete")
    # an accepted insert lengthens the loop by one, an accepted delete shortens it, anything else keeps it
    expected = np.where(accepted & (moves == 1), 1, np.where(accepted & (moves == 2), -1, 0))[:, 1:]
    np.testing.assert_array_equal(np.diff(lengths, axis=1), expected)
    # samples.txt: the length beside each decoded sequence
    rows = [line.split("\t") for line in (out / "samples.txt").read_text().splitlines()]
    assert rows[0] == ["chain", "draw", "lp", "length", "site_prob", "memorized", "sequence"]
    assert all(int(length) == len(seq) - 2 for *_, length, _, _, seq in rows[1:]) and len(rows) == 1 + 180
    # the summary: the length marginal, with the prior, counted from the draws
    report = summary(idata)
    assert [(L, w, n) for L, w, n, _, _ in report.lengths] == [
        (L, w, int((lengths == L).sum())) for L, w in ((1, 0.25), (2, 0.5), (3, 0.25))
    ]
    assert "gap length: prior, draws, frequency" in printed and "length" in report.table.index
    # the length plot beside the others, recorded as the run's own file
    assert (out / "length.png").stat().st_size > 0 and "length.png" in (out / ".mlm-ppl").read_text()
    assert main(["diagnose", str(out), "--loops", "3"]) == 0 and "length.png" in capsys.readouterr().out
    # designs give the MLM energy of each loop at its own length (lp less log pi(L), times -T)
    assert main(["designs", str(out), "--top", "5"]) == 0
    picked = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    for row in picked:
        sequence = row[-1]
        L = len(sequence) - 2
        ids = target.pad(torch.tensor([target.target(L).mlm.encode([sequence]).input_ids[0].tolist()]), L)
        energy = float(target.evaluate(ids).energy[0])
        assert float(row[6]) == pytest.approx(energy, abs=1e-3), (row, energy)
    # loops are read without their pads
    motifs = [loop for loop, *_ in loop_distribution(idata).motifs]
    assert all(1 <= len(loop) <= 3 and set(loop) <= set("ACDE") for loop in motifs)


@pytest.mark.parametrize(
    "kernel",
    [(), ("--kernel", "surrogate-mh", "--inner-steps", "3", "--p-unmask", "0.3")],
    ids=["gap-jump", "surrogate"],
)
@pytest.mark.slow
def test_a_killed_jump_run_resumes_to_the_uninterrupted_draws(model_dir, tmp_path, capsys, kernel):
    """Also surrogate-MH around the jump moves, whose checkpoint holds the inner gap-jump chain's state."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(_args(model_dir, whole, "--draws", "150", *kernel, "--no-progress")) == 0
    capsys.readouterr()
    args = _args(model_dir, cut, "--draws", "150", *kernel, "--checkpoint-seconds", "0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlm_ppl.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    step = wait_for_checkpoint(cut, proc, min_step=40)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and step < 160 and not (cut / "run.nc").exists()
    assert main(["sample", "--resume", str(cut), "--no-progress"]) == 0
    a, b = az.from_netcdf(cut / "run.nc"), az.from_netcdf(whole / "run.nc")
    moves = "n_moves" if kernel else "move"
    for group, name in (("posterior", "tokens"), ("sample_stats", moves), ("sample_stats", "is_accepted")):
        np.testing.assert_array_equal(getattr(a, group)[name].values, getattr(b, group)[name].values)
    # a float32 energy depends on the batch it was computed in to ~1e-6 (runner.state_consistent_lp)
    np.testing.assert_allclose(a.sample_stats["lp"].values, b.sample_stats["lp"].values, rtol=1e-6)


@pytest.mark.slow  # about 5 s (make test-fast keeps under 3 minutes)
def test_a_jump_run_of_surrogate_mh_moves_lengths_inside_its_inner_chain(model_dir, tmp_path, capsys):
    """--kernel surrogate-mh with --length-mode jump: gap-jump's moves on the surrogate, one exact
    evaluation per step; the run records lengths as gap-jump's does, and its copies."""
    out = tmp_path / "sur"
    extra = ("--kernel", "surrogate-mh", "--inner-steps", "4", "--p-unmask", "0.3", "--no-progress")
    assert main(_args(model_dir, out, *extra)) == 0
    capsys.readouterr()
    settings = recorded_settings(out)
    assert settings.kernel == "surrogate-mh" and settings.length_prior == {"1": 1 / 3, "2": 1 / 3, "3": 1 / 3}
    idata = read_run(str(out))
    lengths = idata.posterior["length"].values
    assert set(np.unique(lengths)) == {1, 2, 3}
    stats = idata.sample_stats
    assert (stats["masked_copies"].values > 0).any() and "inner_acceptance" in stats
    changed = np.diff(lengths, axis=1) != 0
    assert (stats["is_accepted"].values[:, 1:][changed]).all()  # a length changes only by an accepted move
    assert "gap length: prior, draws, frequency" in str(summary(idata))
    # the run's own lengths: a resume names no length mode (make lengths once passed its flags again)
    before = (out / "run.nc").read_bytes()
    assert main(["sample", "--resume", str(out), "--length-mode", "jump", *extra]) == 2
    assert "give --resume DIR without --length-mode" in one_line_error(capsys)
    assert (out / "run.nc").read_bytes() == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--kernel", "pseudo-gibbs"), "--length-mode jump samples with a kernel that moves lengths"),
        (("--kernel", "surrogate-mh", "--block-size", "2"), "which take no block_size"),
        (("--kernel", "surrogate-mh", "--anneal", "1:0.5"), "which take no annealing schedule"),
        (("--kernel", "surrogate-mh", "--p-unmask", "1.5"), "p_unmask must lie in [0, 1]"),
        (("--p-insert", "0.6"), "must sum to 1"),
        (("--p-delete", "0"), "p_delete must lie in (0, 1]"),
        (("--anneal", "1:0.5"), "anneal applies to kernel"),
    ],
)
def test_bad_jump_flags_are_one_line_errors_before_any_work(model_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert main(_args(model_dir, out, *extra)) == 2
    assert message in one_line_error(capsys) and not out.exists()


def test_gap_jump_needs_a_variable_gap_and_a_variable_gap_needs_a_length_mode(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    fixed = ["sample", "--model", model_dir, "--template", "A[MASK]C", "--out", str(out)]
    assert main([*fixed, "--kernel", "gap-jump"]) == 2
    assert "kernel gap-jump samples a template with a variable gap" in one_line_error(capsys)
    assert main(["sample", "--model", model_dir, "--template", GAP, "--out", str(out)]) == 2
    assert "give --length-mode jump" in one_line_error(capsys)
    assert main(_args(model_dir, out, "--length-mode", "strata", "--kernel", "gap-jump")) == 2
    assert "--length-mode strata runs each length as a fixed template" in one_line_error(capsys)
    assert not out.exists()


def test_a_constrained_jump_run_starts_feasible_and_records_the_rules(model_dir, tmp_path, capsys):
    """--forbid on a variable gap: every draw of every length breaks no rule (each start is repaired at
    its own length, the moves refuse states of density 0), and run.nc holds the rule per draw."""
    out = tmp_path / "forbid"
    assert main(_args(model_dir, out, "--forbid", "D", "--no-progress")) == 0
    capsys.readouterr()
    idata = read_run(str(out))
    assert recorded_settings(out).constraints["rules"][0]["pattern"] == "D"
    assert (idata.posterior["feasible"].values == 1).all() and (idata.posterior["rule_forbid_1"].values == 1).all()
    rows = [line.split("\t") for line in (out / "samples.txt").read_text().splitlines()[1:]]
    assert all("D" not in seq for *_, seq in rows) and {int(r[4]) for r in rows} >= {1, 2}


@pytest.mark.slow
def test_diagnose_compares_the_length_marginal_with_a_reference(model_dir, tmp_path, capsys):
    """diagnose --length-reference: the reference renormalised over the run's lengths as a column of
    the length table (by hand: weights 1, 2, 4 at lengths 1..3 and 1 at length 4 give 1/7, 2/7, 4/7 over
    1..3, which hold 7/8 of them) and a series of length.png; refused for a run of one length, before any output."""
    out = tmp_path / "jump"
    assert main(_args(model_dir, out, "--no-progress")) == 0
    reference = tmp_path / "repertoire.tsv"
    reference.write_text("# a repertoire's lengths\n4\t1\n1\t1\n2\t2\n3\t4\n")
    capsys.readouterr()
    plots = tmp_path / "plots"
    assert main(["diagnose", str(out), "--length-reference", str(reference), "--plots", str(plots)]) == 0
    printed = capsys.readouterr().out
    assert f"and the reference {reference} renormalised over these lengths" in printed
    assert "(which hold 87.5% of its weight)" in printed
    rows = printed.split("length   prior   draws  frequency   MCSE  reference  term/residue\n")[1].splitlines()[:3]
    assert [(int(r.split()[0]), float(r.split()[5])) for r in rows] == [(1, 0.1429), (2, 0.2857), (3, 0.5714)]
    idata = read_run(str(out))
    counts = [int((idata.posterior["length"].values == L).sum()) for L in (1, 2, 3)]
    assert [int(r.split()[2]) for r in rows] == counts
    assert (plots / "length.png").stat().st_size > 0
    fixed = tmp_path / "fixed"
    assert main(["sample", "--model", model_dir, "--template", "A[MASK]C", "--draws", "4", "--out", str(fixed)]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(fixed), "--length-reference", str(reference)]) == 2
    assert "is a run of one length; it applies to a run over a variable gap" in one_line_error(capsys)
    reference.write_text("9\t1\n")
    assert main(["diagnose", str(out), "--length-reference", str(reference)]) == 2
    assert "it gives no weight to the run's lengths 1..3" in one_line_error(capsys)


def test_the_time_estimate_of_a_jump_run_counts_its_chains_one_at_a_time(model_dir, monkeypatch):
    """gap-jump steps its chains one at a time: its estimate times one chain's evaluation and counts C
    of them per step (1 s each: 4 chains x 30,000 steps x its 1.5 evaluations per step is 50 h, past a
    day), where a batched kernel times its C chains once per step (8.3 h)."""
    from mlm_ppl.inference import estimate
    from mlm_ppl.jobs.door import check_size

    timed = []
    monkeypatch.setattr(estimate, "time_per_evaluation", lambda kernel, chains: timed.append(chains) or 1.0)
    for length_mode, kernel in (("jump", "gap-jump"), (None, "mh")):
        template = GAP if length_mode else "A[MASK][MASK]C"
        extra = {"length_prior": {"1": 1 / 3, "2": 1 / 3, "3": 1 / 3}} if length_mode else {}
        settings = campaign.RunSettings(
            model=model_dir, template=template, kernel=kernel, num_chains=4, num_samples=30000, warmup_steps=0, **extra
        )
        built = campaign.build(settings)[2]
        notes: list[str] = []
        if kernel == "gap-jump":
            expected = (
                r"4 chains x 30000 steps x 1\.5 evaluations per step: .*about 50\.0 h \(timed: one evaluation of "
                r"one chain; its chains step one at a time\): more than a day"
            )
            with pytest.raises(ValueError, match=expected):
                check_size(settings, built, False, notes.append)
        else:
            check_size(settings, built, False, notes.append)
            assert "about 8.3 h (timed: one evaluation of 4 chains)" in notes[0]
    assert timed == [1, 4]
    # surrogate-MH around the jump moves steps its inner chains one at a time too
    settings = campaign.RunSettings(
        model=model_dir, template=GAP, kernel="surrogate-mh", num_chains=4, num_samples=30000, warmup_steps=0,
        length_prior={"1": 1 / 3, "2": 1 / 3, "3": 1 / 3},
    )  # fmt: skip
    assert "timed: one evaluation of one chain" in str(
        estimate.estimate_run(campaign.build(settings)[2], 4, 30000, 30000)
    )
    assert timed[-1] == 1
