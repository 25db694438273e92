"""One node: checks its inputs, builds the coordinator, source and sink, and runs the runtime.

:func:`preflight` turns every bad input into a :class:`~laminar_kafka.cluster.errors.UsageError` with one clear
line *before* anything is written to the output: Kafka unreachable, a topic missing, ZooKeeper
unreachable, the output not writable (then ``_staging`` is created), and for an Iceberg output the
catalog unreachable, or a table whose schema or partition spec cannot take the records (checked last).

Signals: SIGTERM and SIGINT mean a planned leave (ZooKeeper mode: the leader drains this node's vnodes
away, then the node stops and exits 0; embedded mode: stop at once, the next start resumes from the
last manifest). A second signal stops at once.
"""
from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from laminar_kafka.cluster.config import NodeSettings
from laminar_kafka.cluster.errors import RuntimeFailure, SinkError, UsageError
from laminar_kafka.cluster.kafka_metadata import MetadataUnavailable, TopologyReader
from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.lake.deadline import LakeCalls, LakeWatchdog, end_process
from laminar_kafka.cluster.lake.lake_pins import LakePins
from laminar_kafka.cluster.lake.outputs import LakeFactory, LakeOutput, open_lake
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from laminar_kafka.cluster.lake.partitioning import check_topic
from laminar_kafka.cluster.lake.pins import PipelinePins, chain_pins
from laminar_kafka.cluster.lake.reconcile import OnLakeBehind
from laminar_kafka.cluster.lake.record import RecordOf, no_records
from laminar_kafka.cluster.lake.routing import Router
from laminar_kafka.cluster.lake.schema_pin import JsonSchemaPin
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions
from laminar_kafka.cluster.runtime.probe_feed import ProbeFeed
from laminar_kafka.cluster.runtime.probes import ProbeSettings
from laminar_kafka.cluster.runtime.signals import stop_on_signals
from laminar_kafka.cluster.runtime.state import FreshnessPolicy
from laminar_kafka.cluster.runtime.topology import Topology
from laminar_kafka.connector.checkpoint import format_key
from laminar_kafka.connector.errors import ConnectorError
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.coordinator.base import Coordinator, CoordinatorConfig
from laminar_kafka.coordinator.config import ZkCredentials
from laminar_kafka.coordinator.layout import pipeline_path
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.clients import KafkaClientConfig, KafkaTarget, client_config, make_consumer
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.decode.schema import configured_schema, discover_json_schema
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.client_watch import ClientKeeper, close_in_background
from laminar_kafka.kafka_source.read.positions import high_watermarks
from laminar_kafka.kafka_source.read.startup import resolve_start_offsets

logger = logging.getLogger(__name__)

__all__ = ["NodeInputs", "make_coordinator", "preflight", "run_node", "topic_partitions"]

#: the longest one metadata request of the preflight waits before it is made again, so that a
#: refusal (:data:`REFUSED`) met meanwhile ends the wait instead of the whole ``--connect-timeout``
PROBE_S = 2.0
#: librdkafka's errors that no wait cures: a broker refused the client's credentials, or the TLS
#: handshake failed (an untrusted certificate, a key that does not match)
REFUSED = (KafkaError._AUTHENTICATION, KafkaError._SSL)


@dataclass(frozen=True)
class NodeInputs:
    partitions: tuple[TopicPartitionId, ...]


def topic_partitions(kafka: KafkaTarget, topics: tuple[str, ...], timeout: float = 10.0) -> list[TopicPartitionId]:
    """Every (topic, partition) of ``topics`` (names, or one ``re:<regex>``). Raises
    :class:`UsageError` when Kafka does not answer within ``timeout`` (naming the last error the
    client met: refused, authentication failed, untrusted certificate...), a client property is
    invalid (a missing key file...), or a named topic does not exist."""
    selector = TopicSelector.parse(",".join(topics))
    kafka = client_config(kafka)
    try:
        kafka.check_files()
    except ConfigurationError as exc:
        raise UsageError(f"invalid Kafka client settings: {exc}", cause=exc) from exc
    try:
        reader = TopologyReader(kafka, selector, timeout_s=min(timeout, PROBE_S))
    except KafkaException as exc:  # raised when the client is built: a bad property or file
        raise UsageError(f"invalid Kafka client settings: {client_error_text(exc)}", cause=exc) from exc
    return sorted(read_topology(reader, timeout, require_named=True).partitions())


