import pytest

from mlm_ppl.data import germline_sequences, shuffled


def test_human_heavy_v_genes(human_heavy_v):
    assert len(human_heavy_v) == 55  # one per gene, first allele
    assert human_heavy_v["IGHV1-18"].startswith("QVQLVQSGAEVKKPGASVKVSCKASGYTF")
    assert all(set(s) <= set("ACDEFGHIKLMNPQRSTVWY") for s in human_heavy_v.values())
    assert all(90 <= len(s) <= 105 for s in human_heavy_v.values())
    alleles = germline_sequences("human", "H", "V", alleles="all")
    assert len(alleles) == 249 and "IGHV1-18*03" in alleles


def test_bad_germline_requests():
    with pytest.raises(ValueError, match="unknown chain"):
        germline_sequences("human", "Q")
    with pytest.raises(ValueError, match="no V genes for species 'martian'"):
        germline_sequences("martian", "H")
    with pytest.raises(ValueError, match="segment"):
        germline_sequences(segment="D")


def test_shuffle_keeps_composition_and_is_seeded():
    s = "EVQLVESGGGLVQPGGSLRL"
    assert sorted(shuffled(s, 1)) == sorted(s)
    assert shuffled(s, 1) == shuffled(s, 1) != shuffled(s, 2)


def test_example_heavy_chain():
    from mlm_ppl.data import example_heavy_chain

    seq, cdr3 = example_heavy_chain()
    assert len(seq) == 120 and seq[cdr3] == "AKDRGYSSGWFDY"
    assert seq[cdr3.start - 1] == "C" and seq[cdr3.stop] == "W"


def test_heavy_chains_from_germline_segments():
    from mlm_ppl.data import HEAVY_CHAINS, heavy_chain

    cdr3 = [heavy_chain(*h) for h in HEAVY_CHAINS]
    assert [s[sl] for s, sl in cdr3] == ["AKDRGYSSGWFDY", "ARGGYYGSGSYYMDV", "ARVGYCSSTSCYFDP", "ARDYYYDSSGYYFDV"]
    for seq, sl in cdr3:
        assert seq[sl.start - 1] == "C" and seq[sl.stop : sl.stop + 2] == "WG"
    with pytest.raises(ValueError, match="unknown gene"):
        heavy_chain("IGHV9-99")
    with pytest.raises(ValueError, match="cdr3_body"):
        heavy_chain(cdr3_body="drg")
