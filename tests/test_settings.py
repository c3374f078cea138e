"""RunSettings: a sampling run's settings, one typed record, checked once when it is made."""

import dataclasses
import json

import pytest

from mlm_ppl.inference import GeometricAnnealing, MHOptions, SurrogateOptions
from mlm_ppl.settings import RunSettings, option_flags


def test_the_record_round_trips_through_its_json_form():
    s = RunSettings(template="A[MASK]C", kernel="surrogate-mh", kernel_options={"inner_steps": 3}, seed=5)
    assert isinstance(s.kernel_options, SurrogateOptions) and s.kernel_options.inner_steps == 3
    assert RunSettings.from_dict(s.to_dict()) == s
    assert s.total_steps == 100
    one = s.for_template("[MASK]CC")
    assert (one.template, one.length, one.workers, one.kernel_options) == ("[MASK]CC", None, None, s.kernel_options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 6  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({}, ValueError, "give a template .* or a length"),
        ({"template": "A[MASK]", "length": 3}, ValueError, "not both"),
        ({"template": "A[MASK]", "num_chains": 0}, ValueError, "num_chains must be an integer >= 1, got 0"),
        ({"template": "A[MASK]", "num_samples": 2.5}, TypeError, "num_samples must be an integer, got float 2.5"),
        ({"template": "A[MASK]", "temperature": "hot"}, TypeError, "temperature must be a number"),
        ({"template": "A[MASK]", "kernel": "nuts"}, ValueError, "unknown kernel 'nuts'"),
        (
            {"template": "A[MASK]", "kernel_options": {"inner_steps": 3}},
            TypeError,
            "'mh' takes no option 'inner_steps'",
        ),
        ({"template": "A[MASK]", "kernel_options": {"scan": "zigzag"}}, ValueError, "unknown scan 'zigzag'"),
        ({"template": "A[MASK]", "kernel_options": SurrogateOptions()}, TypeError, "must be MHOptions or a mapping"),
        ({"template": "A[MASK]", "until_converged": 1}, TypeError, "until_converged must be true or false"),
        (
            {"template": "A[MASK]", "until_converged": True, "anneal": "1:0.1"},
            ValueError,
            r"an annealed run seeks a mode and never converges.*drop until_converged \(--until-converged\) or anneal",
        ),
        (
            {"template": "A[MASK]", "until_converged": True, "num_samples": 10},
            ValueError,
            "give num_samples > 10 \\(got 10\\)",
        ),
        (
            {"template": "A[MASK]", "until_converged": True, "workers": 2},
            ValueError,
            "needs every chain's draws in one process; run without workers",
        ),
    ],
)
def test_every_setting_is_checked_when_the_record_is_made(kwargs, error, match):
    with pytest.raises(error, match=match):
        RunSettings(**kwargs)


def test_a_config_file_names_itself_and_every_missing_or_unknown_setting():
    record = RunSettings(template="A[MASK]").to_dict()
    del record["seed"]
    record["colour"] = "red"
    with pytest.raises(ValueError, match=r"^run/config.json: unknown colour; missing seed$"):
        RunSettings.from_dict(record, "run/config.json")
    record = RunSettings(template="A[MASK]").to_dict()
    record["kernel_options"] = {"block_size": "two"}
    with pytest.raises(ValueError, match=r"^run/config.json: block_size must be an integer, got str 'two'$"):
        RunSettings.from_dict(record, "run/config.json")
    assert RunSettings(template="A[MASK]").kernel_options == MHOptions()


def test_one_flag_per_kernel_option_across_kernels():
    flags = option_flags()
    assert [k for k, _ in flags["top_k"]] == ["mh", "surrogate-mh", "replica-mh", "pseudo-gibbs"]
    assert [k for k, _ in flags["replicas"]] == ["surrogate-mh", "replica-mh"]  # declared once, in TemperingOptions
    assert "temperature_schedule" not in flags  # Python only: a callable has no flag and no config entry
    assert flags["compute_lp"][0][1].type is bool


def test_anneal_is_a_recorded_setting_whose_schedule_spans_the_run():
    s = RunSettings(template="A[MASK]C", anneal="1.0:0.050", warmup_steps=10, num_samples=20, thin=2)
    assert s.anneal == "1:0.05" and RunSettings.from_dict(s.to_dict()) == s  # one canonical form
    assert s.schedule() == GeometricAnnealing(1.0, 0.05, 49)  # the last of the 50 steps runs at TO
    assert s.kernel_arguments()["temperature_schedule"] == s.schedule()
    assert s.annealing() == {"schedule": "geometric", "start": 1.0, "end": 0.05, "num_steps": 49, "terms": "all"}
    plain = RunSettings(template="A[MASK]C")
    assert plain.schedule() is None and plain.annealing() is None
    assert "temperature_schedule" not in plain.kernel_arguments()
    record = plain.to_dict()
    del record["anneal"]  # a record written before the setting existed
    assert RunSettings.from_dict(record).anneal is None


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh"])
def test_a_record_from_before_anneal_reads_its_anneal_terms_as_all(kernel):
    """Before the anneal setting, anneal_terms was an option that did nothing without a schedule
    (none could be recorded): such a record was refused ("anneal_terms applies to an annealed run"),
    so --resume and designs of the run failed. It reads as "all" now; new settings still refuse it."""
    record = RunSettings(template="A[MASK]C", kernel=kernel).to_dict()
    del record["anneal"]
    record["kernel_options"]["anneal_terms"] = "mlm"
    s = RunSettings.from_dict(record)
    assert s.anneal is None and s.kernel_options.anneal_terms == "all" and s.annealing() is None
    assert record["kernel_options"]["anneal_terms"] == "mlm"  # the caller's record is not changed
    with pytest.raises(ValueError, match="anneal_terms applies to an annealed run"):
        RunSettings.from_dict({**record, "anneal": None})  # a record with anneal: as written now
    with pytest.raises(ValueError, match="anneal_terms applies to an annealed run"):
        RunSettings(template="A[MASK]C", kernel=kernel, kernel_options={"anneal_terms": "mlm"})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"anneal": "1"}, "anneal must be FROM:TO"),
        ({"anneal": "0:1"}, "FROM and TO must be finite numbers > 0"),
        ({"anneal": "1:0.1", "kernel": "pseudo-gibbs"}, "applies to kernel mh or surrogate-mh, not pseudo-gibbs"),
        ({"kernel_options": {"anneal_terms": "mlm"}}, "anneal_terms applies to an annealed run"),
        (
            {"kernel_options": {"temperature_schedule": GeometricAnnealing(1.0, 0.1, 5)}},
            "a temperature_schedule cannot be recorded with a run; give anneal='FROM:TO'",
        ),
    ],
)
def test_annealing_settings_are_checked_when_the_record_is_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RunSettings(template="A[MASK]C", **kwargs)


