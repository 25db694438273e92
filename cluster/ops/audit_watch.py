"""`verify --watch`: audit what a running pipeline lands against Kafka, continuously, incrementally.

Each pass (:meth:`AuditWatch.run_pass`), for each topic:

1. reads the lake's latest epoch cursors: the new *mark* of each partition (first: files are
   published before their epoch's record, and an Iceberg commit adds both at once, so every file of
   an epoch at or below the mark is listed by step 2);
2. lists the lake's data files of the topic (the Parquet tree's published files, or the Iceberg
   table's current snapshot) and the rejected records' files, and reads only the files no pass read
   before (``_topic``, ``_partition``, ``_offset``);
3. reads from Kafka (read_committed) only the offsets between each partition's previous mark and its
   new one;
4. settles them (:func:`~laminar_kafka.cluster.ops.audit_state.advance`): missing, duplicated and
   unexpected rows, totals per topic.

So a pass costs the new files and the new offsets, not the lake. When a file a pass read is gone
(deleted, or rewritten by compaction or expiry) no increment can account for it: the topic's
account starts over with a full audit of the lake as it is (counted in
``laminar_audit_full_audits_total``), which also clears counts that the lake no longer shows.

Metrics (:class:`AuditMetrics`): ``laminar_audit_missing``, ``laminar_audit_duplicated``,
``laminar_audit_unexpected`` (per topic), ``laminar_audit_high_water`` (per partition: the mark
audited up to), ``laminar_audit_passes_total``, ``laminar_audit_full_audits_total``,
``laminar_audit_last_pass_timestamp_seconds``. One log line when a topic's missing or duplicated
count leaves zero, and one when it is back to zero.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from laminar_kafka.cluster.errors import ClusterError, UsageError, VerifyError
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published
from laminar_kafka.cluster.lake.settings import LakeTarget, TableFormat
from laminar_kafka.cluster.ops.audit_state import PartitionAccount, PartitionPass, advance
from laminar_kafka.cluster.ops.lake_state import read_lake_state
from laminar_kafka.cluster.ops.verify import opener_of, read_topic
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig

logger = logging.getLogger(__name__)

__all__ = ["AuditMetrics", "AuditWatch", "TopicAudit"]

_COLUMNS = ["_topic", "_partition", "_offset"]
#: opens a data file for reading
Opener = Callable[[], pa.NativeFile]


class AuditMetrics:
    """The audit's Prometheus families, in their own registry (``serve`` exposes them)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.missing = Gauge("laminar_audit_missing", "records Kafka holds that the lake lacks, below the audited mark",
                             ["topic"], registry=self.registry)
        self.duplicated = Gauge("laminar_audit_duplicated", "rows the lake holds more than once", ["topic"],
                                registry=self.registry)
        self.unexpected = Gauge("laminar_audit_unexpected", "rows whose offset Kafka does not hold", ["topic"],
                                registry=self.registry)
        self.high_water = Gauge("laminar_audit_high_water", "next offset audited up to (the lake's, at the last pass)",
                                ["topic", "partition"], registry=self.registry)
        self.passes = Counter("laminar_audit_passes", "audit passes", registry=self.registry)
        self.full_audits = Counter("laminar_audit_full_audits", "accounts started over (files lost or rewritten)",
                                   ["topic"], registry=self.registry)
        self.last_pass = Gauge("laminar_audit_last_pass_timestamp_seconds", "when the last pass ended",
                               registry=self.registry)

    def serve(self, port: int, address: str = "127.0.0.1") -> Callable[[], None]:
        server, thread = start_http_server(port, addr=address, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            thread.join(5)

        return stop


@dataclass
class TopicAudit:
    """One topic's account: the files read (path -> rows) and each partition's account."""

    topic: str
    files: dict[str, int] = field(default_factory=dict)
    partitions: dict[int, PartitionAccount] = field(default_factory=dict)
    full_audits: int = 0
    #: the marks audited before the last full audit (the lowest marks it may use)
    floor: dict[int, int] = field(default_factory=dict)

    @property
    def missing(self) -> int:
        return sum(a.missing for a in self.partitions.values())

    @property
    def duplicated(self) -> int:
        return sum(a.duplicated for a in self.partitions.values())

    @property
    def unexpected(self) -> int:
        return sum(a.unexpected for a in self.partitions.values())

    @property
    def audited(self) -> int:
        """Rows settled present so far."""
        return sum(a.present for a in self.partitions.values())

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.unexpected == 0

    def line(self) -> str:
        marks = ",".join(f"{p}:{a.mark}" for p, a in sorted(self.partitions.items()))
        return (f"{self.topic}: audited {self.audited} rows in {len(self.files)} files, up to {marks or '-'}; "
                f"missing {self.missing}, duplicated {self.duplicated}, unexpected {self.unexpected}"
                + (f" (full audits {self.full_audits})" if self.full_audits else ""))


class AuditWatch:
    """Audits ``topics`` of the lake ``target`` against Kafka, one pass at a time (blocking I/O)."""

    def __init__(self, target: LakeTarget, kafka: KafkaClientConfig, topics: Sequence[str], *,
                 metrics: AuditMetrics | None = None, timeout_s: float = 120.0) -> None:
        from laminar_kafka.cluster.lake.parquet.sink import open_output

        self.target, self.kafka, self.timeout_s = target, kafka, timeout_s
        self.metrics = metrics or AuditMetrics()
        self.fs, self.root = open_output(target.output)
        self.topics = {topic: TopicAudit(topic) for topic in topics}
        self.passes = 0

    def run_pass(self) -> list[TopicAudit]:
        """One pass over every topic; raises :class:`VerifyError` when the lake or Kafka cannot be read
        (the accounts are unchanged: the next pass does the same work again)."""
        for audit in self.topics.values():
            before = (audit.missing, audit.duplicated)
            self._pass_topic(audit)
            self._report(audit, before)
        self.passes += 1
        self.metrics.passes.inc()
        self.metrics.last_pass.set(time.time())
        return list(self.topics.values())

    def _pass_topic(self, audit: TopicAudit) -> None:
        topic = audit.topic
        marks = self._marks(topic)
        files = self._data_files(topic)
        if audit.files.keys() - files.keys():
            gone = sorted(audit.files.keys() - files.keys())
            logger.info("audit of %s: %d file(s) read before are gone (%s%s): auditing the lake again in full",
                           topic, len(gone), gone[0], ", ..." if len(gone) > 1 else "")
            # the marks audited so far stay the floor: a lake that lost an epoch's files records an
            # older epoch as its latest, and the records it lost are missing, not "not landed yet"
            audit.floor = {p: max(a.mark, audit.floor.get(p, 0)) for p, a in audit.partitions.items()}
            audit.files.clear()
            audit.partitions.clear()
            audit.full_audits += 1
            self.metrics.full_audits.labels(topic).inc()
        new = {path: opener for path, opener in files.items() if path not in audit.files}
        rows, counts = self._read(topic, new)
        marks = {p: max(m, audit.floor.get(p, 0)) for p, m in {**audit.floor, **marks}.items()}
        partitions = set(marks) | set(rows) | set(audit.partitions)
        ranges = {p: (audit.partitions.get(p, PartitionAccount()).mark, marks.get(p, 0)) for p in partitions}
        ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
        expected, lows = self._kafka(topic, ranges)
        updated = dict(audit.partitions)
        for partition in sorted(partitions):
            account = audit.partitions.get(partition, PartitionAccount())
            seen = PartitionPass(rows.get(partition, np.empty(0, np.int64)), max(account.mark, marks.get(partition, 0)),
                                 expected.get(partition, np.empty(0, np.int64)), lows.get(partition, 0))
            updated[partition], _found = advance(account, seen)
        # only now, all reads done: a failed pass leaves the account as it was
        audit.partitions = updated
        audit.files.update(counts)
        for partition, account in updated.items():
            self.metrics.high_water.labels(topic, str(partition)).set(account.mark)

    def _marks(self, topic: str) -> dict[int, int]:
        try:
            state = read_lake_state(self.target, [topic], None)
        except (ClusterError, ConfigurationError) as exc:
            raise VerifyError(f"cannot read the lake's cursors of {topic}: {exc}", cause=exc) from exc
        if state.other_pipelines:  # nothing would ever be audited: say so once, do not watch nothing
            raise UsageError(f"the lake at {self.target.output} records pipeline(s) {', '.join(state.other_pipelines)}, "
                             f"not {self.target.pipeline!r}: is --pipeline right?")
        prefix = f"{topic}:"
        return {int(key[len(prefix):]): offset for key, offset in state.cursors.items() if key.startswith(prefix)}

    def _data_files(self, topic: str) -> dict[str, Opener]:
        """Every data file of ``topic`` in the lake now, and the rejected records' files."""
        files: dict[str, Opener] = {}
        try:
            if self.target.table_format is TableFormat.ICEBERG:
                files.update(self._iceberg_files(topic))
            else:
                for path in list_published(self.fs, f"{self.root}/{topic}"):
                    files[path] = self._opener(path)
            for path in list_published(self.fs, f"{self.root}/{REJECTED_DIR}"):
                files[path] = self._opener(path)
        except (OSError, pa.ArrowException, ClusterError, ConfigurationError) as exc:
            raise VerifyError(f"cannot list the lake's files of {topic}: {exc}", cause=exc) from exc
        return files

    def _opener(self, path: str) -> Opener:
        return lambda: self.fs.open_input_file(path)

    def _iceberg_files(self, topic: str) -> dict[str, Opener]:
        from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog

        assert self.target.iceberg is not None
        catalog = open_catalog(self.target.iceberg, self.fs, self.root)
        table = load_table_or_none(catalog, (self.target.iceberg.namespace, self.target.table_of(topic)))
        if table is None or table.current_snapshot() is None:
            return {}
        files: dict[str, Opener] = {}
        for task in table.scan(selected_fields=tuple(_COLUMNS)).plan_files():
            path = task.file.file_path
            key, listed = path, 1
            while key in files:  # a data file the snapshot lists twice: its rows count twice
                listed += 1
                key = f"{path}#{listed}"
            files[key] = opener_of(table.io, path)
        return files

    def _read(self, topic: str, files: Mapping[str, Opener]) -> tuple[dict[int, np.ndarray], dict[str, int]]:
        """The offsets of ``topic``'s rows in ``files`` per partition, and each file's row count."""
        chunks: dict[int, list[np.ndarray]] = {}
        counts: dict[str, int] = {}
        for path, opener in sorted(files.items()):
            try:
                with opener() as handle:
                    table = pq.ParquetFile(handle).read(columns=_COLUMNS)
            except (OSError, pa.ArrowException) as exc:
                raise VerifyError(f"cannot read {path}: {exc}", cause=exc) from exc
            table = table.filter(pc.equal(table["_topic"], topic))
            counts[path] = table.num_rows
            partitions = table["_partition"].to_numpy().astype(np.int64)
            offsets = table["_offset"].to_numpy().astype(np.int64)
            for partition in np.unique(partitions):
                chunks.setdefault(int(partition), []).append(offsets[partitions == partition])
        return {p: np.concatenate(c) for p, c in chunks.items()}, counts

    def _kafka(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> tuple[dict[int, np.ndarray], dict[int, int]]:
        if not ranges:
            return {}, {}
        expected, _highs, lows = read_topic(self.kafka, topic, self.timeout_s, ranges=ranges)
        return expected, lows

    def _report(self, audit: TopicAudit, before: tuple[int, int]) -> None:
        self.metrics.missing.labels(audit.topic).set(audit.missing)
        self.metrics.duplicated.labels(audit.topic).set(audit.duplicated)
        self.metrics.unexpected.labels(audit.topic).set(audit.unexpected)
        for name, was, now in (("missing", before[0], audit.missing), ("duplicated", before[1], audit.duplicated)):
            if was == 0 and now > 0:
                detail = ""
                if name == "missing":
                    detail = "; first: " + ", ".join(f"{p}:{a.first_missing}" for p, a in sorted(audit.partitions.items())
                                                     if a.first_missing)
                logger.error("audit of %s: %d record(s) %s%s", audit.topic, now, name, detail)
            elif was > 0 and now == 0:
                logger.info("audit of %s: no record %s any more", audit.topic, name)
