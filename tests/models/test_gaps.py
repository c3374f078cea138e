"""Counted masks and variable gaps in templates (mlm_ppl.models.gaps), and the length prior."""

import pytest
import torch

from mlm_ppl import MaskedLMDistribution
from mlm_ppl.models.gaps import (
    GapTemplate,
    LengthPrior,
    LengthReference,
    expand_counts,
    find_gap,
    has_counts,
    has_variable_gap,
    parse_gap,
)

M = "[MASK]"


def test_fixed_counts_are_written_out():
    assert expand_counts("A[MASK]{3}C", M) == "A" + M * 3 + "C"
    assert expand_counts("[MASK]{ 2 }C[MASK]{1}[MASK]", M) == M * 2 + "C" + M + M
    assert expand_counts("<mask>{2}A", "<mask>") == "<mask><mask>A"
    assert expand_counts("ACD", M) == "ACD" and not has_counts("A[MASK]C") and has_counts("A[MASK]{2}")


@pytest.mark.parametrize(
    "text, match",
    [
        ("A[MASK]{0}C", r"has no position; a count is at least 1"),
        ("A[MASK]{0,3}C", r"the gap \[MASK\]\{0,3\} may be empty; a gap has at least 1 position \(\[MASK\]\{1,3\}\)"),
        ("A[MASK]{5,2}C", r"ends before it starts; give \{2,5\}"),
        ("A[MASK]{x}C", r"is not a count; give \[MASK\]\{n\}"),
        ("A[MASK]{3,}C", r"is not a count"),
        ("A[MASK]{-1}C", r"is not a count"),
        ("A[MASK]{\u0663}C", r"is not a count"),  # an Arabic-Indic 3 (issue 47, row 13): digits are 0-9
        ("A[MASK]{2,\uff14}C", r"is not a count"),  # a fullwidth 4
        ("AC{3}", r"'\{3\}' at character 2 follows no mask token"),
        ("A[MASK]{3C", r"unmatched '\{'"),
        ("A[MASK]3}C", r"unmatched '\}'"),
        ("A[MASK]{2,4}C", r"the variable gap \[MASK\]\{2,4\} gives loops of several lengths.*--templates"),
    ],
)
def test_bad_counts_are_one_line_errors(text, match):
    with pytest.raises(ValueError, match=match) as err:
        expand_counts(text, M)
    assert "\n" not in str(err.value)


def test_a_variable_gap_is_read_with_the_fixed_counts_around_it_written_out():
    gap = parse_gap("A[MASK]{2}C[MASK]{1,3}D[MASK]", M)
    assert gap == GapTemplate("A" + M * 2 + "C", "D" + M, 1, 3, M)
    assert list(gap.lengths) == [1, 2, 3]
    assert gap.template(2) == "A" + M * 2 + "C" + M * 2 + "D" + M
    with pytest.raises(ValueError, match="gap length 4 is outside 1..3"):
        gap.template(4)
    assert parse_gap("A[MASK]{3}C", M) is None
    two = r"2 variable gaps \(\[MASK\]\{1,2\}, \[MASK\]\{3,4\}\); a template has at most one"
    with pytest.raises(ValueError, match=two):
        parse_gap("A[MASK]{1,2}C[MASK]{3,4}", M)
    with pytest.raises(ValueError, match="ends before it starts"):
        parse_gap("A[MASK]{5,2}", M)


def test_the_longest_template_must_fit_the_model(tiny4):
    gap = parse_gap("A[MASK]{1,40}C", M)
    shortest = int(tiny4.encode([gap.template(1)], allow_mask=True).input_ids.shape[1])  # CLS A m C SEP
    gap.check_fits(44, shortest)  # A + 40 + C + 2 special tokens
    too_long = r"44 tokens, 4 more than the model accepts \(40\); lower the gap's upper bound to 36"
    with pytest.raises(ValueError, match=too_long):
        gap.check_fits(40, shortest)
    assert has_variable_gap("A[MASK]{1, 3}C") and has_variable_gap("A[MASK]{5,2}C")
    assert not has_variable_gap("A[MASK]{3}C") and not has_variable_gap(None)


def test_a_distribution_reads_a_fixed_count_and_refuses_a_variable_gap(tiny4):
    counted = MaskedLMDistribution(tiny4, "A[MASK]{2}C")
    assert torch.equal(counted.template, MaskedLMDistribution(tiny4, "A[MASK][MASK]C").template)
    with pytest.raises(ValueError, match="the variable gap"):
        MaskedLMDistribution(tiny4, "A[MASK]{1,2}C")


