"""A node's settings, each declared once (:class:`~laminar_kafka.connector.settings.Setting`).

:data:`NODE_SETTINGS` holds every setting of ``laminar-kafka run`` in the order of its flags: the
node's own (``layer=NODE``) and, by reference, the source's declarations the node passes through
under the same name (``layer=BOTH``: ``batch-wait-ms``, ``on-bad-record``...; never declared again
here). The flags and their help, the environment names (``LAMINAR_<NAME>``), the TOML keys, the
:class:`~laminar_kafka.cluster.config.NodeSettings` defaults and the node table of
``docs/settings.md`` are made from it. Pure values.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from laminar_kafka.cluster.config_file import ENV_PREFIX
from laminar_kafka.cluster.lake.parquet.writer_memory import DEFAULT_WRITER_MEMORY_BYTES
from laminar_kafka.cluster.lake.reconcile import OnLakeBehind
from laminar_kafka.cluster.lake.settings import TableFormat, TableLocation
from laminar_kafka.connector.settings import Layer, Setting, by_name
from laminar_kafka.coordinator.config import DEFAULT_SESSION_TIMEOUT_S
from laminar_kafka.coordinator.vnodes.registry import DEFAULT_VNODE_COUNT
from laminar_kafka.kafka_source.config import definitions as source

__all__ = ["ENV_PREFIX", "NODE_SETTINGS", "SECRET_SETTINGS", "attribute", "env_name", "node_default"]

NODE = Layer.NODE


def _own(name: str, kind: type, doc: str, **options: Any) -> Setting:
    return Setting(name, kind, doc, layer=NODE, **options)


NODE_SETTINGS: Mapping[str, Setting] = by_name((
    _own("bootstrap", str, "Kafka bootstrap servers (host:port,...)", required=True),
    source.TOPIC,
    _own("output", str, "output directory or pyarrow.fs URI (file://, s3://, ...)", required=True),
    _own("zk", str, "ZooKeeper hosts (host:port,...); without it the node runs embedded (one node, local manifests)",
         default="", shown_default="embedded"),
    _own("pipeline", str, "pipeline name: the ZooKeeper subtree and the default group id", default="default",
         check=lambda name: None if name and "/" not in name else "must be non-empty and contain no '/'"),
    _own("node-id", int, "this node's id (an integer >= 1, unique in the pipeline), or auto: embedded, 1; a host name "
         "ending in an ordinal -<n> (a StatefulSet's pod-0, pod-1...), n + 1; otherwise an id claimed in ZooKeeper "
         "for this node, kept across restarts (by its state-dir file, else its host name)", default=1, minimum=1,
         notes="See \"Node identity without per-node configuration\"."),
    _own("group-id", str, "consumer group of the advisory offset commits", default="",
         shown_default="laminar-<pipeline>",
         notes="Advisory: a restart reads from the manifest whatever the group holds; a group moved behind is "
               "committed forward at the next epoch, one moved ahead stays there until the manifest passes it, "
               "never moved backwards."),
    _own("metrics-port", int, "serve Prometheus /metrics and the probes /healthz and /readyz on this port (0 = off)",
         default=0, minimum=0, maximum=65535, notes="See \"Metrics\"."),
    _own("checkpoint-interval-ms", int, "epoch interval", default=2000, minimum=1, unit="ms"),
    _own("quiet-checkpoint-interval-ms", int, "once 3 epochs in a row moved no cursor, the epoch interval until a node "
         "holds rows again and asks for one (0 = off; otherwise at least checkpoint-interval-ms)", default=10000,
         minimum=0, unit="ms",
         notes="An idle pipeline costs an epoch per 10 s, not per 2 s; a trickle's first rows after a quiet spell "
               "land in about 3 s. Pipeline-wide (the leader's value counts); a node of an earlier release never "
               "asks, so during a rolling upgrade from one its rows may wait the quiet interval (`docs/deploy.md`)."),
    _own("freshness-target-ms", int, "how soon a row must be visible in the lake: epochs open by need, when a "
         "node's oldest row no epoch covers would otherwise miss it (given the measured time an epoch takes) or its "
         "staged bytes reach max-file-bytes; none while nothing is pending (0 = off: epochs by checkpoint-interval-ms)",
         default=0, minimum=0, unit="ms",
         notes="Set, it replaces the epoch clock: checkpoint-interval-ms and quiet-checkpoint-interval-ms are not "
               "used, an idle pipeline holds no epochs and a burst does not wait for the clock. Off by default so "
               "that an upgraded pipeline keeps its epochs; pipeline-wide (the leader's value counts) and every node "
               "must know it (a node of an earlier release never asks). See \"Freshness\" in "
               "[lake.md](lake.md#freshness)."),
    _own("max-file-bytes", int, "staged Parquet files rotate at this size", default=128 * 1024 * 1024, minimum=1,
         unit="bytes", shown_default="134217728 (128 MiB)"),
    _own("row-group-rows", int, "rows per Parquet row group", default=65536, minimum=1),
    _own("writer-memory-bytes", int, "bound on the bytes the Parquet writers hold (buffered row groups and open "
         "files, every directory of both streams; 0 = no bound): past it the least recently written flush early, "
         "then close early", default=DEFAULT_WRITER_MEMORY_BYTES, minimum=0, unit="bytes",
         shown_default="134217728 (128 MiB)",
         notes="Files and row groups may come out smaller, never a row lost or written twice. See \"Writer "
               "memory\" in [partitioning.md](partitioning.md#writer-memory); `laminar_writer_memory_bytes` shows "
               "the bytes held."),
    _own("max-batch-records", int, "records per source poll", default=10000, minimum=1),
    source.MAX_FETCHED_BYTES,
    source.BATCH_WAIT_MS,
    source.FORMAT,
    source.STARTUP_MODE,
    source.STARTUP_TIMESTAMP_MS,
    source.STARTUP_SPECIFIC_OFFSETS,
    _own("topology-interval-ms", int, "how often topic metadata is read for new partitions and new matching topics "
         "(0 = never)", default=10000, minimum=0, unit="ms"),
    _own("session-timeout-ms", int, "ZooKeeper session timeout: a node gone this long is detected and its partitions "
         "move", default=round(DEFAULT_SESSION_TIMEOUT_S * 1000), minimum=1, unit="ms"),
    _own("drain-timeout-ms", int, "deadline of a rebalance round's drain", default=10000, minimum=1, unit="ms"),
    _own("lake-io-timeout-ms", int, "a call into the object store or the Iceberg catalog that does not return within "
         "this bound stops the node in one line, exit 1", default=120000, minimum=1, unit="ms",
         notes="Its supervisor starts it again and it reconciles with the lake, while the other nodes take its "
               "partitions once its session expires. pyiceberg's REST client has no timeout of its own. Keep it "
               "above the Iceberg commit's retry bound (30 s). `laminar_lake_call_seconds` shows the running "
               "call's age."),
    _own("manifest-deltas", bool, "ZooKeeper mode: the leader stores each manifest as the cursors that changed since "
         "a full one (format 2); false stores them whole (format 1), for a rolling upgrade from a release before "
         "manifest format 2", default=True,
         notes="Every node of this release reads both; a node of an earlier release refuses format 2 in one line "
               "(`docs/deploy.md`, \"Rolling upgrade\")."),
    _own("vnode-count", int, "number of vnodes of a new pipeline", default=DEFAULT_VNODE_COUNT, minimum=1),
    _own("source-identity", str, "the source's stable identity (part of the partition routing)", default="kafka"),
    _own("state-dir", str, "embedded mode: where manifests are kept; ZooKeeper mode with node-id auto: this node's "
         "own directory, where it records its identity and id", default="", shown_default="<output>/_coordinator",
         notes="One node at a time: the node holds an exclusive `flock` on `<state-dir>/lock`, so a second `run` on "
               "the same output exits 1 in one line naming the holder's pid. The directory also pins its "
               "pipeline's name at the first start."),
    _own("metrics-address", str, "address /metrics, /healthz and /readyz bind to (0.0.0.0: every interface; "
         "127.0.0.1: this host only)", default="0.0.0.0"),
    source.JSON_SCHEMA,
    source.ON_BAD_RECORD,
    source.MAX_ERROR_RATE,
    source.ON_TOMBSTONE,
    source.UPSERT_KEYS,
    source.FAIL_ON_DATA_LOSS,
    _own("on-lake-behind", OnLakeBehind, "at start, the lake lost epochs the control state committed (a table rolled "
         "back, published files deleted): rewind lands them again from the lake's cursors, fail refuses to start, "
         "touching nothing", default=OnLakeBehind.REWIND, notes="See \"The lake is the durable truth\"."),
    _own("include-key", bool, "add the record key as a _key column (binary, or decoded: key-format)", default=False),
    _own("include-headers", bool, "add the record headers as a _headers column, a list of {key: string, value: "
         "binary} in the record's order", default=False),
    source.KEY_FORMAT,
    _own("schema-registry-url", str, "formats avro, protobuf, json-schema: the Confluent-compatible schema registry "
         "URL, the source's schema.registry.url (client properties in the [schema_registry] table, "
         "LAMINAR_SCHEMA_REGISTRY__<KEY>)", default=""),
    _own("zk-auth", str, "ZooKeeper digest credentials user:password: the pipeline's subtree is readable and writable "
         "by this user only (prefer the environment variable: flags show in ps)", default=""),
    _own("table-format", TableFormat, "parquet: a Hive-style Parquet tree <output>/<topic>/dt=YYYY-MM-DD/; iceberg: "
         "one Apache Iceberg table per topic, one Iceberg commit per epoch", default=TableFormat.PARQUET,
         notes="See \"The lake\"."),
    _own("partition-by", str, "day or hour of _timestamp (UTC), none, or terms over fields: f, day(f), hour(f), "
         "bucket[N](f), truncate[W](f), comma-separated; a record whose field is null or of another type is a bad "
         "record", default="day", notes="See [partitioning.md](partitioning.md)."),
    _own("table", str, "table-format=iceberg, a single topic: the table name", default="",
         shown_default="the topic, dots and dashes as _"),
    _own("table-template", str, "the table (and first directory) each row lands in: {topic}, {topic:N} (a group of "
         "table-topic-regex), {field:NAME} (a column's value) and A-Z a-z 0-9 _; a row that cannot be routed is a bad "
         "record", default="{topic}", notes="See \"Routing rows to many tables\" in [lake.md](lake.md)."),
    _own("table-topic-regex", str, "with a {topic:N} table-template: the regex matched against the whole topic",
         default=""),
    _own("table-allowed", str, "a regex the routed table names must match in full (a row naming another table is a "
         "bad record)", default="", shown_default="any name"),
    _own("namespace", str, "table-format=iceberg: the Iceberg namespace", default="", shown_default="the pipeline"),
    _own("catalog-uri", str, "table-format=iceberg: sqlite:///<path> or an http(s):// REST catalog; properties in the "
         "[iceberg] table, LAMINAR_ICEBERG__<KEY>; an s3:// output needs one", default="",
         shown_default="<output>/_catalog/catalog.db"),
    _own("table-location", TableLocation, "table-format=iceberg: where a table the node creates goes: output "
         "(<output>/<topic>, metadata beside the data) or catalog (the catalog places it; the data files stay under "
         "<output>/<topic>)", default=TableLocation.OUTPUT),
))
#: settings whose value is a secret: never printed, logged or stored
SECRET_SETTINGS: frozenset[str] = frozenset({"zk-auth"})
#: settings of the node whose :class:`NodeSettings` field is not the name with ``_`` for ``-``
_ATTRIBUTES = {"topic": "topics"}


def attribute(name: str) -> str:
    """The :class:`~laminar_kafka.cluster.config.NodeSettings` field of the setting ``name``."""
    return _ATTRIBUTES.get(name, name.replace("-", "_"))


def env_name(name: str) -> str:
    """``node-id`` -> ``LAMINAR_NODE_ID``."""
    return ENV_PREFIX + name.upper().replace("-", "_")


def node_default(name: str) -> Any:
    """The default of the setting ``name`` as a node holds it (an enum as its value's text)."""
    default = NODE_SETTINGS[name].default
    return default.value if isinstance(default, enum.Enum) else default
