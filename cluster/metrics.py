"""Prometheus metrics of one node, served on ``/metrics`` (DESIGN section 7), with the standard
``process_*`` and ``python_info`` families.

Each :class:`NodeMetrics` owns its own ``CollectorRegistry``, so several nodes in one process (tests)
never collide. Counters are updated by the runtime per batch or per event, never per record.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from prometheus_client import (
    CollectorRegistry, Counter, Gauge, Histogram, PlatformCollector, ProcessCollector, start_http_server,
)

logger = logging.getLogger(__name__)

__all__ = ["LakeCommitMetrics", "NodeMetrics"]

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class NodeMetrics:
    """The node's metric families (label ``node`` on each, plus ``partition`` where per partition)."""

    def __init__(self, node_id: int) -> None:
        self.registry = CollectorRegistry()
        self.node = str(node_id)
        #: gauge -> partition -> its labelled child (:meth:`set_partition_gauge`)
        self._partition_children: dict[Gauge, dict[str, Any]] = {}
        # the standard process_* (CPU, memory, open fds, start time) and python_info families
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        # registered in this order: /metrics lists the families in it
        self._register_intake()
        self._register_partition_positions()
        self._register_epochs_and_rounds()
        self._register_coordinator()
        self._register_assignment()
        self._register_rejections()
        self._register_lake()
        self._export_zeros()

    def _register_intake(self) -> None:
        """What the sources delivered: records, Arrow bytes, batches."""
        r = self.registry
        self.records_in = Counter("laminar_records_in", "Records read from Kafka", ["node"], registry=r)
        self.bytes_in = Counter("laminar_bytes_in", "Arrow bytes read from Kafka", ["node"], registry=r)
        self.batches = Counter("laminar_batches", "Batches polled from sources", ["node"], registry=r)

    def _register_partition_positions(self) -> None:
        """Per partition: read and durable lag, and the pause of the last handoff."""
        r = self.registry
        self.lag = Gauge(
            "laminar_lag_records", "High watermark minus the read cursor", ["node", "partition"], registry=r
        )
        self.durable_lag = Gauge(
            "laminar_durable_lag_records", "High watermark minus the durable (manifest) cursor",
            ["node", "partition"], registry=r,
        )
        self.handoff_pause = Gauge(
            "laminar_handoff_pause_seconds", "Pause of the last handoff of a partition this node acquired",
            ["node", "partition"], registry=r,
        )

    def _register_epochs_and_rounds(self) -> None:
        """The protocol as this node lives it: drain and barrier durations, epochs, generations, rounds."""
        r = self.registry
        self.drain_seconds = Histogram(
            "laminar_drain_seconds", "begin_drain to drain ready", ["node"], buckets=_DURATION_BUCKETS, registry=r
        )
        self.checkpoint_seconds = Histogram(
            "laminar_checkpoint_seconds", "Epoch barrier: snapshot, seal and ack", ["node"],
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
        """The coordinator's view: fenced writes, stale acks, the session state."""
        r = self.registry
        self.fenced_writes_rejected = Gauge(
            "laminar_fenced_writes_rejected", "Leader writes rejected by fencing (coordinator counter)",
            ["node"], registry=r,
        )
        self.stale_acks_rejected = Gauge(
            "laminar_stale_acks_rejected", "Acks rejected for a stale boot id or version", ["node"], registry=r
        )
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
            "(on.bad.record=skip)", ["node"], registry=r,
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
            "laminar_publish_seconds", "Publishing a committed epoch into the lake (renames; Iceberg: "
            "the table commits too)", ["node"], buckets=_DURATION_BUCKETS, registry=r,
        )
        self.lake_commits = Counter(
            "laminar_lake_commits", "Iceberg commits this node made (an epoch another node committed "
            "first counts on that node only)", ["node"], registry=r,
        )
        self.lake_commit_seconds = Histogram(
            "laminar_lake_commit_seconds", "One Iceberg table commit this node made (the catalog transaction, "
            "with its manifest writes)", ["node"], buckets=_DURATION_BUCKETS, registry=r,
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
            "laminar_lake_call_seconds", "How long the lake call in progress (a write, seal or publish into the "
            "object store or the catalog) has run (0: none); past lake-io-timeout-ms the node stops",
            ["node"], registry=r,
        )

    def _export_zeros(self) -> None:
        """Every per-node family is exported from the start (0 until something happens); families
        labelled per partition, outcome or state appear with their first value."""
        for family in (
            self.publish_seconds, self.lake_commits, self.lake_epoch, self.lake_call_seconds, self.lake_commit_seconds,
            self.lake_commit_conflicts, self.lake_commits_found_done,
            self.records_in, self.bytes_in, self.batches, self.drain_seconds, self.checkpoint_seconds,
            self.epochs_committed, self.epoch_asks, self.epochs_aborted, self.generations_retired, self.fenced_writes_rejected,
            self.stale_acks_rejected, self.owned_partitions, self.assignment_version,
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

    def set_session_state(self, state: str) -> None:
        for name in ("CONNECTED", "SUSPENDED", "LOST"):
            self.session_state.labels(self.node, name).set(1 if name == state else 0)

    def observe_batch(self, rows: int, nbytes: int, rejected: int = 0) -> None:
        self.records_in.labels(self.node).inc(rows)
        if rejected:
            self.records_rejected.labels(self.node).inc(rejected)
        self.bytes_in.labels(self.node).inc(nbytes)
        self.batches.labels(self.node).inc()

    def set_partition_gauge(self, gauge: Gauge, values: dict[str, int | float]) -> None:
        """Set ``gauge``'s child of each partition of ``values`` (children looked up once, not on
        every export: ``labels()`` takes a lock and builds a key, 2,000 times per export at 1,000
        partitions)."""
        children = self._partition_children.setdefault(gauge, {})
        for partition, value in values.items():
            child = children.get(partition)
            if child is None:
                child = children[partition] = gauge.labels(self.node, partition)
            child.set(value)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Callable[[], None]:
        """Serve ``/metrics`` on ``port``; returns a function that stops the server."""
        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        logger.info("metrics on http://%s:%d/metrics", addr, port)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop


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
