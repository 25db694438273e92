"""What a Redis failure tells the node runtime: a server that does not answer is transient (retried
for as long as it lasts), an answered error is fatal (counted); messages name the call, never a
password."""
from __future__ import annotations

import pytest
from redis.exceptions import BusyLoadingError, ConnectionError, ResponseError, TimeoutError

from laminar_kafka.connector.errors import FatalError, TransientError
from laminar_kafka.redis_source import RedisCommandError, RedisStreamsConfig, RedisStreamsSource, RedisUnavailable

CONFIG = RedisStreamsConfig.from_properties({"redis-url": "redis://app:s3cret@db:6380/0", "stream": "s", "partitions": "2"})


@pytest.mark.parametrize("raised", [ConnectionError("refused"), TimeoutError("timed out"), BusyLoadingError("loading")])
def test_a_server_that_does_not_answer_is_transient(raised: Exception) -> None:
    error = RedisStreamsSource(CONFIG)._error("XREAD of 2 streams", raised)  # type: ignore[arg-type]
    assert isinstance(error, RedisUnavailable) and isinstance(error, TransientError) and not isinstance(error, FatalError)
    assert "XREAD of 2 streams on Redis redis://app:***@db:6380/0: the server does not answer" in str(error)
    assert "s3cret" not in str(error)


def test_an_answered_error_is_fatal() -> None:
    error = RedisStreamsSource(CONFIG)._error("XREAD of 2 streams", ResponseError("WRONGTYPE Operation against a key"))
    assert isinstance(error, RedisCommandError) and isinstance(error, FatalError) and not isinstance(error, TransientError)
    assert "WRONGTYPE" in str(error)


def test_both_protocols_xread_answers_read_alike() -> None:
    """A URL with ``protocol=3`` makes redis-py answer XREAD with a map of key to ``[entries]``."""
    from laminar_kafka.redis_source.source import _streams_of

    entries = [(b"1-0", {b"value": b"a"}), (b"1-1", {b"value": b"b"})]
    assert _streams_of([[b"s:0", entries]]) == [(b"s:0", entries)]
    assert _streams_of({b"s:0": [entries]}) == [(b"s:0", entries)]
    assert _streams_of(None) == [] and _streams_of([]) == [] and _streams_of({}) == []
