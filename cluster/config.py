"""Typed settings of one node, merged from defaults, a TOML file, the environment and flags.

Every setting is declared once in :mod:`laminar_kafka.cluster.settings_def` (name, type, default,
bounds, doc; the source's pass-through settings by reference to the source's own declarations).
Precedence (later wins): the declared defaults < TOML file (``--config FILE``) < environment
(``LAMINAR_<NAME>``, e.g. ``LAMINAR_NODE_ID``) < command-line flags. A setting has one name, the long
flag without dashes (``node-id``); the TOML file uses the same names (``node_id`` is accepted too) plus
three optional tables, ``[kafka]``, ``[schema_registry]`` and ``[iceberg]``, whose properties are handed
through (:mod:`laminar_kafka.cluster.config_file`). Secrets (see
:func:`laminar_kafka.kafka_source.clients.is_secret_key`) never appear in ``repr`` or logs.

Unknown names are rejected with the nearest valid one. Values are validated here, so a
:class:`NodeSettings` that exists is well-formed. Apart from reading the TOML file in
:func:`load_settings`, this module does no I/O.
"""
from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from laminar_kafka.cluster.config_file import (
    AUTO,
    ICEBERG_ENV_PREFIX,
    KAFKA_ENV_PREFIX,
    REGISTRY_ENV_PREFIX,
    as_node_id,
    as_str,
    as_topics,
    passthrough_tables,
    read_config_file,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.routing_template import FIELD_KINDS, TableTemplate
from laminar_kafka.cluster.lake.settings import (
    IcebergSettings,
    LakeTarget,
    TableFormat,
    TableLocation,
    table_name_of,
)
from laminar_kafka.cluster.settings_def import (
    ENV_PREFIX,
    NODE_SETTINGS,
    SECRET_SETTINGS,
    attribute,
    env_name,
    node_default,
)
from laminar_kafka.connector.settings import Layer
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig, redact
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.config.values import parse_upsert_keys

__all__ = [
    "ENV_PREFIX", "NodeSettings", "SECRET_SETTINGS", "SETTING_NAMES", "env_name", "kafka_client_from", "load_settings",
    "settings_from",
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
#: Every setting name (the long flags of `laminar-kafka run`, without the leading dashes).
SETTING_NAMES: tuple[str, ...] = tuple(NODE_SETTINGS)


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
    zk: str = node_default("zk")
    pipeline: str = node_default("pipeline")
    node_id: int = node_default("node-id")
    node_id_auto: bool = False
    group_id: str = node_default("group-id")
    metrics_port: int = node_default("metrics-port")
    checkpoint_interval_ms: int = node_default("checkpoint-interval-ms")
    quiet_checkpoint_interval_ms: int = node_default("quiet-checkpoint-interval-ms")
    freshness_target_ms: int = node_default("freshness-target-ms")
    max_file_bytes: int = node_default("max-file-bytes")
    row_group_rows: int = node_default("row-group-rows")
    writer_memory_bytes: int = node_default("writer-memory-bytes")
    max_batch_records: int = node_default("max-batch-records")
    max_fetched_bytes: int = node_default("max-fetched-bytes")
    batch_wait_ms: int = node_default("batch-wait-ms")
    format: str = node_default("format")
    startup_mode: str = node_default("startup-mode")
    startup_timestamp_ms: int | None = node_default("startup-timestamp-ms")
    startup_specific_offsets: str | None = node_default("startup-specific-offsets")
    topology_interval_ms: int = node_default("topology-interval-ms")
    session_timeout_ms: int = node_default("session-timeout-ms")
    drain_timeout_ms: int = node_default("drain-timeout-ms")
    lake_io_timeout_ms: int = node_default("lake-io-timeout-ms")
    manifest_deltas: bool = node_default("manifest-deltas")
    vnode_count: int = node_default("vnode-count")
    source_identity: str = node_default("source-identity")
    state_dir: str = node_default("state-dir")
    metrics_address: str = node_default("metrics-address")
    json_schema: str | None = node_default("json-schema")
    #: None: the source's default under the node's guaranteed delivery (fail)
    on_bad_record: str | None = node_default("on-bad-record")
    max_error_rate: float = node_default("max-error-rate")
    #: None: bad, or a delete in upsert mode (upsert-keys)
    on_tombstone: str | None = node_default("on-tombstone")
    upsert_keys: str | None = node_default("upsert-keys")
    fail_on_data_loss: bool = node_default("fail-on-data-loss")
    on_lake_behind: str = node_default("on-lake-behind")
    include_key: bool = node_default("include-key")
    include_headers: bool = node_default("include-headers")
    key_format: str = node_default("key-format")
    schema_registry_url: str = node_default("schema-registry-url")
    zk_auth: str = field(default=node_default("zk-auth"), repr=False)
    table_format: str = node_default("table-format")
    partition_by: str = node_default("partition-by")
    table: str = node_default("table")
    table_template: str = node_default("table-template")
    table_topic_regex: str = node_default("table-topic-regex")
    table_allowed: str = node_default("table-allowed")
    namespace: str = node_default("namespace")
    catalog_uri: str = node_default("catalog-uri")
    table_location: str = node_default("table-location")
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
        if self.node_id_auto and self.node_id < 0:
            raise ConfigurationError(f"node-id must be >= 1 (or auto), got {self.node_id}")
        self._check_declared()
        quiet = self.quiet_checkpoint_interval_ms
        if quiet != 0 and quiet < self.checkpoint_interval_ms:
            raise ConfigurationError(f"quiet-checkpoint-interval-ms must be 0 (off) or at least checkpoint-interval-ms "
                                     f"({self.checkpoint_interval_ms}), got {quiet}")
        if self.json_schema and self.format not in ("json", "debezium-json"):
            raise ConfigurationError("json-schema goes with format=json or debezium-json, and only with them")
        if self.format not in ("raw", "json", "debezium-json") and not self.schema_registry_url:
            raise ConfigurationError(f"format={self.format} needs schema-registry-url (the Confluent wire format)")
        if self.zk_auth and (":" not in self.zk_auth or self.zk_auth.startswith(":")):
            raise ConfigurationError("zk-auth must be user:password")
        if self.zk_auth and not self.zk:
            raise ConfigurationError("zk-auth goes with zk (ZooKeeper mode)")
        if (self.startup_mode == "timestamp") != (self.startup_timestamp_ms is not None):
            raise ConfigurationError("startup-timestamp-ms goes with startup-mode=timestamp, and only with it")
        if (self.startup_mode == "specific-offsets") != bool(self.startup_specific_offsets):
            raise ConfigurationError(
                "startup-specific-offsets (topic:partition:offset,...) goes with startup-mode=specific-offsets, "
                "and only with it"
            )
        TopicSelector.parse(",".join(self.topics))
        self._check_lake()

    def _check_declared(self) -> None:
        """Every setting's value against its declaration: bounds, and a closed set of choices."""
        for name, setting in NODE_SETTINGS.items():
            value = getattr(self, attribute(name))
            if name == "topic" or value is None or (name == "node-id" and self.node_id_auto):
                continue
            if setting.choices and value not in setting.choices:
                raise ConfigurationError(f"{name}={value!r}: expected one of {', '.join(setting.choices)}")
            if not setting.choices:
                setting.validate(value)

    def _check_lake(self) -> None:
        self._check_partitioning()
        if not self.routing.is_identity and self.table:
            raise ConfigurationError("table names one table and table-template routes rows to tables: give one of them")
        if self.table_format != TableFormat.ICEBERG.value:
            if self.upsert_keys or self.format == "debezium-json":  # a Parquet tree only appends files
                raise ConfigurationError("upsert-keys and format=debezium-json need table-format=iceberg (keyed tables "
                                         "with updates and deletes); the Parquet tree is append-only")
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
        self.partitioning.check_sources(record_format=self.format, json_schema=self.json_schema or "",
                                        include_key=self.include_key, key_format=self.key_format)

    def with_node_id(self, node_id: int) -> NodeSettings:
        """These settings with the id ``node-id auto`` chose (``node_id_auto`` stays True)."""
        if not self.node_id_auto:
            raise ConfigurationError("with_node_id: node-id is not auto")
        NODE_SETTINGS["node-id"].validate(node_id)
        return replace(self, node_id=node_id)

    @property
    def partitioning(self) -> PartitionSpec:
        """``partition-by`` parsed (raises :class:`ConfigurationError`)."""
        return PartitionSpec.parse(self.partition_by)

    @property
    def routing(self) -> TableTemplate:
        """``table-template`` with ``table-topic-regex`` and ``table-allowed``, parsed (raises
        :class:`ConfigurationError`)."""
        return TableTemplate.parse(self.table_template, self.table_topic_regex, self.table_allowed)

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
            routed=not self.routing.is_identity,
            upsert_keys=parse_upsert_keys(self.upsert_keys or ""),
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
            "include-metadata": ",".join(metadata),
            # the runtime watches the topology and hands new partitions to the source
            "partition-discovery-interval-ms": "0",
        }
        for name, setting in NODE_SETTINGS.items():  # the settings passed through under their own name
            value = getattr(self, attribute(name))
            if setting.layer is Layer.BOTH and name != "topic" and value not in (None, ""):
                props[name] = setting.text(value)
        if not self.json_schema and json_schema:
            props["json-schema"] = json_schema
        required = self.partitioning.required_fields()
        routed = [f"{name}:{FIELD_KINDS}" for name in self.routing.fields if name not in self.partitioning.sources]
        required = ",".join([part for part in (required, *routed) if part])  # a row the template cannot route: bad
        if required:  # a record partition-by cannot place is a bad record, never a row in a wrong directory
            props["required-fields"] = required
        if self.schema_registry_url:
            props["schema.registry.url"] = self.schema_registry_url
        for key, value in self.schema_registry.items():
            props[f"schema.registry.{key}"] = str(value)
        return props


def _converted(name: str, value: Any) -> Any:
    """``value`` (a flag's, a variable's or a TOML value) of the setting ``name`` as
    :class:`NodeSettings` holds it (an enum as its value's text)."""
    if name == "topic":
        return as_topics(name, value)
    if name == "node-id":
        node_id = as_node_id(name, value)
        return node_id if node_id == AUTO else NODE_SETTINGS[name].parse(node_id)
    parsed = NODE_SETTINGS[name].parse(value)
    return parsed.value if isinstance(parsed, enum.Enum) else parsed


def _nearest(name: str) -> str:
    match = difflib.get_close_matches(name, SETTING_NAMES, n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else ""


def _canonical(name: str, origin: str) -> str:
    canonical = name.strip().lower().replace("_", "-")
    if canonical not in NODE_SETTINGS:
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
        kwargs[attribute(name)] = _converted(name, value)
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

