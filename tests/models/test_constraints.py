"""Constraint specs (models/constraints.py): every rule and expert against a hand-computed case,
the log-factor against a naive reference on an enumerated state space, the framework report,
each malformed-spec message, and the TOML round trip."""

import math
import re

import pytest
import torch

import mlm_ppl
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference.exact import enumerate_states
from mlm_ppl.models import ConstrainedTarget, Target
from mlm_ppl.models.constraints import (
    KYTE_DOOLITTLE,
    LIABILITIES,
    Allowed,
    ConstraintSpec,
    ConstraintTarget,
    Expert,
    Forbid,
    OddCount,
    Require,
    classifier_log_prob,
    hamming_distance,
    hydropathy,
    keyword_count,
    net_charge,
    recorded_expert_weights,
    residue_count,
    weighted_expert_sum,
)
from mlm_ppl.testing import goyal_counterexample, tiny_antibody_bert, tiny_bert, tiny_residue_bert

TEMPLATE = "A[MASK]C[MASK][MASK]"  # residues 0..4; the free ones are 1, 3, 4
FREE = (1, 3, 4)


@pytest.fixture(scope="module")
def mlm():
    return tiny_residue_bert("ACDE", seed=1, dtype=torch.float64)


@pytest.fixture(scope="module")
def dist(mlm):
    return MaskedLMDistribution(mlm, TEMPLATE)


@pytest.fixture(scope="module")
def states(dist):
    return enumerate_states(dist)  # (64, 7)


@pytest.fixture(scope="module")
def texts(mlm, states):
    return mlm.decode(states)


@pytest.fixture(scope="module")
def antibody():
    return tiny_antibody_bert()


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def fill(dist, residues: str) -> torch.Tensor:
    """The template with its free positions filled by ``residues`` (one per free position)."""
    state = dist.template.clone()
    vocab = dist.mlm.vocab
    state[dist.free_positions] = torch.tensor([vocab.index(r) for r in residues])
    return state[None]


# ---------------------------------------------------------------------- hard rules
def test_allowed_alphabets_intersect_per_position_and_fixed(mlm, dist, states, texts):
    spec = ConstraintSpec(
        [Allowed("no-e", "ACD"), Allowed.fixed("mid", 1, "C"), Allowed("last", ["A", "E"], positions=[-1])]
    )
    allowed = spec.allowed_mask(dist)
    assert allowed.shape == (3, mlm.vocab_size) and allowed.dtype == torch.bool
    alphabet = ["".join(mlm.vocab[i] for i in row.nonzero().flatten().tolist()) for row in allowed]
    assert alphabet == ["ACD", "C", "A"]
    assert not allowed[:, ~mlm.ordinary_mask].any()  # never a special token

    v = spec.bind(dist).violations(states)
    assert list(v) == ["no-e", "mid", "last"]
    designed = ["".join(t[i] for i in FREE) for t in texts]
    assert v["no-e"].tolist() == ["E" in d for d in designed]
    assert v["mid"].tolist() == [d[1] != "C" for d in designed]
    assert v["last"].tolist() == [d[2] not in "AE" for d in designed]


def test_allowed_errors_name_the_rule_and_position(mlm, dist):
    with pytest.raises(ValueError) as err:
        ConstraintSpec([Allowed("ac", "AC", positions=[2]), Allowed("de", "DE", positions=[2])]).bind(dist)
    assert "rule 'de' leaves free position 2 (token position 5) with no allowed token" in one_line(err)
    for empty in ("", " ", []):
        with pytest.raises(ValueError) as err:
            Allowed("none", empty)
        assert "rule 'none' allows no token" in one_line(err)
    with pytest.raises(ValueError) as err:
        ConstraintSpec([Allowed("z", "AZ")]).bind(dist)
    assert "rule 'z': token 'Z' is not in the vocabulary" in one_line(err)
    with pytest.raises(ValueError) as err:
        ConstraintSpec([Allowed("m", ["[MASK]"])]).bind(dist)
    assert "token '[MASK]' is a special token" in one_line(err)
    with pytest.raises(ValueError) as err:
        ConstraintSpec([Allowed("far", "A", positions=[3])]).bind(dist)
    assert "rule 'far': free position 3 is out of range; the template has 3 free positions" in one_line(err)
    with pytest.raises(TypeError, match="positions must be integers"):
        Allowed("p", "A", positions=[True])


