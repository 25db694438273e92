"""Typed settings of one node, merged from defaults, a TOML file, the environment and flags.

Precedence (later wins): built-in defaults < TOML file (``--config FILE``) < environment
(``LAMINAR_<NAME>``, e.g. ``LAMINAR_NODE_ID``) < command-line flags. Every setting has one canonical
name, the long flag without dashes (``node-id``); the TOML file uses the same names (``node_id`` is
accepted too) plus three optional tables: ``[kafka]``, librdkafka properties shared by every Kafka client
of the node (security: ``security.protocol``, ``sasl.*``, ``ssl.*``; also ``LAMINAR_KAFKA__<KEY>``,
e.g. ``LAMINAR_KAFKA__SASL_PASSWORD`` for ``sasl.password``), and ``[schema_registry]``, properties of
the schema-registry client (``basic.auth.user.info``...; also ``LAMINAR_SCHEMA_REGISTRY__<KEY>``),
and ``[iceberg]``, properties of the Iceberg catalog and its FileIO (``token``, ``s3.endpoint``...;
also ``LAMINAR_ICEBERG__<KEY>``; a key's ``_`` is a dot and ``__`` a dash, or the key is the property as
written: :func:`laminar_kafka.cluster.config_file.env_property`). Reading the file and the tables:
:mod:`laminar_kafka.cluster.config_file`.
Secrets (see :func:`laminar_kafka.kafka_source.clients.is_secret_key`) never appear in ``repr`` or logs.

Unknown names are rejected with the nearest valid one. Values are validated here, so a
:class:`NodeSettings` that exists is well-formed. Apart from reading the TOML file in
:func:`load_settings`, this module does no I/O.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from laminar_kafka.cluster.config_file import (
    AUTO,
    ENV_PREFIX,
    ICEBERG_ENV_PREFIX,
    KAFKA_ENV_PREFIX,
    REGISTRY_ENV_PREFIX,
    as_bool,
    as_float,
    as_int,
    as_node_id,
    as_str,
    as_topics,
    passthrough_tables,
    read_config_file,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.reconcile import OnLakeBehind
from laminar_kafka.cluster.lake.settings import (
    IcebergSettings,
    LakeTarget,
    TableFormat,
    TableLocation,
    table_name_of,
)
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig, redact
from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig
from laminar_kafka.kafka_source.config.topics import TopicSelector

__all__ = [
    "BAD_RECORD_POLICIES", "TOMBSTONE_POLICIES", "ENV_PREFIX", "NodeSettings", "SETTING_NAMES", "STARTUP_MODES", "env_name",
    "kafka_client_from", "load_settings", "settings_from",
]

#: LAMINAR_* variables that configure the tooling, not a node (README "Development"); a node ignores
#: them, as it ignores LAMINAR_TEST_*. Any other unknown LAMINAR_* close to a setting's name is a typo.
TOOLING_ENV: frozenset[str] = frozenset({
    "LAMINAR_CACHE_DIR", "LAMINAR_DEBIAN_MIRROR", "LAMINAR_CONTAINERS_REQUIRED", "LAMINAR_ALLOW_NO_NETNS",
    "LAMINAR_LOG_LEVEL", "LAMINAR_LOG_FORMAT", "LAMINAR_NO_PROGRESS",  # every command (laminar_kafka.cluster.logs, .progress)
    # the test suite's tools and requirements, which .ci/run exports to every process it starts
    "LAMINAR_HELM", "LAMINAR_PROMTOOL", "LAMINAR_DEPLOY_TOOLS_REQUIRED", "LAMINAR_NO_SYSTEM_JAVA_REQUIRED",
    "LAMINAR_FORCE_PODMAN", "LAMINAR_MATRIX_CELL",
    # the dev stack's server releases (laminar_kafka.devstack.jvm.versions)
    "LAMINAR_KAFKA_VERSION", "LAMINAR_KAFKA_MODE", "LAMINAR_ZOOKEEPER_VERSION",
})
#: what a record that does not decode does: stop the node, or go to ``<output>/_rejected/``
BAD_RECORD_POLICIES: tuple[str, ...] = ("fail", "skip")
#: what a null value (a tombstone) is under a decoded format: a bad record, or a row of null payload columns
TOMBSTONE_POLICIES: tuple[str, ...] = ("bad", "row")
#: where a new pipeline starts (resolved once and pinned as its initial manifest)
STARTUP_MODES: tuple[str, ...] = ("earliest", "latest", "timestamp", "specific-offsets")


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise ConfigurationError(f"{name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class NodeSettings:
    """Everything a node needs. Required: ``bootstrap``, ``topic`` (one or more), ``output``.

    ``zk`` empty means embedded mode (a :class:`~laminar_kafka.coordinator.local.coordinator.LocalCoordinator` whose state
    lives in ``state_dir``, default ``<output>/_coordinator`` for a local output).

    ``node_id_auto`` (``node-id = auto``): the node chooses its id at start
    (:func:`laminar_kafka.cluster.auto_node_id.choose_node_id`); ``node_id`` is 0 until then and the
    chosen id after (:meth:`with_node_id`). In ZooKeeper mode ``state_dir`` is then where the node
    records its identity and id.
    """

    bootstrap: str
    topics: tuple[str, ...]
    output: str
    zk: str = ""
    pipeline: str = "default"
    node_id: int = 1
    node_id_auto: bool = False
    group_id: str = ""
    metrics_port: int = 0
    checkpoint_interval_ms: int = 2000
    quiet_checkpoint_interval_ms: int = 10000
    max_file_bytes: int = 128 * 1024 * 1024
    row_group_rows: int = 65536
    max_batch_records: int = 10000
    max_fetched_bytes: int = 32 * 1024 * 1024
    batch_wait_ms: int = 250
    format: str = "raw"
    startup_mode: str = "earliest"
    startup_timestamp_ms: int = 0
    startup_specific_offsets: str = ""
    topology_interval_ms: int = 10000
    session_timeout_ms: int = 6000
    drain_timeout_ms: int = 10000
    lake_io_timeout_ms: int = 120000
    manifest_deltas: bool = True
    vnode_count: int = 256
    source_identity: str = "kafka"
    state_dir: str = ""
    metrics_address: str = "0.0.0.0"
    json_schema: str = ""
    on_bad_record: str = "fail"
    max_error_rate: float = 0.01
    on_tombstone: str = "bad"
    fail_on_data_loss: bool = True
    on_lake_behind: str = "rewind"
    include_key: bool = False
    include_headers: bool = False
    key_format: str = "raw"
    schema_registry_url: str = ""
    zk_auth: str = field(default="", repr=False)
    table_format: str = "parquet"
    partition_by: str = "day"
    table: str = ""
    namespace: str = ""
    catalog_uri: str = ""
    table_location: str = "output"
    kafka: Mapping[str, str] = field(default_factory=dict)
    schema_registry: Mapping[str, str] = field(default_factory=dict)
    iceberg: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        hidden = ("kafka", "schema_registry", "iceberg", "zk_auth")
        shown = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in hidden}
        fields = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return (f"NodeSettings({fields}, kafka={redact(self.kafka)!r}, schema_registry={redact(self.schema_registry)!r}, "
                f"iceberg={redact(self.iceberg)!r}, zk_auth={'***' if self.zk_auth else ''!r})")

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))
        object.__setattr__(self, "schema_registry", MappingProxyType(dict(self.schema_registry)))
        object.__setattr__(self, "iceberg", MappingProxyType(dict(self.iceberg)))
        _kafka_client(self.bootstrap, self.kafka)  # the bootstrap servers and the [kafka] table
        if not self.topics or not all(self.topics):
            raise ConfigurationError("topic is required (--topic, LAMINAR_TOPIC or 'topic' in the config file)")
        if not self.output:
            raise ConfigurationError("output is required (--output, LAMINAR_OUTPUT or 'output' in the config file)")
        if not self.pipeline or "/" in self.pipeline:
            raise ConfigurationError(f"pipeline {self.pipeline!r} must be non-empty and contain no '/'")
        if not self.node_id_auto:
            _positive("node-id", self.node_id)
        elif self.node_id < 0:
            raise ConfigurationError(f"node-id must be >= 1 (or auto), got {self.node_id}")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError(f"metrics-port must be 0..65535, got {self.metrics_port}")
        for name in ("checkpoint_interval_ms", "max_file_bytes", "row_group_rows", "max_batch_records", "max_fetched_bytes",
                     "session_timeout_ms", "drain_timeout_ms", "lake_io_timeout_ms", "vnode_count"):
            _positive(name.replace("_", "-"), getattr(self, name))
        quiet = self.quiet_checkpoint_interval_ms
        if quiet != 0 and quiet < self.checkpoint_interval_ms:
            raise ConfigurationError(f"quiet-checkpoint-interval-ms must be 0 (off) or at least checkpoint-interval-ms "
                              f"({self.checkpoint_interval_ms}), got {quiet}")
        formats = tuple(f.value for f in Format)
        if self.format not in formats:
            raise ConfigurationError(f"format={self.format!r}: expected one of {', '.join(formats)}")
        if self.json_schema and self.format != "json":
            raise ConfigurationError("json-schema goes with format=json, and only with it")
        if self.format not in ("raw", "json") and not self.schema_registry_url:
            raise ConfigurationError(f"format={self.format} needs schema-registry-url (the Confluent wire format)")
        if self.on_bad_record not in BAD_RECORD_POLICIES:
            raise ConfigurationError(f"on-bad-record={self.on_bad_record!r}: expected one of {', '.join(BAD_RECORD_POLICIES)}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigurationError(f"max-error-rate must be within [0, 1], got {self.max_error_rate:g}")
        if self.on_tombstone not in TOMBSTONE_POLICIES:
            raise ConfigurationError(f"on-tombstone={self.on_tombstone!r}: expected one of {', '.join(TOMBSTONE_POLICIES)}")
        if self.zk_auth and (":" not in self.zk_auth or self.zk_auth.startswith(":")):
            raise ConfigurationError("zk-auth must be user:password")
        if self.zk_auth and not self.zk:
            raise ConfigurationError("zk-auth goes with zk (ZooKeeper mode)")
        if self.startup_mode not in STARTUP_MODES:
            raise ConfigurationError(f"startup-mode={self.startup_mode!r}: expected one of {', '.join(STARTUP_MODES)}")
        if (self.startup_mode == "timestamp") != (self.startup_timestamp_ms > 0):
            raise ConfigurationError("startup-timestamp-ms (> 0) goes with startup-mode=timestamp, and only with it")
        if (self.startup_mode == "specific-offsets") != bool(self.startup_specific_offsets):
            raise ConfigurationError(
                "startup-specific-offsets (topic:partition:offset,...) goes with startup-mode=specific-offsets, "
                "and only with it"
            )
        if self.topology_interval_ms < 0:
            raise ConfigurationError(f"topology-interval-ms must be >= 0 (0 = never), got {self.topology_interval_ms}")
        if self.batch_wait_ms < 0:
            raise ConfigurationError(f"batch-wait-ms must be >= 0 (0 = no wait), got {self.batch_wait_ms}")
        TopicSelector.parse(",".join(self.topics))
        self._check_lake()

    def _check_lake(self) -> None:
        self._check_partitioning()
        for name, enum_type in (("table-format", TableFormat), ("on-lake-behind", OnLakeBehind),
                                ("table-location", TableLocation)):
            value = getattr(self, name.replace("-", "_"))
            choices = tuple(member.value for member in enum_type)
            if value not in choices:
                raise ConfigurationError(f"{name}={value!r}: expected one of {', '.join(choices)}")
        if self.table_format != TableFormat.ICEBERG.value:
            if self.table_location != TableLocation.OUTPUT.value:
                raise ConfigurationError("table-location goes with table-format=iceberg, and only with it")
            for name in ("table", "namespace", "catalog-uri"):
                if getattr(self, name.replace("-", "_")):
                    raise ConfigurationError(f"{name} goes with table-format=iceberg, and only with it")
            return
        if self.table and (len(self.topics) != 1 or self.selector.pattern is not None):
            raise ConfigurationError("table names one table: it goes with a single topic (not a list or a re: pattern)")
        if "://" in self.output and not self.output.startswith("file://") and not self.catalog_uri:
            raise ConfigurationError("table-format=iceberg with a remote output needs catalog-uri "
                              "(sqlite:///<local path> or an http(s):// REST catalog)")
        self.iceberg_settings()  # validates the names and the catalog URI

    def _check_partitioning(self) -> None:
        """``partition-by`` parses, and every column it reads is one these records can have."""
        self.partitioning.check_sources(record_format=self.format, json_schema=self.json_schema,
                                        include_key=self.include_key, key_format=self.key_format)

    def with_node_id(self, node_id: int) -> NodeSettings:
        """These settings with the id ``node-id auto`` chose (``node_id_auto`` stays True)."""
        if not self.node_id_auto:
            raise ConfigurationError("with_node_id: node-id is not auto")
        _positive("node-id", node_id)
        return replace(self, node_id=node_id)

    @property
    def partitioning(self) -> PartitionSpec:
        """``partition-by`` parsed (raises :class:`ConfigurationError`)."""
        return PartitionSpec.parse(self.partition_by)

    @property
    def lake_format(self) -> TableFormat:
        return TableFormat(self.table_format)

    def lake_target(self) -> LakeTarget:
        """Where this node's lake is, for its readers (``verify``...)."""
        iceberg = self.iceberg_settings() if self.lake_format is TableFormat.ICEBERG else None
        return LakeTarget(self.output, self.lake_format, self.pipeline, iceberg)

    def iceberg_settings(self) -> IcebergSettings:
        """The Iceberg catalog and table names (namespace default: the pipeline, with ``-`` and ``.``
        as ``_``)."""
        return IcebergSettings(
            namespace=self.namespace or table_name_of(self.pipeline),
            catalog_uri=self.catalog_uri or None,
            table=self.table or None,
            properties=self.iceberg,
            table_location=TableLocation(self.table_location),
        )

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
            raise ConfigurationError("embedded mode with a remote output needs state-dir (a local directory)")
        root = self.output[len("file://"):] if self.output.startswith("file://") else self.output
        return str(Path(root) / "_coordinator")

    def kafka_client(self) -> KafkaClientConfig:
        """The client configuration every Kafka client of this node uses, the source's included
        (checked when the settings were made)."""
        return KafkaClientConfig(self.bootstrap, self.kafka)

    def source_config(self, json_schema: str = "") -> KafkaSourceConfig:
        """The source's typed configuration: :meth:`source_properties` parsed once, with
        :meth:`kafka_client` given as a value. Raises the source's ``ConfigurationError``."""
        return KafkaSourceConfig.from_properties(self.source_properties(json_schema), self.kafka_client())

    def source_properties(self, json_schema: str = "") -> dict[str, str]:
        """The KafkaSource properties (metadata columns `_topic`, `_partition`, `_offset`, `_timestamp`
        always on; `_key`, `_headers` with include-key / include-headers). ``json_schema`` is the
        pipeline's pinned schema when ``json-schema`` is not set (format=json). The Kafka client
        configuration is not among them: the source receives :meth:`kafka_client` as a value
        (:meth:`source_config`)."""
        metadata = ["_topic", "_partition", "_offset", "_timestamp"]
        metadata += ["_key"] if self.include_key else []
        metadata += ["_headers"] if self.include_headers else []
        props = {
            "topic": ",".join(self.topics),
            "group.id": self.effective_group_id,
            "format": self.format,
            "startup.mode": self.startup_mode,
            "include.metadata": ",".join(metadata),
            "max.fetched.bytes": str(self.max_fetched_bytes),
            "batch.wait.ms": str(self.batch_wait_ms),
            # the runtime watches the topology and hands new partitions to the source
            "partition.discovery.interval.ms": "0",
        }
        if self.startup_mode == "timestamp":
            props["startup.timestamp.ms"] = str(self.startup_timestamp_ms)
        if self.startup_mode == "specific-offsets":
            props["startup.specific-offsets"] = self.startup_specific_offsets
        if self.json_schema or json_schema:
            props["json.schema"] = self.json_schema or json_schema
        if self.on_bad_record != "fail":
            props["on.bad.record"] = self.on_bad_record
        required = self.partitioning.required_fields()
        if required:  # a record partition-by cannot place is a bad record, never a row in a wrong directory
            props["required.fields"] = required
        props["max.error.rate"] = repr(self.max_error_rate)
        if self.on_tombstone != "bad":
            props["on.tombstone"] = self.on_tombstone
        if not self.fail_on_data_loss:
            props["fail.on.data.loss"] = "false"
        if self.key_format != "raw":
            props["key.format"] = self.key_format
        if self.schema_registry_url:
            props["schema.registry.url"] = self.schema_registry_url
        for key, value in self.schema_registry.items():
            props[f"schema.registry.{key}"] = str(value)
        return props


