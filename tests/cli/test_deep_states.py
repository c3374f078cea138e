"""Deep states, memorized loops and runs read while they run (issue 45): the designed positions'
terms against a naive reference, the deep-state report against a hand count, the disagreement
line, designs' memorized flag and filters, Hamming distances named for their reference, and a run
read from its checkpoint equal to the finished run's outputs."""

import shutil

import numpy as np
import pytest
import torch
from test_cli_constraints import SPEC, _sample, _vocab

from mlm_ppl import load_mlm
from mlm_ppl.cli import main
from mlm_ppl.designs import pick_designs
from mlm_ppl.diagnostics import (
    deep_disagreement,
    deep_states,
    draw_energies,
    read_run,
    site_scores,
    summary,
    to_inference_data,
    with_reference,
)
from mlm_ppl.diagnostics import sites as sites_module
from mlm_ppl.inference.runner import Run
from mlm_ppl.jobs import load_run, read_current
from mlm_ppl.models.energy import site_log_probs
from mlm_ppl.testing import tiny_residue_bert


@pytest.fixture(scope="module")
def mlm():
    return tiny_residue_bert("ACDE", seed=1)


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory):
    """A constrained run, 3 chains x 30 draws (an expert, so its energy is not -lp)."""
    spec = tmp_path_factory.mktemp("spec") / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path_factory.mktemp("runs") / "deep"
    assert main(_sample(model_dir, out, "--constraints", str(spec), draws="30")) == 0
    return out


def test_site_terms_are_the_energy_terms_of_the_designed_positions(mlm):
    seqs = ["ACDEA", "EEDCA", "AAAAC"]
    ids = mlm.encode(seqs).input_ids
    positions = [1, 3, 4]
    terms = mlm.energy_terms(seqs).norm  # -log p(x_t | x_\t) at every scored position
    got = site_log_probs(mlm, ids, positions)
    assert torch.allclose(got, -terms[:, positions].double(), atol=1e-5)
    # a padded state of a variable gap: its pads are taken out before the model reads it, and give NaN
    pad = int(mlm.pad_id)
    padded = torch.cat([ids[:1, :4], torch.full((1, 2), pad), ids[:1, 4:]], 1)  # "ACD" + two pads + "EA"
    got = site_log_probs(mlm, padded, [2, 3, 4, 5, 6], pad_id=pad)[0]
    assert torch.isnan(got[2:4]).all()
    assert torch.allclose(got[[0, 1, 4]], -terms[0, [2, 3, 4]].double(), atol=1e-5)


def test_site_scores_read_each_distinct_state_once_and_flag_by_the_threshold(mlm, monkeypatch):
    ids = mlm.encode(["ACDEA", "EEDCA"]).input_ids
    tokens = torch.stack([ids[[0, 0, 1]], ids[[1, 1, 1]]])  # (2 chains, 3 draws, L)
    calls = []
    real = site_log_probs

    def counted(model, states, positions, **kw):
        calls.append(states.shape[0])
        return real(model, states, positions, **kw)

    monkeypatch.setattr("mlm_ppl.models.energy.site_log_probs", counted)
    scores = site_scores(tokens, [1, 2], mlm)
    assert calls == [2]  # two distinct states
    logp = real(mlm, ids, [1, 2])
    prob = logp.exp().mean(1).numpy()
    assert np.allclose(scores["site_prob"], prob[[[0, 0, 1], [1, 1, 1]]])
    assert np.allclose(scores["site_energy"], -logp.sum(1).numpy()[[[0, 0, 1], [1, 1, 1]]])
    monkeypatch.setattr(sites_module, "MEMORIZED_PROB", float(prob.min()) + 1e-9)
    flagged = site_scores(tokens, [1, 2], mlm)["memorized"]
    assert np.array_equal(flagged, (scores["site_prob"] >= float(prob.min()) + 1e-9).astype(float))
    assert 0 < flagged.sum() < flagged.size