def test_forbid_counts_matches_touching_a_designed_residue_and_reports_the_framework(antibody):
    d = MaskedLMDistribution(antibody, "NGT[MASK]SAA[MASK]G")
    spec = ConstraintSpec([Forbid("td", "TD")], liabilities=["deamidation", "n-glycosylation"])
    bound = spec.bind(d)
    # NG (deamidation) and NGT (sequon) lie wholly in the fixed framework: reported once, not infeasible
    assert [(m.rule, m.start, m.end, m.text) for m in bound.framework_matches] == [
        ("deamidation", 0, 2, "NG"),
        ("n-glycosylation", 0, 3, "NGT"),
    ]
    assert "fixed framework" in bound.report()
    cases = {
        "AA": (False, False, False),  # NGTASAAAG: only the framework's motifs
        "NA": (False, True, False),  # NGTNSAAAG: N(free)S(fixed) deamidates; NSA is no sequon
        "AN": (False, True, False),  # ...AAN G: NG across the boundary
        "DA": (True, False, False),  # T(fixed)D(free)
        "QN": (False, True, False),
    }
    tokens = torch.cat([fill(d, k) for k in cases])
    v = bound.violations(tokens)
    for n, (k, expected) in enumerate(cases.items()):
        assert (bool(v["td"][n]), bool(v["deamidation"][n]), bool(v["n-glycosylation"][n])) == expected, k
    assert bound.feasible(tokens).tolist() == [not any(e) for e in cases.values()]
    # overlapping matches are all tried: the second of NNS (N-N-S) touches the free position
    d2 = MaskedLMDistribution(antibody, "NN[MASK]A")
    assert ConstraintSpec([Forbid("nx", "N[NS]")]).bind(d2).violations(fill(d2, "S"))["nx"].tolist() == [True]


def test_forbid_on_text_reads_words_as_decode_writes_them():
    bert = tiny_bert()
    d = MaskedLMDistribution(bert, "the [MASK] sat on the mat")
    bound = ConstraintSpec([Forbid("cat", "cat"), Forbid("mat", "mat"), Forbid("cat-sat", "t s")]).bind(d)
    assert [m.rule for m in bound.framework_matches] == ["mat"]
    state = d.template.clone()[None]
    state[0, d.free_positions] = bert.vocab.index("cat")
    assert bert.decode(state) == ["the cat sat on the mat"]
    v = bound.violations(state)
    assert (v["cat"].item(), v["mat"].item(), v["cat-sat"].item()) == (True, False, True)


def test_require_matches_anywhere(mlm, dist, states, texts):
    v = ConstraintSpec([Require("da", "DA|AC")]).bind(dist).violations(states)["da"]
    assert v.tolist() == [not ("DA" in t or "AC" in t) for t in texts]
    assert not v[0]  # AACAA: the framework alone satisfies it


def test_unpaired_cysteine_is_an_odd_number_of_designed_cysteines(dist, states, texts):
    spec = ConstraintSpec(liabilities=["unpaired-cysteine"])
    assert spec.all_rules == (OddCount("unpaired-cysteine", "C"),)
    v = spec.bind(dist).violations(states)["unpaired-cysteine"]
    assert v.tolist() == [sum(t[i] == "C" for i in FREE) % 2 == 1 for t in texts]


def test_bad_regexes_are_one_line_errors_naming_the_rule():
    with pytest.raises(ValueError) as err:
        Forbid("broken", "N[")
    assert one_line(err).startswith("rule 'broken': bad regular expression 'N['")
    with pytest.raises(ValueError) as err:
        Require("empty", "A*")
    assert "rule 'empty': pattern 'A*' matches the empty string" in one_line(err)
    with pytest.raises(TypeError, match="rule 'x': pattern must be text"):
        Forbid("x", 3)