_CONVERTERS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    # canonical setting name -> (dataclass field, converter)
    "bootstrap": ("bootstrap", as_str),
    "topic": ("topics", as_topics),
    "output": ("output", as_str),
    "zk": ("zk", as_str),
    "pipeline": ("pipeline", as_str),
    "node-id": ("node_id", as_node_id),
    "group-id": ("group_id", as_str),
    "metrics-port": ("metrics_port", as_int),
    "checkpoint-interval-ms": ("checkpoint_interval_ms", as_int),
    "quiet-checkpoint-interval-ms": ("quiet_checkpoint_interval_ms", as_int),
    "max-file-bytes": ("max_file_bytes", as_int),
    "row-group-rows": ("row_group_rows", as_int),
    "max-batch-records": ("max_batch_records", as_int),
    "max-fetched-bytes": ("max_fetched_bytes", as_int),
    "batch-wait-ms": ("batch_wait_ms", as_int),
    "format": ("format", as_str),
    "startup-mode": ("startup_mode", as_str),
    "startup-timestamp-ms": ("startup_timestamp_ms", as_int),
    "startup-specific-offsets": ("startup_specific_offsets", as_str),
    "topology-interval-ms": ("topology_interval_ms", as_int),
    "session-timeout-ms": ("session_timeout_ms", as_int),
    "drain-timeout-ms": ("drain_timeout_ms", as_int),
    "lake-io-timeout-ms": ("lake_io_timeout_ms", as_int),
    "manifest-deltas": ("manifest_deltas", as_bool),
    "vnode-count": ("vnode_count", as_int),
    "source-identity": ("source_identity", as_str),
    "state-dir": ("state_dir", as_str),
    "metrics-address": ("metrics_address", as_str),
    "json-schema": ("json_schema", as_str),
    "on-bad-record": ("on_bad_record", as_str),
    "max-error-rate": ("max_error_rate", as_float),
    "on-tombstone": ("on_tombstone", as_str),
    "fail-on-data-loss": ("fail_on_data_loss", as_bool),
    "on-lake-behind": ("on_lake_behind", as_str),
    "include-key": ("include_key", as_bool),
    "include-headers": ("include_headers", as_bool),
    "key-format": ("key_format", as_str),
    "schema-registry-url": ("schema_registry_url", as_str),
    "zk-auth": ("zk_auth", as_str),
    "table-format": ("table_format", as_str),
    "partition-by": ("partition_by", as_str),
    "table": ("table", as_str),
    "namespace": ("namespace", as_str),
    "catalog-uri": ("catalog_uri", as_str),
    "table-location": ("table_location", as_str),
}
#: settings whose value is a secret: never printed, logged or stored
SECRET_SETTINGS: frozenset[str] = frozenset({"zk-auth"})
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
        raise ConfigurationError(f"unknown setting {name!r} in {origin}{_nearest(canonical)}")
    return canonical


