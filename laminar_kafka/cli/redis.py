"""`laminar-kafka redis run|verify`: the cluster runtime over Redis Streams, and its exactly-once audit.

``redis run`` is a node of a ZooKeeper-coordinated pipeline that reads the streams ``<stream>:0`` ..
``<stream>:<partitions - 1>`` with :class:`~laminar_kafka.redis_source.RedisStreamsSource` and lands
them into a Parquet tree, exactly once: the same :class:`~laminar_kafka.cluster.runtime.node_runtime.NodeRuntime`,
coordinator, epochs, drains and lake as a Kafka node; only the source differs. What it does not
have that ``run`` has: registry formats and decoding (rows are the entry's ``value`` field as
bytes), Iceberg, pipeline setting pins, lag metrics, a topology that grows (the partition count is
fixed: a pipeline is restarted to change it).

``redis verify`` reads every entry ID of the streams and the published Parquet files, and reports
each partition's missing and duplicated entries (the audit of ``verify``). Exit 0 exact, 1 not.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow.fs as pafs

from laminar_kafka.cli.common import Parser, add_common, configure_command_logging
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from laminar_kafka.cluster.lake.parquet.tree import parquet_tree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.logs import quiet_clients
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.ops.verify import audit, read_output
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions
from laminar_kafka.cluster.runtime.probe_feed import ProbeFeed
from laminar_kafka.cluster.runtime.probes import ProbeSettings
from laminar_kafka.cluster.runtime.signals import stop_on_signals
from laminar_kafka.cluster.runtime.topology import TopicInfo, Topology
from laminar_kafka.cluster.settings_def import NODE_SETTINGS
from laminar_kafka.connector.errors import ConnectorError
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.coordinator.config import DEFAULT_SESSION_TIMEOUT_S, CoordinatorConfig

logger = logging.getLogger(__name__)

__all__ = ["RedisNodeOptions", "add_redis_commands", "build_redis_runtime", "read_stream_offsets"]

#: entries per XRANGE page of `redis verify`
PAGE = 10_000


@dataclass(frozen=True)
class RedisNodeOptions:
    """One Redis node: who it is, which pipeline, where it lands, what it reads."""

    node_id: int
    zk: str
    pipeline: str
    output: str
    properties: dict[str, str]
    checkpoint_interval_s: float = 2.0
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    vnode_count: int = 64
    metrics_port: int = 0


def add_redis_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    redis = commands.add_parser("redis", help="land Redis Streams (one stream per partition) exactly once",
                                description="Run a node of a pipeline over Redis Streams (the streams "
                                            "<stream>:0..<partitions-1>), or audit its output against the streams.")
    add_common(redis)
    verbs = redis.add_subparsers(dest="redis_command", required=True, metavar="{run,verify}", parser_class=Parser)
    run = verbs.add_parser("run", help="run one node of a Redis pipeline")
    add_common(run)
    _add_stream_flags(run)
    run.add_argument("--node-id", type=int, required=True, help="this node's id (>= 1), unique in the pipeline")
    run.add_argument("--zk", required=True, help="ZooKeeper connection string (host:port[,host:port][/chroot])")
    run.add_argument("--pipeline", required=True, help="the pipeline's name (its ZooKeeper subtree and lake records)")
    run.add_argument("--checkpoint-interval-ms", type=int, default=2000, help="epoch interval (default 2000)")
    session_timeout = NODE_SETTINGS["session-timeout-ms"]
    run.add_argument("--session-timeout-ms", type=int, default=session_timeout.default, help=session_timeout.help())
    run.add_argument("--vnode-count", type=int, default=64, help="vnodes of the pipeline (default 64; same on every node)")
    run.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port (0: off)")
    run.set_defaults(handler=cmd_redis_run)
    verify = verbs.add_parser("verify", help="audit a Redis pipeline's output against the streams")
    add_common(verify)
    _add_stream_flags(verify)
    verify.set_defaults(handler=cmd_redis_verify)


def _add_stream_flags(parser: argparse.ArgumentParser) -> None:
    # each flag sets the connector property of its name (redis_source.config.SETTINGS, not imported
    # here: the redis package costs every command's start)
    parser.add_argument("--redis-url", required=True, help="redis://host:port/db (rediss:// for TLS)")
    parser.add_argument("--stream", required=True, help="the stream family: partitions are the streams <stream>:<n>")
    parser.add_argument("--partitions", type=int, required=True, help="how many streams <stream>:0..<n-1>")
    parser.add_argument("--value-field", default="value", help="the entry field landed as 'value' (default value)")
    parser.add_argument("--output", required=True, help="the Parquet tree (a directory, or s3://bucket/prefix)")


def _properties(args: argparse.Namespace) -> dict[str, str]:
    from laminar_kafka.redis_source import RedisStreamsConfig

    properties = {"redis-url": args.redis_url, "stream": args.stream, "partitions": str(args.partitions),
                  "value-field": args.value_field}
    try:
        RedisStreamsConfig.from_properties(properties)
    except ConnectorError as exc:
        raise UsageError(str(exc), cause=exc) from exc
    return properties


def build_redis_runtime(options: RedisNodeOptions, metrics: NodeMetrics) -> NodeRuntime:
    """The node: a ZooKeeper coordinator, the Parquet tree, generations of RedisStreamsSource."""
    from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
    from laminar_kafka.redis_source import RedisStreamsConfig, RedisStreamsSource
    from laminar_kafka.redis_source.checkpoint import CONNECTOR_NAME

    config = RedisStreamsConfig.from_properties(options.properties)
    coordinator_config = CoordinatorConfig(
        pipeline=options.pipeline, hosts=options.zk, session_timeout=options.session_timeout_s,
        checkpoint_interval=options.checkpoint_interval_s, vnode_count=options.vnode_count,
    )
    coordinator = ZooKeeperCoordinator(coordinator_config, options.node_id,
                                       f"metrics:{options.metrics_port}" if options.metrics_port else "")
    sink = ParquetSink(options.output, node_id=options.node_id, boot_id=uuid.uuid4().hex,
                       partitioning=PartitionSpec())
    # the streams never change identity: a fixed id ("topic re-created" never fires)
    topology = Topology.of(TopicInfo(config.stream, f"redis:{config.stream}", config.partitions))
    runtime_options = RuntimeOptions(
        node_id=options.node_id,
        source_identity=f"redis:{config.stream}",
        # the connector type is the connector's one name, the one its checkpoints carry
        connector=ConnectorConfig(CONNECTOR_NAME, config.properties()),
        vnode_mode=True,
        topology_interval_s=0,
        pipeline=options.pipeline,
        manifests_kept=coordinator_config.manifests_to_keep,
    )
    return NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), lambda: RedisStreamsSource(config),
                       lambda: topology, runtime_options, metrics=metrics)


async def run_redis_node(options: RedisNodeOptions) -> int:
    """Run until SIGTERM/SIGINT (the first: a planned leave; a second: stop now). Exit code 0."""
    metrics = NodeMetrics(options.node_id)
    runtime = build_redis_runtime(options, metrics)
    probes = ProbeFeed(runtime, ProbeSettings(zookeeper=True, session_timeout_s=options.session_timeout_s))
    metrics.watch_probes(probes)
    stop_metrics = metrics.serve(options.metrics_port, "127.0.0.1", probes) if options.metrics_port else None
    try:
        async with probes.running():
            with stop_on_signals(probes):  # the runtime's stop, published to /readyz at once
                await runtime.run()
    finally:
        if stop_metrics is not None:
            stop_metrics()
    logger.info("redis node %d stopped: %d rows written, %d epochs committed",
                options.node_id, runtime.rows_written, runtime.epochs_committed)
    return 0


def cmd_redis_run(args: argparse.Namespace) -> int:
    configure_command_logging(args)
    if args.node_id < 1:
        raise UsageError(f"--node-id must be >= 1, got {args.node_id}")
    if not args.zk.strip():
        raise UsageError("--zk is empty: give the ZooKeeper hosts (host:port[,host:port...])")
    options = RedisNodeOptions(
        node_id=args.node_id, zk=args.zk, pipeline=args.pipeline, output=args.output, properties=_properties(args),
        checkpoint_interval_s=args.checkpoint_interval_ms / 1000.0,
        session_timeout_s=args.session_timeout_ms / 1000.0, vnode_count=args.vnode_count,
        metrics_port=args.metrics_port,
    )
    with quiet_clients(args.debug):
        return asyncio.run(run_redis_node(options))


def read_stream_offsets(url: str, stream: str, partitions: int) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Every entry's offset per partition, and each partition's end (the position after its last
    entry at the time of the scan), read page by page with XRANGE."""
    import redis

    from laminar_kafka.redis_source.ids import offset_of
    from laminar_kafka.redis_source.source import redacted

    client = redis.Redis.from_url(url, socket_timeout=30)
    offsets: dict[int, np.ndarray] = {}
    ends: dict[int, int] = {}
    try:
        for partition in range(partitions):
            key, found, start = f"{stream}:{partition}", [], "-"
            while True:
                page = client.xrange(key, min=start, max="+", count=PAGE) or []
                ids = [entry_id for entry_id, _ in page if entry_id is not None]
                found += [offset_of(entry_id) for entry_id in ids]
                if len(page) < PAGE:
                    break
                last = ids[-1]
                start = f"({last.decode() if isinstance(last, bytes) else last}"
            offsets[partition] = np.asarray(found, dtype=np.int64)
            ends[partition] = int(found[-1]) + 1 if found else 0
    except redis.RedisError as exc:
        raise UsageError(f"cannot read the streams {stream}:* on {redacted(url)}: {exc}", cause=exc) from exc
    finally:
        client.close()
    return offsets, ends


def _require_stream_directory(fs: pafs.FileSystem, root: str, output: str, stream: str, entries: int) -> None:
    """A stream with entries but no directory in the output is a wrong ``--output`` or ``--stream``,
    not a pipeline that lost everything: UsageError naming what the output holds."""
    if entries == 0 or fs.get_file_info(f"{root}/{stream}").type == pafs.FileType.Directory:
        return
    held = sorted(info.base_name for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
                  if info.type == pafs.FileType.Directory and not info.base_name.startswith(("_", ".")))
    raise UsageError(f"{output} holds no rows of stream {stream!r} ({entries} entries in Redis): "
                     f"wrong --output or --stream? It holds {', '.join(held) or 'nothing'}")


def cmd_redis_verify(args: argparse.Namespace) -> int:
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    configure_command_logging(args, default_level="warning")
    _properties(args)
    expected, ends = read_stream_offsets(args.redis_url, args.stream, args.partitions)
    fs, root = open_output(args.output)
    _require_stream_directory(fs, root, args.output, args.stream, sum(len(o) for o in expected.values()))
    report = audit(args.stream, expected, ends, read_output(fs, root, args.stream))
    print(report.table())
    return 0 if report.ok else 1
