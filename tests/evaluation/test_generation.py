"""Generation metrics against hand-computed values and against nltk itself."""

import math

import pytest
import torch

from mlm_ppl.evaluation.generation import (
    corpus_bleu,
    identity,
    mean_pairwise_identity,
    nearest_germline,
    sample_energies,
    self_bleu,
    tokenize,
    transition_rates,
    unique_ngrams,
)


def test_bleu_hand_values():
    # one mismatch at the end: precisions 4/5, 3/4, 2/3, 1/2, no brevity penalty
    assert corpus_bleu(["ABCDE"], ["ABCDF"]) == pytest.approx((4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)
    # corpus level: counts pooled over samples before the geometric mean
    pooled = (9 / 10 * 7 / 8 * 5 / 6 * 3 / 4) ** 0.25
    assert corpus_bleu(["ABCDE", "ABCDF"], ["ABCDF"]) == pytest.approx(pooled)
    # brevity penalty exp(1 - r/c), r = 6, c = 4
    assert corpus_bleu(["ABCD"], ["ABCDEF"]) == pytest.approx(math.exp(1 - 6 / 4))
    # the closest reference length is used: a 4-residue reference removes the penalty
    assert corpus_bleu(["ABCD"], ["ABCDEF", "ABCD"]) == pytest.approx(1.0)
    # self-BLEU: each sample against the other
    assert self_bleu(["ABCDE", "ABCDF"]) == pytest.approx((4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)
    # no 4-gram match: 0, without a warning escaping (tests turn warnings into errors)
    assert corpus_bleu(["ABCDE"], ["ABCXY"]) == pytest.approx(0.0, abs=1e-70)


def test_bleu_equals_nltk_with_wang_and_cho_settings():
    from nltk.translate.bleu_score import corpus_bleu as nltk_bleu

    samples = ["the cat sat on the mat", "a dog ran on the big mat", "the red dog ran on the mat"]
    refs = ["the cat sat on a mat", "the red dog ran on the mat and the cat sat"]
    tok = [s.split() for s in samples]
    expected = nltk_bleu([[r.split() for r in refs]] * 3, tok, weights=(0.25, 0.25, 0.25, 0.25))
    assert corpus_bleu(samples, refs, unit="word") == pytest.approx(expected)
    expected_self = nltk_bleu([[t for j, t in enumerate(tok) if j != i] for i in range(3)], tok, weights=(0.25,) * 4)
    assert self_bleu(samples, unit="word") == pytest.approx(expected_self)


def test_unique_ngrams_hand_values():
    samples = ["ABCD", "ABCE", "XBCD"]  # bigrams AB BC CD | AB BC CE | XB BC CD: 9 occurrences
    assert unique_ngrams(samples, ["ABCF"], n=2) == pytest.approx(100 * 4 / 9)  # CD, CE, XB, CD
    assert unique_ngrams(samples, n=2) == pytest.approx(100 * 2 / 9)  # CE and XB occur in one sample only
    assert unique_ngrams(samples, ["ABCF"], n=1) == pytest.approx(100 * 4 / 12)  # D, E, X, D
    assert unique_ngrams(["the cat sat", "the dog sat"], n=1, unit="word") == pytest.approx(100 * 2 / 6)


def test_identity_hand_values():
    assert identity("ACDEFG", "ACDEFG") == 1.0
    assert identity("ACDEFG", "ACDQFG") == pytest.approx(5 / 6)
    assert identity("ACDEFGHIK", "DEFGH") == 1.0  # end gaps are free; over the shorter length
    assert identity("A C D E", "ACDE") == 1.0  # spaces are not residues
    # equal lengths: position by position, even where a shifted overlap would match more
    assert identity("AKGEAYCGGDFDY", "AKDLGYSGYDWNY") == pytest.approx(6 / 13)
    assert identity("ABCDEF", "BCDEFA") == 0.0
    # unequal lengths: aligned; a partial match is never traded for an empty overlap
    assert identity("ABCDEFG", "BCDEFA") == pytest.approx(5 / 6)
    assert identity("AKGEAYCGGDFDY", "AKDLGYSGYDWN") >= 5 / 12
    assert nearest_germline("ACDEWGHIKL", {"g1": "ACDEFGHIKL", "g2": "ACDEWGHIKL"}) == ("g2", 1.0)
    name, value = nearest_germline("ACDEWGHIKQ", {"g1": "ACDEFGHIKL", "g2": "ACDEWGHIKL"})
    assert name == "g2" and value == pytest.approx(9 / 10)
    assert mean_pairwise_identity(["ACDEFGHI", "ACDEFGHK", "ACWEFGHK"]) == pytest.approx((7 + 6 + 7) / 24)


def test_transition_rates_hand_values():
    from mlm_ppl.inference import Run

    stats = {"is_accepted": torch.tensor([[1, 0, 1, 1]], dtype=torch.bool), "n_changed": torch.tensor([[1, 0, 0, 2]])}
    run = Run(torch.zeros(1, 4, 3, dtype=torch.long), stats)
    assert transition_rates(run) == {"acceptance_rate": 0.75, "novel_transition_rate": 0.5}


def test_sample_energies_match_score(tiny_models):
    mlm, seqs = tiny_models["esm"]
    got = sample_energies(mlm, seqs)
    assert got["e_norm"] == pytest.approx(float(mlm.score(seqs).mean()), rel=1e-6)
    assert got["e_raw"] == pytest.approx(float(mlm.score(seqs, energy="raw").mean()), rel=1e-6)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: corpus_bleu([], ["A"]), ValueError, "non-empty"),
        (lambda: corpus_bleu("ABC", ["A"]), ValueError, "non-empty list"),
        (lambda: corpus_bleu(["ABC"], ["A"], max_n=0), ValueError, "max_n"),
        (lambda: self_bleu(["ABC"]), ValueError, "two samples"),
        (lambda: unique_ngrams(["AB"], n=3), ValueError, "no 3-grams"),
        (lambda: unique_ngrams(["ABC"], n=2), ValueError, "two samples"),
        (lambda: tokenize("ABC", "letter"), ValueError, "unit"),
        (lambda: tokenize(b"ABC"), TypeError, "str"),
        (lambda: identity("", "A"), ValueError, "non-empty"),
        (lambda: nearest_germline("A", {}), ValueError, "no germline"),
        (lambda: mean_pairwise_identity(["A"]), ValueError, "two samples"),
    ],
)
def test_bad_input_is_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