def client_error_text(exc: KafkaException) -> str:
    """The one-line text of a client error (librdkafka's own, without the ``KafkaError{...}`` dump)."""
    error = exc.args[0] if exc.args else None
    text = error.str() if isinstance(error, KafkaError) else str(exc)
    return " ".join(str(text).split())


def read_topology(reader: TopologyReader, timeout: float, *, require_named: bool = False) -> Topology:
    """``reader.read()`` with one-line errors: :class:`UsageError` when Kafka does not answer within
    ``timeout`` (a transient failure, such as a controller failover, is retried until then; each
    try takes up to the reader's own timeout), at once when a broker refused the client (its
    credentials or its TLS handshake: no wait cures them), or (``require_named``) when a named
    topic does not exist."""
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        try:
            topology = reader.read()
            break
        except MetadataUnavailable as exc:
            refused = reader.errors.last
            if refused is not None and refused.code() in REFUSED:
                raise UsageError(f"Kafka at {reader.kafka.bootstrap} refused this client: {exc}", cause=exc) from exc
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"cannot reach Kafka at {reader.kafka.bootstrap} within {timeout:g}s: {exc}", cause=exc
                ) from exc
            # one line for the wait, not one per try (a try takes up to PROBE_S)
            logger.log(logging.INFO if tries == 1 else logging.DEBUG, "topic metadata unavailable (%s); retrying", exc)
            time.sleep(0.5)
    if require_named:
        for topic in reader.selector.names:
            if topic not in topology.topics:
                raise UsageError(f"topic {topic!r} does not exist")
    return topology


