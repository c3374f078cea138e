"""Pair-joint metrics against hand-computed values, the evaluation loop, and `mlm-ppl pairs`."""

import csv
import json
import math

import pytest
import torch

from mlm_ppl.cli import main
from mlm_ppl.evaluation import (
    compatibility_score,
    draw_pairs,
    evaluate_pairs,
    js_divergence,
    kl_divergence,
    mlm_pair_metrics,
    pair_metrics,
    summarize_pairs,
)
from mlm_ppl.evaluation.pairs import PAIR_METRICS, REFERENCE_AG, format_summary, parse_methods
from mlm_ppl.models.pairs import pair_conditionals, pair_joint, summed_kl
from mlm_ppl.testing import AMINO_ACIDS, goyal_counterexample, save_tiny, table_pair_conditionals, tiny_residue_bert
from reference import naive_both_masked, naive_pair_logits

TOL = 1e-6  # the Goyal table is float32


def test_kl_and_jsd_hand_values():
    p = torch.tensor([0.5, 0.5], dtype=torch.float64).log()
    q = torch.tensor([0.9, 0.1], dtype=torch.float64).log()
    assert float(kl_divergence(p, q)) == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1))
    m = [0.7, 0.3]
    jsd = 0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1])) + 0.5 * (
        0.9 * math.log(0.9 / m[0]) + 0.1 * math.log(0.1 / m[1])
    )
    assert float(js_divergence(p, q)) == pytest.approx(jsd)
    assert float(js_divergence(q, p)) == pytest.approx(jsd)
    # 0 log 0 = 0; mass where q has none is infinite
    zero = torch.tensor([1.0, 0.0], dtype=torch.float64).log()
    assert float(kl_divergence(zero, q)) == pytest.approx(math.log(1 / 0.9))
    assert kl_divergence(q, zero) == float("inf")


def test_pair_metrics_hand_values_on_goyal_ag():
    cond = table_pair_conditionals(goyal_counterexample(), observed=(0, 0))
    joint = pair_joint(cond, "ag")  # .3725 .1275 / .1275 .3725: both conditionals [.745, .255]
    got = pair_metrics(joint, cond)
    assert got["pair_nll"] == pytest.approx(-math.log(0.3725) / 2, abs=TOL)
    assert got["unary_nll"] == pytest.approx(-math.log(0.745), abs=TOL)

    def kl(p, q):
        return sum(x * math.log(x / y) for x, y in zip(p, q))

    def jsd(p, q):
        m = [(x + y) / 2 for x, y in zip(p, q)]
        return (kl(p, m) + kl(q, m)) / 2

    q0, q1 = [0.745, 0.255], [0.255, 0.745]  # joint's conditionals given value 0 and 1
    a0, a1, b = [0.99, 0.01], [0.01, 0.99], [0.5, 0.5]  # MLM: P(x1|x2=0), P(x1|x2=1), P(x2|x1)
    assert got["kl_fwd_gold"] == pytest.approx((kl(a0, q0) + kl(b, q0)) / 2, abs=TOL)
    assert got["kl_rev_gold"] == pytest.approx((kl(q0, a0) + kl(q0, b)) / 2, abs=TOL)
    assert got["jsd_gold"] == pytest.approx((jsd(a0, q0) + jsd(b, q0)) / 2, abs=TOL)
    assert got["kl_fwd_all"] == pytest.approx((kl(a0, q0) + kl(a1, q1) + kl(b, q0) + kl(b, q1)) / 4, abs=TOL)
    assert got["kl_rev_all"] == pytest.approx((kl(q0, a0) + kl(q1, a1) + kl(q0, b) + kl(q1, b)) / 4, abs=TOL)
    assert got["jsd_all"] == pytest.approx((jsd(a0, q0) + jsd(a1, q1) + jsd(b, q0) + jsd(b, q1)) / 4, abs=TOL)
    base = mlm_pair_metrics(cond)
    assert base["unary_nll"] == pytest.approx(-(math.log(0.99) + math.log(0.5)) / 2, abs=TOL)
    assert base["compatibility"] == pytest.approx(float(compatibility_score(cond.log_cond_a, cond.log_cond_b)))


