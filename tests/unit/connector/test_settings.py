"""The declaration of one setting: parsing text and TOML values, bounds, checks, choices, text back."""
from __future__ import annotations

import enum
import warnings

import pytest

from laminar_kafka.connector.settings import Layer, Setting, by_name, renamed_keys
from laminar_kafka.errors import ConfigurationError


class Color(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark-blue"


WAIT = Setting("wait-ms", int, "how long", default=250, minimum=0, unit="ms", old_names=("wait.ms",))
RATE = Setting("rate", float, "a fraction", default=0.01, minimum=0.0, maximum=1.0)
ON = Setting("on", bool, "a switch", default=True)
COLOR = Setting("color", Color, "a color", default=Color.RED, layer=Layer.BOTH)
NAME = Setting("name", str, "a name", default="x", check=lambda v: None if "/" not in v else "no '/' allowed")


@pytest.mark.parametrize("setting, given, expected", [
    (WAIT, " 40 ", 40), (WAIT, 40, 40), (RATE, "0.5", 0.5), (RATE, 1, 1.0), (ON, "off", False), (ON, "YES", True),
    (ON, False, False), (COLOR, "Dark-Blue", Color.DARK_BLUE), (NAME, " a ", "a"), (NAME, 7, "7"),
])
def test_text_and_toml_values_parse_to_the_declared_type(setting: Setting, given: object, expected: object) -> None:
    assert setting.parse(given) == expected
    assert setting.parse(setting.text(expected)) == expected


@pytest.mark.parametrize("setting, given, message", [
    (WAIT, "x", "wait-ms='x' is not an integer"), (WAIT, True, "not an integer"), (WAIT, 1.5, "not an integer"),
    (WAIT, "-1", "wait-ms must be >= 0, got -1"), (RATE, "2", "rate must be <= 1, got 2.0"),
    (RATE, "y", "not a number"), (ON, "maybe", "on='maybe' is not a boolean"),
    (COLOR, "green", "color='green': expected one of red, dark-blue"), (NAME, "a/b", "name='a/b': no '/' allowed"),
    (NAME, ["a"], "is not a string"),
])
def test_a_bad_value_is_refused_naming_the_setting(setting: Setting, given: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        setting.parse(given)


def test_choices_defaults_and_help() -> None:
    assert COLOR.choices == ("red", "dark-blue") and WAIT.choices == ()
    assert WAIT.help() == "how long (default 250)" and COLOR.default_text == "red"
    assert Setting("req", str, "needed", required=True).help() == "needed"
    assert Setting("size", int, "bytes", default=1024, shown_default="1 KiB").help() == "bytes (default 1 KiB)"


def test_a_name_is_declared_once() -> None:
    assert list(by_name((WAIT, RATE))) == ["wait-ms", "rate"]
    with pytest.raises(ValueError, match="declared twice"):
        by_name((WAIT, RATE, WAIT))


def test_old_spellings_are_renamed_with_one_warning_each() -> None:
    with pytest.warns(DeprecationWarning, match="'wait.ms' is deprecated: use 'wait-ms'") as caught:
        assert renamed_keys({"wait.ms": "5", "other": "1"}, [WAIT]) == {"wait-ms": "5", "other": "1"}
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed_keys({"wait-ms": "5"}, [WAIT]) == {"wait-ms": "5"}
    with pytest.raises(ConfigurationError, match="same setting"):
        renamed_keys({"wait.ms": "5", "wait-ms": "6"}, [WAIT])
