"""The Redis Streams connector's properties: strict parse, clear refusals, a round trip."""
from __future__ import annotations

import pytest

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.redis_source import RedisConfigError, RedisStreamsConfig
from laminar_kafka.redis_source.source import redacted

BASE = {"redis-url": "redis://127.0.0.1:6379/0", "stream": "orders", "partitions": "4"}


def test_the_defaults_and_the_keys() -> None:
    config = RedisStreamsConfig.from_properties(BASE)
    assert (config.partitions, config.value_field, config.advisory_key, config.timeout_s) == (4, "value", "orders:committed", 5.0)
    assert config.stream_key(3) == "orders:3"
    assert RedisStreamsConfig.from_properties(config.properties()) == RedisStreamsConfig(
        config.url, "orders", 4, "value", "orders:committed", 5.0)


@pytest.mark.parametrize("change,message", [
    ({"redis-url": "http://x"}, "must start with redis://"),
    ({"stream": "a b"}, "without spaces"),
    ({"partitions": "0"}, "must be >= 1"),
    ({"partitions": "four"}, "'four' is not an integer"),
    ({"timeout-ms": "0"}, "timeout-ms must be >= 1"),
    ({"value-field": ""}, "value-field must not be empty"),
    ({"bootstrap.servers": "x"}, "unknown Redis Streams properties \\['bootstrap.servers'\\]"),
    ({"stream": ""}, "missing Redis Streams properties \\['stream'\\]"),
])
def test_a_bad_property_is_refused_naming_it(change: dict[str, str], message: str) -> None:
    with pytest.raises(RedisConfigError, match=message) as refused:
        RedisStreamsConfig.from_properties({**BASE, **change})
    assert isinstance(refused.value, ConfigurationError)  # the protocol's: the runtime does not retry it


def test_a_password_never_reaches_a_message() -> None:
    assert redacted("redis://app:s3cret@db:6380/1") == "redis://app:***@db:6380/1"
    assert redacted("redis://db:6379/0") == "redis://db:6379/0"


def test_the_dotted_spellings_of_0_1_0_are_read_with_a_warning_naming_the_new_key() -> None:
    with pytest.warns(DeprecationWarning, match="'redis.url' is deprecated: use 'redis-url'"):
        config = RedisStreamsConfig.from_properties({"redis.url": "redis://db:6379/0", "stream": "s", "partitions": "1"})
    assert config.url == "redis://db:6379/0"
    with pytest.raises(RedisConfigError, match="same setting"):
        RedisStreamsConfig.from_properties({**BASE, "redis.url": "redis://db:6379/0"})


def test_the_run_flags_are_the_properties_with_their_defaults() -> None:
    from laminar_kafka.cli.main import build_parser
    from laminar_kafka.redis_source.config import SETTINGS

    args = build_parser().parse_args(["redis", "verify", "--redis-url", "redis://db:1/0", "--stream", "s",
                                      "--partitions", "2", "--output", "/tmp/o"])
    assert args.value_field == SETTINGS["value-field"].default
    assert {"redis-url", "stream", "partitions", "value-field"} <= set(SETTINGS)