def test_metrics_need_the_observed_tokens_in_the_support():
    cond = table_pair_conditionals(goyal_counterexample())
    outside = cond.__class__(**{**cond.__dict__, "observed": (5, 0)})
    with pytest.raises(ValueError, match="not both in the support"):
        mlm_pair_metrics(outside)


def test_summary_hand_values():
    rows = [{"method": "ag", "pair_nll": x, "unary_nll": x / 2, "kl_fwd_gold": x} for x in (1.0, 2.0, 3.0)]
    rows.append({"method": "mlm", "unary_nll": "0.5", "compatibility": "", "pair_nll": ""})
    got = {(r["method"], r["metric"]): r for r in summarize_pairs(rows)}
    se = 1 / math.sqrt(3)  # sd 1 over sqrt(3)
    assert got["ag", "pair_ppl"]["mean"] == pytest.approx(math.exp(2.0))
    assert got["ag", "pair_ppl"]["se"] == pytest.approx(math.exp(2.0) * se)
    assert got["ag", "unary_ppl"]["mean"] == pytest.approx(math.exp(1.0))
    assert got["ag", "kl_fwd_gold"]["mean"] == pytest.approx(2.0) and got["ag", "kl_fwd_gold"]["se"] == pytest.approx(
        se
    )
    assert got["mlm", "unary_ppl"]["n"] == 1 and math.isnan(got["mlm", "unary_ppl"]["se"])
    assert ("mlm", "compatibility") not in got and ("mlm", "pair_ppl") not in got
    text = format_summary(summarize_pairs(rows))
    assert text.splitlines()[0].split()[:3] == ["method", "pair_ppl", "unary_ppl"]
    assert "7.389 ± 4.3" in text


def test_paired_differences_hand_values():
    from mlm_ppl.evaluation.pairs import format_differences, paired_differences

    rows = []
    for pair, (ag, mrf, mlm) in enumerate([(1.0, 3.0, 2.0), (2.0, 2.5, 1.0), (1.5, 1.0, 1.5)]):
        rows += [
            {"pair": pair, "method": "mlm", "unary_nll": mlm, "kl_fwd_all": ""},
            {"pair": pair, "method": "mrf", "unary_nll": mrf, "kl_fwd_all": mrf / 10},
            {"pair": pair, "method": "ag", "unary_nll": ag, "kl_fwd_all": ag / 10},
        ]
    got = {(d["method"], d["metric"]): d for d in paired_differences(rows, "ag", metrics=("unary_nll", "kl_fwd_all"))}
    d = got["mrf", "unary_nll"]  # differences 2, 0.5, -0.5
    assert d["mean"] == pytest.approx(2 / 3) and d["n"] == 3
    assert d["se"] == pytest.approx(math.sqrt(((4 / 3) ** 2 + (1 / 6) ** 2 + (7 / 6) ** 2) / 2 / 3))
    assert d["reference_lower"] == pytest.approx(2 / 3)
    assert got["mlm", "unary_nll"]["mean"] == pytest.approx(0.0)  # 1, -1, 0
    assert got["mlm", "unary_nll"]["reference_lower"] == pytest.approx(1 / 3)
    assert ("mlm", "kl_fwd_all") not in got
    assert got["mrf", "kl_fwd_all"]["mean"] == pytest.approx(2 / 30)
    assert "mrf        unary_nll    +0.6667" in format_differences(list(got.values()))


