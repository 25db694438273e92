"""The config file and the passthrough tables: TOML reading, value converters, ``[kafka]``,
``[schema_registry]`` and ``[iceberg]`` with their ``LAMINAR_<TABLE>__<KEY>`` variables.

Pure apart from :func:`read_config_file`; :mod:`laminar_kafka.cluster.config` builds the settings from these
(each setting's own value through its declaration, :mod:`laminar_kafka.cluster.settings_def`).
"""
from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.topics import PATTERN_PREFIX

__all__ = [
    "AUTO", "ENV_PREFIX", "ICEBERG_ENV_PREFIX", "KAFKA_ENV_PREFIX", "PassthroughTables", "REGISTRY_ENV_PREFIX",
    "as_int", "as_node_id", "as_str", "as_topics", "env_property", "passthrough_tables", "read_config_file",
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
        raise ConfigurationError(f"{name}={value!r} is not an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"{name}={value!r} is not an integer") from None


#: ``node-id = "auto"``: the node chooses its id at start (:mod:`laminar_kafka.cluster.node_identity`)
AUTO = "auto"


def as_node_id(name: str, value: Any) -> int | str:
    """An integer, or :data:`AUTO` (``auto`` in any case: flag, file or environment)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return as_int(name, value)
    except ConfigurationError:
        raise ConfigurationError(f"{name}={value!r} is not an integer (or auto)") from None


def as_str(name: str, value: Any) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigurationError(f"{name}={value!r} is not a string")
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


#: the spelled key: names of letters and digits joined by ``_`` (a dot) or ``__`` (a dash)
_SPELLED_KEY = re.compile(r"[A-Za-z0-9]+(?:__?[A-Za-z0-9]+)*")


def env_property(variable: str, key: str) -> str:
    """The property that the environment ``variable`` (``LAMINAR_<TABLE>__<KEY>``) sets, from its ``key``.

    - A key holding a ``.`` or a ``-`` is the property as written: ``LAMINAR_ICEBERG__oauth2-server-uri``,
      ``LAMINAR_ICEBERG__s3.endpoint``, ``LAMINAR_ICEBERG__header.X-Iceberg-Access-Delegation`` (case
      and underscores are kept; a shell cannot ``export`` such a name, ``env NAME=value``, Docker and
      Kubernetes can).
    - Otherwise, in upper or lower case, the key is lower-cased, ``_`` is a dot and ``__`` a dash:
      ``SASL_PASSWORD`` -> ``sasl.password``, ``S3_ENDPOINT`` and ``s3_endpoint`` -> ``s3.endpoint``
      (the spelling that always worked), ``OAUTH2__SERVER__URI`` -> ``oauth2-server-uri``,
      ``S3_ACCESS__KEY__ID`` -> ``s3.access-key-id``.

    Raises :class:`ConfigurationError` naming ``variable`` for a key without ``.`` or ``-`` that is not
    letters and digits joined by ``_`` or ``__`` (``S3___ENDPOINT``, a leading or trailing ``_``, an
    empty key). Pure."""
    if "." in key or "-" in key:
        return key
    if not _SPELLED_KEY.fullmatch(key):
        raise ConfigurationError(
            f"environment variable {variable}: the property after the '__' is letters and digits "
            "joined by '_' for a dot and '__' for a dash (LAMINAR_ICEBERG__S3_ACCESS__KEY__ID sets "
            "s3.access-key-id), or the property as written with its dots and dashes "
            "(LAMINAR_ICEBERG__s3.access-key-id)")
    return "-".join(part.replace("_", ".") for part in key.lower().split("__"))


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
    ``LAMINAR_ICEBERG__<KEY>`` on top (the key's spelling: :func:`env_property`). Pure."""
    tables: dict[str, dict[str, str]] = {}
    for table, prefix in _TABLES.items():
        values: dict[str, str] = {}
        raw = file_values.get(table, {})
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"{table!r} in the config file must be a table of client properties")
        values.update({k: as_str(f"{table}.{k}", v) for k, v in _flatten(raw).items()})
        values.update({env_property(k, k[len(prefix):]): v for k, v in env.items() if k.startswith(prefix)})
        tables[table] = values
    return PassthroughTables(tables["kafka"], tables["schema_registry"], tables["iceberg"])


def read_config_file(config_file: str | Path | None) -> dict[str, Any]:
    """The parsed TOML file (empty without one); :class:`ConfigurationError` naming the file otherwise."""
    if not config_file:
        return {}
    path = Path(config_file)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}") from exc


