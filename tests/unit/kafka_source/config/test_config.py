from __future__ import annotations

import pyarrow as pa
import pytest

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import (
    CATCH_UP_WAIT_MS,
    METADATA_COLUMNS,
    Format,
    IsolationLevel,
    KafkaSourceConfig,
    StartupMode,
)

BASE = {"bootstrap.servers": "localhost:9092", "topic": "orders", "group.id": "g"}


def build(**extra: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({**BASE, **{k.replace("_", "."): v for k, v in extra.items()}})


def test_defaults() -> None:
    config = KafkaSourceConfig.from_properties(BASE)
    assert config.topics == ("orders",)
    assert config.format is Format.RAW
    assert config.startup_mode is StartupMode.EARLIEST
    assert config.isolation_level is IsolationLevel.READ_COMMITTED
    assert config.include_metadata == ()
    consumer = config.consumer_config(guaranteed=True)
    assert consumer["enable.auto.commit"] is False
    assert consumer["auto.offset.reset"] == "error"
    assert consumer["isolation.level"] == "read_committed"
    assert config.consumer_config(guaranteed=False)["auto.offset.reset"] == "earliest"


def test_unknown_key_names_the_nearest_valid_key() -> None:
    with pytest.raises(ConfigurationError, match="did you mean 'startup-mode'"):
        KafkaSourceConfig.from_properties({**BASE, "startup.mod": "earliest"})
    with pytest.raises(ConfigurationError, match="did you mean 'bootstrap.servers'"):
        KafkaSourceConfig.from_properties({**BASE, "bootstrap.server": "x"})
    with pytest.raises(ConfigurationError, match="unknown property 'zzzz'$"):
        KafkaSourceConfig.from_properties({**BASE, "zzzz": "1"})


@pytest.mark.parametrize("missing", ["bootstrap.servers", "topic", "group.id"])
def test_required_keys(missing: str) -> None:
    props = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigurationError, match=missing):
        KafkaSourceConfig.from_properties(props)


def test_topic_list() -> None:
    assert KafkaSourceConfig.from_properties({**BASE, "topic": "a, b,c"}).topics == ("a", "b", "c")
    with pytest.raises(ConfigurationError):
        KafkaSourceConfig.from_properties({**BASE, "topic": "a,a"})
    with pytest.raises(ConfigurationError):
        KafkaSourceConfig.from_properties({**BASE, "topic": "bad topic"})


def test_auto_commit_cannot_be_enabled() -> None:
    with pytest.raises(ConfigurationError, match="enable.auto.commit"):
        KafkaSourceConfig.from_properties({**BASE, "kafka.enable.auto.commit": "true"})
    config = KafkaSourceConfig.from_properties({**BASE, "kafka.enable.auto.commit": "false"})
    assert config.consumer_config(guaranteed=True)["enable.auto.commit"] is False


def test_kafka_passthrough_and_owned_keys() -> None:
    config = KafkaSourceConfig.from_properties({**BASE, "kafka.fetch.max.bytes": "1048576"})
    assert config.consumer_config(guaranteed=True)["fetch.max.bytes"] == "1048576"
    with pytest.raises(ConfigurationError, match="owned"):
        KafkaSourceConfig.from_properties({**BASE, "kafka.group.id": "other"})
    with pytest.raises(ConfigurationError, match="owned"):
        KafkaSourceConfig.from_properties({**BASE, "kafka.isolation.level": "read_uncommitted"})
    # Guaranteed delivery never resets silently, whatever the passthrough says.
    config = KafkaSourceConfig.from_properties({**BASE, "kafka.auto.offset.reset": "latest"})
    assert config.consumer_config(guaranteed=True)["auto.offset.reset"] == "error"
    assert config.consumer_config(guaranteed=False)["auto.offset.reset"] == "latest"


def test_startup_modes() -> None:
    assert KafkaSourceConfig.from_properties({**BASE, "startup-mode": "latest"}).startup_mode is StartupMode.LATEST
    config = KafkaSourceConfig.from_properties(
        {**BASE, "startup-mode": "timestamp", "startup-timestamp-ms": "1700000000000"}
    )
    assert config.startup_timestamp_ms == 1700000000000
    with pytest.raises(ConfigurationError):
        KafkaSourceConfig.from_properties({**BASE, "startup-mode": "timestamp"})
    with pytest.raises(ConfigurationError):
        KafkaSourceConfig.from_properties({**BASE, "startup-timestamp-ms": "5"})
    with pytest.raises(ConfigurationError, match="expected one of"):
        KafkaSourceConfig.from_properties({**BASE, "startup-mode": "group-offsets"})
    config = KafkaSourceConfig.from_properties(
        {**BASE, "startup-mode": "specific-offsets", "startup-specific-offsets": "orders:0:5, orders:3:10"}
    )
    assert dict(config.startup_specific_offsets) == {("orders", 0): 5, ("orders", 3): 10}
    for bad in ["orders:0", "other:0:1", "orders:0:-1", "orders:x:1", "orders:0:1,orders:0:2", ""]:
        with pytest.raises(ConfigurationError):
            KafkaSourceConfig.from_properties(
                {**BASE, "startup-mode": "specific-offsets", "startup-specific-offsets": bad}
            )