# ---------------------------------------------------------------------- experts
def test_built_in_experts_on_hand_computed_cases(dist):
    kd = hydropathy(region="designed")
    assert kd.takes == "designed"
    assert kd.function(["ADE"]) == [pytest.approx((1.8 - 3.5 - 3.5) / 3)]
    assert hydropathy(region="sequence").function(["AXC"]) == [pytest.approx((1.8 + 0 + 2.5) / 3)]
    assert net_charge().function(["KRDEH"]) == [0.0]
    assert net_charge(histidine=0.5).function(["KRDEH", "KKA"]) == [0.5, 2.0]
    assert residue_count("MW").function(["MWAMW", "AAA"]) == [4.0, 0.0]
    assert keyword_count(["cat", "dog"]).function(["the cat sat on the Cat dogs"]) == [2.0]
    assert keyword_count(["cat"], case_sensitive=True).function(["Cat cat"]) == [1.0]
    assert hamming_distance("ACDE").function(["ACDE", "AADE", "ACD", "ACDEEA"]) == [0.0, 1.0, 1.0, 2.0]
    assert hamming_distance("the cat sat", unit="word").function(["the dog sat", "the cat"]) == [1.0, 1.0]
    # through a bound spec: designed = the free residues, sequence = the whole state
    bound = ConstraintSpec(experts=[hydropathy(), net_charge(name="q"), residue_count("C", name="c")]).bind(dist)
    values = bound.expert_values(fill(dist, "DEC"))  # A D C E C
    assert values["hydropathy"].item() == pytest.approx((-3.5 - 3.5 + 2.5) / 3)
    assert values["q"].item() == -2.0
    assert values["c"].item() == 1.0  # designed region only: the framework's C is not counted
    assert all(v.dtype == torch.float64 for v in values.values())


def test_expert_weights_and_inputs_are_checked():
    f = lambda s: [0.0] * len(s)
    for bad in ("1", None, True):
        with pytest.raises(TypeError, match="expert 'w': weight must be a number"):
            Expert("w", f, bad)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="expert 'w': weight must be finite"):
            Expert("w", f, bad)
    with pytest.raises(ValueError, match="takes must be one of"):
        Expert("w", f, 1.0, takes="strings")
    with pytest.raises(TypeError, match="function must be callable"):
        Expert("w", 3)
    with pytest.raises(ValueError, match="region must be 'designed' or 'sequence'"):
        hydropathy(region="core")


def test_a_nan_or_a_misshapen_expert_value_names_the_expert(dist, states):
    nan = Expert("nanny", lambda s: [math.nan] * len(s))
    with pytest.raises(ValueError) as err:
        ConstraintSpec(experts=[nan]).bind(dist).log_factor(states[:3])
    assert one_line(err) == "expert 'nanny' returned nan for state 0; expert values must be finite"
    short = Expert("short", lambda s: [0.0])
    with pytest.raises(ValueError, match=r"expert 'short' returned shape \(1,\) for 3 states"):
        ConstraintSpec(experts=[short]).bind(dist).expert_values(states[:3])


def test_classifier_log_prob_from_a_local_directory(tmp_path, mlm):
    from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=len(mlm.tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=2,
        id2label={0: "bad", 1: "good"},
        label2id={"bad": 0, "good": 1},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertForSequenceClassification(cfg).save_pretrained(tmp_path)
    mlm.tokenizer.save_pretrained(tmp_path)

    good = classifier_log_prob(tmp_path, "good", spaced=True)
    bad = classifier_log_prob(tmp_path, 0, name="bad", spaced=True)
    seqs = ["ACDA", "EEC"]
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path, local_files_only=True).eval()
    with torch.no_grad():
        enc = mlm.tokenizer(["A C D A", "E E C"], padding=True, return_tensors="pt")
        reference = torch.log_softmax(model(**enc).logits.double(), -1)
    torch.testing.assert_close(good.function(seqs), reference[:, 1])
    torch.testing.assert_close(good.function(seqs).exp() + bad.function(seqs).exp(), torch.ones(2, dtype=torch.float64))
    assert good.params == {"path": str(tmp_path), "label": "good", "spaced": True, "batch_size": 32}
    with pytest.raises(ValueError, match=r"label 'ugly' is not one of the classifier's \['bad', 'good'\]"):
        classifier_log_prob(tmp_path, "ugly")
    # issue 47, row 6: the classifier's files are on the record; weights replaced since are refused by name
    record = ConstraintSpec(experts=[good]).to_dict()
    assert record["experts"][0]["code_digest"].startswith("sha256:")
    assert ConstraintSpec.from_dict(record).experts[0].code_digest == good.code_digest
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        BertForSequenceClassification(cfg).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="the files of the classifier in .* changed since this was recorded"):
        ConstraintSpec.from_dict(record)
    # issue 47, row 12: weights as a pickle that would run code are refused in one line (no UnpicklingError)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tmp_path / name).exists():
            (pickled / name).write_bytes((tmp_path / name).read_bytes())
    torch.save({"weights": print}, pickled / "pytorch_model.bin")  # a global: weights-only loading refuses it
    with pytest.raises(ValueError, match="its weights are a pickle that would run code, refused"):
        classifier_log_prob(pickled, "good")
    with pytest.raises(ValueError, match="label 2 is out of range for 2 classes"):
        classifier_log_prob(tmp_path, 2)
    with pytest.raises(ValueError, match="does not exist"):
        classifier_log_prob(tmp_path / "missing", 0)


