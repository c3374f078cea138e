import pytest
import torch

from mlm_ppl.testing import tiny_antibody_bert
from reference import naive_terms


def test_energies_match_naive_reference(tiny):
    mlm, seqs = tiny
    terms = mlm.energy_terms(seqs)
    for b, text in enumerate(seqs):
        ids = terms.encoding.input_ids[b, : int(terms.encoding.lengths[b])]
        raw, norm = naive_terms(mlm, ids)
        positions = sorted(raw)
        assert positions == terms.scored[b].nonzero().flatten().tolist()
        assert torch.allclose(
            terms.raw[b, positions].double(), torch.tensor([raw[t] for t in positions], dtype=torch.float64), atol=1e-5
        )
        assert torch.allclose(
            terms.norm[b, positions].double(),
            torch.tensor([norm[t] for t in positions], dtype=torch.float64),
            atol=1e-5,
        )
        assert abs(float(mlm.score([text], energy="raw")[0]) - sum(raw.values())) < 1e-4
        assert abs(float(mlm.score([text], energy="norm")[0]) - sum(norm.values())) < 1e-4
    # terms are zero where nothing is scored (special tokens, padding)
    assert (terms.norm[~terms.scored] == 0).all() and (terms.raw[~terms.scored] == 0).all()
    assert (terms.norm[terms.scored] > 0).all()  # -log p > 0


def test_within_word_l2r_matches_naive_reference(tiny):
    mlm, seqs = tiny
    terms = mlm.energy_terms(seqs, variant="within_word_l2r")
    for b, text in enumerate(seqs):
        ids = terms.encoding.input_ids[b, : int(terms.encoding.lengths[b])]
        if mlm.residue_level:
            words = [None if w < 0 else w for w in terms.encoding.word_ids[b, : len(ids)].tolist()]
        else:
            words = mlm.tokenizer(text).word_ids()
        raw, norm = naive_terms(mlm, ids, words)
        positions = sorted(norm)
        assert torch.allclose(
            terms.norm[b, positions].double(),
            torch.tensor([norm[t] for t in positions], dtype=torch.float64),
            atol=1e-5,
        )
        assert torch.allclose(
            terms.raw[b, positions].double(), torch.tensor([raw[t] for t in positions], dtype=torch.float64), atol=1e-5
        )


def test_within_word_l2r_differs_only_for_multi_token_words(tiny_models):
    mlm, _ = tiny_models["bert"]
    # "runs" -> run ##s and "jumped" -> jump ##ed: the first piece's term changes, nothing else
    pll = mlm.energy_terms(["the dog runs"])
    l2r = mlm.energy_terms(["the dog runs"], variant="within_word_l2r")
    diff = (pll.norm - l2r.norm).abs()[0] > 1e-6
    assert diff.nonzero().flatten().tolist() == [3]  # [CLS] the dog run ##s [SEP]
    res, _ = tiny_models["esm"]
    seqs = ["ACDEFG"]
    assert torch.allclose(res.score(seqs), res.score(seqs, variant="within_word_l2r"))


def test_values_do_not_depend_on_batch_composition_or_chunking(tiny):
    mlm, seqs = tiny
    alone = torch.cat([mlm.score([s]) for s in seqs])
    together = mlm.score(seqs)
    reversed_ = mlm.score(seqs[::-1]).flip(0)
    assert torch.allclose(alone, together, atol=1e-5)
    assert torch.allclose(alone, reversed_, atol=1e-5)
    budget = mlm.memory_budget_mb
    try:
        mlm.memory_budget_mb = 1e-3  # one copy per chunk
        one_by_one = mlm.score(seqs)
        mlm.memory_budget_mb = 1e4  # everything in one chunk
        all_at_once = mlm.score(seqs)
    finally:
        mlm.memory_budget_mb = budget
    assert torch.allclose(alone, one_by_one, atol=1e-5)
    assert torch.allclose(alone, all_at_once, atol=1e-5)


def test_masked_log_probs_rows_are_the_conditionals(tiny):
    mlm, seqs = tiny
    cond = mlm.masked_log_probs(seqs[:2])
    enc = mlm.encode(seqs[:2])
    assert cond.logits.shape == (int(enc.scorable.sum()), mlm.vocab_size)
    assert torch.allclose(cond.log_probs.exp().sum(-1), torch.ones(len(cond.position)), atol=1e-5)
    # the row for (b, t) equals a fresh forward with t masked
    b, t = int(cond.batch_index[-1]), int(cond.position[-1])
    x = enc.input_ids[b, : int(enc.lengths[b])].clone()
    x[t] = mlm.mask_id
    with torch.no_grad():
        ref = mlm.model(input_ids=x[None]).logits[0, t]
    assert torch.allclose(cond.logits[-1], ref, atol=1e-5)
    # an explicit position set
    first = int(enc.scorable[0].nonzero()[0])
    sub = mlm.masked_log_probs(seqs[:2], positions=[first])
    assert sub.position.tolist() == [first, first] and sub.batch_index.tolist() == [0, 1]
    assert torch.allclose(sub.logits[0], cond.logits[0], atol=1e-5)


def test_masked_log_probs_rejects_bad_positions(tiny_models):
    mlm, seqs = tiny_models["bert"]
    with pytest.raises(ValueError, match="not scorable"):
        mlm.masked_log_probs(seqs[:1], positions=[0])  # [CLS]
    with pytest.raises(ValueError, match="outside"):
        mlm.masked_log_probs(seqs[:1], positions=[99])
    with pytest.raises(TypeError, match="each position must be an integer, got float"):
        mlm.masked_log_probs(seqs[:1], positions=[1.5])
    with pytest.raises(ValueError, match="empty"):
        mlm.masked_log_probs(seqs[:1], positions=[])


def test_unknown_energy_and_variant_are_errors(tiny_models):
    mlm, seqs = tiny_models["esm"]
    with pytest.raises(ValueError, match="unknown energy 'nrom'"):
        mlm.score(seqs, energy="nrom")
    with pytest.raises(ValueError, match="unknown variant"):
        mlm.score(seqs, variant="l2r")


def test_energy_refuses_masked_sequences(tiny_models):
    mlm, _ = tiny_models["antibody-bert"]
    enc = mlm.encode(["AC[MASK]D"], allow_mask=True)
    assert not enc.scorable[0, 3]
    with pytest.raises(ValueError, match="mask token"):
        mlm.score(enc)


def test_bfloat16_mode_is_close_to_float32():
    fp32 = tiny_antibody_bert(seed=3)
    bf16 = tiny_antibody_bert(seed=3)
    bf16.model.to(torch.bfloat16)
    seqs = ["ACDEFGHIKLMNPQRSTVWY", "WYWYAAAC"]
    e32, e16 = fp32.score(seqs), bf16.score(seqs)
    assert bf16.dtype == torch.bfloat16 and e16.dtype == torch.float32
    assert not torch.equal(e32, e16)  # it really ran in bf16
    assert torch.allclose(e32, e16, rtol=0.05, atol=0.5)
