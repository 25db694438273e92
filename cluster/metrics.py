"""Prometheus metrics of one node, served on ``/metrics`` (docs/settings.md, "Metrics"), with the standard
``process_*`` and ``python_info`` families.

Each :class:`NodeMetrics` owns its own ``CollectorRegistry``, so several nodes in one process (tests)
never collide. Counters are updated by the runtime per batch or per event, never per record.

Names follow Prometheus's conventions (``tests/unit/cluster/test_metrics_names.py`` checks them):
counters export ``<name>_total``; durations are in seconds (``_seconds``), sizes in bytes; every family
has the label ``node``, the per-partition ones ``topic`` and ``partition`` (the partition's number).
"""
from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import confluent_kafka
import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from laminar_kafka.cluster.node_server import Probes, serve_node
from laminar_kafka.coordinator.base import CoordinatorMetrics
from laminar_kafka.coordinator.versioning import installed_version
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

__all__ = ["LakeCommitMetrics", "NodeMetrics", "bucket_counts"]

# No ``<name>_created`` sample beside each counter and histogram: in the text format each is a family
# of its own (a gauge), doubling the series for a start time ``process_start_time_seconds`` already
# gives. Process-wide, and the same for every registry of the process.
disable_created_metrics()

def bucket_counts(values: np.ndarray, upper_bounds: tuple[float, ...]) -> np.ndarray:
    """Counts of ``values`` per histogram bucket (non-cumulative; the last bound is +Inf): a value
    goes to the first bucket whose upper bound is at least it, as the client's ``observe`` does."""
    index = np.searchsorted(np.asarray(upper_bounds, dtype=np.float64), values, side="left")
    return np.bincount(np.minimum(index, len(upper_bounds) - 1), minlength=len(upper_bounds))