def test_a_surrogate_record_from_before_the_context_options_compares_equal_to_todays():
    """A surrogate-mh record written before surrogate_context and surrogate_frame existed, and the
    checkpoint a resume wrote beside it in today's form, are the same settings (its runs used the
    whole sequence): a second resume is not refused as an edit. A recorded value is kept."""
    today = RunSettings(template="A[MASK]C", kernel="surrogate-mh").to_dict()
    old = json.loads(json.dumps(today))
    del old["kernel_options"]["surrogate_context"], old["kernel_options"]["surrogate_frame"]
    assert RunSettings.completed(old) == RunSettings.completed(today)
    assert RunSettings.from_dict(old) == RunSettings.from_dict(today)
    cropped = RunSettings(template="A[MASK]C", kernel="surrogate-mh", kernel_options={"surrogate_context": 3})
    assert RunSettings.completed(cropped.to_dict())["kernel_options"]["surrogate_context"] == 3
    assert (
        "surrogate_context" not in RunSettings.completed(RunSettings(template="A[MASK]C").to_dict())["kernel_options"]
    )


@pytest.mark.parametrize(
    "kernel, template, added",
    [
        ("mh", "A[MASK]C", ("p_unmask", "unmask_size")),
        ("gap-jump", "A[MASK]{1,3}C", ("p_unmask", "unmask_size")),
        (
            "surrogate-mh",
            "A[MASK]C",
            ("block_size", "p_unmask", "unmask_size", "p_update", "p_insert", "p_delete", "surrogate_context"),
        ),
    ],
)
def test_each_kernel_reads_its_older_records_with_the_values_their_runs_had(kernel, template, added):
    """A record written before the unmask proposals (0.3) lacks their options: its kernel's
    older_records fill them in with what its runs did, so a resume is not refused as an edit (the
    converge run of 2026-12-02 was recorded before p_update, p_insert and p_delete)."""
    today = RunSettings(template=template, kernel=kernel).to_dict()
    old = json.loads(json.dumps(today))
    for name in added:
        del old["kernel_options"][name]
    assert RunSettings.completed(old) == RunSettings.completed(today)
    assert RunSettings.from_dict(old) == RunSettings.from_dict(today)


def test_plan_gap_chooses_the_length_mode_in_the_library(tmp_path):
    """What --length-mode, --length-prior and --kernel decide, decided by campaign.plan_gap (the
    command line only passes its flags on): the kernel by capability, the prior read once, each
    refusal naming what to give instead."""
    from mlm_ppl import campaign
    from mlm_ppl.inference.registry import length_kernels

    template = "CAR[MASK]{2,4}WG"
    jump = campaign.plan_gap(template, "jump")
    assert jump.kernel == length_kernels()[0] == "gap-jump" and jump.prior.source == "uniform"
    assert jump.prior.record() == {"2": 1 / 3, "3": 1 / 3, "4": 1 / 3}
    assert campaign.plan_gap(template, "jump", kernel="surrogate-mh").kernel == "surrogate-mh"
    table = tmp_path / "prior.tsv"
    table.write_text("2\t1\n4\t3\n")
    strata = campaign.plan_gap(template, "strata", str(table), kernel="mh")
    templates, lengths = strata.strata()
    assert [name for name, _ in templates] == ["L02", "L04"] and templates[1][1] == "CAR" + "[MASK]" * 4 + "WG"
    assert lengths == {"template": template, "prior": {"2": 0.25, "4": 0.75}, "source": str(table)}
    for mode, prior, kernel, match in [
        (None, None, None, "give --length-mode jump"),
        ("hop", None, None, "--length-mode must be one of jump, strata"),
        ("jump", None, "mh", "drop --kernel mh"),
        ("strata", None, "gap-jump", "which kernel gap-jump does not sample"),
        ("jump", str(tmp_path / "missing.tsv"), None, "missing.tsv"),
    ]:
        with pytest.raises(ValueError, match=match):
            campaign.plan_gap(template, mode, prior, kernel)
    with pytest.raises(ValueError, match="apply to a template with a variable gap"):
        campaign.plan_gap("CAR[MASK]{3}WG", "jump")
