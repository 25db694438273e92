"""Typed settings of one node, merged from defaults, a TOML file, the environment and flags.

Precedence (later wins): built-in defaults < TOML file (``--config FILE``) < environment
(``LAMINAR_<NAME>``, e.g. ``LAMINAR_NODE_ID``) < command-line flags. Every setting has one canonical
name, the long flag without dashes (``node-id``); the TOML file uses the same names (``node_id`` is
accepted too) plus an optional ``[kafka]`` table of librdkafka properties passed to the source.

Unknown names are rejected with the nearest valid one. Values are validated here, so a
:class:`NodeSettings` that exists is well-formed. Apart from reading the TOML file in
:func:`load_settings`, this module does no I/O.
"""
from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from cluster.errors import ConfigError
from kafka_source.errors import ConfigurationError as ConnectorConfigurationError
from kafka_source.topics import PATTERN_PREFIX, TopicSelector

__all__ = ["NodeSettings", "SETTING_NAMES", "ENV_PREFIX", "env_name", "load_settings", "settings_from"]

ENV_PREFIX = "LAMINAR_"
#: LAMINAR_* variables that configure the tooling, not a node (README "Development"); a node ignores
#: them, as it ignores LAMINAR_TEST_*. Any other unknown LAMINAR_* close to a setting's name is a typo.
TOOLING_ENV: frozenset[str] = frozenset({
    "LAMINAR_CACHE_DIR", "LAMINAR_DEBIAN_MIRROR", "LAMINAR_CONTAINERS_REQUIRED", "LAMINAR_ALLOW_NO_NETNS",
})
#: where a new pipeline starts (resolved once and pinned as its initial manifest)
STARTUP_MODES: tuple[str, ...] = ("earliest", "latest", "timestamp", "specific-offsets")


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise ConfigError(f"{name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class NodeSettings:
    """Everything a node needs. Required: ``bootstrap``, ``topic`` (one or more), ``output``.

    ``zk`` empty means embedded mode (a :class:`~coordinator.local.LocalCoordinator` whose state
    lives in ``state_dir``, default ``<output>/_coordinator`` for a local output).
    """

    bootstrap: str
    topics: tuple[str, ...]
    output: str
    zk: str = ""
    pipeline: str = "default"
    node_id: int = 1
    group_id: str = ""
    metrics_port: int = 0
    checkpoint_interval_ms: int = 2000
    max_file_bytes: int = 128 * 1024 * 1024
    row_group_rows: int = 65536
    max_batch_records: int = 10000
    format: str = "raw"
    startup_mode: str = "earliest"
    startup_timestamp_ms: int = 0
    startup_specific_offsets: str = ""
    topology_interval_ms: int = 10000
    session_timeout_ms: int = 6000
    drain_timeout_ms: int = 10000
    vnode_count: int = 256
    source_identity: str = "kafka"
    state_dir: str = ""
    kafka: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))
        if not self.bootstrap:
            raise ConfigError("bootstrap is required (--bootstrap, LAMINAR_BOOTSTRAP or 'bootstrap' in the config file)")
        if not self.topics or not all(self.topics):
            raise ConfigError("topic is required (--topic, LAMINAR_TOPIC or 'topic' in the config file)")
        if not self.output:
            raise ConfigError("output is required (--output, LAMINAR_OUTPUT or 'output' in the config file)")
        if not self.pipeline or "/" in self.pipeline:
            raise ConfigError(f"pipeline {self.pipeline!r} must be non-empty and contain no '/'")
        _positive("node-id", self.node_id)
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics-port must be 0..65535, got {self.metrics_port}")
        for name in ("checkpoint_interval_ms", "max_file_bytes", "row_group_rows", "max_batch_records",
                     "session_timeout_ms", "drain_timeout_ms", "vnode_count"):
            _positive(name.replace("_", "-"), getattr(self, name))
        if self.format not in ("raw", "json"):
            raise ConfigError(f"format={self.format!r}: expected raw or json")
        if self.startup_mode not in STARTUP_MODES:
            raise ConfigError(f"startup-mode={self.startup_mode!r}: expected one of {', '.join(STARTUP_MODES)}")
        if (self.startup_mode == "timestamp") != (self.startup_timestamp_ms > 0):
            raise ConfigError("startup-timestamp-ms (> 0) goes with startup-mode=timestamp, and only with it")
        if (self.startup_mode == "specific-offsets") != bool(self.startup_specific_offsets):
            raise ConfigError(
                "startup-specific-offsets (topic:partition:offset,...) goes with startup-mode=specific-offsets, "
                "and only with it"
            )
        if self.topology_interval_ms < 0:
            raise ConfigError(f"topology-interval-ms must be >= 0 (0 = never), got {self.topology_interval_ms}")
        try:
            TopicSelector.parse(",".join(self.topics))
        except ConnectorConfigurationError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def selector(self) -> TopicSelector:
        """The topics to land: the named ones, or every topic matching ``re:<regex>``."""
        return TopicSelector.parse(",".join(self.topics))

    @property
    def effective_group_id(self) -> str:
        return self.group_id or f"laminar-{self.pipeline}"

    @property
    def embedded(self) -> bool:
        return not self.zk

    @property
    def effective_state_dir(self) -> str:
        """Where an embedded coordinator keeps its manifests."""
        if self.state_dir:
            return self.state_dir
        if "://" in self.output and not self.output.startswith("file://"):
            raise ConfigError("embedded mode with a remote output needs state-dir (a local directory)")
        root = self.output[len("file://"):] if self.output.startswith("file://") else self.output
        return str(Path(root) / "_coordinator")

    def source_properties(self) -> dict[str, str]:
        """The KafkaSource properties (metadata columns `_topic`, `_partition`, `_offset` always on)."""
        props = {
            "bootstrap.servers": self.bootstrap,
            "topic": ",".join(self.topics),
            "group.id": self.effective_group_id,
            "format": self.format,
            "startup.mode": self.startup_mode,
            "include.metadata": "_topic,_partition,_offset,_timestamp",
            # the runtime watches the topology and hands new partitions to the source
            "partition.discovery.interval.ms": "0",
        }
        if self.startup_mode == "timestamp":
            props["startup.timestamp.ms"] = str(self.startup_timestamp_ms)
        if self.startup_mode == "specific-offsets":
            props["startup.specific-offsets"] = self.startup_specific_offsets
        for key, value in self.kafka.items():
            props[f"kafka.{key}"] = str(value)
        return props


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None


