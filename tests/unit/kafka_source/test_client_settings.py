"""One Kafka client configuration for every client: the [kafka] table, LAMINAR_KAFKA__*, secrets hidden."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from laminar_kafka.cluster.config import kafka_client_from, settings_from
from laminar_kafka.cluster.config_file import passthrough_tables
from laminar_kafka.cluster.logs import JsonFormatter, RepeatFilter
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import (
    KafkaClientConfig,
    client_config,
    consumer_properties,
    is_secret_key,
    redact,
)
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}
SECURE = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
          "sasl.password": "s3cret-pw", "ssl.ca.location": "/etc/ca.pem"}


def test_the_kafka_table_and_environment_reach_the_client_and_the_source() -> None:
    env = {"LAMINAR_KAFKA__SASL_PASSWORD": "from-env", "LAMINAR_KAFKA__SSL_KEY_LOCATION": "/k.pem"}
    s = settings_from({**BASE, "kafka": SECURE}, env, {})
    client = s.kafka_client()
    assert client.bootstrap == "k:9092"
    assert client.properties == {**SECURE, "sasl.password": "from-env", "ssl.key.location": "/k.pem"}
    source = s.source_config()
    assert source.kafka == client  # one value, never written out as properties and parsed back
    consumer = source.consumer_config(guaranteed=True)
    assert consumer["sasl.password"] == "from-env" and consumer["security.protocol"] == "SASL_SSL"
    assert consumer["bootstrap.servers"] == "k:9092"


def test_status_and_verify_build_the_same_client_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('bootstrap = "b:1"\ntopic = "t"\noutput = "/o"\n[kafka]\n'
                      'security.protocol = "SSL"\n"ssl.ca.location" = "/ca.pem"\n')
    client = kafka_client_from(config, {}, None)
    assert client.bootstrap == "b:1" and client.properties["ssl.ca.location"] == "/ca.pem"
    assert client.properties["security.protocol"] == "SSL"  # a bare dotted TOML key is a nested table
    assert kafka_client_from(config, {}, "flag:2").bootstrap == "flag:2"  # the flag wins
    assert kafka_client_from(None, {"LAMINAR_BOOTSTRAP": "env:3"}, None).bootstrap == "env:3"
    with pytest.raises(ConfigurationError, match="bootstrap is required"):
        kafka_client_from(None, {}, None)


def test_bootstrap_servers_may_not_hide_in_the_kafka_table() -> None:
    with pytest.raises(ConfigurationError, match="bootstrap"):
        settings_from({**BASE, "kafka": {"bootstrap.servers": "other:1"}}, {}, {})
    with pytest.raises(ConfigurationError):
        KafkaClientConfig("a:1", {"bootstrap.servers": "b:2"})


def test_the_bootstrap_servers_are_checked_by_the_client_configuration_alone() -> None:
    with pytest.raises(ConfigurationError, match="bootstrap is required"):
        KafkaClientConfig("  ")
    assert KafkaClientConfig(" a:1 ").bootstrap == "a:1"
    with pytest.raises(ConfigurationError, match=r"bootstrap is required \(--bootstrap, LAMINAR_BOOTSTRAP"):
        settings_from({**BASE, "bootstrap": ""}, {}, {})
    with pytest.raises(ConfigurationError, match=r"bootstrap is required \(property 'bootstrap.servers'\)"):
        KafkaSourceConfig.from_properties({"topic": "t", "group.id": "g"})


def test_a_source_given_its_client_configuration_takes_no_client_properties() -> None:
    client = KafkaClientConfig("k:1", {"security.protocol": "SSL"})
    config = KafkaSourceConfig.from_properties({"topic": "t", "group.id": "g"}, client)
    assert config.kafka is client
    with pytest.raises(ConfigurationError, match="kafka.fetch.min.bytes goes with bootstrap.servers"):
        KafkaSourceConfig.from_properties({"topic": "t", "group.id": "g", "kafka.fetch.min.bytes": "1"}, client)
    own = KafkaSourceConfig.from_properties({"bootstrap.servers": "b:2", "topic": "t", "group.id": "g"}, client)
    assert own.kafka == KafkaClientConfig("b:2")  # properties that carry a client configuration are authoritative
    with pytest.raises(ConfigurationError, match="kafka.group.id is owned by the source"):
        KafkaSourceConfig.from_properties({"topic": "t", "group.id": "g"}, KafkaClientConfig("k:1", {"group.id": "x"}))
    with pytest.raises(ConfigurationError, match="enable.auto.commit cannot be enabled"):
        settings_from({**BASE, "kafka": {"enable.auto.commit": "true"}}, {}, {}).source_config()


def test_registry_table_and_environment() -> None:
    kafka, registry, iceberg = passthrough_tables({"schema_registry": {"basic.auth.user.info": "u:p"}},
                                                  {"LAMINAR_SCHEMA_REGISTRY__SSL_CA_LOCATION": "/ca"})
    assert kafka == {} and iceberg == {} and registry == {"basic.auth.user.info": "u:p", "ssl.ca.location": "/ca"}
    s = settings_from({**BASE, "format": "raw", "schema_registry": {"basic.auth.user.info": "u:p"}}, {}, {})
    assert s.source_properties()["schema.registry.basic.auth.user.info"] == "u:p"


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
                                 "sasl.oauthbearer.client.secret", "basic.auth.user.info", "sasl.jaas.config",
                                 "sasl.oauthbearer.config"])
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key) and redact({key: "x"}) == {key: "***"}


@pytest.mark.parametrize("key", ["sasl.username", "ssl.ca.location", "security.protocol", "ssl.key.location"])
def test_not_secret_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_no_secret_in_repr_of_settings_or_client() -> None:
    s = settings_from({**BASE, "zk": "z:2181", "zk-auth": "bob:zk-pw", "kafka": SECURE,
                       "schema_registry": {"basic.auth.user.info": "u:reg-pw"}}, {}, {})
    for text in (repr(s), str(s), repr(s.kafka_client())):
        assert "s3cret-pw" not in text and "zk-pw" not in text and "reg-pw" not in text
        assert "alice" in text or "KafkaClientConfig" in text


def test_a_consumer_layers_its_defaults_the_shared_properties_and_what_it_owns() -> None:
    client = KafkaClientConfig("a:1", {"auto.offset.reset": "latest", "enable.auto.commit": "true"})
    layered = consumer_properties(client, "g", {"isolation.level": "read_committed"},
                                  defaults={"auto.offset.reset": "earliest", "fetch.wait.max.ms": 5})
    assert layered == {"fetch.wait.max.ms": 5, "bootstrap.servers": "a:1", "auto.offset.reset": "latest",
                       "enable.auto.commit": False, "group.id": "g", "isolation.level": "read_committed"}


def test_client_config_of_a_plain_bootstrap() -> None:
    assert client_config("a:1") == KafkaClientConfig("a:1")
    config = KafkaClientConfig("a:1", SECURE)
    assert client_config(config) is config
    assert config.client_properties({"group.id": "g"}) == {"bootstrap.servers": "a:1", **SECURE, "group.id": "g"}


@pytest.mark.parametrize("bad, message", [
    ({"on-bad-record": "drop"}, "on-bad-record"),
    ({"max-error-rate": "2"}, "max-error-rate"),
    ({"max-error-rate": "x"}, "not a number"),
    ({"include-key": "maybe"}, "not a boolean"),
    ({"json-schema": "a:int64"}, "json-schema goes with format=json"),
    ({"zk-auth": "nopassword", "zk": "z:1"}, "user:password"),
    ({"zk-auth": "a:b"}, "zk-auth goes with zk"),
])
def test_new_settings_are_validated(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings_from({**BASE, **bad}, {}, {})


def test_new_settings_reach_the_source_properties() -> None:
    s = settings_from({**BASE, "format": "json", "json-schema": "a:int64", "on-bad-record": "skip",
                       "max-error-rate": "0.5", "include-key": "true", "include-headers": True}, {}, {})
    props = s.source_properties()
    assert props["json-schema"] == "a:int64" and props["on-bad-record"] == "skip"
    assert props["max-error-rate"] == "0.5"
    assert props["include-metadata"] == "_topic,_partition,_offset,_timestamp,_key,_headers"
    pinned = settings_from({**BASE, "format": "json"}, {}, {}).source_properties(json_schema="b:string")
    assert pinned["json-schema"] == "b:string"


def test_json_log_lines() -> None:
    record = logging.LogRecord("x.y", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    import json

    body = json.loads(JsonFormatter().format(record))
    assert body["level"] == "warning" and body["logger"] == "x.y" and body["message"] == "hello world"
    assert body["ts"].endswith("Z")


def test_repeat_filter_passes_one_line_per_window_and_counts_the_rest() -> None:
    now = [0.0]
    keep = RepeatFilter(window_s=60.0, clock=lambda: now[0])

    def line(port: int) -> logging.LogRecord:
        return logging.LogRecord("rdkafka", logging.ERROR, __file__, 1,
                                 "127.0.0.1:%d/bootstrap: Connect failed (after %dms)", (port, port * 3), None)

    passed = [keep.filter(line(p)) for p in range(1, 201)]
    assert passed.count(True) == 1  # 200 retries of one failure: one line
    now[0] = 61.0
    again = line(7)
    assert keep.filter(again) and "199 similar line(s) dropped" in again.getMessage()
    other = logging.LogRecord("rdkafka", logging.ERROR, __file__, 1, "SASL authentication failed", (), None)
    assert keep.filter(other)


def test_missing_or_unreadable_files_are_named(tmp_path: Path) -> None:
    key = tmp_path / "client.key"
    key.write_text("k")
    KafkaClientConfig("a:1", {"ssl.key.location": str(key), "ssl.ca.location": "probe"}).check_files()
    with pytest.raises(ConfigurationError, match=r"ssl.ca.location: .*absent.pem does not exist"):
        KafkaClientConfig("a:1", {"ssl.ca.location": str(tmp_path / "absent.pem")}).check_files()