# ---------------------------------------------------------------------- the log-factor
def designed_a_count(tokens):
    """A user expert over token ids: how many free positions of the ACDE template hold A."""
    a = 5  # [PAD] [UNK] [CLS] [SEP] [MASK] A C D E
    return (tokens[:, [2, 4, 5]] == a).sum(-1)


def reference_log_factor(text: str) -> float:
    """The spec of the test below, written out by hand for one decoded state ``text``."""
    designed = "".join(text[i] for i in FREE)
    if designed[0] == "E":  # Allowed("first", "ACD", positions=[0])
        return -math.inf
    for i in range(len(text) - 1):  # Forbid("dc", "D[CE]") where it touches a designed residue
        if text[i] == "D" and text[i + 1] in "CE" and {i, i + 1} & set(FREE):
            return -math.inf
    if "AD" not in text and "DA" not in text:  # Require("ad", "AD|DA")
        return -math.inf
    if designed.count("C") % 2 == 1:  # the unpaired-cysteine liability
        return -math.inf
    kd = sum(KYTE_DOOLITTLE[c] for c in designed) / 3
    charge = sum({"D": -1, "E": -1}.get(c, 0) for c in text)
    return -0.5 * kd + 0.25 * charge + 0.1 * designed.count("A")


def test_log_factor_matches_a_naive_reference_on_every_state(dist, states, texts):
    spec = ConstraintSpec(
        [Allowed("first", "ACD", positions=[0]), Forbid("dc", "D[CE]"), Require("ad", "AD|DA")],
        [hydropathy(weight=-0.5), net_charge(weight=0.25), Expert("a", designed_a_count, 0.1, takes="tokens")],
        liabilities=["unpaired-cysteine"],
    )
    bound = spec.bind(dist)
    got = bound.log_factor(states)
    expected = torch.tensor([reference_log_factor(t) for t in texts], dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected)
    assert 0 < int(torch.isfinite(expected).sum()) < len(texts)  # both kinds of state are there
    assert bound.feasible(states).tolist() == torch.isfinite(expected).tolist()


def test_constrain_gives_a_constrained_target_with_alphabets(dist, states):
    spec = ConstraintSpec([Allowed("no-e", "ACD"), Forbid("dc", "D[CE]")], [hydropathy(weight=-1.0)])
    target = spec.constrain(dist)
    assert isinstance(target, ConstraintTarget) and isinstance(target, ConstrainedTarget)
    assert isinstance(target, Target)
    assert torch.equal(target.allowed, spec.allowed_mask(dist))
    some = states[[0, 3, 17, 63]]
    ev, base = target.evaluate(some), dist.evaluate(some)
    torch.testing.assert_close(ev.energy, base.energy)
    torch.testing.assert_close(ev.log_factor, target.constraints.log_factor(some))
    assert torch.isinf(ev.log_factor[-1])  # EEE: outside the alphabet
    with pytest.raises(ValueError, match="bound to another target"):
        ConstraintTarget(MaskedLMDistribution(dist.mlm, "[MASK]C"), target.constraints)
    with pytest.raises(TypeError, match="need a target with a masked LM"):
        spec.bind(goyal_counterexample())