def check_zookeeper(hosts: str, timeout: float = 10.0, credentials: ZkCredentials | None = None,
                    subtree: str = "") -> None:
    """Raise :class:`UsageError` unless a ZooKeeper session to ``hosts`` opens within ``timeout``
    and, when the pipeline's ``subtree`` exists, may read it (its digest ACL accepts ``credentials``,
    or it has none)."""
    from kazoo.exceptions import AuthFailedError, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from laminar_kafka.coordinator.errors import AccessDeniedError
    from laminar_kafka.coordinator.zk.auth import check_access, open_client

    client = open_client(hosts, timeout, credentials)
    try:
        client.start(timeout=timeout)
        if subtree:
            check_access(client, subtree)
    except NoNodeError:
        pass  # a new pipeline: its subtree is created on join
    except AccessDeniedError as exc:
        raise UsageError(f"{exc} (zk-auth)", cause=exc) from exc
    except AuthFailedError as exc:
        raise UsageError(f"ZooKeeper at {hosts} refused the zk-auth credentials", cause=exc) from exc
    except (KazooTimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach ZooKeeper at {hosts} within {timeout:g}s", cause=exc) from exc
    finally:
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001 - closing a client that never connected
            pass


def preflight(settings: NodeSettings, timeout: float = 10.0, lake_calls: LakeCalls | None = None) -> NodeInputs:
    """Validate every external input of ``run``; raises :class:`UsageError` (one line) on the first
    bad one. Writes to the output only when everything else is fine (creates ``_staging``).
    ``lake_calls``: where the checks of the output and the lake are timed (for a
    :class:`~laminar_kafka.cluster.lake.deadline.LakeWatchdog`: the object store and the catalog are
    bounded by ``lake-io-timeout-ms``, not by ``timeout``)."""
    calls = lake_calls or LakeCalls()
    source_config = settings.source_config()  # a bad setting is named before Kafka is reached
    partitions = topic_partitions(settings.kafka_client(), settings.topics, timeout)
    if not partitions:
        logger.warning("no topic matches %s yet; the node lands matching topics as they appear", settings.selector)
    for topic in sorted({t for t, _ in partitions}):
        try:
            check_topic(topic)
        except SinkError as exc:
            raise UsageError(f"topic {topic!r} cannot be landed: {exc}", cause=exc) from exc
    schemas = expected_schemas(source_config, partitions, check_registry(source_config, partitions))
    if settings.zk:
        check_zookeeper(settings.zk, timeout, zk_credentials(settings), pipeline_path(coordinator_config(settings)))
    with calls.timing("checking that the output is writable"):
        sink = ParquetSink(settings.output, node_id=settings.node_id, boot_id="preflight", filesystem=None)
        try:
            sink.check_writable()
        except SinkError as exc:
            raise UsageError(f"output {settings.output!r} is not writable: {exc.cause or exc}", cause=exc) from exc
    with calls.timing("checking the lake's tables"):
        check_lake(settings, make_lake(settings, sink), schemas)
    return NodeInputs(tuple(partitions))


def make_lake(settings: NodeSettings, sink: ParquetSink, record_of: RecordOf = no_records,
              commit_listener: CommitListener | None = None) -> LakeOutput:
    """The lake of ``table-format`` over ``sink``'s output (a :class:`LakeFactory` once given
    ``settings`` and ``sink``); ``record_of`` and ``commit_listener`` as :func:`open_lake`'s."""
    return open_lake(
        settings.lake_format, sink.fs, sink.root, output_uri=settings.output, pipeline=settings.pipeline,
        partitioning=settings.partitioning,
        iceberg=settings.iceberg_settings() if settings.lake_format is TableFormat.ICEBERG else None,
        record_of=record_of, commit_listener=commit_listener,
    )


def check_lake(settings: NodeSettings, lake: LakeOutput, schemas: dict[str, pa.Schema | None]) -> None:
    """Raise :class:`UsageError` (one line) unless the lake takes each topic's records (schema None:
    not known before the first record); an unreachable catalog or bucket is one line too."""
    if lake.table_format is TableFormat.PARQUET:
        return
    topics = sorted(schemas) or ([] if settings.selector.pattern else list(settings.topics))
    try:
        for topic in topics:
            lake.check([topic], schemas.get(topic))
    except SinkError as exc:
        raise UsageError(str(exc), cause=exc) from exc


def zk_credentials(settings: NodeSettings) -> ZkCredentials | None:
    """The ZooKeeper digest credentials of ``zk-auth`` (None without)."""
    if not settings.zk_auth:
        return None
    try:
        return ZkCredentials.parse(settings.zk_auth)
    except ConfigurationError as exc:
        raise UsageError(f"zk-auth: {exc}", cause=exc) from exc


def expected_schemas(config: KafkaSourceConfig, partitions: list[TopicPartitionId],
                     registry: dict[str, pa.Schema]) -> dict[str, pa.Schema | None]:
    """Each present topic's batch schema, when it is known before the first record: the configured
    one (raw, json with json-schema), the registry's latest (``registry``), else None."""
    known: pa.Schema | None = None
    if not config.format.uses_registry and (not config.format.reads_json or config.json_schema is not None):
        known = configured_schema(config, None)
    return {topic: registry.get(topic, known) for topic in sorted({t for t, _ in partitions})}


def check_registry(config: KafkaSourceConfig, partitions: list[TopicPartitionId]) -> dict[str, pa.Schema]:
    """Registry formats: raise :class:`UsageError` unless the schema registry answers and accepts the
    credentials, and each topic's latest value schema (subject ``<topic>-value``) maps to Arrow; returns
    those schemas. A topic without a subject yet is only logged (its producers may start later)."""
    schemas: dict[str, pa.Schema] = {}
    if not config.format.uses_registry:
        return schemas
    from laminar_kafka.connector.errors import TransientError
    from laminar_kafka.kafka_source.decode.schema import registry_subject_schema
    from laminar_kafka.kafka_source.schema_registry.client import UnknownSchemaError, safe_url

    for topic in sorted({t for t, _ in partitions}):
        try:
            schema = registry_subject_schema(config, topic)
        except TransientError as exc:
            raise UsageError(f"cannot reach the schema registry at {safe_url(config.schema_registry_url or '')}: {exc}",
                             cause=exc) from exc
        except ConfigurationError as exc:
            if isinstance(exc.__context__, UnknownSchemaError):
                logger.warning("topic %s has no value schema in the registry yet: %s", topic, exc)
                continue
            raise UsageError(f"topic {topic}: {exc}", cause=exc) from exc
        logger.info("topic %s: the latest value schema maps to %s", topic, ", ".join(schema.names))
        schemas[topic] = schema
    return schemas


def coordinator_config(settings: NodeSettings) -> CoordinatorConfig:
    return CoordinatorConfig(
        credentials=zk_credentials(settings),
        pipeline=settings.pipeline,
        hosts=settings.zk,
        session_timeout=settings.session_timeout_ms / 1000.0,
        checkpoint_interval=settings.checkpoint_interval_ms / 1000.0,
        quiet_checkpoint_interval=settings.quiet_checkpoint_interval_ms / 1000.0,
        freshness_target=settings.freshness_target_ms / 1000.0,
        round_deadline=settings.drain_timeout_ms / 1000.0,
        vnode_count=settings.vnode_count,
        manifest_deltas=settings.manifest_deltas,
    )


def epoch_ask_after_s(settings: NodeSettings) -> float | None:
    """When a node holding rows asks for an epoch: 1.5 checkpoint intervals after the last commit
    (an ordinary epoch comes before that, so a busy pipeline never sees an ask); None when the
    quiet interval is off."""
    if not settings.quiet_checkpoint_interval_ms:
        return None
    return 1.5 * settings.checkpoint_interval_ms / 1000.0


def make_coordinator(settings: NodeSettings, endpoint: str = "", id_origin: str = "") -> Coordinator:
    """ZooKeeper mode when ``settings.zk`` is set, else the embedded local coordinator. ``id_origin``:
    how ``node-id auto`` chose the id (the refusal of a twin names it)."""
    config = coordinator_config(settings)
    if settings.zk:
        from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator

        return ZooKeeperCoordinator(config, settings.node_id, endpoint, id_origin=id_origin)
    from laminar_kafka.coordinator.local.coordinator import LocalCoordinator

    return LocalCoordinator(config, settings.effective_state_dir, settings.node_id, endpoint)


class WatermarkReader:
    """High watermarks for the lag metrics (one long-lived consumer; called from the control executor)."""

    def __init__(self, kafka: KafkaClientConfig) -> None:
        #: replaced when its requests failed for a while (:mod:`~laminar_kafka.kafka_source.read.client_watch`)
        self._consumer = ClientKeeper(lambda: make_consumer(kafka, "laminar-watermarks"), close_in_background)

    def __call__(self, partitions: list[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        try:
            highs = high_watermarks(self._consumer.client, partitions, 5.0)
        except Exception as exc:  # counted, then re-raised to the caller (it retries)
            self._consumer.failed(exc)
            raise
        self._consumer.succeeded()
        return highs

    def close(self) -> None:
        self._consumer.client.close()


def router_of(settings: NodeSettings) -> Router | None:
    """The sink's routing by ``table-template`` (None for ``{topic}``: one table per topic), refusing
    unroutable rows per ``on-bad-record`` (fail unless skip)."""
    routing = settings.routing
    return None if routing.is_identity else Router(routing, fail_on_bad=settings.on_bad_record != "skip")


def build_runtime(settings: NodeSettings, coordinator: Coordinator, metrics: NodeMetrics) -> NodeRuntime:
    """The node's runtime. The source is built with its typed configuration (the node's Kafka client
    configuration in it, as a value); each generation's start request carries the source
    properties without client settings, the pinned ones laid over them (:class:`RuntimeOptions`)."""
    source_config = settings.source_config()
    connector = ConnectorConfig(CONNECTOR_NAME, settings.source_properties())
    schema_pin: JsonSchemaPin | None = None
    if source_config.format.reads_json and source_config.json_schema is None:
        schema_pin = JsonSchemaPin(lambda: discover_json_schema(source_config, timeout_s=10.0))
    sink = ParquetSink(
        settings.output,
        node_id=settings.node_id,
        boot_id=uuid.uuid4().hex,
        max_file_bytes=settings.max_file_bytes,
        row_group_rows=settings.row_group_rows,
        partitioning=settings.partitioning,
        router=router_of(settings),
        writer_memory_bytes=settings.writer_memory_bytes,
    )
    metrics.watch_writers(lambda: sink.writer_memory, lambda: sink.early_flushes, lambda: sink.early_closes)
    config = coordinator_config(settings)
    options = RuntimeOptions(
        node_id=settings.node_id,
        source_identity=settings.source_identity,
        connector=connector,
        max_batch_records=settings.max_batch_records,
        vnode_mode=not settings.embedded,
        topology_interval_s=settings.topology_interval_ms / 1000.0,
        pinned_properties=None if schema_pin is None else (lambda: {"json-schema": schema_pin.text}),
        manifests_kept=config.manifests_to_keep,
        pipeline=settings.pipeline,
        on_lake_behind=OnLakeBehind(settings.on_lake_behind),
        epoch_ask_after_s=epoch_ask_after_s(settings),
        freshness=FreshnessPolicy(settings.freshness_target_ms / 1000.0, settings.max_file_bytes)
        if settings.freshness_target_ms else None,
    )
    kafka = source_config.kafka  # the one client configuration of every Kafka client of the node
    topology = TopologyReader(kafka, settings.selector)

    def resolve_start() -> dict[str, int]:
        try:
            offsets = resolve_start_offsets(source_config, options.delivery)
        except (ConnectorError, ConfigurationError) as exc:  # retried with a bound already: one line
            raise RuntimeFailure(f"cannot resolve the start position: {exc}", cause=exc) from exc
        return {format_key(*tp): offset for tp, offset in offsets.items()}

    def new_source() -> KafkaSource:
        return KafkaSource(source_config, metrics=SourceMetrics(
            on_offsets_lost=metrics.offsets_lost.labels(metrics.node).inc,
            on_client_replaced=metrics.kafka_clients_replaced.labels(metrics.node).inc,
        ))

    pins = PipelinePins.of(settings)
    lake_pins = LakePins(sink.fs, sink.root, settings.pipeline, pins.values)
    lake: LakeFactory = functools.partial(make_lake, settings, sink)
    return NodeRuntime(
        coordinator,
        sink,
        lake,
        source_factory=new_source,
        topology=topology.read,
        options=options,
        metrics=metrics,
        watermarks=WatermarkReader(kafka),
        resolve_start=resolve_start,
        # the pipeline's settings first: a node that disagrees stops before the schema pin samples;
        # the lake's copy is written once the coordinator's pins agree
        pin_settings=chain_pins(pins, lake_pins.keep, schema_pin),
        # before the node reconciles with the lake: a node either copy refuses reseeds and pins nothing
        check_settings=chain_pins(pins.check, lake_pins.check),
    )


async def run_node(settings: NodeSettings, id_origin: str = "") -> int:
    """Run one node until it is stopped; returns the process exit code (0 after a clean stop).
    ``settings.node_id`` is chosen (``node-id auto``: see :mod:`laminar_kafka.cluster.auto_node_id`,
    which says how in ``id_origin``). A lake call that runs past ``lake-io-timeout-ms`` ends the
    process: one line on stderr, exit 1 (:func:`laminar_kafka.cluster.lake.deadline.end_process`).
    The metrics port also answers ``/healthz`` and ``/readyz`` (:mod:`laminar_kafka.cluster.runtime.probes`)."""
    if settings.node_id < 1:
        raise UsageError("node-id auto: run_node needs the chosen id (choose_node_id, then settings.with_node_id)")
    metrics = NodeMetrics(settings.node_id)
    endpoint = f"metrics:{settings.metrics_port}" if settings.metrics_port else ""
    coordinator = make_coordinator(settings, endpoint, id_origin)
    runtime = build_runtime(settings, coordinator, metrics)
    metrics.watch_lake_calls(runtime.lake_calls.age_s)
    probes = ProbeFeed(runtime, ProbeSettings(zookeeper=bool(settings.zk), session_timeout_s=settings.session_timeout_ms / 1000.0))
    metrics.watch_probes(probes)
    stop_metrics = metrics.serve(settings.metrics_port, settings.metrics_address, probes) if settings.metrics_port else None
    # a lake call past lake-io-timeout-ms ends the process in one line (see cluster.lake.deadline)
    watchdog = LakeWatchdog(runtime.lake_calls, settings.lake_io_timeout_ms / 1000.0, end_process)
    watchdog.start()
    try:
        async with probes.running():
            with stop_on_signals(probes):  # the runtime's stop, published to /readyz at once
                await runtime.run()
    finally:
        watchdog.stop()
        if stop_metrics is not None:
            stop_metrics()
    logger.info(
        "node %d stopped: %d rows written, %d epochs acked, %d committed",
        settings.node_id, runtime.rows_written, runtime.epochs_acked, runtime.epochs_committed,
    )
    return 0