def test_the_length_prior_from_uniform_or_a_table(tmp_path):
    gap = parse_gap("A[MASK]{2,5}C", M)
    assert LengthPrior.read("uniform", gap).weights == {2: 0.25, 3: 0.25, 4: 0.25, 5: 0.25}
    table = tmp_path / "prior.tsv"
    table.write_text("# CDR-H3 lengths\n2\t1\n\n4\t3  # most\n5\t0\n")
    prior = LengthPrior.read(str(table), gap)
    assert prior.weights == {2: 0.25, 4: 0.75} and prior.source == str(table)
    # the mixture sum_L pi(L) p_L from N_L draws of each length: pi(L) / N_L per draw
    assert prior.draw_weights({2: 10, 4: 30, 3: 5}) == {2: 0.025, 4: 0.025, 3: 0.0}
    with pytest.raises(ValueError, match=r"lengths \[4\] have prior weight but no draws"):
        prior.draw_weights({2: 10})


@pytest.mark.parametrize(
    "text, match",
    [
        ("6\t1\n", r"line 1: '6\\t1': length 6 is outside the gap's 2..5"),
        ("2\t1\n2\t2\n", r"line 2: .*length 2 is given twice"),
        ("2\t-1\n", r"the weight must be a finite number >= 0"),
        ("2\tnan\n", r"the weight must be a finite number >= 0"),
        ("2\t0\n3\t0\n", r"its weights sum to 0; they must sum to a positive number"),
        ("2 1 3\n", r"line 1: '2 1 3' is not LENGTH<TAB>WEIGHT"),
        ("two\t1\n", r"is not LENGTH<TAB>WEIGHT \(an integer and a number\)"),
        ("", r"its weights sum to 0"),
    ],
)
def test_bad_length_priors_are_one_line_errors(tmp_path, text, match):
    gap = parse_gap("A[MASK]{2,5}C", M)
    table = tmp_path / "prior.tsv"
    table.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        LengthPrior.read(str(table), gap)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="cannot read it"):
        LengthPrior.read(str(tmp_path / "missing.tsv"), gap)


def test_a_length_reference_is_renormalised_over_the_run_lengths(tmp_path):
    """A repertoire's table (any lengths >= 1, comments) compared over a run's lengths 2..4: by hand,
    weights 1, 2, 3, 4 at lengths 1..4 give 2/9, 3/9, 4/9 over 2..4, which hold 9/10 of the weight."""
    table = tmp_path / "reference.tsv"
    table.write_text("# a repertoire\n1\t1\n2\t2\n3\t3\n4\t4\n")
    ref = LengthReference.read(str(table), [2, 3, 4])
    assert ref.weights == pytest.approx({2: 2 / 9, 3: 3 / 9, 4: 4 / 9}) and list(ref.weights) == [2, 3, 4]
    assert ref.inside == pytest.approx(0.9) and ref.source == str(table)
    with pytest.raises(ValueError, match=r"length reference .*: it gives no weight to the run's lengths 5..6"):
        LengthReference.read(str(table), [5, 6])
    table.write_text("0\t1\n")
    with pytest.raises(ValueError, match=r"line 1: '0\\t1': a length is an integer >= 1"):
        LengthReference.read(str(table), [2, 3])
    with pytest.raises(ValueError, match="cannot read it .*give a file of lines LENGTH<TAB>WEIGHT"):
        LengthReference.read(str(tmp_path / "missing.tsv"), [2, 3])


def test_find_gap_reads_the_mask_token_off_the_text_and_the_prior_round_trips_its_record():
    """The one parse of a variable gap before a model loads: the mask token before the gap, either
    of MASK_TOKENS; a gap after anything else is a one-line error; a record reads back as its prior."""
    assert find_gap("CAR[MASK]{2,4}WG") == parse_gap("CAR[MASK]{2,4}WG", M)
    assert find_gap("A<mask>{2}C<mask>{1,3}") == GapTemplate("A<mask><mask>C", "", 1, 3, "<mask>")
    assert find_gap("CAR[MASK]{3}WG") is None and find_gap(None) is None
    with pytest.raises(ValueError, match=r"the variable gap '\{2,4\}' at character 3 follows no mask token"):
        find_gap("CAR{2,4}WG")
    prior = LengthPrior({3: 0.25, 2: 0.75}, "file.tsv")
    assert prior.record() == {"2": 0.75, "3": 0.25} and list(prior.record()) == ["2", "3"]
    back = LengthPrior.from_record(prior.record())
    assert back.weights == {2: 0.75, 3: 0.25} and back.source == "recorded"