def _kafka_client(bootstrap: str, kafka: Mapping[str, str]) -> KafkaClientConfig:
    """The Kafka client configuration of the ``bootstrap`` setting and the ``[kafka]`` table;
    :class:`KafkaClientConfig` checks them, its error raised as a :class:`ConfigurationError` naming where
    the setting is given."""
    try:
        return KafkaClientConfig(bootstrap, kafka)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (--bootstrap, LAMINAR_BOOTSTRAP or 'bootstrap' in the config file)") from None


def kafka_client_from(config_file: str | Path | None, env: Mapping[str, str], bootstrap: str | None) -> KafkaClientConfig:
    """The Kafka client configuration of a command that is not a node (``status``, ``verify``):
    ``bootstrap`` (the flag) or the file's / environment's ``bootstrap``, plus the ``[kafka]`` table
    and ``LAMINAR_KAFKA__*``. Other settings in the file are ignored here (they configure ``run``)."""
    file_values = read_config_file(config_file)
    kafka = passthrough_tables(file_values, env).kafka
    bootstrap = bootstrap or env.get(env_name("bootstrap")) or file_values.get("bootstrap") or ""
    return _kafka_client(as_str("bootstrap", bootstrap), kafka)


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
    tables = passthrough_tables(file_values, env)
    for key, value in file_values.items():
        if key in tables._fields:
            continue
        merged[_canonical(key, "the config file")] = value
    known_env = {env_name(name): name for name in SETTING_NAMES}
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX) or key.startswith((KAFKA_ENV_PREFIX, REGISTRY_ENV_PREFIX, ICEBERG_ENV_PREFIX)):
            continue
        if key not in known_env:
            if key in TOOLING_ENV or key.startswith("LAMINAR_TEST_"):
                continue
            guess = difflib.get_close_matches(key, list(known_env), n=1, cutoff=0.6)
            if guess:
                raise ConfigurationError(f"unknown environment variable {key}; did you mean {guess[0]}?")
            continue
        merged[known_env[key]] = value
    for key, value in flags.items():
        if value is None:
            continue
        merged[_canonical(key, "the flags")] = value
    kwargs: dict[str, Any] = tables._asdict()
    for name, value in merged.items():
        attr, convert = _CONVERTERS[name]
        kwargs[attr] = convert(name, value)
    if kwargs.get("node_id") == AUTO:
        kwargs["node_id"], kwargs["node_id_auto"] = 0, True
    for required in ("bootstrap", "topics", "output"):
        kwargs.setdefault(required, "" if required != "topics" else ())
    return NodeSettings(**kwargs)


def load_settings(
    config_file: str | Path | None, env: Mapping[str, str], flags: Mapping[str, Any]
) -> NodeSettings:
    """Read the TOML file (if any) and merge it with ``env`` and ``flags`` (see module docstring)."""
    return settings_from(read_config_file(config_file), env, flags)