_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class NodeMetrics:
    """The node's metric families (label ``node`` on each, plus ``topic`` and ``partition`` where per partition)."""

    def __init__(self, node_id: int) -> None:
        self.registry = CollectorRegistry()
        self.node = str(node_id)
        #: gauge -> (topic, partition) -> its labelled child (:meth:`set_partition_gauge`)
        self._partition_children: dict[Gauge, dict[TopicPartitionId, Any]] = {}
        # the standard process_* (CPU, memory, open fds, start time) and python_info families
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        # registered in this order: /metrics lists the families in it
        self._register_node()
        self._register_intake()
        self._register_partition_positions()
        self._register_epochs_and_rounds()
        self._register_coordinator()
        self._register_assignment()
        self._register_rejections()
        self._register_lake()
        self._export_zeros()

    def _register_node(self) -> None:
        """The build, and the verdicts of ``/healthz`` and ``/readyz`` (read at each scrape once
        :meth:`watch_probes` wired them; 0 before)."""
        r = self.registry
        build = Gauge("laminar_build_info", "The node's build: 1, labelled with the versions of laminar-kafka, "
                      "Python and librdkafka", ["node", "version", "python", "librdkafka"], registry=r)
        build.labels(self.node, installed_version(), platform.python_version(), confluent_kafka.libversion()[0]).set(1)
        self.healthy = Gauge("laminar_node_healthy", "1 while /healthz answers 200 (the event loop turns, the "
                             "ZooKeeper session is live or away for less than its timeout), else 0", ["node"], registry=r)
        self.ready = Gauge("laminar_node_ready", "1 while /readyz answers 200 (joined, holding its assignment, "
                           "reading, not leaving), else 0", ["node"], registry=r)

    def _register_intake(self) -> None:
        """What the sources delivered: records, Arrow bytes, batches."""
        r = self.registry
        self.records_in = Counter("laminar_records_in", "Records read from Kafka", ["node"], registry=r)
        self.bytes_in = Counter("laminar_bytes_in", "Arrow bytes read from Kafka", ["node"], registry=r)
        self.batches = Counter("laminar_batches", "Batches polled from sources", ["node"], registry=r)

    def _register_partition_positions(self) -> None:
        """Per partition: read and durable lag; the pauses of the handoffs of partitions this node acquired."""
        r = self.registry
        self.lag = Gauge(
            "laminar_lag_records", "High watermark minus the read cursor", ["node", "topic", "partition"], registry=r
        )
        self.durable_lag = Gauge(
            "laminar_durable_lag_records", "High watermark minus the durable (manifest) cursor",
            ["node", "topic", "partition"], registry=r,
        )
        self.freshness = Gauge(
            "laminar_freshness_seconds", "Age of the oldest record written here and not yet visible in the lake "
            "(from the records' Kafka timestamps; 0 when caught up)", ["node", "topic", "partition"], registry=r,
        )
        self.visibility = Histogram(
            "laminar_visibility_seconds", "Seconds from a row's Kafka timestamp to its epoch being visible in "
            "the lake (published here)", ["node"], buckets=_DURATION_BUCKETS, registry=r,
        )
        self.handoff_pause = Histogram(
            "laminar_handoff_pause_seconds", "Seconds a partition this node acquired in a live round paused: "
            "from the round's start to its first row written here", ["node"], buckets=_DURATION_BUCKETS, registry=r,
        )

    def _register_epochs_and_rounds(self) -> None:
        """The protocol as this node lives it: drain and barrier durations, epochs, generations, rounds."""
        r = self.registry
        self.drain_seconds = Histogram(
            "laminar_drain_seconds", "Seconds from begin_drain to drain ready", ["node"], buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.checkpoint_seconds = Histogram(
            "laminar_checkpoint_seconds", "Seconds of an epoch barrier: snapshot, seal and ack", ["node"],
            buckets=_DURATION_BUCKETS, registry=r,
        )
        self.epochs_committed = Counter("laminar_epochs_committed", "Epochs committed", ["node"], registry=r)
        self.epoch_asks = Counter(
            "laminar_epoch_asks", "Epochs this node asked for: it held rows while the leader waited a quiet "
            "checkpoint interval", ["node"], registry=r,
        )
        self.epochs_aborted = Counter(
            "laminar_epochs_aborted", "Epochs this node abandoned (fenced ack, lost session)", ["node"], registry=r
        )
        self.generations_retired = Counter(
            "laminar_source_generations_retired", "Source generations retired after a fatal source error",
            ["node"], registry=r,
        )
        self.rounds = Counter("laminar_rounds", "Rounds resolved", ["node", "outcome"], registry=r)

    def _register_coordinator(self) -> None:
        """The coordinator's view: fenced writes and stale acks (its own counts, read at each scrape once
        :meth:`watch_coordinator` wired them), the session state."""
        r = self.registry
        self._coordinator_counts = _CoordinatorCounts(self.node)
        r.register(self._coordinator_counts)
        self.session_state = Gauge(
            "laminar_session_state", "1 for the current coordinator session state", ["node", "state"], registry=r
        )

    def _register_assignment(self) -> None:
        """What this node owns: its partitions, the assignment version, partitions discovered while running."""
        r = self.registry
        self.owned_partitions = Gauge("laminar_owned_partitions", "Partitions this node reads", ["node"], registry=r)
        self.assignment_version = Gauge(
            "laminar_assignment_version", "Published assignment version seen", ["node"], registry=r
        )
        self.partitions_discovered = Counter(
            "laminar_partitions_discovered", "Partitions that appeared while the node ran (topic growth, "
            "new topics matching the pattern)", ["node"], registry=r,
        )

    def _register_rejections(self) -> None:
        """What was refused or skipped: rejected acks, undecodable records, offsets lost to retention."""
        r = self.registry
        self.ack_cursors = Counter(
            "laminar_ack_cursors", "Partition cursors this node's epoch acks carried (sent: changed since "
            "the previous manifest; unchanged: left out, the manifest keeps them)", ["node", "kind"], registry=r,
        )
        self.acks_rejected = Counter(
            "laminar_acks_rejected", "This node's epoch acks the leader rejected (the generation restarted)",
            ["node"], registry=r,
        )
        self.records_rejected = Counter(
            "laminar_records_rejected", "Records that did not decode, skipped into <output>/_rejected/ "
            "(on-bad-record=skip)", ["node"], registry=r,
        )
        self.offsets_lost = Counter(
            "laminar_offsets_lost", "Offsets Kafka deleted (retention) before this node read them, skipped "
            "under fail-on-data-loss=false", ["node"], registry=r,
        )
        self.kafka_clients_replaced = Counter(
            "laminar_kafka_clients_replaced", "Source consumers replaced because they fetched nothing and "
            "could not reach a broker (a client that had lost every broker; docs/settings.md)", ["node"], registry=r,
        )

    def _register_lake(self) -> None:
        """The lake: publish durations, Iceberg commits (their durations, conflicts and no-ops), start-up
        reconciliations, the lake's epoch, the age of the lake call in progress."""
        r = self.registry
        self.publish_seconds = Histogram(
            "laminar_publish_seconds", "Seconds publishing a committed epoch into the lake (renames; Iceberg: "
            "the table commits too)", ["node"], buckets=_DURATION_BUCKETS, registry=r,
        )
        self.lake_commits = Counter(
            "laminar_lake_commits", "Iceberg commits this node made (an epoch another node committed "
            "first counts on that node only)", ["node"], registry=r,
        )
        self.lake_commit_seconds = Histogram(
            "laminar_lake_commit_seconds", "Seconds of one Iceberg table commit this node made (the catalog "
            "transaction, with its manifest writes)", ["node"], buckets=_DURATION_BUCKETS, registry=r,
        )
        self.lake_commit_conflicts = Counter(
            "laminar_lake_commit_conflicts", "Iceberg commits this node lost to a concurrent committer "
            "(the catalog refused them; retried from a reload of the table)", ["node"], registry=r,
        )
        self.lake_commits_found_done = Counter(
            "laminar_lake_commits_found_done", "Iceberg table epochs this node came to commit and found "
            "already committed by another node (no-op)", ["node"], registry=r,
        )
        self.lake_reconciliations = Counter(
            "laminar_lake_reconciliations", "Start-up reconciliations of the control state with the lake, by "
            "decision: start-fresh, continue, reseed (the control state was lost or disagreed; see the log)",
            ["node", "decision"], registry=r,
        )
        self.lake_epoch = Gauge(
            "laminar_lake_epoch", "The latest epoch the lake showed at this node's start (0: none recorded)",
            ["node"], registry=r,
        )
        self.lake_call_seconds = Gauge(
            "laminar_lake_call_seconds", "Seconds the lake call in progress (a write, seal or publish into the "
            "object store or the catalog) has run (0: none); past lake-io-timeout-ms the node stops",
            ["node"], registry=r,
        )
        self.writer_memory = Gauge(
            "laminar_writer_memory_bytes", "Bytes the Parquet writers hold: buffered row groups and open files "
            "(the estimate writer-memory-bytes bounds)", ["node"], registry=r,
        )
        self._writer_counts = _WriterCounts(self.node)
        r.register(self._writer_counts)

    def _export_zeros(self) -> None:
        """Every per-node family is exported from the start (0 until something happens); families
        labelled per partition, outcome or state appear with their first value."""
        for family in (
            self.publish_seconds, self.lake_commits, self.lake_epoch, self.lake_call_seconds, self.lake_commit_seconds,
            self.writer_memory,
            self.lake_commit_conflicts, self.lake_commits_found_done,
            self.records_in, self.bytes_in, self.batches, self.drain_seconds, self.checkpoint_seconds,
            self.epochs_committed, self.epoch_asks, self.epochs_aborted, self.generations_retired,
            self.healthy, self.ready, self.handoff_pause, self.owned_partitions, self.assignment_version,
            self.partitions_discovered, self.acks_rejected, self.records_rejected, self.offsets_lost,
            self.kafka_clients_replaced,
        ):
            family.labels(self.node)
        for kind in ("sent", "unchanged"):
            self.ack_cursors.labels(self.node, kind)
        for decision in ("start-fresh", "continue", "reseed"):
            self.lake_reconciliations.labels(self.node, decision)

    def watch_lake_calls(self, age_s: Callable[[], float]) -> None:
        """Export ``age_s()`` (the running lake call's age, read at each scrape) as ``laminar_lake_call_seconds``."""
        self.lake_call_seconds.labels(self.node).set_function(age_s)

    def watch_writers(self, held: Callable[[], int], flushes: Callable[[], int], closes: Callable[[], int]) -> None:
        """Export the sink's writer memory ``held()`` as ``laminar_writer_memory_bytes`` and its
        cumulative early flushes and closes as ``laminar_writer_early_flushes_total`` and
        ``laminar_writer_early_closes_total`` (each read at each scrape)."""
        self.writer_memory.labels(self.node).set_function(held)
        self._writer_counts.counts = (flushes, closes)

    def watch_probes(self, probes: Probes) -> None:
        """Export the verdicts of ``probes`` (read at each scrape) as ``laminar_node_healthy`` and ``laminar_node_ready``."""
        self.healthy.labels(self.node).set_function(lambda: float(probes.health().ok))
        self.ready.labels(self.node).set_function(lambda: float(probes.readiness().ok))

    def watch_coordinator(self, counts: Callable[[], CoordinatorMetrics]) -> None:
        """Export the coordinator's cumulative counts of ``counts()`` (read at each scrape) as the
        counters ``laminar_fenced_writes_rejected_total`` and ``laminar_stale_acks_rejected_total``."""
        self._coordinator_counts.counts = counts

    def set_session_state(self, state: str) -> None:
        for name in ("CONNECTED", "SUSPENDED", "LOST"):
            self.session_state.labels(self.node, name).set(1 if name == state else 0)

    def observe_batch(self, rows: int, nbytes: int, rejected: int = 0) -> None:
        self.records_in.labels(self.node).inc(rows)
        if rejected:
            self.records_rejected.labels(self.node).inc(rejected)
        self.bytes_in.labels(self.node).inc(nbytes)
        self.batches.labels(self.node).inc()

    def observe_visibility(self, seconds: np.ndarray) -> None:
        """Observe every value of ``seconds`` in ``laminar_visibility_seconds`` at once: the bucket
        counts by numpy, then one increment per bucket (the client's own ``observe`` is per value)."""
        if not seconds.size:
            return
        child = self.visibility.labels(self.node)
        bounds = (*_DURATION_BUCKETS, float("inf"))
        for bucket, count in zip(child._buckets, bucket_counts(seconds, bounds).tolist(), strict=True):
            if count:
                bucket.inc(count)
        child._sum.inc(float(seconds.sum()))

    def set_partition_gauge(self, gauge: Gauge, values: Mapping[TopicPartitionId, int | float]) -> None:
        """Make ``gauge``'s children exactly the ``(topic, partition)`` of ``values`` (labels ``topic``
        and ``partition``): each set to its value, and the child of every other partition removed, so
        a partition the node no longer reads (handed off) stops being exported and a sum by topic
        counts each partition once. Children are looked up once, not on every export: ``labels()``
        takes a lock and builds a key, 2,000 times per export at 1,000 partitions."""
        children = self._partition_children.setdefault(gauge, {})
        for tp in [tp for tp in children if tp not in values]:
            del children[tp]
            gauge.remove(self.node, tp[0], str(tp[1]))
        for tp, value in values.items():
            child = children.get(tp)
            if child is None:
                child = children[tp] = gauge.labels(self.node, tp[0], str(tp[1]))
            child.set(value)

    def clear_partition_gauge(self, gauge: Gauge) -> None:
        """Remove every partition child of ``gauge`` (the node reads nothing)."""
        self.set_partition_gauge(gauge, {})

    def serve(self, port: int, addr: str = "0.0.0.0", probes: Probes | None = None) -> Callable[[], None]:
        """Serve ``/metrics``, and ``/healthz`` and ``/readyz`` answered by ``probes``
        (:mod:`~laminar_kafka.cluster.node_server`), on ``port``; returns a function that stops the server."""
        return serve_node(port, addr, self.registry, probes).stop


class _CoordinatorCounts(Collector):
    """The coordinator's cumulative counts of fenced writes and stale acks, as counters read at each
    scrape (0 until a coordinator is wired in)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.counts: Callable[[], CoordinatorMetrics] | None = None

    def collect(self) -> Iterator[Metric]:
        counts = self.counts() if self.counts is not None else None
        for name, documentation, value in (
            ("laminar_fenced_writes_rejected", "Leader writes the coordinator rejected by fencing",
             counts.fenced_writes_rejected if counts is not None else 0),
            ("laminar_stale_acks_rejected", "Acks the coordinator rejected for a stale boot id or version",
             counts.stale_acks_rejected if counts is not None else 0),
        ):
            family = CounterMetricFamily(name, documentation, labels=["node"])
            family.add_metric([self.node], value)
            yield family

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class _WriterCounts(Collector):
    """The sink's cumulative early flushes and closes under writer-memory-bytes, as counters read at
    each scrape (0 until a sink is wired in)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.counts: tuple[Callable[[], int], Callable[[], int]] | None = None

    def collect(self) -> Iterator[Metric]:
        flushes, closes = self.counts or (lambda: 0, lambda: 0)
        for name, documentation, value in (
            ("laminar_writer_early_flushes", "Parquet writer buffers flushed early, as smaller row groups, "
             "because the writers passed their memory bound", flushes()),
            ("laminar_writer_early_closes", "Staged files closed early (sealed with their epoch) because the "
             "writers passed their memory bound", closes()),
        ):
            family = CounterMetricFamily(name, documentation, labels=["node"])
            family.add_metric([self.node], value)
            yield family

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class LakeCommitMetrics:
    """The node's :class:`~laminar_kafka.cluster.lake.commits.CommitListener`: each table commit,
    lost race and no-op counted in ``metrics`` (prometheus_client's families are thread-safe)."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self._seconds = metrics.lake_commit_seconds.labels(metrics.node)
        self._conflicts = metrics.lake_commit_conflicts.labels(metrics.node)
        self._found_done = metrics.lake_commits_found_done.labels(metrics.node)

    def committed(self, table: str, seconds: float) -> None:
        self._seconds.observe(seconds)

    def lost_race(self, table: str) -> None:
        self._conflicts.inc()

    def found_done(self, table: str) -> None:
        self._found_done.inc()
