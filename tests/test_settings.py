"""RunSettings: a sampling run's settings, one typed record, checked once when it is made."""

import dataclasses

import pytest

from mlm_ppl.inference import MHOptions, SurrogateOptions
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
        ({"template": "A[MASK]", "chains": 0}, ValueError, "chains must be an integer >= 1, got 0"),
        ({"template": "A[MASK]", "draws": 2.5}, TypeError, "draws must be an integer, got float 2.5"),
        ({"template": "A[MASK]", "temperature": "hot"}, TypeError, "temperature must be a number"),
        ({"template": "A[MASK]", "kernel": "nuts"}, ValueError, "unknown kernel 'nuts'"),
        (
            {"template": "A[MASK]", "kernel_options": {"inner_steps": 3}},
            TypeError,
            "'mh' takes no option 'inner_steps'",
        ),
        ({"template": "A[MASK]", "kernel_options": {"scan": "zigzag"}}, ValueError, "unknown scan 'zigzag'"),
        ({"template": "A[MASK]", "kernel_options": SurrogateOptions()}, TypeError, "must be MHOptions or a mapping"),
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
    assert [k for k, _ in flags["top_k"]] == ["mh", "surrogate-mh", "pseudo-gibbs"]
    assert "temperature_schedule" not in flags  # Python only: a callable has no flag and no config entry
    assert flags["compute_lp"][0][1].type is bool