def _as_str(name: str, value: Any) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a string")
    return str(value).strip()


def _as_topics(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) and value.strip().startswith(PATTERN_PREFIX):
        return (value.strip(),)  # one regular expression (it may contain commas)
    if isinstance(value, (list, tuple)):
        items = [_as_str(name, v) for v in value]
    else:
        items = _as_str(name, value).split(",")
    return tuple(t.strip() for t in items if t.strip())


_CONVERTERS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    # canonical setting name -> (dataclass field, converter)
    "bootstrap": ("bootstrap", _as_str),
    "topic": ("topics", _as_topics),
    "output": ("output", _as_str),
    "zk": ("zk", _as_str),
    "pipeline": ("pipeline", _as_str),
    "node-id": ("node_id", _as_int),
    "group-id": ("group_id", _as_str),
    "metrics-port": ("metrics_port", _as_int),
    "checkpoint-interval-ms": ("checkpoint_interval_ms", _as_int),
    "max-file-bytes": ("max_file_bytes", _as_int),
    "row-group-rows": ("row_group_rows", _as_int),
    "max-batch-records": ("max_batch_records", _as_int),
    "format": ("format", _as_str),
    "startup-mode": ("startup_mode", _as_str),
    "startup-timestamp-ms": ("startup_timestamp_ms", _as_int),
    "startup-specific-offsets": ("startup_specific_offsets", _as_str),
    "topology-interval-ms": ("topology_interval_ms", _as_int),
    "session-timeout-ms": ("session_timeout_ms", _as_int),
    "drain-timeout-ms": ("drain_timeout_ms", _as_int),
    "vnode-count": ("vnode_count", _as_int),
    "source-identity": ("source_identity", _as_str),
    "state-dir": ("state_dir", _as_str),
}
#: Every setting name (the long flags of `laminar-kafka run`, without the leading dashes).
SETTING_NAMES: tuple[str, ...] = tuple(_CONVERTERS)


def env_name(setting: str) -> str:
    """``node-id`` -> ``LAMINAR_NODE_ID``."""
    return ENV_PREFIX + setting.upper().replace("-", "_")


def _nearest(name: str) -> str:
    match = difflib.get_close_matches(name, SETTING_NAMES, n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else ""


def _canonical(name: str, origin: str) -> str:
    canonical = name.strip().lower().replace("_", "-")
    if canonical not in _CONVERTERS:
        raise ConfigError(f"unknown setting {name!r} in {origin}{_nearest(canonical)}")
    return canonical


def settings_from(
    file_values: Mapping[str, Any],
    env: Mapping[str, str],
    flags: Mapping[str, Any],
) -> NodeSettings:
    """Merge the three sources (file < env < flags) into validated settings.

    ``file_values`` is the parsed TOML document (a ``kafka`` table is the librdkafka passthrough);
    ``env`` is the process environment (only ``LAMINAR_*`` names are read, unknown ones rejected);
    ``flags`` maps canonical names to values, ``None`` meaning "not given". Pure.
    """
    merged: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    for key, value in file_values.items():
        if key == "kafka":
            if not isinstance(value, Mapping):
                raise ConfigError("'kafka' in the config file must be a table of librdkafka properties")
            kafka.update({str(k): _as_str(f"kafka.{k}", v) for k, v in value.items()})
            continue
        merged[_canonical(key, "the config file")] = value
    known_env = {env_name(name): name for name in SETTING_NAMES}
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        if key.startswith(ENV_PREFIX + "KAFKA__"):
            kafka[key[len(ENV_PREFIX + "KAFKA__"):].lower().replace("_", ".")] = value
            continue
        if key not in known_env:
            if key in TOOLING_ENV or key.startswith("LAMINAR_TEST_"):
                continue
            guess = difflib.get_close_matches(key, list(known_env), n=1, cutoff=0.6)
            if guess:
                raise ConfigError(f"unknown environment variable {key}; did you mean {guess[0]}?")
            continue
        merged[known_env[key]] = value
    for key, value in flags.items():
        if value is None:
            continue
        merged[_canonical(key, "the flags")] = value
    kwargs: dict[str, Any] = {"kafka": kafka}
    for name, value in merged.items():
        attr, convert = _CONVERTERS[name]
        kwargs[attr] = convert(name, value)
    for required in ("bootstrap", "topics", "output"):
        kwargs.setdefault(required, "" if required != "topics" else ())
    return NodeSettings(**kwargs)


def load_settings(
    config_file: str | Path | None, env: Mapping[str, str], flags: Mapping[str, Any]
) -> NodeSettings:
    """Read the TOML file (if any) and merge it with ``env`` and ``flags`` (see module docstring)."""
    file_values: dict[str, Any] = {}
    if config_file:
        path = Path(config_file)
        try:
            file_values = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    return settings_from(file_values, env, flags)

