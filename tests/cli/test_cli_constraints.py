"""mlm-ppl sample with constraints (issue 23): --constraints FILE.toml, --forbid REGEX,
--liabilities [NAME ...], one spec recorded with the run and compared on --resume; batches take
it too; a malformed spec is one line before any work, and nothing is written."""

import json
import os
import re
import warnings

import pytest
import torch
from cli_checks import one_line_error as _one_line_error
from cli_checks import recorded_settings as _settings

from mlm_ppl import campaign
from mlm_ppl.cli import main
from mlm_ppl.models.constraints import ConstraintSpec, ConstraintTarget, Forbid
from mlm_ppl.settings import RunSettings
from mlm_ppl.testing import save_tiny, tiny_antibody_bert

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"
ALPHABET = "ACDE"

SPEC = """\
[[rules]]
kind = "allowed"
name = "first-a-or-c"
tokens = "AC"
positions = [0]

[[rules]]
kind = "forbid"
name = "no-dd"
pattern = "DD"

[[experts]]
name = "few-e"
kind = "residue-count"
weight = -1.5
params = { residues = "E" }
"""

EXPERTS = """\
import math


def raises(sequences):
    raise KeyError("no such residue")


def nan(sequences):
    return [math.nan for _ in sequences]
"""


def _sample(model_dir, out, *extra, template=TEMPLATE, chains="3", draws="60"):
    return ["sample", "--model", str(model_dir), "--template", template, "--chains", chains, "--draws", draws,
            "--seed", "3", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _sequences(directory, decode):
    tokens = az.from_netcdf(os.path.join(directory, "run.nc")).posterior["tokens"].values
    return [decode(row) for row in tokens.reshape(-1, tokens.shape[-1])]


def _residues(row, vocab):
    return "".join(vocab[t] for t in row if len(vocab[t]) == 1)


def _vocab(model_dir):
    from mlm_ppl import load_mlm

    return load_mlm(str(model_dir)).vocab


def test_a_spec_file_holds_in_every_draw_and_is_recorded(model_dir, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--constraints", str(spec))) == 0
    vocab = _vocab(model_dir)
    seqs = _sequences(out, lambda row: _residues(row, vocab))
    assert len(seqs) == 3 * 60 and all(len(s) == 5 and s[0] == "A" and s[2] == "C" for s in seqs)
    assert all(s[1] in "AC" and "DD" not in s for s in seqs)
    config = json.loads((out / "config.json").read_text())
    assert [r["name"] for r in config["constraints"]["rules"]] == ["first-a-or-c", "no-dd"]
    assert config["constraints"]["experts"][0]["kind"] == "residue-count"
    # the run's target, rebuilt from its record, is the constrained one: the expert's term is in lp
    _, target, kernel = campaign.build(_settings(out))
    assert isinstance(target, ConstraintTarget) and kernel.target is target
    assert [e.name for e in target.constraints.spec.all_experts] == ["few-e"]
    data = az.from_netcdf(os.path.join(out, "run.nc"))
    lp = torch.as_tensor(data.sample_stats["lp"].values).reshape(-1)[::20]
    tokens = torch.as_tensor(data.posterior["tokens"].values)
    tokens = tokens.reshape(-1, tokens.shape[-1])[::20]
    energy = target.base.evaluate(tokens).energy.double()
    designed_e = torch.tensor([float(_residues(row, vocab)[3:].count("E") + (_residues(row, vocab)[1] == "E"))
                               for row in tokens.tolist()], dtype=torch.float64)  # fmt: skip
    assert torch.allclose(lp.double(), -energy - 1.5 * designed_e, atol=1e-4)
    capsys.readouterr()


@pytest.mark.slow  # about 2 s (make test-fast keeps under 3 minutes)
def test_repeated_forbid_flags_are_rules_forbid_1_and_forbid_2(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--forbid", "DD", "--forbid", "E$", "--kernel", "surrogate-mh")) == 0
    vocab = _vocab(model_dir)
    seqs = _sequences(out, lambda row: _residues(row, vocab))
    assert seqs and all("DD" not in s and not s.endswith("E") for s in seqs)
    rules = json.loads((out / "config.json").read_text())["constraints"]["rules"]
    assert rules == [
        {"kind": "forbid", "name": "forbid-1", "pattern": "DD"},
        {"kind": "forbid", "name": "forbid-2", "pattern": "E$"},
    ]
    capsys.readouterr()


@pytest.fixture(scope="module")
def antibody_dir(tmp_path_factory):
    return str(save_tiny(tiny_antibody_bert(seed=2), tmp_path_factory.mktemp("m") / "antibody"))


LIABILITY_MOTIFS = ("N[^P][ST]", "N[GS]", "D[GS]", "DP")


@pytest.mark.parametrize("names", [[], ["deamidation", "dp-cleavage"]])
def test_liabilities_are_absent_from_every_draw(antibody_dir, tmp_path, capsys, names):
    template = "AAAA" + "[MASK]" * 6 + "AAAA"  # a framework of A: every motif match touches a designed residue
    out = tmp_path / "run"
    assert main(_sample(antibody_dir, out, "--liabilities", *names, template=template, draws="40")) == 0
    vocab = _vocab(antibody_dir)
    seqs = _sequences(out, lambda row: _residues(row, vocab))
    motifs = LIABILITY_MOTIFS if not names else ("N[GS]", "DP")
    assert len(seqs) == 3 * 40
    assert all(not re.search(m, s) for s in seqs for m in motifs)
    if not names:
        assert all(s[4:10].count("C") % 2 == 0 for s in seqs)  # no unpaired designed cysteine
    recorded = json.loads((out / "config.json").read_text())["constraints"]["liabilities"]
    assert recorded == (names or recorded) and (names or len(recorded) == 6)
    capsys.readouterr()


def test_a_batch_takes_the_spec(model_dir, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    templates = tmp_path / "templates.tsv"
    templates.write_text("one\tA[MASK]C[MASK][MASK]\ntwo\t[MASK]DC[MASK][MASK]\n")
    out = tmp_path / "batch"
    argv = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "30",
            "--out", str(out), "--no-progress", "--constraints", str(spec), "--forbid", "^C"]  # fmt: skip
    assert main(argv) == 0
    header, *lines = (out / "designs.tsv").read_text().splitlines()
    assert header.split("\t") == ["template", "chain", "draw", "energy", "feasible", "few-e", "sequence"]
    free = {"one": [1, 3, 4], "two": [0, 3, 4]}
    rows = [line.split("\t") for line in lines]
    assert len(rows) == 2 * 2 * 30 and {r[0] for r in rows} == {"one", "two"}
    for name, _, _, energy, feasible, few_e, seq in rows:
        assert "DD" not in seq and not seq.startswith("C") and seq[1 if name == "one" else 0] in "AC"
        assert float(energy) == float(energy) and abs(float(energy)) < 1e6
        assert feasible == "1" and float(few_e) == [seq[i] for i in free[name]].count("E")  # designed E
    config = json.loads((out / "config.json").read_text())["settings"]["constraints"]
    assert [r["name"] for r in config["rules"]] == ["first-a-or-c", "no-dd", "forbid-1"]
    for name in ("one", "two"):
        assert json.loads((out / name / "config.json").read_text())["constraints"] == config
    # the energy column is the model's energy E, without the expert's term
    _, target, _ = campaign.build(_settings(out / "one"))
    tokens = torch.as_tensor(az.from_netcdf(os.path.join(out, "one", "run.nc")).posterior["tokens"].values)
    energy = target.base.evaluate(tokens.reshape(-1, tokens.shape[-1])).energy.double()
    column = torch.tensor([float(r[3]) for r in rows if r[0] == "one"], dtype=torch.float64)
    assert torch.allclose(column, energy, atol=1e-3)
    capsys.readouterr()


def test_resume_refuses_an_edited_spec(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--forbid", "DD", "--checkpoint-seconds", "0", draws="10")) == 0
    capsys.readouterr()
    config_file = out / "config.json"
    config = json.loads(config_file.read_text())
    assert main(["sample", "--resume", str(out), "--no-progress", "--forbid", "EE"]) == 2
    assert "--constraints/--forbid/--liabilities" in _one_line_error(capsys)
    assert main(["sample", "--resume", str(out), "--no-progress", "--forbid", "DD"]) == 0  # its own spec
    capsys.readouterr()
    config["constraints"]["rules"][0]["pattern"] = "EE"
    config_file.write_text(json.dumps(config))
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    line = _one_line_error(capsys)
    assert "constraints.rules" in line and "'EE'" in line and "differs from the settings" in line


@pytest.mark.parametrize(
    "flags, spec, match",
    [
        (["--forbid", "D("], None, "--forbid 'D(': rule 'forbid-1'"),
        (["--forbid", "D*"], None, "matches the empty string"),
        (["--liabilities", "glycation"], None, "unknown liability 'glycation'"),
        ([], 'liabilities = ["glycation"]', "unknown liability 'glycation'"),
        ([], '[[rules]]\nkind = "prefer"\nname = "x"\npattern = "A"\n', "key 'kind': kind must be one of"),
        (
            [],
            '[[experts]]\nname = "e"\nkind = "residue-count"\nweight = "heavy"\nparams = { residues = "E" }\n',
            "key 'weight': weight must be a number",
        ),  # fmt: skip
        (["--trust-code"], '[[experts]]\nname = "e"\nkind = "cexperts_cli:raises"\n', "KeyError: 'no such residue'"),
        (["--trust-code"], '[[experts]]\nname = "e"\nkind = "cexperts_cli:nan"\n', "expert 'e' returned nan"),
        ([], '[[experts]]\nname = "e"\nkind = "cexperts_cli:nan"\n', "names Python code ('cexperts_cli:nan')"),
        ([], '[[rules]]\nkind = "allowed"\nname = "w"\ntokens = "W"\n', "token 'W' is not in the vocabulary"),
        (
            [],
            '[[rules]]\nkind = "allowed"\nname = "a"\ntokens = "A"\n\n[[rules]]\nkind = "allowed"\nname = "c"\n'
            'tokens = "C"\npositions = [1]\n',
            "rule 'c' leaves free position 1",
        ),  # fmt: skip
        ([], '[[rules]]\nkind = "allowed"\nname = "far"\ntokens = "A"\npositions = [7]\n', "out of range"),
        (["--forbid", "[ACDE]"], None, "no sequence satisfying 'forbid-1' found"),  # no state: refused at the start
        (["--forbid", "DD", "--kernel", "pseudo-gibbs"], None, "pseudo-gibbs would ignore the log-factor"),
        (["--forbid", "DD"], '[[rules]]\nkind = "forbid"\nname = "forbid-1"\npattern = "E"\n', "named 'forbid-1'"),
    ],
)
def test_a_malformed_spec_is_one_line_and_nothing_is_written(
    model_dir, tmp_path, capsys, monkeypatch, flags, spec, match
):
    (tmp_path / "cexperts_cli.py").write_text(EXPERTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    if spec is not None:
        (tmp_path / "spec.toml").write_text(spec)
        flags = [*flags, "--constraints", str(tmp_path / "spec.toml")]
    out = tmp_path / "out"
    assert main(_sample(model_dir, out, *flags)) == 2
    line = _one_line_error(capsys)
    assert match in line, line
    assert not out.exists()


def test_an_alphabet_spec_is_sampled_by_pseudo_gibbs(model_dir, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rules]]\nkind = "allowed"\nname = "no-e"\ntokens = "ACD"\n')
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--constraints", str(spec), "--kernel", "pseudo-gibbs", draws="30")) == 0
    vocab = _vocab(model_dir)
    assert all("E" not in s for s in _sequences(out, lambda row: _residues(row, vocab)))
    capsys.readouterr()


def test_settings_recorded_before_constraints_read_as_none_and_specs_are_canonical():
    record = RunSettings(template=TEMPLATE).to_dict()
    del record["constraints"]  # a record written before the setting existed
    assert RunSettings.from_dict(record).constraints is None
    spec = ConstraintSpec([Forbid("no-dd", "DD")], liabilities=["dp-cleavage"])
    made = RunSettings(template=TEMPLATE, constraints=spec.to_dict())
    assert made.constraints == {
        "experts": [],
        "liabilities": ["dp-cleavage"],
        "rules": [{"kind": "forbid", "name": "no-dd", "pattern": "DD"}],
    }
    assert RunSettings(template=TEMPLATE, constraints={"rules": []}).constraints is None  # an empty spec: none
    with pytest.raises(ValueError, match=r"constraints: rules\[0\] \('x'\), key 'pattern'"):
        RunSettings.from_dict({**record, "constraints": {"rules": [{"kind": "forbid", "name": "x", "pattern": "("}]}})


def test_code_named_in_a_spec_or_a_record_runs_only_with_trust_code(model_dir, tmp_path, capsys, monkeypatch):
    """Issue 36, rows 1 and 2. An expert that names Python code ('module:function') in --constraints
    or in the record --resume reads is refused without --trust-code: one line naming the code, its
    module never imported, nothing written. With consent the run records the module's digest, and a
    resume after the module's source changed is refused by name (it would relabel the draws)."""
    import sys

    flag = tmp_path / "imported"
    module = tmp_path / "trusted_expert.py"
    module.write_text(
        f"with open({str(flag)!r}, 'a') as f:\n    f.write('x')\n\n\ndef d_count(sequences):\n"
        "    return [0.0 for s in sequences]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[experts]]\nname = "d"\nkind = "trusted_expert:d_count"\n')
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--constraints", str(spec), draws="4")) == 2
    line = _one_line_error(capsys)
    assert "names Python code ('trusted_expert:d_count')" in line and "--trust-code" in line, line
    assert not flag.exists() and not out.exists()

    assert main(_sample(model_dir, out, "--constraints", str(spec), "--trust-code", draws="4")) == 0
    capsys.readouterr()
    assert flag.exists()
    recorded = json.loads((out / "config.json").read_text())["constraints"]["experts"][0]
    assert recorded["kind"] == "trusted_expert:d_count" and recorded["code_digest"].startswith("sha256:")

    monkeypatch.delitem(sys.modules, "trusted_expert")
    flag.unlink()
    assert main(["sample", "--resume", str(out), "--no-progress"]) == 2
    line = _one_line_error(capsys)
    assert "names Python code ('trusted_expert:d_count')" in line and "config.json" in line, line
    assert not flag.exists()
    assert main(["sample", "--resume", str(out), "--no-progress", "--trust-code"]) == 0
    capsys.readouterr()

    module.write_text(module.read_text().replace("0.0 for s", "5.0 * s.count('D') for s"))
    monkeypatch.delitem(sys.modules, "trusted_expert")
    flag.unlink()
    assert main(["sample", "--resume", str(out), "--no-progress", "--trust-code"]) == 2
    line = _one_line_error(capsys)
    assert "the code of 'trusted_expert:d_count' changed since this was recorded" in line, line
    assert not flag.exists()  # refused before the changed module ran


@pytest.mark.slow
def test_a_change_to_a_module_the_expert_imports_is_refused_on_resume(model_dir, tmp_path, capsys, monkeypatch):
    """Issue 47, row 5: the digest covered the expert's own file only, so a change to ``helper.py``, which
    it imports, was accepted and relabelled the earlier draws. Every ``.py`` file of its directory now."""
    import sys

    code = tmp_path / "code"
    code.mkdir()
    (code / "helper.py").write_text("def g(sequences):\n    return [0.0 for s in sequences]\n")
    (code / "reexp.py").write_text("from helper import g\n")
    monkeypatch.syspath_prepend(str(code))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[experts]]\nname = "e"\nkind = "reexp:g"\n')
    out = tmp_path / "run"
    assert main(_sample(model_dir, out, "--constraints", str(spec), "--trust-code", draws="4")) == 0
    (code / "helper.py").write_text("def g(sequences):\n    return [100.0 for s in sequences]\n")
    for name in ("reexp", "helper"):
        monkeypatch.delitem(sys.modules, name)
    capsys.readouterr()
    assert main(["sample", "--resume", str(out), "--no-progress", "--trust-code", "--draws", "8"]) == 2
    assert "the code of 'reexp:g' changed since this was recorded" in _one_line_error(capsys)


@pytest.mark.slow  # 5-6 s: a run, the model read again, four tables (make test-fast keeps under 3 minutes)
def test_the_command_line_adds_a_trust_region_and_its_draws_keep_it(model_dir, tmp_path, capsys):
    """--reference LOOP --max-mutations K --min-mutations D beside a spec file with an expert: rule
    mutations in every draw, the summary's Hamming reference, and designs' mutations and deltas
    from the reference (recomputed here: the energy by the model, the expert by a table)."""
    out, spec = tmp_path / "run", tmp_path / "spec.toml"
    spec.write_text('[[experts]]\nkind = "hydropathy"\nname = "kd"\nweight = -0.5\n')
    flags = ("--constraints", str(spec), "--reference", "DCA", "--max-mutations", "2", "--min-mutations", "1")
    assert main(_sample(model_dir, out, *flags, draws="30")) == 0
    idata = az.from_netcdf(os.path.join(out, "run.nc"))
    assert (idata.posterior["rule_mutations"].values == 1).all()
    # the spec's reference is the summary's Hamming reference
    assert idata.attrs["hamming_reference"] == "DCA" and "hamming_chain0_start" not in idata.posterior
    distance = idata.posterior["hamming_reference"].values
    assert distance.max() <= 2 and distance.min() >= 1
    rows = [line.split("\t")[-1] for line in (out / "samples.txt").read_text().splitlines()[1:]]
    loops = [seq[1] + seq[3:5] for seq in rows]  # A?C??
    assert len(loops) == 3 * 30 and all(1 <= sum(a != b for a, b in zip(loop, "DCA")) <= 2 for loop in loops)
    assert len(set(loops)) > 3
    config = json.loads((out / "config.json").read_text())
    assert config["constraints"]["reference"] == "DCA"
    # designs count each design's mutations and deltas from the spec's reference, or from --reference
    from mlm_ppl import MaskedLMDistribution, load_mlm

    mlm = load_mlm(model_dir)
    state = mlm.encode("ADCCA").input_ids  # A?C?? with DCA on the designed positions
    e_ref = float(MaskedLMDistribution(mlm, TEMPLATE).evaluate(state).energy[0])
    kd = {"A": 1.8, "C": 2.5, "D": -3.5, "E": -3.5}
    capsys.readouterr()
    assert main(["designs", str(out), "--top", "4"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    columns = header.split("\t")
    assert columns[-6:] == ["n_mutations", "mutations", "delta_energy", "delta_expert_kd", "min_hamming", "sequence"]
    for row in rows:
        fields = dict(zip(columns, row.split("\t")))
        seq = fields["sequence"]
        loop = seq[1] + seq[3:5]
        changes = [f"{a}{i}{b}" for i, (a, b) in enumerate(zip("DCA", loop), 1) if a != b]
        assert fields["mutations"] == ",".join(changes) and int(fields["n_mutations"]) == len(changes) in (1, 2)
        assert float(fields["delta_energy"]) == pytest.approx(float(fields["energy"]) - e_ref, abs=2e-3)
        loop_kd = sum(kd[c] for c in loop) / 3
        assert float(fields["delta_expert_kd"]) == pytest.approx(loop_kd - sum(kd[c] for c in "DCA") / 3, abs=1e-3)
    assert main(["designs", str(out), "--top", "1", "--reference", "AAA"]) == 0
    first = dict(zip(columns, capsys.readouterr().out.splitlines()[1].split("\t")))
    loop = first["sequence"][1] + first["sequence"][3:5]
    assert first["mutations"] == ",".join(f"A{i}{b}" for i, b in enumerate(loop, 1) if b != "A")
    assert main(["designs", str(out), "--reference", "AAAA"]) == 2
    assert "reference 'AAAA' has 4 tokens; the designed loops have [3]" in capsys.readouterr().err
    assert main(_sample(model_dir, tmp_path / "x", "--max-mutations", "2")) == 2
    assert "count changes from --reference LOOP: give the loop" in capsys.readouterr().err
