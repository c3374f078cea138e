"""The real model: AntiBERTy on real human germline genes (slow, still run in CI)."""

import pytest
import torch

from mlm_ppl.data import shuffled
from reference import naive_terms

pytestmark = pytest.mark.slow


def test_antiberty_energies_match_naive_reference(antiberty, human_heavy_v):
    seqs = [human_heavy_v["IGHV3-23"], human_heavy_v["IGHV1-69"][:60]]
    terms = antiberty.energy_terms(seqs)
    for b in range(len(seqs)):
        ids = terms.encoding.input_ids[b, : int(terms.encoding.lengths[b])]
        raw, norm = naive_terms(antiberty, ids)
        pos = sorted(norm)
        assert len(pos) == len(seqs[b])
        assert torch.allclose(
            terms.norm[b, pos].double(), torch.tensor([norm[t] for t in pos], dtype=torch.float64), atol=1e-5
        )
        assert torch.allclose(
            terms.raw[b, pos].double(), torch.tensor([raw[t] for t in pos], dtype=torch.float64), atol=1e-5
        )


def test_germlines_score_lower_than_their_shuffles(antiberty, human_heavy_v):
    """Every sixth of the 55 human heavy V genes scores lower than its shuffle, all 10 of them (a
    shuffle's residues are the gene's own, so only their order tells them apart; deterministic: each
    shuffle is seeded by its gene's index). 10 genes keep the suite's time (the 55 took 197 s in
    CI, every third 84 s); `mlm-ppl germlines --n 0` scores all 55."""
    names = list(human_heavy_v)
    assert len(names) == 55
    picked = range(0, 55, 6)
    real = [human_heavy_v[names[k]] for k in picked]
    controls = [shuffled(human_heavy_v[names[k]], k) for k in picked]
    energies = antiberty.score(real + controls)
    wins = (energies[: len(real)] < energies[len(real) :]).float()
    assert len(real) == 10 and bool(wins.all()), f"only {int(wins.sum())} of {len(real)} genes beat their shuffle"


def test_germlines_command(capsys):
    from mlm_ppl.cli import main

    assert main(["germlines", "--n", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "IGHV1-18" in out and "IGHV1-2 " in out
    assert "real gene scored lower than its shuffle: 2/2" in out


def test_antiberty_pair_conditionals_match_naive_reference(antiberty, human_heavy_v):
    from mlm_ppl import pair_conditionals
    from mlm_ppl.evaluation import pair_metrics
    from reference import naive_pair_logits

    seq = human_heavy_v["IGHV1-69"]
    ids = antiberty.encode(seq).input_ids[0]
    cond = pair_conditionals(antiberty, seq, 31, 58)  # residues 31 (CDR1) and 58 (CDR2)
    assert len(cond.candidates_a) == 20 and cond.copies == 41
    la, lb = naive_pair_logits(antiberty, ids, 31, 58, cond.candidates_a.tolist(), cond.candidates_b.tolist())
    assert torch.allclose(cond.logits_a, la, atol=1e-4) and torch.allclose(cond.logits_b, lb, atol=1e-4)
    from mlm_ppl.models.pairs import summed_kl

    ag = cond.joint("ag", max_iter=100000)  # this pair needs about 26000 map evaluations
    assert ag.converged
    capped = cond.joint("ag")  # the default cap of 20000 stops short, a hair above the optimum
    assert not capped.converged
    J = [float(summed_kl(j.log_joint, cond.log_cond_a, cond.log_cond_b)) for j in (ag, capped)]
    assert 0 <= J[1] - J[0] < 1e-6
    others = [pair_metrics(cond.joint(m), cond)["jsd_all"] for m in ("naive", "mrf", "mrf_logit", "hcb")]
    assert pair_metrics(ag, cond)["jsd_all"] < min(others)