def _hand_run(mlm):
    """4 chains x 8 draws over three loops; chain 2 alone visits the deepest one."""
    a, b, c = (mlm.encode([s]).input_ids[0] for s in ("AAAAA", "ACCCA", "AEEEA"))
    lp_of = {0: -9.0, 1: -5.0, 2: -1.0}  # a, b, c
    plan = [
        [0, 0, 1, 1, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 1, 1, 1],
        [0, 2, 2, 2, 1, 2, 2, 0],
        [0, 1, 0, 1, 0, 1, 0, 1],
    ]
    states = [a, b, c]
    tokens = torch.stack([torch.stack([states[k] for k in row]) for row in plan])
    lp = torch.tensor([[lp_of[k] for k in row] for row in plan], dtype=torch.float64)
    n_changed = torch.ones_like(lp)
    stats = dict(lp=lp, is_accepted=torch.ones_like(lp, dtype=torch.bool), n_changed=n_changed)
    attrs = dict(free_positions=[2, 3, 4], temperature=1.0, energy="norm")
    return Run(tokens, stats, attrs, tokens[:, 0].clone()), plan


def test_deep_states_are_counted_as_by_hand(mlm):
    run, plan = _hand_run(mlm)
    idata = to_inference_data(run, mlm=mlm)
    report = deep_states(idata, 2, mlm=mlm)
    first, second = report.states
    assert (first.loop, first.lp, first.energy) == ("EEE", -1.0, 1.0)
    assert first.chains == {2: 5} and first.first == (2, 1) and first.longest == 3 and first.visits == 5
    assert second.loop == "CCC" and second.chains == {0: 3, 1: 6, 2: 1, 3: 4} and second.first == (1, 0)
    assert second.longest == 3  # chain 1, draws 0-2
    assert report.library() == "EEE,CCC"  # a later run's library proposal, deepest first
    memorized = [s.loop for s in report.states if s.memorized]
    if len(memorized) < 2:
        assert report.library(exclude_memorized=True) == ",".join(s.loop for s in report.states if not s.memorized)
    # the designed positions' terms, read for the two states only
    logp = site_log_probs(mlm, mlm.encode(["AEEEA"]).input_ids, [2, 3, 4])[0]
    assert first.site_energy == pytest.approx(float(-logp.sum()), abs=1e-5)
    assert first.site_prob == pytest.approx(float(logp.exp().mean()), abs=1e-6)
    assert first.memorized == (first.site_prob >= sites_module.MEMORIZED_PROB)
    line = deep_disagreement(idata)
    assert line is not None and "AEEEA" not in line and "EEE (lp -1.00)" in line
    assert "chain 2 (5 draws, longest stay 3)" in line and "3 of 4 chains never came within 3 nats" in line
    assert line in str(summary(idata)) and line in str(report)
    # within the gap of the best: no line
    assert deep_disagreement(idata, gap=4.5) is None


def test_a_run_with_experts_ranks_deep_states_by_energy(finished):
    idata = read_run(str(finished))
    energy = draw_energies(idata)
    lp = idata.sample_stats["lp"].values
    few_e = idata.posterior["expert_few_e"].values
    assert np.allclose(energy, -(lp - (-1.5) * few_e))
    report = deep_states(idata, 3)
    assert [s.energy for s in report.states] == sorted(s.energy for s in report.states)
    assert report.states[0].energy == pytest.approx(float(energy.min()))
    # the run's own columns: site_prob and memorized in run.nc, beside each draw in samples.txt
    prob = idata.posterior["site_prob"].values
    assert report.states[0].site_prob in set(prob.reshape(-1).tolist())
    rows = (finished / "samples.txt").read_text().splitlines()
    assert rows[0].split("\t")[-3:] == ["site_prob", "memorized", "sequence"]
    assert float(rows[1].split("\t")[-3]) == pytest.approx(float(prob[0, 0]), abs=1e-4)


def test_hamming_distances_are_named_for_their_reference(mlm, model_dir, finished, capsys):
    run, _ = _hand_run(mlm)
    idata = to_inference_data(run, mlm=mlm)
    assert "hamming_reference" not in idata.posterior
    start = run.tokens[0, 0]
    tokens = run.tokens
    assert np.array_equal(idata.posterior["hamming_chain0_start"].values, (tokens != start).sum(-1).double().numpy())
    ref = with_reference(idata, "CCC")  # not chain 0's start (AAA)
    expected = (tokens[..., 2:5] != mlm.encode(["ACCCA"]).input_ids[0, 2:5]).sum(-1).double().numpy()
    assert np.array_equal(ref.posterior["hamming_reference"].values, expected)
    assert not np.array_equal(expected, idata.posterior["hamming_chain0_start"].values)
    text = str(summary(ref))
    assert "hamming_reference: to the reference CCC" in text and "hamming_chain0_start: to chain 0's start" in text
    with pytest.raises(ValueError, match="has 2 tokens; the run designs 3"):
        with_reference(idata, "CC")
    assert main(["diagnose", str(finished), "--reference", "CAA", "--plots", str(finished.parent / "p")]) == 0
    out = capsys.readouterr().out
    assert "hamming_reference" in out and "to the reference CAA" in out