def test_parse_methods():
    assert parse_methods("naive, hcb:one,ag") == [
        ("naive", "naive", {}),
        ("hcb:one", "hcb", {"pivot": "one"}),
        ("ag", "ag", {}),
    ]
    for bad, match in (
        ("mrf,gibbs", "unknown method"),
        ("ag:one", "only hcb"),
        ("hcb:x", "only hcb"),
        ("ag,ag", "twice"),
        ("", "unknown method"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_methods(bad)


@pytest.fixture(scope="module")
def antibody(tiny_models):
    return tiny_models["antibody-bert"][0]


def test_draw_pairs(antibody):
    seqs = ["ACDEFGHIK", "MNPQRSTVWY", "KLLV"]
    for kind in ("contiguous", "random"):
        pairs = draw_pairs(antibody, seqs, kind, 30, seed=3)
        assert pairs == draw_pairs(antibody, seqs, kind, 30, seed=3)
        assert pairs != draw_pairs(antibody, seqs, kind, 30, seed=4)
        assert [s for s, _, _ in pairs] == [k % 3 for k in range(30)]
        for s, a, b in pairs:
            assert 1 <= a < b <= len(seqs[s])  # residue positions: [CLS] is 0
            if kind == "contiguous":
                assert b == a + 1
    # the reference convention: the same positions, random pairs in the order they were drawn
    ours, theirs = (draw_pairs(antibody, seqs, "random", 30, 3, convention=c) for c in ("mlm-ppl", "reference"))
    assert [(s, min(a, b), max(a, b)) for s, a, b in theirs] == ours
    assert any(a > b for _, a, b in theirs)
    assert draw_pairs(antibody, seqs, "contiguous", 30, 3, convention="reference") == draw_pairs(
        antibody, seqs, "contiguous", 30, 3
    )
    with pytest.raises(ValueError, match="unknown convention"):
        draw_pairs(antibody, seqs, "random", 2, 0, convention="paper")
    with pytest.raises(ValueError, match="fewer than two"):
        draw_pairs(antibody, ["A"], "random", 2, 0)
    with pytest.raises(ValueError, match="pairs must be"):
        draw_pairs(antibody, seqs, "diagonal", 2, 0)
    with pytest.raises(ValueError, match="n must be"):
        draw_pairs(antibody, seqs, "random", 0, 0)


def test_evaluate_pairs_rows(antibody):
    seqs = ["ACDEFGHIK", "MNPQRSTVWY"]
    pairs = draw_pairs(antibody, seqs, "random", 3, 0)
    out = list(evaluate_pairs(antibody, seqs, pairs, "mrf,hcb:one,ag", support=6, skip={1}))
    assert [rows[0]["pair"] for rows in out] == [0, 2]
    rows = out[0]
    assert [r["method"] for r in rows] == ["mlm", "mrf", "hcb:one", "ag"]
    assert rows[0]["copies"] == 2 * 6 + 1 and rows[0]["seconds"] > 0
    assert rows[-1]["converged"] is True and rows[-1]["iterations"] > 0
    for r in rows[1:]:
        assert all(math.isfinite(r[m]) and r[m] >= 0 for m in PAIR_METRICS[2:-1] if m in r)


# ---------------------------------------------------------------------- the reference convention
def _reference_rows(mlm, sequence, a, b):
    """The metrics of ltorroba/lms-from-mlms's evaluate_kl_compatibility.py in whole-vocabulary
    mode, written out here from its formulas and the model's own forward passes: A is the first
    drawn position; conditionals are normalised over every token id; its 'mrf' adds raw logits,
    'mrf-local' log-conditionals, 'hcb-both' pivots on the both-masked argmax at A over the
    whole vocabulary, 'iter' runs 40 plain Arnold-Gokhale steps in probability space."""
    ids = mlm.encode(sequence).input_ids[0]
    V = mlm.vocab_size
    la, lb = naive_pair_logits(mlm, ids, a, b, range(V), range(V))  # (V, V): [x_a, x_b]
    ma, mb = naive_both_masked(mlm, ids, a, b)
    cond_a, cond_b = la.log_softmax(0), lb.log_softmax(1)
    pivot = int(ma.argmax())
    joint = torch.full((V, V), 1 / V**2, dtype=torch.float64)
    for _ in range(40):
        joint = (cond_a.exp() + cond_b.exp()) / (1 / joint.sum(1, keepdim=True) + 1 / joint.sum(0, keepdim=True))
        joint = joint / joint.sum()
    joints = {
        "naive": ma.log_softmax(0)[:, None] + mb.log_softmax(0)[None, :],
        "mrf_logit": la + lb,  # the reference's "mrf"
        "mrf": cond_a + cond_b,  # the reference's "mrf-local"
        "hcb": cond_a - cond_a[pivot][None, :] + cond_b[pivot][None, :],  # "hcb-both"
        "ag": joint.log(),  # "iter"
    }
    gold_a, gold_b = int(ids[a]), int(ids[b])

    def kl(p, q, dim):
        return (p.exp() * (p - q)).sum(dim)

    out = {}
    for name, logq in joints.items():
        logq = logq - logq.reshape(-1).logsumexp(0)
        qa, qb = logq.log_softmax(0), logq.log_softmax(1)
        fa, fb = kl(cond_a, qa, 0), kl(cond_b, qb, 1)  # one per value of the other position
        out[name] = {
            "pair_nll": float(-logq[gold_a, gold_b] / 2),
            "unary_nll": float(-(qa[gold_a, gold_b] + qb[gold_a, gold_b]) / 2),
            "kl_fwd_gold": float((fa[gold_b] + fb[gold_a]) / 2),
            "kl_fwd_all": float(torch.cat([fa, fb]).mean()),
        }
    log_c = cond_a - cond_b
    score = log_c + log_c.reshape(-1).logsumexp(0) - log_c.logsumexp(1, keepdim=True) - log_c.logsumexp(0, keepdim=True)
    out["mlm"] = {"compatibility": float((score**2).mean())}
    return out


def test_one_pair_both_ways_shows_what_the_reference_convention_changes():
    mlm = tiny_residue_bert(AMINO_ACIDS, seed=2, dtype=torch.float64)
    seqs = ["EVQLVESGGGLVQPGG"]
    methods = "naive,mrf,mrf_logit,hcb,ag"
    drawn = draw_pairs(mlm, seqs, "random", 4, 0, convention="reference")
    k = next(k for k, (_, a, b) in enumerate(drawn) if a > b)  # a pair drawn right to left
    (_, a, b), (_, lo, hi) = drawn[k], draw_pairs(mlm, seqs, "random", 4, 0)[k]
    assert (lo, hi) == (b, a)
    ours = {r["method"]: r for r in next(evaluate_pairs(mlm, seqs, [(0, lo, hi)], methods))}
    theirs = {r["method"]: r for r in next(evaluate_pairs(mlm, seqs, [(0, a, b)], methods, convention="reference"))}

    # the reference convention is the reference code's computation
    expect = _reference_rows(mlm, seqs[0], a, b)
    for method, values in expect.items():
        for metric, value in values.items():
            assert theirs[method][metric] == pytest.approx(value, rel=1e-9, abs=1e-12), (method, metric)

    # 1. the support: every token id (25 with the 5 special ones) against the 20 ordinary ones
    assert theirs["mlm"]["copies"] == 2 * 25 + 1 and ours["mlm"]["copies"] == 2 * 20 + 1
    for metric in ("kl_fwd_all", "pair_nll"):
        assert theirs["naive"][metric] != pytest.approx(ours["naive"][metric], rel=1e-3), metric
    assert theirs["mlm"]["compatibility"] != pytest.approx(ours["mlm"]["compatibility"], rel=1e-2)
    # 2. AG: 40 plain steps, not converged, against the converged fixed point
    assert theirs["ag"]["iterations"] == 40 and theirs["ag"]["converged"] is False
    assert ours["ag"]["converged"] is True
    whole = pair_conditionals(mlm, seqs[0], a, b, support="all")
    j40 = summed_kl(whole.joint("ag", **REFERENCE_AG).log_joint, whole.log_cond_a, whole.log_cond_b)
    j_conv = summed_kl(whole.joint("ag").log_joint, whole.log_cond_a, whole.log_cond_b)
    assert float(j40 - j_conv) > 1e-3
    # 3. the order: the reference's HCB pivots on the first drawn position, the right one here
    swapped = pair_conditionals(mlm, seqs[0], lo, hi, support="all")
    right = swapped.joint("hcb", pivot_side="b").log_joint.T
    assert torch.allclose(whole.joint("hcb").log_joint, right, atol=1e-12)
    assert not torch.allclose(swapped.joint("hcb").log_joint.T, right, atol=1e-3)

    with pytest.raises(ValueError, match="whole vocabulary"):
        next(evaluate_pairs(mlm, seqs, [(0, a, b)], methods, support=6, convention="reference"))


# ---------------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, antibody):
    return str(save_tiny(antibody, tmp_path_factory.mktemp("model")))


def _read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_pairs_command_writes_outputs_and_resumes(model_dir, tmp_path, capsys):
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEFGHIKLMN\nMNPQRSTVWYAC\n")
    out = tmp_path / "run"
    argv = [
        "pairs",
        "--model",
        model_dir,
        "--data",
        str(data),
        "--pairs",
        "random",
        "--n",
        "5",
        "--methods",
        "naive,mrf,ag",
        "--support",
        "8",
        "--seed",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pair_ppl" in printed and "ag: converged on 5/5" in printed
    for name in ("config.json", "pairs.csv", "summary.csv", "summary.txt", "pairs.png"):
        assert (out / name).stat().st_size > 0
    rows = _read(out / "pairs.csv")
    assert len(rows) == 5 * 4 and {r["method"] for r in rows} == {"mlm", "naive", "mrf", "ag"}
    summary = {(r["method"], r["metric"]): float(r["mean"]) for r in _read(out / "summary.csv")}
    nll = [float(r["pair_nll"]) for r in rows if r["method"] == "ag"]
    assert summary["ag", "pair_ppl"] == pytest.approx(math.exp(sum(nll) / len(nll)))
    assert json.loads((out / "config.json").read_text())["methods"] == ["naive", "mrf", "ag"]

    # an interrupted run: two complete pairs and half a row of the third
    lines = (out / "pairs.csv").read_text().splitlines(keepends=True)
    (out / "pairs.csv").write_text("".join(lines[: 1 + 2 * 4]) + lines[9][:20])
    assert main(argv) == 0
    capsys.readouterr()
    again = _read(out / "pairs.csv")
    key = ("pair", "method", "pair_nll", "unary_nll", "kl_fwd_all", "compatibility")
    assert [tuple(r[k] for k in key) for r in again] == [tuple(r[k] for k in key) for r in rows]

    # cut inside the last row of a pair: the whole pair is recomputed
    lines = (out / "pairs.csv").read_text().splitlines(keepends=True)
    (out / "pairs.csv").write_text("".join(lines[: 1 + 3 * 4 + 3]) + lines[16][:30])
    assert main(argv) == 0
    capsys.readouterr()
    again = _read(out / "pairs.csv")
    assert [tuple(r[k] for k in key) for r in again] == [tuple(r[k] for k in key) for r in rows]

    # other settings in the same directory: refused, nothing changed
    assert main([*argv[:-3], "--seed", "2", "--out", str(out), "--no-progress"]) == 2
    assert "other settings (seed)" in capsys.readouterr().err
    assert _read(out / "pairs.csv") == again
    assert main([*argv[:-3], "--seed", "2", "--out", str(out), "--no-progress", "--overwrite"]) == 0


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_pairs_command_reference_convention(model_dir, tmp_path, capsys):
    data = tmp_path / "seqs.txt"
    data.write_text("ACDEFGHIKLMN\n")
    argv = ["pairs", "--model", model_dir, "--data", str(data), "--pairs", "random", "--n", "2", "--no-progress"]
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    assert main([*argv, "--methods", "hcb,ag", "--convention", "reference", "--out", str(ref)]) == 0
    assert "reference convention: every token id" in capsys.readouterr().out
    assert json.loads((ref / "config.json").read_text())["convention"] == "reference"
    rows = _read(ref / "pairs.csv")
    assert {int(r["copies"]) for r in rows if r["method"] == "mlm"} == {2 * 25 + 1}
    assert {r["iterations"] for r in rows if r["method"] == "ag"} == {"40"}
    assert main([*argv, "--methods", "ag", "--out", str(ours)]) == 0
    assert main([*argv, "--methods", "ag", "--out", str(ours), "--convention", "reference"]) == 2
    assert "other settings (convention)" in capsys.readouterr().err
    # a run whose settings lack the convention (0.1.0 wrote none) is no longer read as mlm-ppl's
    config = json.loads((ours / "config.json").read_text())
    del config["convention"]
    (ours / "config.json").write_text(json.dumps(config))
    assert main([*argv, "--methods", "ag", "--out", str(ours)]) == 2
    assert "other settings (convention)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--convention", "reference", "--support", "3"], "--support applies to --convention mlm-ppl"),
        (["--methods", "mrf,gibbs"], "unknown method"),
        (["--support", "0"], "--support must be"),
        (["--support", "99"], "exceeds"),
        (["--data", "germlines:human"], "germlines:SPECIES:CHAIN"),
        (["--data", "missing.txt"], "does not exist"),
        (["--n", "0"], "n must be"),
    ],
)
def test_pairs_command_bad_input(model_dir, tmp_path, capsys, extra, match):
    out = tmp_path / "run"
    assert main(["pairs", "--model", model_dir, "--out", str(out), *extra]) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()
