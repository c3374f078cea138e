"""mlm-ppl designs DIR --top N --min-hamming d (issue 23): the best distinct designs of a run or a
batch, checked against a hand computation from run.nc: the ranking by lp, the counts of merged
sequences, the distance between designs, infeasible draws never picked, the energy column
against the model, and one-line errors before any work."""

import math
import os
import shutil
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from test_cli_constraints import SPEC, _one_line_error, _residues, _sample, _settings, _vocab

from mlm_ppl import campaign
from mlm_ppl.cli import main
from mlm_ppl.rundir import RunDirectory

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

HEADER = ["rank", "template", "chain", "draw", "count", "lp", "energy", "feasible"]


@pytest.fixture(scope="module")
def constrained(model_dir, tmp_path_factory):
    """A run under SPEC (rules first-a-or-c and no-dd, expert few-e with weight -1.5): 3 chains x 30 draws."""
    spec = tmp_path_factory.mktemp("spec") / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path_factory.mktemp("runs") / "cons"
    assert main(_sample(model_dir, out, "--constraints", str(spec), draws="30")) == 0
    return out


@pytest.fixture(scope="module")
def plain(model_dir, tmp_path_factory):
    """An unconstrained run at temperature 2: 3 chains x 30 draws."""
    out = tmp_path_factory.mktemp("runs") / "plain"
    assert main(_sample(model_dir, out, "--temperature", "2", draws="30")) == 0
    return out


def _record(directory):
    """tokens (C, D, L), lp (C, D) and feasible (C, D) bool as run.nc holds them."""
    data = az.from_netcdf(os.path.join(directory, "run.nc"))
    tokens = data.posterior["tokens"].values
    lp = data.sample_stats["lp"].values.astype(np.float64)
    post = data.posterior
    feasible = post["feasible"].values == 1.0 if "feasible" in post else np.ones(lp.shape, dtype=bool)
    return tokens, lp, feasible


def _by_hand(tokens, lp, feasible, top, d):
    """The picks, plainly: (tokens, chain, draw, count, distance to the nearest design above) each."""
    C, D, _ = tokens.shape
    best, counts = {}, Counter()
    for c in range(C):
        for k in range(D):
            if feasible[c, k] and lp[c, k] > -math.inf:
                key = tuple(int(t) for t in tokens[c, k])
                counts[key] += 1
                if key not in best or lp[c, k] > best[key][0]:
                    best[key] = (lp[c, k], c, k)
    taken = []
    for key, (_, c, k) in sorted(best.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[1][2])):
        distances = [sum(a != b for a, b in zip(key, other[0])) for other in taken]
        if all(x >= d for x in distances):
            taken.append((key, c, k, counts[key], min(distances) if distances else None))
        if len(taken) == top:
            break
    return taken


def _designs(capsys, *argv):
    assert main(["designs", *map(str, argv)]) == 0
    captured = capsys.readouterr()
    header, *lines = captured.out.splitlines()
    return header.split("\t"), [line.split("\t") for line in lines], captured.err


def _check_against_hand(rows, tokens, lp, feasible, top, d, vocab, template):
    expected = _by_hand(tokens, lp, feasible, top, d)
    assert len(rows) == len(expected)
    for rank, (row, (key, c, k, count, nearest)) in enumerate(zip(rows, expected), 1):
        assert row[:5] == [str(rank), template, str(c), str(k), str(count)]
        assert float(row[5]) == pytest.approx(lp[c, k], abs=1e-4)
        assert row[7] == "1"
        assert row[-2] == ("" if nearest is None else str(nearest))
        assert row[-1] == _residues(key, vocab)
    picked = [tokens[int(r[2]), int(r[3])] for r in rows]
    assert all((a != b).sum() >= d for i, a in enumerate(picked) for b in picked[i + 1 :])
    return expected


def test_a_constrained_run_ranks_merges_and_spaces_its_designs(model_dir, constrained, capsys):
    tokens, lp, feasible = _record(constrained)
    vocab = _vocab(model_dir)
    header, rows, err = _designs(capsys, constrained, "--top", 3, "--min-hamming", 2)
    assert header == [*HEADER, "expert_few_e", "site_prob", "memorized", "min_hamming", "sequence"]
    expected = _check_against_hand(rows, tokens, lp, feasible, 3, 2, vocab, "cons")
    assert len(rows) >= 2 and any(count > 1 for *_, count, _ in expected)  # sequences were merged
    # the expert's value is the designed E count; the energy is the model's, without the expert's term
    _, target, _ = campaign.build(_settings(constrained))
    picked = torch.as_tensor(np.stack([tokens[int(r[2]), int(r[3])] for r in rows]))
    energy = target.base.evaluate(picked).energy.double()
    assert [float(r[6]) for r in rows] == pytest.approx(energy.tolist(), abs=1e-3)
    for r in rows:
        s = r[-1]
        assert float(r[8]) == (s[1] + s[3:]).count("E") and s[0] == "A" and s[1] in "AC" and "DD" not in s
    if len(rows) < 3:
        assert err == f"mlm-ppl designs: note: only {len(rows)} of 3 designs at --min-hamming 2 in 'cons'\n"
    else:
        assert err == ""