def test_designs_flag_memorized_loops_and_filters_remove_them(finished, monkeypatch, tmp_path):
    idata = read_run(str(finished))
    prob = idata.posterior["site_prob"].values
    every = pick_designs(finished, top=50, min_hamming=0)
    assert all(d.site_prob == pytest.approx(float(prob[d.chain, d.draw])) for d in every.designs)
    assert all(d.memorized == (d.site_prob >= sites_module.MEMORIZED_PROB) for d in every.designs)
    # flag the best third as memorized (the threshold a run's designs read is the library's)
    cut = float(np.quantile([d.site_prob for d in every.designs], 0.66))
    monkeypatch.setattr("mlm_ppl.designs.MEMORIZED_PROB", cut)
    flagged = pick_designs(finished, top=50, min_hamming=0)
    memorized = {d.sequence for d in flagged.designs if d.memorized}
    assert memorized and len(memorized) < len(flagged.designs)
    kept = pick_designs(finished, top=50, min_hamming=0, exclude_memorized=True)
    assert {d.sequence for d in kept.designs} == {d.sequence for d in flagged.designs} - memorized
    assert kept.excluded[finished.name] == {"exclude_memorized": len(memorized)}
    # the novelty rule: loops near any in the file are left out, the rest kept in their order
    loops = {d.sequence: d.sequence[1] + d.sequence[3:5] for d in every.designs}  # A[MASK]C[MASK][MASK]
    best = every.designs[0].sequence
    file = tmp_path / "known.txt"
    file.write_text(f"# known loops\n{loops[best]}\n\nAAAAAAAAAAAA\n")
    novel = pick_designs(finished, top=50, min_hamming=0, novel_from=file, min_distance=2)
    near = {s for s, loop in loops.items() if sum(a != b for a, b in zip(loop, loops[best])) < 2}
    assert best in near and {d.sequence for d in novel.designs} == set(loops) - near
    assert [d.sequence for d in novel.designs] == [d.sequence for d in every.designs if d.sequence not in near]
    other = tmp_path / "other.txt"
    other.write_text("ACDEAC\nAC\n")
    with pytest.raises(ValueError, match="none of its 2 loops has the length of a designed loop"):
        pick_designs(finished, novel_from=other)


