"""designs --where (issue 46): the condition language against hand-computed cases, its refusals, and
the filter on a run with a reference loop, every design kept meeting it (checked from the table)."""

import numpy as np
import pytest
from test_cli_constraints import _sample

import mlm_ppl
from mlm_ppl.cli import main
from mlm_ppl.designs.where import parse_where

NAMES = {"lp": "lp", "energy": "energy", "kd": "expert_kd", "expert_kd": "expert_kd", "n_mutations": "n_mutations"}
COLUMNS = {
    "lp": np.array([-1.0, -5.0, -3.0, -2.0]),
    "energy": np.array([1.0, 5.0, 3.0, 2.0]),
    "expert_kd": np.array([-2.0, 0.5, -1.0, 1.0]),
    "n_mutations": np.array([1.0, 3.0, 2.0, 0.0]),
}
AT_REFERENCE = {"energy": 2.5, "expert_kd": -0.5}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("lp > -2.5", [1, 0, 0, 1]),
        ("kd < reference", [1, 0, 1, 0]),
        ("expert_kd<reference-1", [1, 0, 0, 0]),
        ("energy <= reference + 0.5", [1, 0, 1, 1]),
        ("reference > kd", [1, 0, 1, 0]),
        ("kd < reference and n_mutations <= 1", [1, 0, 0, 0]),
        ("n_mutations == 0 or energy >= 5", [0, 1, 0, 1]),
        ("not (lp < -2.5) and not kd > 0", [1, 0, 0, 0]),
        ("(lp > -4 or n_mutations > 2) and energy != 2", [1, 1, 1, 0]),
        ("-1.5e0 >= lp", [0, 1, 1, 1]),
    ],
)
def test_conditions_read_as_by_hand(text, expected):
    condition, _ = parse_where(text, NAMES)
    assert condition(COLUMNS, AT_REFERENCE).tolist() == [bool(x) for x in expected]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "give a condition"),
        ("lp >", "expected a number, a column or 'reference' at its end"),
        ("lp > 1 and", "expected a number, a column or 'reference' at its end"),
        ("(lp > 1", r"expected '\)' at its end"),
        ("lp 1", r"expected a comparison \(<, <="),
        ("lp > 1 lp", "expected 'and', 'or' or the end at 'lp'"),
        ("hydro < 1", "no column 'hydro'; the columns are energy, expert_kd, lp, n_mutations"),
        ("reference < 2", "'reference' compares a column with its own value"),
        ("lp > __import__('os')", "cannot read"),
        ("lp > 1; rm", "cannot read"),
    ],
)
def test_what_it_cannot_read_is_one_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_where(text, NAMES)


@pytest.mark.slow  # 4-5 s: two runs and four tables (make test-fast keeps under 3 minutes)
def test_designs_where_keeps_only_the_draws_that_meet_it(model_dir, tmp_path, capsys):
    out, spec = tmp_path / "run", tmp_path / "spec.toml"
    spec.write_text('reference = "DCA"\n\n[[experts]]\nkind = "hydropathy"\nname = "kd"\nweight = -0.5\n')
    assert main(_sample(model_dir, out, "--constraints", str(spec), draws="30")) == 0
    kd = {"A": 1.8, "C": 2.5, "D": -3.5, "E": -3.5}
    capsys.readouterr()
    where = "kd < reference and n_mutations <= 1"
    assert main(["designs", str(out), "--top", "20", "--min-hamming", "0", "--where", where]) == 0
    captured = capsys.readouterr()
    header, *rows = captured.out.splitlines()
    columns = header.split("\t")
    assert rows and "--where left out distinct sequences that do not meet it:" in captured.err
    for row in rows:
        fields = dict(zip(columns, row.split("\t")))
        loop = fields["sequence"][1] + fields["sequence"][3:5]
        assert sum(kd[c] for c in loop) < sum(kd[c] for c in "DCA") and int(fields["n_mutations"]) <= 1
    # the same from Python, as a DataFrame with the loops decoded
    frame = mlm_ppl.load_run(out).designs(top=20, min_hamming=0, where=where).to_frame()
    assert len(frame) == len(rows) and list(frame.columns[-3:]) == ["min_hamming", "loop", "sequence"]
    assert (frame["loop"] == frame["sequence"].str[1] + frame["sequence"].str[3:5]).all()
    assert (frame["n_mutations"] <= 1).all() and (frame["delta_expert_kd"] < 0).all()
    # without it, some picks fail the condition: the filter took them out
    assert main(["designs", str(out), "--top", "20", "--min-hamming", "0"]) == 0
    every = capsys.readouterr().out.splitlines()[1:]
    assert len(every) > len(rows)
    assert main(["designs", str(out), "--where", "kd <"]) == 2
    assert "where: expected a number, a column or 'reference' at its end" in capsys.readouterr().err
    plain = tmp_path / "plain"
    assert main(_sample(model_dir, plain, draws="10")) == 0
    assert main(["designs", str(plain), "--where", "energy < reference"]) == 2
    assert "has no reference loop of its designed loop's length: give --reference LOOP" in capsys.readouterr().err