# ---------------------------------------------------------------------- liabilities
def test_liabilities_by_name(antibody):
    spec = ConstraintSpec(liabilities=True)
    assert spec.liabilities == tuple(LIABILITIES)
    assert [r.name for r in spec.all_rules] == [
        "n-glycosylation",
        "deamidation",
        "isomerisation",
        "unpaired-cysteine",
        "dp-cleavage",
    ]
    assert [(e.name, e.weight) for e in spec.all_experts] == [("met-trp-oxidation", -1.0)]
    d = MaskedLMDistribution(antibody, "EV[MASK][MASK][MASK]K")
    bound = spec.bind(d)
    assert bound.framework_matches == ()
    tokens = torch.cat([fill(d, s) for s in ("AAA", "DGA", "DPA", "CAA", "CCA", "MWA", "NAT")])
    v = bound.violations(tokens)
    assert v["isomerisation"].tolist() == [False, True, False, False, False, False, False]
    assert v["dp-cleavage"].tolist() == [False, False, True, False, False, False, False]
    assert v["unpaired-cysteine"].tolist() == [False, False, False, True, False, False, False]
    assert v["n-glycosylation"].tolist() == [False] * 6 + [True]
    lf = bound.log_factor(tokens)
    assert lf[0].item() == 0.0 and lf[4].item() == 0.0 and lf[5].item() == -2.0
    with pytest.raises(ValueError) as err:
        ConstraintSpec(liabilities=["glycosylation"])
    assert one_line(err).startswith("unknown liability 'glycosylation'; choose from 'n-glycosylation'")
    with pytest.raises(ValueError, match="two rules or experts are named 'deamidation'"):
        ConstraintSpec([Forbid("deamidation", "NG")], liabilities=["deamidation"])


# ---------------------------------------------------------------------- spec files
USER_MODULE = """
def length_penalty(sequences, per=1.0):
    return [per * len(s) for s in sequences]
"""


