import pytest
import torch

from mlm_ppl.testing import tiny_bert, tiny_roberta


def test_encoding_matches_the_tokenizer(tiny):
    mlm, seqs = tiny
    enc = mlm.encode(seqs)
    for b, text in enumerate(seqs):
        expected = mlm.tokenizer(" ".join(text) if mlm.residue_level else text)["input_ids"]
        n = int(enc.lengths[b])
        assert enc.input_ids[b, :n].tolist() == list(expected)
        assert (enc.input_ids[b, n:] == mlm.pad_id).all()
        assert not enc.attention_mask[b, n:].any()
    # special tokens and padding are never scorable; every other real token is
    special = torch.tensor([[int(i) in mlm.special_ids for i in row] for row in enc.input_ids.tolist()])
    assert torch.equal(enc.scorable, ~special & enc.attention_mask.bool())
    assert mlm.decode(enc.input_ids) == list(seqs)


def test_single_string_is_a_batch_of_one(tiny):
    mlm, seqs = tiny
    assert len(mlm.encode(seqs[0])) == 1
    assert mlm.score(seqs[0]).shape == (1,)


def test_residue_models_accept_spaced_and_unspaced_residues(tiny_models):
    mlm, _ = tiny_models["antibody-bert"]
    assert torch.equal(mlm.encode("EVQL").input_ids, mlm.encode("E V Q L").input_ids)
    assert mlm.decode(mlm.encode("E V Q L").input_ids) == ["EVQL"]


@pytest.mark.parametrize(
    "bad, error, match",
    [
        ("ACB", ValueError, r"character 'B' at offset 2 .* allowed characters are 'ACDEFGHIKLMNPQRSTVWY'"),
        ("ACX", ValueError, "character 'X'"),
        ("AC1", ValueError, "character '1'"),
        ("acd", ValueError, "character 'a'.*case-sensitive"),
        ("", ValueError, "sequence 1 is empty"),
        ("   ", ValueError, "sequence 1 is empty"),
        ("AC[MASK]D", ValueError, r"special token '\[MASK\]'"),
        ("A[CLS]", ValueError, r"special token '\[CLS\]'"),
        ("A" * 200, ValueError, "has 202 tokens .* at most 160"),
        (b"ACD", TypeError, "sequence 1 is a bytes"),
        (None, TypeError, "sequence 1 is a NoneType"),
    ],
)
def test_bad_residue_input_is_a_clear_error(tiny_models, bad, error, match):
    mlm, _ = tiny_models["antibody-bert"]
    with pytest.raises(error, match=match):
        mlm.encode(["ACD", bad])


@pytest.mark.parametrize(
    "arg, error, match",
    [([], ValueError, "no sequences"), (b"ACD", TypeError, "not bytes"), (42, TypeError, "got int")],
)
def test_bad_batches_are_clear_errors(tiny_models, arg, error, match):
    mlm, _ = tiny_models["antibody-bert"]
    with pytest.raises(error, match=match):
        mlm.score(arg)


def test_text_models_reject_what_they_cannot_represent():
    bert = tiny_bert()
    with pytest.raises(ValueError, match=r"unknown token '\[UNK\]'"):
        bert.encode(["the cat sat", "the zebra sat"])
    roberta = tiny_roberta()
    # byte-level BPE silently drops characters outside its vocabulary: refuse instead
    with pytest.raises(ValueError, match="character 'z' at offset 4 .* drops"):
        roberta.encode("the zebra")
    with pytest.raises(ValueError, match="has 70 tokens"):
        bert.encode(" ".join(["cat"] * 68))


def test_allow_mask_keeps_masks_unscorable(tiny_models):
    mlm, _ = tiny_models["esm"]
    enc = mlm.encode(["AC<mask>D"], allow_mask=True)
    assert enc.input_ids[0, 3] == mlm.mask_id and not enc.scorable[0, 3]
    assert enc.scorable[0].sum() == 3


def test_vocabulary_and_special_ids(tiny_models):
    mlm, _ = tiny_models["antibody-bert"]
    assert mlm.vocab[:5] == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert mlm.special_ids == {0, 1, 2, 3, 4}
    assert mlm.ordinary_mask.sum() == 20 and not mlm.ordinary_mask[:5].any()
    assert mlm.mask_id == 4 and mlm.pad_id == 0
    assert "residue-level" in repr(mlm)


def test_text_mask_tokens_need_allow_mask(tiny_models):
    mlm, _ = tiny_models["bert"]
    with pytest.raises(ValueError, match=r"special token '\[MASK\]'"):
        mlm.encode("the [MASK] sat")
    enc = mlm.encode("the [MASK] sat", allow_mask=True)
    assert enc.input_ids[0, 2] == mlm.mask_id and not enc.scorable[0, 2]
    assert enc.scorable[0].tolist() == [False, True, False, True, False]
