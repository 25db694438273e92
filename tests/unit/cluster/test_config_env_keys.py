"""How a ``LAMINAR_<TABLE>__<KEY>`` variable names its property: ``_`` a dot, ``__`` a dash, or the
property as written. Before, every ``_`` became a dot, so ``oauth2-server-uri`` (or any Iceberg
property with a dash) could not be set from the environment."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.config import kafka_client_from, settings_from
from laminar_kafka.cluster.config_file import env_property, passthrough_tables
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}


@pytest.mark.parametrize(("key", "prop"), [
    # the upper-case spelling: '_' a dot (as before), '__' a dash
    ("SASL_PASSWORD", "sasl.password"),
    ("SECURITY_PROTOCOL", "security.protocol"),
    ("S3_ENDPOINT", "s3.endpoint"),
    ("TOKEN", "token"),
    ("OAUTH2__SERVER__URI", "oauth2-server-uri"),
    ("S3_ACCESS__KEY__ID", "s3.access-key-id"),
    ("S3_SECRET__ACCESS__KEY", "s3.secret-access-key"),
    ("REST_SIGV4__ENABLED", "rest.sigv4-enabled"),
    # the property as written
    ("oauth2-server-uri", "oauth2-server-uri"),
    ("s3.endpoint", "s3.endpoint"),
    ("s3.access-key-id", "s3.access-key-id"),
    ("header.X-Iceberg-Access-Delegation", "header.X-Iceberg-Access-Delegation"),
    ("OAUTH2-SERVER-URI", "OAUTH2-SERVER-URI"),  # a dash: as written (case kept)
    ("sasl.password", "sasl.password"),
    # lower case without '.' or '-': the mapping that always worked ('_' a dot)
    ("s3_endpoint", "s3.endpoint"),
    ("sasl_password", "sasl.password"),
    ("Security_Protocol", "security.protocol"),
    ("oauth2__server__uri", "oauth2-server-uri"),
    ("token", "token"),
])
def test_a_key_names_one_property(key: str, prop: str) -> None:
    assert env_property(f"LAMINAR_ICEBERG__{key}", key) == prop


@pytest.mark.parametrize("key", ["S3___ENDPOINT", "_TOKEN", "TOKEN_", "TOKEN__", "", "S3_END$POINT", "S3 ENDPOINT",
                                 "s3___endpoint", "_token", "s3_end$point"])
def test_a_malformed_upper_case_key_is_one_line_naming_the_variable(key: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        env_property(f"LAMINAR_ICEBERG__{key}", key)
    message = str(error.value)
    assert message.startswith(f"environment variable LAMINAR_ICEBERG__{key}: ") and "\n" not in message
    assert "LAMINAR_ICEBERG__S3_ACCESS__KEY__ID sets s3.access-key-id" in message


@given(st.lists(st.lists(st.from_regex(r"[a-z0-9]+", fullmatch=True), min_size=1, max_size=3), min_size=1, max_size=4))
def test_every_dotted_and_dashed_property_has_an_upper_case_spelling(parts: list[list[str]]) -> None:
    """A property of lower-case words joined by dots and dashes (every librdkafka and pyiceberg key
    but a case-sensitive header) round-trips through its upper-case spelling."""
    prop = ".".join("-".join(words) for words in parts)
    spelled = prop.upper().replace("-", "__").replace(".", "_")
    assert env_property("LAMINAR_ICEBERG__" + spelled, spelled) == prop


def test_the_iceberg_table_from_the_environment_and_the_file() -> None:
    env = {
        "LAMINAR_ICEBERG__OAUTH2__SERVER__URI": "https://auth.example/token",
        "LAMINAR_ICEBERG__s3.access-key-id": "AKIA",
        "LAMINAR_ICEBERG__S3_ENDPOINT": "http://127.0.0.1:9000",  # the spelling that always worked
        "LAMINAR_ICEBERG__CREDENTIAL": "id:secret",
        "LAMINAR_ICEBERG__s3_region": "eu-west-2",  # lower case, no dot: '_' is still a dot
    }
    tables = passthrough_tables({"iceberg": {"s3": {"region": "eu-west-1"}, "warehouse": "w"}}, env)
    assert tables.iceberg == {
        "s3.region": "eu-west-2", "warehouse": "w", "oauth2-server-uri": "https://auth.example/token",
        "s3.access-key-id": "AKIA", "s3.endpoint": "http://127.0.0.1:9000", "credential": "id:secret",
    }
    settings = settings_from(BASE, env, {})
    assert settings.iceberg["oauth2-server-uri"] == "https://auth.example/token"
    assert settings.iceberg["s3.endpoint"] == "http://127.0.0.1:9000"


def test_the_kafka_and_registry_tables_map_the_same_way() -> None:
    env = {"LAMINAR_KAFKA__SASL_PASSWORD": "pw", "LAMINAR_KAFKA__ssl.ca.location": "/ca.pem",
           "LAMINAR_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
           "LAMINAR_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": "u:p", "LAMINAR_SCHEMA_REGISTRY__url": "http://r"}
    tables = passthrough_tables({}, env)
    assert tables.kafka == {"sasl.password": "pw", "ssl.ca.location": "/ca.pem", "security.protocol": "SASL_SSL"}
    assert tables.schema_registry == {"basic.auth.user.info": "u:p", "url": "http://r"}
    assert kafka_client_from(None, env, "b:1").properties["ssl.ca.location"] == "/ca.pem"


def test_a_malformed_variable_stops_the_settings_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match=r"^environment variable LAMINAR_KAFKA__SASL___PASSWORD: "):
        settings_from(BASE, {"LAMINAR_KAFKA__SASL___PASSWORD": "pw"}, {})