def test_toml_round_trip(tmp_path, monkeypatch, mlm, dist, states):
    (tmp_path / "my_experts.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        """
liabilities = ["unpaired-cysteine", "met-trp-oxidation"]

[[rules]]
kind = "allowed"
name = "no-e"
tokens = "ACD"
positions = [0, -1]

[[rules]]
kind = "forbid"
name = "dc"
pattern = 'D[CE]'

[[rules]]
kind = "require"
name = "ad"
pattern = "AD|DA"

[[experts]]
name = "kd"
kind = "hydropathy"
weight = -0.5

[[experts]]
name = "len"
kind = "my_experts:length_penalty"
weight = 0.1
params = { per = 2.0 }
"""
    )
    spec = ConstraintSpec.from_toml(spec_file, mlm, trust_code=True)  # it names my_experts:length_penalty
    assert [r.name for r in spec.all_rules] == ["no-e", "dc", "ad", "unpaired-cysteine"]
    assert [e.name for e in spec.all_experts] == ["kd", "len", "met-trp-oxidation"]
    assert spec.all_experts[1].function(["ACD"]) == [6.0]

    again = tmp_path / "again.toml"
    again.write_text(spec.to_toml())
    back = ConstraintSpec.from_toml(again, mlm, trust_code=True)
    assert back.to_dict() == spec.to_dict()
    assert back.to_toml() == spec.to_toml()
    torch.testing.assert_close(back.bind(dist).log_factor(states), spec.bind(dist).log_factor(states))
    # a spec built in Python writes out too: built-ins and a module-level user function by name
    py = ConstraintSpec([Forbid("dc", "D[CE]")], [net_charge(weight=0.5), Expert("a", designed_a_count, 0.1, "tokens")])
    d = py.to_dict()
    assert d["experts"][1]["kind"] == f"{__name__}:designed_a_count"
    with pytest.raises(ValueError, match="has no spec-file form"):
        ConstraintSpec(experts=[Expert("lam", lambda s: s)]).to_dict()
    assert mlm_ppl.constraints.ConstraintSpec is ConstraintSpec


class _Scorer:
    def __call__(self, tokens):
        return designed_a_count(tokens)


def test_an_expert_with_no_module_level_name_has_no_file_form_and_still_pickles(tmp_path, dist, states):
    """A functools.partial or a callable object has no __qualname__: spec_kind gave 'functools:', so
    to_dict and to_toml wrote an unreadable kind and pickle.loads failed on it. Now they say the
    expert has no file form, and pickle writes such a spec as it is."""
    import functools
    import pickle

    for fn in (functools.partial(designed_a_count), _Scorer()):
        spec = ConstraintSpec([Forbid("dc", "D[CE]")], [Expert("p", fn, 0.5, "tokens")])
        for call in (spec.to_dict, spec.to_toml):
            with pytest.raises(ValueError, match=r"expert 'p': its function .* has no spec-file form"):
                call()
        back = pickle.loads(pickle.dumps(spec))
        assert [e.name for e in back.all_experts] == ["p"] and back.experts[0].weight == 0.5
        torch.testing.assert_close(back.bind(dist).log_factor(states), spec.bind(dist).log_factor(states))
    # a module-level function goes through the file form and comes back by name
    spec = ConstraintSpec(experts=[Expert("a", designed_a_count, 0.1, "tokens"), net_charge(weight=0.5)])
    back = pickle.loads(pickle.dumps(spec))
    assert back.to_dict() == spec.to_dict() and back.experts[0].function is designed_a_count
    # a name that resolves to another object is no file form either
    impostor = Expert("i", lambda t: designed_a_count(t), takes="tokens")
    impostor.function.__qualname__ = "designed_a_count"
    with pytest.raises(ValueError, match="has no spec-file form"):
        impostor.spec_kind()


def test_recorded_expert_weights_read_a_spec_without_building_it():
    spec = ConstraintSpec([Forbid("dc", "D[CE]")], [Expert("a", designed_a_count, 0.1, "tokens"), net_charge(weight=2)],
                          liabilities=True)  # fmt: skip
    assert recorded_expert_weights(spec.to_dict()) == {e.name: e.weight for e in spec.all_experts}
    assert list(recorded_expert_weights(spec.to_dict())) == ["a", "net-charge", "met-trp-oxidation"]
    # no module is imported, no classifier loaded
    data = {"experts": [{"name": "x", "kind": "no_such_module_here:f"}, {"name": "c", "kind": "classifier",
            "weight": -1, "params": {"model": "/no/such/model", "label": 0}}]}  # fmt: skip
    assert recorded_expert_weights(data) == {"x": 1.0, "c": -1.0}
    values = {"x": torch.tensor([1.0, 2.0]), "c": torch.tensor([0.5, 0.0])}
    assert recorded_expert_weights({}) == {} and weighted_expert_sum({}, {}, 2).tolist() == [0.0, 0.0]
    assert weighted_expert_sum(recorded_expert_weights(data), values, 2).tolist() == [0.5, 2.0]
    for bad, message in [
        ({"experts": [{"name": "x", "weight": "1"}]}, "src: experts[0] ('x'), key 'weight': expert 'x': weight must"),
        ({"experts": [{"kind": "hydropathy"}]}, "src: experts[0], key 'name'"),
        ({"experts": [{"name": "x"}, {"name": "x"}]}, "src: experts[1] ('x'), key 'name': two experts are named"),
        ({"liabilities": ["nope"]}, "src: top level, key 'liabilities': unknown liability 'nope'"),
        ([], "src: a constraint spec is a table"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            recorded_expert_weights(bad, "src")


MALFORMED = [
    ('liabilities = ["n-glyco"]', "top level, key 'liabilities': unknown liability 'n-glyco'"),
    ("liabilities = 3", "top level, key 'liabilities': liabilities must be true, false or a list of names"),
    ("colour = 1", "top level: unknown key 'colour'"),
    ("rules = 1", "top level, key 'rules': must be an array of tables"),
    ('[[rules]]\nkind = "ban"\nname = "x"\npattern = "A"', "rules[0] ('x'), key 'kind': kind must be one of"),
    ('[[rules]]\nkind = "forbid"\nname = "x"', "rules[0] ('x'), key 'pattern': missing"),
    ('[[rules]]\nkind = "forbid"\nname = "x"\npattern = "N["', "rules[0] ('x'), key 'pattern': rule 'x': bad regular"),
    ('[[rules]]\nkind = "forbid"\nname = "x"\npattern = "A"\ncolour = 1', "rules[0] ('x'), key 'colour': unknown key"),
    ('[[rules]]\nkind = "forbid"\npattern = "A"', "rules[0], key 'name': missing"),
    ('[[rules]]\nkind = "allowed"\nname = "x"\ntokens = ""', "rules[0] ('x'), key 'tokens': rule 'x' allows no token"),
    ('[[rules]]\nkind = "allowed"\nname = "x"\ntokens = "AZ"', "rules[0] ('x'), key 'tokens': rule 'x': token 'Z'"),
    ('[[rules]]\nkind = "allowed"\nname = "x"\ntokens = "A"\npositions = ["a"]', "key 'positions'"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\nweight = "heavy"', "experts[0] ('e'), key 'weight': weight must"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\nweight = nan', "experts[0] ('e'), key 'weight'"),
    ('[[experts]]\nname = "e"\nkind = "nonesuch"', "experts[0] ('e'), key 'kind': unknown expert kind 'nonesuch'"),
    ('[[experts]]\nname = "e"\nkind = "no_such_module_xyz:f"', "key 'kind': cannot import module 'no_such_module_xyz'"),
    ('[[experts]]\nname = "e"\nkind = "math:nonesuch"', "key 'kind': module 'math' has no attribute 'nonesuch'"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\nparams = { region = "core" }', "key 'params.region'"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\nparams = { colour = 1 }', "key 'params.colour': unknown param"),
    ('[[experts]]\nname = "e"\nkind = "residue-count"', "experts[0] ('e'), key 'params.residues': missing"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\ntakes = "tokens"', "key 'takes': unknown key"),
    ('[[experts]]\nname = "e"\nkind = "math:fsum"\ntakes = "words"', "key 'takes': expert 'e': takes must be one of"),
    ('[[experts]]\nkind = "hydropathy"', "experts[0], key 'name': missing"),
    ('[[experts]]\nname = "e"\nkind = "hydropathy"\nparams = 3', "key 'params': params must be a table"),
    (
        '[[rules]]\nkind = "forbid"\nname = "x"\npattern = "A"\n[[experts]]\nname = "x"\nkind = "hydropathy"',
        "spec, key 'name': two rules or experts are named 'x'",
    ),
    ("[[rules]\n", "not valid TOML"),
    (
        '[[experts]]\nname = "e"\nkind = "math:fsum"\ncode_digest = "sha256:0"',
        "key 'code_digest': the code of 'math:fsum' changed since this was recorded",
    ),
]


@pytest.mark.parametrize("text, expected", MALFORMED, ids=[m[1][:40] for m in MALFORMED])
def test_malformed_spec_files_are_one_line_errors_naming_file_entry_and_key(tmp_path, mlm, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ValueError) as err:
        ConstraintSpec.from_toml(path, mlm, trust_code=True)  # consent given: the other checks still hold
    message = one_line(err)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_code_in_a_spec_is_refused_without_consent_and_never_imported(tmp_path, mlm, monkeypatch):
    """A spec file or record naming Python code ('module:function') runs nothing unless the reader
    consents (trust_code, trusting_code); the refusal names the code; built-ins need no consent; a
    pickled spec (trusted, as pickle is) rebuilds; a non-UTF-8 file is named."""
    import pickle
    import sys

    from mlm_ppl.models.constraints import code_trusted, trusting_code

    module = tmp_path / "spec_side_effect.py"
    module.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n\ndef f(s):\n    return [0.0 for _ in s]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"experts": [{"name": "e", "kind": "spec_side_effect:f"}, {"name": "h", "kind": "hydropathy"}]}
    for call in (lambda: ConstraintSpec.from_dict(data, source="run/config.json"), lambda: _from_file(tmp_path, data)):
        with pytest.raises(ValueError) as err:
            call()
        message = one_line(err)
        assert "experts[0] ('e'), key 'kind': names Python code ('spec_side_effect:f')" in message, message
        assert "--trust-code" in message and "trust_code=True" in message
    assert not (tmp_path / "imported").exists() and "spec_side_effect" not in sys.modules
    assert not code_trusted()
    with trusting_code():
        spec = ConstraintSpec.from_dict(data)
    assert (tmp_path / "imported").exists() and not code_trusted()
    recorded = spec.to_dict()["experts"][0]
    assert recorded["code_digest"].startswith("sha256:") and len(recorded["code_digest"]) == 7 + 64
    assert ConstraintSpec.from_dict({"experts": [data["experts"][1]]}).all_experts[0].name == "h"  # no consent needed
    assert pickle.loads(pickle.dumps(spec)).to_dict() == spec.to_dict()
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('[[rules]]\nkind = "forbid"\nname = "caf\xe9"\npattern = "A"\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}: not UTF-8 text \(byte 37"):
        ConstraintSpec.from_toml(bad)


def _from_file(tmp_path, data):
    path = tmp_path / "spec.toml"
    path.write_text('[[experts]]\nname = "e"\nkind = "spec_side_effect:f"\n')
    return ConstraintSpec.from_toml(path)


def test_from_dict_names_its_source():
    with pytest.raises(ValueError) as err:
        ConstraintSpec.from_dict({"rules": [{"kind": "forbid", "name": "x", "pattern": "("}]}, source="cli")
    assert one_line(err).startswith("cli: rules[0] ('x'), key 'pattern': rule 'x': bad regular expression '('")
    assert ConstraintSpec.from_dict({"liabilities": True}).liabilities == tuple(LIABILITIES)