@pytest.mark.slow
def test_an_unfinished_run_is_read_from_its_checkpoint_as_its_end_would_write_it(finished, model_dir, tmp_path, capsys):
    cut = tmp_path / "cut"
    shutil.copytree(finished, cut)
    for name in ("run.nc", "samples.txt", "summary.txt"):
        (cut / name).unlink()
    current = read_current(cut)
    assert current.from_checkpoint and "the 30 draws of 30" in current.source and "not written yet" in current.source
    whole = read_run(str(finished))
    for name in ("tokens", "site_prob", "memorized", "feasible", "expert_few_e"):
        assert np.array_equal(current.idata.posterior[name].values, whole.posterior[name].values), name
    assert np.allclose(current.idata.sample_stats["lp"].values, whole.sample_stats["lp"].values)
    assert load_run(cut).source == current.source
    # designs read it too, without samples.txt
    assert [d.sequence for d in pick_designs(cut).designs] == [d.sequence for d in pick_designs(finished).designs]
    # diagnose says what it read and writes the run's current outputs
    assert main(["diagnose", str(cut), "--deep", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"read {cut / 'checkpoint.pt'}: the 30 draws") and "distinct states of lowest energy" in out
    assert "wrote the run's current outputs: run.nc, samples.txt, summary.txt" in out
    assert (cut / "samples.txt").read_text() == (finished / "samples.txt").read_text()
    assert not read_current(cut).from_checkpoint
    # a run.nc older than the checkpoint: the checkpoint is read
    vocab = _vocab(model_dir)
    assert vocab and main(["sample", "--resume", str(cut), "--num-samples", "34", "--no-progress"]) == 0
    older = tmp_path / "older"
    shutil.copytree(cut, older)
    shutil.copy(finished / "run.nc", older / "run.nc")
    again = read_current(older)
    assert again.from_checkpoint and "holds 30 draws, an older state of the run" in again.source
    assert again.idata.posterior["tokens"].shape[1] == 34


def test_diagnose_deep_lists_the_states_with_their_figures(finished, capsys):
    assert main(["diagnose", str(finished), "--deep", "4", "--plots", str(finished.parent / "plots")]) == 0
    out = capsys.readouterr().out
    report = deep_states(read_run(str(finished)), 4)
    assert str(report) in out
    assert "| 1 | " in out and "| 4 | " in out


def test_the_length_table_gives_the_mean_term_per_residue_at_each_length():
    import json

    import arviz as az

    from mlm_ppl.diagnostics.lengths import length_terms

    length = np.array([[1.0, 2.0, 2.0], [1.0, 1.0, 3.0]])
    site_energy = np.array([[3.0, 5.0, 7.0], [1.0, 2.0, 9.0]])
    idata = az.from_dict(
        posterior={"length": length, "site_energy": site_energy},
        attrs={"length_prior": json.dumps({"1": 0.25, "2": 0.25, "3": 0.25, "4": 0.25})},
    )
    terms = length_terms(idata)
    assert terms[1] == pytest.approx(2.0) and terms[2] == pytest.approx(3.0) and terms[3] == pytest.approx(3.0)
    assert np.isnan(terms[4])  # no draw of length 4
    assert length_terms(az.from_dict(posterior={"length": length}, attrs=idata.attrs)) is None


def test_the_command_line_adds_the_rule_and_its_draws_keep_it(model_dir, tmp_path, capsys):
    model = model_dir
    known = tmp_path / "known.txt"
    known.write_text("ACA\nDDE\n")
    out = tmp_path / "run"
    assert main(_sample(model, out, "--novel-from", str(known), "--min-distance", "2", draws="30")) == 0
    idata = read_run(str(out))
    assert (idata.posterior["rule_novel"].values == 1).all()
    rows = [line.split("\t")[-1] for line in (out / "samples.txt").read_text().splitlines()[1:]]
    loops = [seq[1] + seq[3:5] for seq in rows]  # A?C??
    assert len(loops) == 3 * 30 and all(
        sum(a != b for a, b in zip(loop, k)) >= 2 for loop in loops for k in ("ACA", "DDE")
    )
    assert len(set(loops)) > 3
    assert main(_sample(model, tmp_path / "x", "--min-distance", "2")) == 2
    assert "--min-distance applies to --novel-from" in capsys.readouterr().err


def test_a_run_with_more_states_than_the_budget_scores_only_what_is_shown(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("mlm_ppl.diagnostics.SITE_COPY_BUDGET", 5)
    out = tmp_path / "big"
    assert main(_sample(model_dir, out, draws="30")) == 0
    idata = read_run(str(out))
    assert "site_prob" not in idata.posterior and "more than 5 masked copies" in idata.attrs["site_scores"]
    assert (
        "memorized: not read: the run's distinct states need more than 5 masked copies"
        in (out / "summary.txt").read_text()
    )
    assert (out / "samples.txt").read_text().splitlines()[0] == "chain\tdraw\tlp\tsequence"
    mlm = load_mlm(model_dir)
    designs = pick_designs(out, top=5)
    tokens = idata.posterior["tokens"].values
    for d in designs.designs:  # the picks are read, each as site_scores reads it
        want = site_scores(tokens[d.chain, d.draw][None, None], [2, 4, 5], mlm)["site_prob"][0, 0]
        assert d.site_prob == pytest.approx(want)
    # passing over memorized picks: the best of the rest, as with every draw scored
    cut = float(np.median([d.site_prob for d in designs.designs]))
    monkeypatch.setattr("mlm_ppl.designs.MEMORIZED_PROB", cut)
    kept = pick_designs(out, top=5, exclude_memorized=True)
    assert all(d.site_prob < cut for d in kept.designs) and kept.excluded[out.name]["exclude_memorized"] >= 1
    report = deep_states(idata, 3, mlm=mlm)  # the deepest states read with the model
    assert all(s.site_prob is not None for s in report.states)