def test_distance_zero_lists_every_distinct_sequence_with_its_count(model_dir, constrained, capsys):
    tokens, lp, feasible = _record(constrained)
    _, rows, _ = _designs(capsys, constrained, "--top", 1000, "--min-hamming", 0)
    _check_against_hand(rows, tokens, lp, feasible, 1000, 0, _vocab(model_dir), "cons")
    C, D, _ = tokens.shape
    assert sum(int(r[4]) for r in rows) == C * D  # every draw counted once
    assert len({r[-1] for r in rows}) == len(rows) == len({tuple(t) for t in tokens.reshape(C * D, -1).tolist()})
    assert [float(r[5]) for r in rows] == sorted((float(r[5]) for r in rows), reverse=True)


def test_an_unconstrained_run_at_temperature_2(model_dir, plain, capsys, tmp_path):
    tokens, lp, feasible = _record(plain)
    header, rows, _ = _designs(capsys, plain, "--top", 2, "--min-hamming", 1)
    assert header == [*HEADER, "site_prob", "memorized", "min_hamming", "sequence"]
    _check_against_hand(rows, tokens, lp, feasible, 2, 1, _vocab(model_dir), "plain")
    assert len(rows) == 2
    _, target, _ = campaign.build(_settings(plain))
    picked = torch.as_tensor(np.stack([tokens[int(r[2]), int(r[3])] for r in rows]))
    energy = target.evaluate(picked).energy.double()  # E = -T lp, with T = 2
    assert [float(r[6]) for r in rows] == pytest.approx(energy.tolist(), abs=1e-3)
    assert [float(r[6]) for r in rows] == pytest.approx([-2 * float(r[5]) for r in rows], abs=1e-3)
    # --out writes the same table, atomically; the directory is only read, even while another process holds it
    with RunDirectory.open(plain, "sample"):
        assert main(["designs", str(plain), "--top", "2", "--out", str(tmp_path / "top.tsv")]) == 0
    assert capsys.readouterr().out == f"wrote 2 designs to {tmp_path / 'top.tsv'}\n"
    table = (tmp_path / "top.tsv").read_text().splitlines()
    assert [line.split("\t") for line in table] == [header, *rows]