def test_include_metadata() -> None:
    assert KafkaSourceConfig.from_properties({**BASE, "include-metadata": "true"}).include_metadata == METADATA_COLUMNS
    assert KafkaSourceConfig.from_properties({**BASE, "include-metadata": "false"}).include_metadata == ()
    config = KafkaSourceConfig.from_properties({**BASE, "include-metadata": "offset,_partition"})
    assert config.include_metadata == ("_partition", "_offset")  # canonical order
    with pytest.raises(ConfigurationError, match="unknown column"):
        KafkaSourceConfig.from_properties({**BASE, "include-metadata": "_offsets"})


def test_json_schema() -> None:
    config = KafkaSourceConfig.from_properties(
        {**BASE, "format": "json", "json-schema": "id:int64, name:string, ts:timestamp[ms]"}
    )
    assert config.json_schema == pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("ms"))]
    )
    for bad in ["id", "id:nosuchtype", "id:int64,id:string", "_offset:int64", ""]:
        with pytest.raises(ConfigurationError):
            KafkaSourceConfig.from_properties({**BASE, "format": "json", "json-schema": bad})
    with pytest.raises(ConfigurationError, match="only valid with format=json"):
        KafkaSourceConfig.from_properties({**BASE, "json-schema": "id:int64"})


@pytest.mark.parametrize(
    "key,value",
    [
        ("max-fetched-bytes", "10"),
        ("max-fetched-bytes", "lots"),
        ("consume-chunk-records", "0"),
        ("partition-discovery-interval-ms", "-1"),
        ("max-error-rate", "1.5"),
        ("max-error-rate", "x"),
        ("isolation.level", "serializable"),
        ("format", "avro"),
    ],
)
def test_invalid_values(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=key.split(".")[0]):
        KafkaSourceConfig.from_properties({**BASE, key: value})


def test_identity_options_exclude_endpoints_and_group() -> None:
    config = KafkaSourceConfig.from_properties(
        {**BASE, "kafka.sasl.password": "secret", "include-metadata": "true"}
    )
    options = config.identity_options()
    assert options["topic"] == "orders"
    assert "localhost:9092" not in options.values()
    assert "secret" not in options.values()
    assert "group.id" not in options and "bootstrap.servers" not in options
    other_endpoint = KafkaSourceConfig.from_properties({**BASE, "bootstrap.servers": "other:1"})
    assert other_endpoint.identity_options() == KafkaSourceConfig.from_properties(BASE).identity_options()


def test_a_full_client_queue_is_fetched_again_soon_unless_the_user_says_otherwise() -> None:
    # librdkafka's default (1000 ms) left a reader with a bounded queue idle most of the time
    config = KafkaSourceConfig.from_properties(BASE)
    assert config.consumer_config(guaranteed=True)["fetch.queue.backoff.ms"] == 10
    chosen = KafkaSourceConfig.from_properties({**BASE, "kafka.fetch.queue.backoff.ms": "250"})
    assert chosen.consumer_config(guaranteed=False)["fetch.queue.backoff.ms"] == "250"


def test_max_fetched_bytes_bounds_the_client_queue_and_the_fifo_together() -> None:
    config = KafkaSourceConfig.from_properties(BASE)
    # the batching consumer's queue, the catch-up consumer's (1 MiB) and the FIFO
    assert config.client_queue_bytes + config.catch_up_queue_bytes + config.fifo_bytes == config.max_fetched_bytes
    assert config.max_fetched_bytes == 32 * 1024 * 1024 and config.catch_up_queue_bytes == 1 << 20
    assert config.consumer_config(guaranteed=True)["queued.max.messages.kbytes"] == 16 * 1024
    small = KafkaSourceConfig.from_properties({**BASE, "max-fetched-bytes": str(8 << 20)})
    assert (small.client_queue_bytes, small.catch_up_queue_bytes, small.fifo_bytes) == (4 << 20, 1 << 20, 3 << 20)
    assert small.consumer_config(guaranteed=True)["queued.max.messages.kbytes"] == 4096
    # an explicit client queue takes its share; the FIFO gets the rest
    explicit = KafkaSourceConfig.from_properties(
        {**BASE, "max-fetched-bytes": str(8 << 20), "kafka.queued.max.messages.kbytes": "1024"})
    assert (explicit.client_queue_bytes, explicit.fifo_bytes) == (1 << 20, 6 << 20)
    assert explicit.consumer_config(guaranteed=True)["queued.max.messages.kbytes"] == "1024"
    with pytest.raises(ConfigurationError, match="leaves nothing of max-fetched-bytes"):
        KafkaSourceConfig.from_properties({**BASE, "max-fetched-bytes": str(1 << 20),
                                           "kafka.queued.max.messages.kbytes": "1024"})
    with pytest.raises(ConfigurationError, match="queued.max.messages.kbytes"):
        KafkaSourceConfig.from_properties({**BASE, "kafka.queued.max.messages.kbytes": "lots"})


def test_the_catch_up_consumer_fetches_without_the_batch_wait_in_its_share_of_max_fetched_bytes() -> None:
    config = KafkaSourceConfig.from_properties({**BASE, "kafka.fetch.min.bytes": "4096"})
    overrides = config.catch_up_overrides(guaranteed=True)
    assert (overrides["fetch.min.bytes"], overrides["fetch.wait.max.ms"]) == (1, CATCH_UP_WAIT_MS)
    assert overrides["queued.max.messages.kbytes"] == 1024 and overrides["auto.offset.reset"] == "error"
    # no batch wait: no catch-up consumer, and the FIFO keeps its whole share
    plain = KafkaSourceConfig.from_properties({**BASE, "batch-wait-ms": "0"})
    assert plain.catch_up_queue_bytes == 0 and plain.client_queue_bytes + plain.fifo_bytes == plain.max_fetched_bytes
