"""What a Redis failure tells the node runtime: a server that does not answer is transient (retried
for as long as it lasts), an answered error is fatal (counted); messages name the call, never a
password."""
from __future__ import annotations

import pytest
from redis.exceptions import BusyLoadingError, ConnectionError, ResponseError, TimeoutError

from laminar_kafka.kafka_source.errors import FatalError, TransientError
from laminar_kafka.redis_source import RedisCommandError, RedisStreamsConfig, RedisStreamsSource, RedisUnavailable

CONFIG = RedisStreamsConfig.from_properties({"redis.url": "redis://app:s3cret@db:6380/0", "stream": "s", "partitions": "2"})


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
