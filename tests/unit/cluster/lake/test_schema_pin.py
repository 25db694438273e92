"""format=json without json-schema: the schema is inferred once and pinned for every node and restart."""
from __future__ import annotations

import pyarrow as pa
import pytest

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.schema_pin import JSON_SCHEMA_SETTING, JsonSchemaPin
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.type_text import parse_schema_text


class Pins:
    """The coordinator's pin_setting alone (create-once)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def pin_setting(self, name: str, value: str | None) -> str | None:
        return self.values.get(name) if value is None else self.values.setdefault(name, value)


NESTED = pa.schema([("id", pa.int64()), ("user", pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))]))])


def test_first_node_infers_and_pins_later_nodes_only_read() -> None:
    pins, calls = Pins(), []
    first = JsonSchemaPin(lambda: calls.append(1) or NESTED)
    first(pins)  # type: ignore[arg-type]
    assert parse_schema_text(first.text).equals(NESTED) and len(calls) == 1

    other = pa.schema([("id", pa.string())])
    second = JsonSchemaPin(lambda: calls.append(2) or other)
    second(pins)  # type: ignore[arg-type]
    assert second.text == first.text and calls == [1]  # the pinned schema wins; no second sample
    assert pins.values[JSON_SCHEMA_SETTING] == first.text


def test_waits_for_a_first_record_then_fails_naming_the_setting() -> None:
    now = [0.0]
    attempts = []

    def empty() -> pa.Schema:
        attempts.append(now[0])
        raise ConfigurationError("cannot infer a JSON schema: topics ('t',) are empty")

    def sleep(seconds: float) -> None:
        now[0] += seconds

    pin = JsonSchemaPin(empty, wait_s=10.0, retry_s=2.0, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(RuntimeFailure, match="set json-schema"):
        pin(Pins())  # type: ignore[arg-type]
    assert len(attempts) == 6 and attempts[-1] >= 10.0


def test_records_arriving_while_waiting_are_used() -> None:
    results = iter([ConfigurationError("topics are empty"), NESTED])

    def discover() -> pa.Schema:
        value = next(results)
        if isinstance(value, Exception):
            raise value
        return value

    pin = JsonSchemaPin(discover, sleep=lambda _s: None)
    pins = Pins()
    pin(pins)  # type: ignore[arg-type]
    assert pins.values[JSON_SCHEMA_SETTING] == pin.text


def test_a_sample_that_is_not_json_fails_at_once() -> None:
    def bad() -> pa.Schema:
        raise ConfigurationError("cannot infer a JSON schema: JSON parse error")

    with pytest.raises(RuntimeFailure, match="JSON parse error"):
        JsonSchemaPin(bad, sleep=lambda _s: pytest.fail("must not wait"))(Pins())  # type: ignore[arg-type]


def test_a_field_name_the_text_cannot_hold_is_refused() -> None:
    weird = pa.schema([("a,b", pa.int64())])
    with pytest.raises(RuntimeFailure, match="cannot be pinned"):
        JsonSchemaPin(lambda: weird)(Pins())  # type: ignore[arg-type]


@pytest.mark.parametrize("arrow_type", [
    pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null(), pa.timestamp("s"), pa.timestamp("ms", tz="UTC"),
    pa.date32(), pa.decimal128(12, 3), pa.list_(pa.int64()), pa.map_(pa.string(), pa.int64()),
    pa.struct([("x", pa.list_(pa.struct([("y", pa.float64())])))]), pa.binary(),
])
def test_type_text_round_trips(arrow_type: pa.DataType) -> None:
    from laminar_kafka.kafka_source.config.type_text import parse_type, schema_text

    assert parse_type(str(arrow_type)) == arrow_type
    schema = pa.schema([("f", arrow_type)])
    assert parse_schema_text(schema_text(schema)).equals(schema)


@pytest.mark.parametrize("text", ["list<int64", "struct<a int64>", "map<string>", "nope", "a>"])
def test_bad_type_text_is_one_clear_error(text: str) -> None:
    from laminar_kafka.kafka_source.config.type_text import parse_type

    with pytest.raises(ConfigurationError):
        parse_type(text)