def test_designs_builds_no_expert_a_module_function_whose_module_is_gone(model_dir, tmp_path, capsys, monkeypatch):
    """designs read the run's settings with RunSettings.from_dict, which built the spec: it imported
    every module:function expert (and would load every classifier). The expert's values are in
    run.nc and its weight in the record: designs works after its module is gone."""
    import sys

    module = tmp_path / "designs_gone_expert.py"
    module.write_text("def e_count(sequences):\n    return [float(s.count('E')) for s in sequences]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[experts]]\nname = "e-count"\nkind = "designs_gone_expert:e_count"\nweight = -0.5\n')
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--constraints", str(spec), "--trust-code", draws="20")) == 0
    capsys.readouterr()
    module.unlink()
    monkeypatch.delitem(sys.modules, "designs_gone_expert")
    with pytest.raises(ImportError):
        __import__("designs_gone_expert")
    tokens, lp, feasible = _record(out)
    header, rows, _ = _designs(capsys, out, "--top", 3, "--min-hamming", 1)
    assert header == [*HEADER, "expert_e_count", "site_prob", "memorized", "min_hamming", "sequence"]
    _check_against_hand(rows, tokens, lp, feasible, 3, 1, _vocab(model_dir), "run")
    for r in rows:  # f: the whole sequence's E count; E = -T (lp - w f) with T = 1 and w = -0.5
        assert float(r[8]) == r[-1].count("E")
        assert float(r[6]) == pytest.approx(-(float(r[5]) + 0.5 * float(r[8])), abs=1e-3)


def _edit_run(source, target, edit):
    """A copy of the run ``source`` whose run.nc has its ``lp`` and ``feasible`` changed by ``edit``:
    what a run whose chains passed through infeasible states (a start given by hand) records."""
    shutil.copytree(source, target)
    data = az.from_netcdf(os.path.join(source, "run.nc"))
    lp = data.sample_stats["lp"].values.copy()
    feasible = data.posterior["feasible"].values.copy()
    edit(data.posterior["tokens"].values, lp, feasible)
    data.sample_stats["lp"].values = lp
    data.posterior["feasible"].values = feasible
    os.remove(target / "run.nc")
    data.to_netcdf(str(target / "run.nc"))
    return target


def test_infeasible_draws_are_never_picked(model_dir, constrained, capsys, tmp_path):
    tokens, lp, feasible = _record(constrained)
    first, second = _by_hand(tokens, lp, feasible, 2, 1)
    same = {name: (tokens == np.array(pick[0])).all(-1) for name, pick in (("first", first), ("second", second))}

    def edit(_, lp, feasible):  # every draw of the best sequence infeasible, every draw of the next of density 0
        feasible[same["first"]] = 0.0
        lp[same["second"]] = -np.inf

    edited = _edit_run(constrained, tmp_path / "cons", edit)
    tokens, lp, feasible = _record(edited)
    _, rows, _ = _designs(capsys, edited, "--top", 5, "--min-hamming", 1)
    _check_against_hand(rows, tokens, lp, feasible, 5, 1, _vocab(model_dir), "cons")
    vocab = _vocab(model_dir)
    assert {_residues(first[0], vocab), _residues(second[0], vocab)}.isdisjoint(r[-1] for r in rows)

    def none(_, lp, feasible):
        feasible[...] = 0.0

    nothing = _edit_run(constrained, tmp_path / "none", none)
    assert main(["designs", str(nothing)]) == 2
    assert _one_line_error(capsys) == f"mlm-ppl designs: error: no feasible draw in {nothing}; nothing to pick"


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_a_batch_picks_per_template(model_dir, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    templates = tmp_path / "templates.tsv"
    templates.write_text("one\tA[MASK]C[MASK][MASK]\ntwo\t[MASK]DC[MASK][MASK]\n")
    out = tmp_path / "batch"
    argv = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "20",
            "--seed", "5", "--out", str(out), "--no-progress", "--constraints", str(spec)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    header, rows, _ = _designs(capsys, out, "--top", 3, "--min-hamming", 2)
    assert header == [*HEADER, "expert_few_e", "site_prob", "memorized", "min_hamming", "sequence"]
    vocab = _vocab(model_dir)
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)  # template by template, in the batch's order
    for name in ("one", "two"):
        mine = [r for r in rows if r[1] == name]
        assert mine, name
        _check_against_hand(mine, *_record(out / name), 3, 2, vocab, name)
    # a template's designs are not compared with another's: "two" is picked as if alone
    assert main(["designs", str(out / "two"), "--top", "3", "--min-hamming", "2"]) == 0
    alone = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert alone == [r for r in rows if r[1] == "two"]


def test_errors_are_one_line_before_any_work(model_dir, constrained, tmp_path, capsys):
    cases = [
        ((constrained, "--top", 0), "--top must be >= 1, got 0"),
        ((constrained, "--min-hamming", -1), "--min-hamming must be >= 0, got -1"),
        ((tmp_path / "absent",), "is not a directory"),
        ((tmp_path,), "is not an mlm-ppl run or batch directory (no .mlm-ppl marker)"),
        ((constrained, "--out", tmp_path), "is a directory; give a file name"),
        ((constrained, "--out", constrained / "top.tsv"), f"lies in the mlm-ppl run directory {constrained}"),
    ]
    for argv, message in cases:
        assert main(["designs", *map(str, argv)]) == 2
        line = _one_line_error(capsys)
        assert line.startswith("mlm-ppl designs: error: ") and message in line, line
    assert not (constrained / "top.tsv").exists()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(constrained, unfinished)
    os.remove(unfinished / "run.nc")  # a run read from its checkpoint (tests/cli/test_deep_states.py); with neither:
    os.remove(unfinished / "checkpoint.pt")
    assert main(["designs", str(unfinished)]) == 2
    line = _one_line_error(capsys)
    assert "has no draws yet (no run.nc, no checkpoint)" in line and f"--resume {unfinished}" in line
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    (pairs / ".mlm-ppl").write_text('{"format": "mlm-ppl-dir-1", "kind": "pairs", "run_id": "0", "files": []}')
    assert main(["designs", str(pairs)]) == 2
    assert "holds an mlm-ppl pairs run, not a sampling run or batch" in _one_line_error(capsys)


def test_out_is_checked_before_the_runs_are_read(constrained, tmp_path, capsys):
    """--out in a missing directory failed only after the work, when the table was written; --out
    in a folder inside a run directory (not its immediate parent) was written into the run."""
    missing = tmp_path / "missing" / "top.tsv"
    for directory in (constrained, tmp_path / "absent"):  # the --out error comes first, before DIR is read
        assert main(["designs", str(directory), "--out", str(missing)]) == 2
        assert _one_line_error(capsys) == (
            f"mlm-ppl designs: error: --out {missing}: its directory {tmp_path / 'missing'} does not exist; "
            "make it first"
        )
    run = tmp_path / "run"
    shutil.copytree(constrained, run)
    deep = run / "deep" / "er"
    deep.mkdir(parents=True)
    assert main(["designs", str(tmp_path / "absent"), "--out", str(deep / "top.tsv")]) == 2
    line = _one_line_error(capsys)
    assert f"--out {deep / 'top.tsv'} lies in the mlm-ppl run directory {run}, whose files are the run's" in line
    assert not (deep / "top.tsv").exists() and not missing.parent.exists()
