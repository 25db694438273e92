"""The exactly-once audit: published output against the topic, per partition.

For each partition of the topic: ``expected`` = the offsets a ``read_committed`` consumer sees from
the low up to the high watermark (taken first, so later writes do not count); ``present`` = how many
of those appear in the published output; ``missing`` = expected but absent; ``duplicated`` = extra
rows of an offset that appears more than once; ``unexpected`` = output offsets below the high watermark
that the topic does not hold (aborted transactions, another topic's data); ``beyond`` = output offsets
at or above the high watermark (the pipeline ran ahead of the snapshot; not an error). Inside each
output file, offsets of one partition must strictly increase (``order_violations``).

A published file whose bytes do not parse as Parquet (truncated, corrupted) is a finding, not an
error of the audit: the report names it (``damaged``) and is not OK; the rest of the output is still
audited (the damaged file's rows count as missing).

Records the bad-record policy skipped are published under ``_rejected/``: their offsets count as
accounted for (``rejected``, not missing), and an offset in both the rows and ``_rejected/``, or
twice in either, is duplicated.

The pure part (:func:`audit`) works on NumPy arrays; :func:`read_output` and :func:`read_topic` do
the I/O. The report is OK iff nothing is missing, duplicated, unexpected or out of order.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from confluent_kafka import KafkaException, TopicPartition

from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.kafka_metadata import ClientErrors
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published
from laminar_kafka.kafka_source.clients import KafkaTarget, client_config, make_consumer
from laminar_kafka.kafka_source.read.positions import watermarks

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

logger = logging.getLogger(__name__)

__all__ = [
    "DamagedFile", "OutputScan", "PartitionAudit", "VerifyReport", "audit", "opener_of", "read_offset_columns",
    "read_output", "read_topic",
]

_COLUMNS = ["_topic", "_partition", "_offset"]


@dataclass(frozen=True)
class DamagedFile:
    """A published file whose bytes do not parse as Parquet: its ``path`` and what is wrong
    (``problem``, one line)."""

    path: str
    problem: str

    def line(self) -> str:
        return f"damaged file {self.path}: {self.problem}"


@dataclass(frozen=True)
class PartitionAudit:
    partition: int
    expected: int
    present: int
    missing: int
    duplicated: int
    unexpected: int = 0
    beyond: int = 0
    first_missing: tuple[int, ...] = ()
    #: expected offsets accounted for by a record in ``_rejected/`` (not in ``present``)
    rejected: int = 0

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.unexpected == 0


@dataclass(frozen=True)
class VerifyReport:
    topic: str
    partitions: tuple[PartitionAudit, ...]
    files: int
    rows: int
    order_violations: tuple[str, ...] = ()
    #: published files that cannot be read as Parquet (their rows are not in ``rows``)
    damaged: tuple[DamagedFile, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.order_violations and not self.damaged and all(p.ok for p in self.partitions)

    @property
    def missing(self) -> int:
        return sum(p.missing for p in self.partitions)

    @property
    def duplicated(self) -> int:
        return sum(p.duplicated for p in self.partitions)

    @property
    def rejected(self) -> int:
        return sum(p.rejected for p in self.partitions)

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "ok": self.ok,
            "files": self.files,
            "rows": self.rows,
            "missing": self.missing,
            "duplicated": self.duplicated,
            "rejected": self.rejected,
            "order_violations": list(self.order_violations),
            "damaged": [asdict(d) for d in self.damaged],
            "partitions": [{**asdict(p), "first_missing": list(p.first_missing)} for p in self.partitions],
        }

    def table(self) -> str:
        lines = [f"{'partition':>9} {'expected':>10} {'present':>10} {'rejected':>8} {'missing':>8} "
                 f"{'duplicated':>10} {'unexpected':>10}"]
        for p in self.partitions:
            lines.append(
                f"{p.partition:>9} {p.expected:>10} {p.present:>10} {p.rejected:>8} {p.missing:>8} {p.duplicated:>10} "
                f"{p.unexpected:>10}"
            )
        total_expected = sum(p.expected for p in self.partitions)
        total_present = sum(p.present for p in self.partitions)
        lines.append(
            f"{'total':>9} {total_expected:>10} {total_present:>10} {self.rejected:>8} {self.missing:>8} "
            f"{self.duplicated:>10} {sum(p.unexpected for p in self.partitions):>10}"
        )
        for violation in self.order_violations[:10]:
            lines.append(f"order violation: {violation}")
        lines.extend(d.line() for d in self.damaged)
        lines.append(f"{self.files} file(s), {self.rows} row(s): {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)


@dataclass
class OutputScan:
    """Offsets found in the published output for one topic: partition -> all rows' offsets, and
    partition -> the offsets of the rejected records under ``_rejected/``."""

    offsets: dict[int, np.ndarray] = field(default_factory=dict)
    rejected: dict[int, np.ndarray] = field(default_factory=dict)
    files: int = 0
    rows: int = 0
    order_violations: list[str] = field(default_factory=list)
    damaged: list[DamagedFile] = field(default_factory=list)


def audit(
    topic: str,
    expected: Mapping[int, np.ndarray],
    high_watermarks: Mapping[int, int],
    scan: OutputScan,
    low_watermarks: Mapping[int, int] | None = None,
) -> VerifyReport:
    """Compare ``expected`` offsets (sorted, unique, per partition) with the scanned output (its
    rows and its rejected records together). Pure.

    Rows below a partition's low watermark were deleted from the topic by retention after they
    landed: they cannot be checked against it, so they are not "unexpected" (they still count
    for duplicates)."""
    results = []
    empty = np.empty(0, np.int64)
    for partition in sorted(set(expected) | set(scan.offsets) | set(scan.rejected)):
        want = np.asarray(expected.get(partition, empty), dtype=np.int64)
        good = np.asarray(scan.offsets.get(partition, empty), dtype=np.int64)
        bad = np.asarray(scan.rejected.get(partition, empty), dtype=np.int64)
        high = high_watermarks.get(partition, 0)
        rows = np.concatenate([good, bad])
        beyond = int(np.count_nonzero(rows >= high))
        rows = rows[rows < high]
        unique, counts = np.unique(rows, return_counts=True)
        rejected = np.intersect1d(want, bad[bad < high])
        duplicated = int(np.sum(counts - 1))
        missing = np.setdiff1d(want, unique, assume_unique=True)
        unexpected = np.setdiff1d(unique, want, assume_unique=True)
        if low_watermarks is not None:
            unexpected = unexpected[unexpected >= low_watermarks.get(partition, 0)]
        results.append(PartitionAudit(
            partition=partition,
            expected=int(want.size),
            present=int(np.intersect1d(want, good[good < high]).size),
            missing=int(missing.size),
            duplicated=duplicated,
            unexpected=int(unexpected.size),
            beyond=beyond,
            first_missing=tuple(int(o) for o in missing[:5]),
            rejected=int(rejected.size),
        ))
    return VerifyReport(
        topic=topic,
        partitions=tuple(results),
        files=scan.files,
        rows=scan.rows,
        order_violations=tuple(scan.order_violations),
        damaged=tuple(scan.damaged),
    )


def scan_table(table: pa.Table, topic: str, name: str, scan: OutputScan, *, rejected: bool = False) -> None:
    """Add one file's rows of ``topic`` to ``scan`` (to ``scan.rejected`` for a file of rejected
    records; they do not count in ``files`` and ``rows``) and check per-partition order inside it."""
    missing = [c for c in _COLUMNS if c not in table.column_names]
    if missing:
        raise VerifyError(f"{name} lacks column(s) {missing}: not written by laminar-kafka?")
    table = table.filter(pc.equal(table["_topic"], topic))
    if not rejected:
        scan.files += 1
        scan.rows += table.num_rows
    if table.num_rows == 0:
        return
    partitions = table["_partition"].to_numpy().astype(np.int64)
    offsets = table["_offset"].to_numpy().astype(np.int64)
    for partition in np.unique(partitions):
        mine = offsets[partitions == partition]
        if mine.size > 1 and not bool(np.all(np.diff(mine) > 0)):
            scan.order_violations.append(f"{name}: partition {int(partition)} offsets do not increase")
        found = scan.rejected if rejected else scan.offsets
        previous = found.get(int(partition))
        found[int(partition)] = mine if previous is None else np.concatenate([previous, mine])


#: listings of the output a scan tries when a listed file is gone before it is read
_SCAN_ATTEMPTS = 5


def read_output(fs: pafs.FileSystem, root: str, topic: str) -> OutputScan:
    """Scan every published file under ``root`` (``_staging`` and other ``_`` paths are skipped),
    then the rejected records published under ``root/_rejected``. A file listed and gone before it
    is read (a compaction exchanged its directory) restarts the scan from a new listing, up to
    :data:`_SCAN_ATTEMPTS` times."""
    for attempt in range(1, _SCAN_ATTEMPTS + 1):
        try:
            return _read_output_once(fs, root, topic)
        except FileNotFoundError as exc:
            if attempt == _SCAN_ATTEMPTS:
                raise VerifyError(f"cannot read the output under {root!r}: files kept vanishing while it was "
                                  f"read ({exc})", cause=exc) from exc
            logger.info("a listed file vanished before it was read (%s): listing the output again", exc)
    raise AssertionError("unreachable")


def _read_output_once(fs: pafs.FileSystem, root: str, topic: str) -> OutputScan:
    scan = OutputScan()
    try:
        rejected_root = f"{root}/{REJECTED_DIR}" if root else REJECTED_DIR
        for directory, rejected in ((root, False), (rejected_root, True)):
            for path in list_published(fs, directory):
                columns = read_offset_columns(functools.partial(fs.open_input_file, path), path)
                if isinstance(columns, DamagedFile):
                    scan.damaged.append(columns)
                else:
                    scan_table(columns, topic, path, scan, rejected=rejected)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read the output under {root!r}: {exc}", cause=exc) from exc
    return scan


#: opens one file for reading: a context manager of a file-like object (``read``, ``seek``, ``tell``)
FileOpener = Callable[[], AbstractContextManager[Any]]


def opener_of(io: FileIO, path: str) -> FileOpener:
    """Opens ``path`` through ``io`` (an Iceberg table's) each time it is called."""
    return lambda: io.new_input(path).open()


def read_offset_columns(open_file: FileOpener, path: str) -> pa.Table | DamagedFile:
    """The ``_topic``, ``_partition`` and ``_offset`` columns (those the file has) of the Parquet file
    ``open_file`` opens, or the :class:`DamagedFile` that ``path`` is when its bytes do not parse.

    A failed read may be the file's bytes or the way to them (an object store that failed a
    request): after one, the file is read again whole into memory and parsed there. An error of that
    read raises (``OSError``: the audit cannot read the lake, not a finding); a parse that fails
    again is the file's own bytes: damaged. ``FileNotFoundError`` (the file vanished) raises at once.
    """
    try:
        with open_file() as handle:
            return _offset_columns(handle)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        logger.debug("reading %s failed (%s): reading it again whole", path, exc)
    with open_file() as handle:
        data = handle.read()
    try:
        return _offset_columns(pa.BufferReader(data))
    except (OSError, pa.ArrowException) as exc:
        return DamagedFile(path, f"not a readable Parquet file ({len(data)} bytes): {' '.join(str(exc).split())}")


def _offset_columns(source: Any) -> pa.Table:
    parquet = pq.ParquetFile(source)
    names = parquet.schema_arrow.names
    return parquet.read(columns=[c for c in _COLUMNS if c in names])


def read_topic(
    kafka: KafkaTarget, topic: str, timeout: float = 120.0, progress: Callable[[int, int], None] | None = None,
    ranges: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[dict[int, np.ndarray], dict[int, int], dict[int, int]]:
    """The offsets of ``topic`` a read_committed consumer sees, up to the high watermarks taken now;
    with ``ranges`` (partition -> ``[start, end)``), only those offsets of only those partitions
    (clipped to the watermarks: an incremental audit reads each offset once).
    ``progress(done, total)``, when given, is called after each fetch with the offsets read so far.

    Returns (partition -> sorted offsets, partition -> high watermark, partition -> low watermark). Raises :class:`VerifyError`
    when the topic does not exist or the broker does not answer within ``timeout``.
    """
    kafka = client_config(kafka)
    bootstrap = kafka.bootstrap
    errors = ClientErrors()
    try:
        consumer = make_consumer(kafka, "laminar-verify", {
            "isolation.level": "read_committed", "enable.partition.eof": False, "socket.timeout.ms": 10000,
            "error_cb": errors,
        })
    except KafkaException as exc:  # a bad client property or file
        raise VerifyError(f"invalid Kafka client settings: {exc.args[0].str() if exc.args else exc}", cause=exc) from exc
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=min(timeout, 10.0))
        except KafkaException as exc:
            raise VerifyError(f"cannot reach Kafka at {bootstrap}{errors.cause() or f': {exc}'}", cause=exc) from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise VerifyError(f"topic {topic!r} does not exist on {bootstrap}")
        wanted = [p for p in info.partitions if ranges is None or p in ranges]
        ends = watermarks(consumer, [(topic, p) for p in wanted], 10.0)
        marks = {partition: low_high for (_topic, partition), low_high in ends.items()}
        bounds = dict(marks)
        if ranges is not None:
            bounds = {p: (max(low, ranges[p][0]), max(max(low, ranges[p][0]), min(high, ranges[p][1])))
                      for p, (low, high) in marks.items()}
        collected: dict[int, list[np.ndarray]] = {p: [] for p in bounds}
        pending = {p for p, (low, high) in bounds.items() if high > low}
        consumer.assign([TopicPartition(topic, p, bounds[p][0]) for p in pending])
        deadline = time.monotonic() + timeout
        total = sum(bounds[p][1] - bounds[p][0] for p in pending)
        while pending:
            if time.monotonic() > deadline:
                raise VerifyError(f"reading {topic} did not finish within {timeout:.0f}s")
            messages = consumer.consume(num_messages=50000, timeout=0.5)
            failed = [m.error() for m in messages if m.error() is not None]
            if failed:
                raise VerifyError(f"error reading {topic}: {failed[0]}")
            if messages:
                parts = np.fromiter((m.partition() for m in messages), np.int64, len(messages))
                offs = np.fromiter((m.offset() for m in messages), np.int64, len(messages))
                for partition in np.unique(parts):
                    collected[int(partition)].append(offs[parts == partition])
            positions = consumer.position([TopicPartition(topic, p) for p in pending])
            for tp in positions:
                if tp.offset >= bounds[tp.partition][1]:
                    pending.discard(tp.partition)
            if progress is not None:
                left = {tp.partition: bounds[tp.partition][1] - max(tp.offset, bounds[tp.partition][0]) for tp in positions}
                progress(total - sum(left[p] for p in pending), total)
        expected = {}
        for partition, chunks in collected.items():
            all_offsets = np.concatenate(chunks) if chunks else np.empty(0, np.int64)
            high = bounds[partition][1]
            expected[partition] = np.unique(all_offsets[(all_offsets >= bounds[partition][0]) & (all_offsets < high)])
        return expected, {p: high for p, (_, high) in marks.items()}, {p: low for p, (low, _) in marks.items()}
    finally:
        consumer.close()
