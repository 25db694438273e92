"""The config file and the passthrough tables: TOML reading, value converters, ``[kafka]``,
``[schema_registry]`` and ``[iceberg]`` with their ``LAMINAR_<TABLE>__<KEY>`` variables.

Pure apart from :func:`read_config_file`; :mod:`laminar_kafka.cluster.config` builds the settings from these.
"""
from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from laminar_kafka.cluster.errors import ConfigError
from laminar_kafka.kafka_source.config.topics import PATTERN_PREFIX

__all__ = [
    "AUTO", "ICEBERG_ENV_PREFIX", "KAFKA_ENV_PREFIX", "PassthroughTables", "REGISTRY_ENV_PREFIX", "as_bool",
    "as_float", "as_int", "as_node_id", "as_str", "as_topics", "passthrough_tables", "read_config_file",
]

ENV_PREFIX = "LAMINAR_"
#: prefixes of the passthrough tables in the environment
KAFKA_ENV_PREFIX = ENV_PREFIX + "KAFKA__"
REGISTRY_ENV_PREFIX = ENV_PREFIX + "SCHEMA_REGISTRY__"
ICEBERG_ENV_PREFIX = ENV_PREFIX + "ICEBERG__"


class PassthroughTables(NamedTuple):
    """Properties handed through as they are: to every Kafka client, to the schema-registry client,
    to the Iceberg catalog and its FileIO."""

    kafka: dict[str, str]
    schema_registry: dict[str, str]
    iceberg: dict[str, str]


def as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None


#: ``node-id = "auto"``: the node chooses its id at start (:mod:`laminar_kafka.cluster.node_identity`)
AUTO = "auto"


def as_node_id(name: str, value: Any) -> int | str:
    """An integer, or :data:`AUTO` (``auto`` in any case: flag, file or environment)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return as_int(name, value)
    except ConfigError:
        raise ConfigError(f"{name}={value!r} is not an integer (or auto)") from None


def as_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a number")
    try:
        return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number") from None


def as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (true or false)")


def as_str(name: str, value: Any) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a string")
    return str(value).strip()


def as_topics(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) and value.strip().startswith(PATTERN_PREFIX):
        return (value.strip(),)  # one regular expression (it may contain commas)
    if isinstance(value, (list, tuple)):
        items = [as_str(name, v) for v in value]
    else:
        items = as_str(name, value).split(",")
    return tuple(t.strip() for t in items if t.strip())


#: the passthrough tables of the config file: TOML table name -> environment prefix
_TABLES: dict[str, str] = {
    "kafka": KAFKA_ENV_PREFIX, "schema_registry": REGISTRY_ENV_PREFIX, "iceberg": ICEBERG_ENV_PREFIX,
}


def _env_property(name: str) -> str:
    """``SASL_PASSWORD`` -> ``sasl.password`` (librdkafka spelling)."""
    return name.lower().replace("_", ".")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads the bare key ``security.protocol = "SSL"`` as a nested table; librdkafka's keys
    are dotted names, so nested tables are joined back (``{"security": {"protocol": ...}}`` ->
    ``{"security.protocol": ...}``); a quoted ``"security.protocol"`` key is the same."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def passthrough_tables(file_values: Mapping[str, Any], env: Mapping[str, str]) -> PassthroughTables:
    """The ``[kafka]``, ``[schema_registry]`` and ``[iceberg]`` tables of the config file, with the
    environment's ``LAMINAR_KAFKA__<KEY>`` / ``LAMINAR_SCHEMA_REGISTRY__<KEY>`` /
    ``LAMINAR_ICEBERG__<KEY>`` on top. Pure."""
    tables: dict[str, dict[str, str]] = {}
    for table, prefix in _TABLES.items():
        values: dict[str, str] = {}
        raw = file_values.get(table, {})
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{table!r} in the config file must be a table of client properties")
        values.update({k: as_str(f"{table}.{k}", v) for k, v in _flatten(raw).items()})
        values.update({_env_property(k[len(prefix):]): v for k, v in env.items() if k.startswith(prefix)})
        tables[table] = values
    return PassthroughTables(tables["kafka"], tables["schema_registry"], tables["iceberg"])


def read_config_file(config_file: str | Path | None) -> dict[str, Any]:
    """The parsed TOML file (empty without one); :class:`ConfigError` naming the file otherwise."""
    if not config_file:
        return {}
    path = Path(config_file)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


