"""The audit of a keyed (upsert mode) Iceberg table: the table against the topic's final state per key.

A keyed table does not hold every record of its topic: a key's later change replaces its row, a
delete removes it. So it is audited by state, not by offsets: the topic is replayed (read_committed,
up to the high watermarks) and decoded as the source decodes it, reduced to the last change of each
key by offset (:func:`~laminar_kafka.cluster.lake.iceberg.upsert.reduce_changes`, deletes removed),
and compared with the table's rows (:func:`compare_state`): each key of the final state must be in
the table once, from its last change (the same ``_partition`` and ``_offset``: the row was written
from that record), and no other key may be.

While a pipeline is running the table trails the topic; :func:`cursor_report` tells how far it is
from the table's own epoch record (the next offset of every partition committed with the rows), as
the :class:`~laminar_kafka.cluster.ops.verify.VerifyReport` ``wait_caught_up`` waits on.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message, TopicPartition

from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.iceberg.upsert import OP_COLUMN, KeyConflict, reduce_changes
from laminar_kafka.cluster.lake.settings import LakeTarget
from laminar_kafka.cluster.ops.verify import PartitionAudit, VerifyReport
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig, KafkaTarget, client_config, make_consumer
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.read.positions import watermarks

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["AUDITED_FORMATS", "UpsertAudit", "applied_report", "audit_payload", "keyed_audit", "compare_state", "cursor_report", "read_changes", "source_decode", "table_cursors",
           "table_state"]

_POSITION = ["_partition", "_offset"]
#: keys shown in a report's examples
_SHOWN = 5

#: decodes consumed messages of one topic into change rows (keys, ``_op``, ``_partition``, ``_offset``)
Decode = Callable[[list[Message]], pa.Table]


@dataclass(frozen=True)
class UpsertAudit:
    """A keyed table against its topic's final state: ``keys`` in the final state, ``rows`` in the
    table; ``missing`` keys absent from the table, ``extra`` table keys the final state does not hold
    (a delete not applied), ``duplicated`` extra rows of a key, ``stale`` keys whose row is not from
    their last change; ``conflict``: the topic cannot be reduced (a key in two partitions)."""

    topic: str
    keys: int
    rows: int
    missing: int = 0
    extra: int = 0
    duplicated: int = 0
    stale: int = 0
    examples: tuple[str, ...] = ()
    conflict: str = ""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.duplicated or self.stale or self.conflict)

    def line(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        text = (f"{self.topic}: {self.keys} key(s) in the topic's final state, {self.rows} row(s) in the table; "
                f"missing {self.missing}, extra {self.extra}, duplicated {self.duplicated}, stale {self.stale}: {verdict}")
        if self.conflict:
            text += f" ({self.conflict})"
        return text + "".join(f"\n  {example}" for example in self.examples)

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "examples": list(self.examples), "ok": self.ok}


def _describe(row: Mapping[str, object], keys: Sequence[str]) -> str:
    return ", ".join(f"{key}={row[key]!r}" for key in keys)


def compare_state(topic: str, changes: pa.Table, table_rows: pa.Table, keys: Sequence[str]) -> UpsertAudit:
    """Audit ``table_rows`` (the table's key columns, ``_partition``, ``_offset``) against the final
    state of ``changes`` (every change row of the topic). Pure."""
    try:
        final = reduce_changes(changes, keys).upserts.select([*keys, *_POSITION])
    except KeyConflict as exc:
        return UpsertAudit(topic, 0, table_rows.num_rows, conflict=str(exc))
    table_rows = table_rows.select([*keys, *_POSITION])
    final = final.cast(pa.schema([final.schema.field(k) for k in keys]
                                 + [pa.field("_partition", pa.int32()), pa.field("_offset", pa.int64())]))
    table_rows = table_rows.cast(pa.schema([final.schema.field(k) for k in keys]
                                           + [pa.field("_partition", pa.int32()), pa.field("_offset", pa.int64())]))
    counts = table_rows.group_by(list(keys)).aggregate([("_offset", "count")])
    duplicated = int(pc.sum(pc.subtract(counts.column("_offset_count"), 1)).as_py() or 0)
    joined = final.join(table_rows, keys=list(keys), join_type="full outer", right_suffix="_table",
                        left_suffix="_topic")
    want, have = joined.column("_offset_topic"), joined.column("_offset_table")
    missing_rows = joined.filter(pc.is_null(have))
    extra_rows = joined.filter(pc.is_null(want))
    differs = pc.or_(pc.not_equal(want, have), pc.not_equal(joined.column("_partition_topic"),
                                                             joined.column("_partition_table")))
    stale_rows = joined.filter(pc.fill_null(differs, False))
    examples = [f"missing: {_describe(r, keys)} (last change at partition {r['_partition_topic']} offset "
                f"{r['_offset_topic']})" for r in missing_rows.slice(0, _SHOWN).to_pylist()]
    examples += [f"extra: {_describe(r, keys)} (row from partition {r['_partition_table']} offset "
                 f"{r['_offset_table']})" for r in extra_rows.slice(0, _SHOWN).to_pylist()]
    examples += [f"stale: {_describe(r, keys)} (row from offset {r['_offset_table']}, last change at "
                 f"{r['_offset_topic']})" for r in stale_rows.slice(0, _SHOWN).to_pylist()]
    return UpsertAudit(topic, final.num_rows, table_rows.num_rows, missing_rows.num_rows, extra_rows.num_rows,
                       duplicated, stale_rows.num_rows, tuple(examples))


def cursor_report(topic: str, expected: Mapping[int, np.ndarray], highs: Mapping[int, int],
                  cursors: Mapping[int, int]) -> VerifyReport:
    """How far a keyed table trails its topic, as a :class:`VerifyReport`: per partition, an expected
    offset is ``present`` once the table's epoch record moved past it (the table applied it; its row
    may since have been replaced), else ``missing``. Pure."""
    partitions = []
    for partition in sorted(expected):
        offsets = np.asarray(expected[partition], dtype=np.int64)
        cursor = cursors.get(partition, 0)
        applied = int(np.count_nonzero(offsets < cursor))
        pending = offsets[offsets >= cursor]
        partitions.append(PartitionAudit(partition, int(offsets.size), applied, int(pending.size), 0,
                                         first_missing=tuple(int(o) for o in pending[:5])))
    return VerifyReport(topic, tuple(partitions), files=0, rows=sum(p.present for p in partitions))


def table_cursors(table: Table, pipeline: str, topic: str) -> dict[int, int]:
    """The next offset of each partition of ``topic`` in the table's latest epoch record of
    ``pipeline`` ({} before the first)."""
    from laminar_kafka.cluster.lake.iceberg.records import latest_record

    _epoch, record = latest_record(table, pipeline)
    cursors: dict[int, int] = {}
    if record is None:
        return cursors
    for partitions in record.cursors.values():
        for key, offset in partitions.items():
            name, _, partition = key.rpartition(":")
            if name == topic:
                cursors[int(partition)] = max(offset, cursors.get(int(partition), 0))
    return cursors


def table_state(table: Table, keys: Sequence[str]) -> pa.Table:
    """The key columns, ``_partition`` and ``_offset`` of every row of the table's current snapshot."""
    if table.current_snapshot() is None:
        empty = {name: pa.array([], pa.string()) for name in keys}
        return pa.table({**empty, "_partition": pa.array([], pa.int32()), "_offset": pa.array([], pa.int64())})
    return table.scan(selected_fields=(*keys, *_POSITION)).to_arrow()


def read_changes(kafka: KafkaTarget, topic: str, decode: Decode, timeout: float = 120.0) -> pa.Table:
    """Every record of ``topic`` a read_committed consumer sees up to the high watermarks taken now,
    decoded by ``decode`` (batch by batch). Raises :class:`VerifyError` when the topic does not exist
    or is not read within ``timeout``."""
    kafka = client_config(kafka)
    consumer = make_consumer(kafka, "laminar-verify", {"isolation.level": "read_committed",
                                                       "enable.partition.eof": False})
    try:
        info = consumer.list_topics(topic, timeout=min(timeout, 10.0)).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise VerifyError(f"topic {topic!r} does not exist on {kafka.bootstrap}")
        ends = {p: high for (_t, p), (_low, high) in watermarks(consumer, [(topic, p) for p in info.partitions],
                                                                10.0).items()}
        pending = {p for p, high in ends.items() if high > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        parts: list[pa.Table] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise VerifyError(f"reading {topic} did not finish within {timeout:.0f}s")
            messages = consumer.consume(num_messages=10000, timeout=0.5)
            failed = [m.error() for m in messages if m.error() is not None]
            if failed:
                raise VerifyError(f"error reading {topic}: {failed[0]}")
            wanted = [m for m in messages if (m.offset() or 0) < ends[m.partition() or 0]]
            if wanted:
                parts.append(decode(wanted))
            for position in consumer.position([TopicPartition(topic, p) for p in pending]):
                if position.offset >= ends[position.partition]:
                    pending.discard(position.partition)
        if not parts:
            raise VerifyError(f"topic {topic!r} holds no record to audit")
        return pa.concat_tables(parts, promote_options="permissive")
    finally:
        consumer.close()


def source_decode(config: KafkaSourceConfig, payload: pa.Schema | None = None) -> Decode:
    """Decodes messages as a source of ``config`` does (``payload``: the JSON formats' row schema,
    as the pipeline pinned it or the table holds it), keeping the columns the audit compares."""
    from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
    from laminar_kafka.kafka_source.decode.records import RecordFields, Records

    builder = BatchBuilder(config, json_schema=payload)
    fields = RecordFields.of(config, keeps_rejected=False)
    columns = [*config.upsert_keys, OP_COLUMN, *_POSITION]

    def decode(messages: list[Message]) -> pa.Table:
        batch = builder.build(Records.of(messages, fields)).batch
        return pa.Table.from_batches([batch]).select(columns)

    return decode


def applied_report(kafka: KafkaTarget, topic: str, target: LakeTarget) -> VerifyReport:
    """:func:`cursor_report` of ``topic``'s keyed table in ``target`` (every offset missing while the
    table does not exist)."""
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output
    from laminar_kafka.cluster.ops.verify import read_topic

    assert target.iceberg is not None
    expected, highs, _lows = read_topic(kafka, topic)
    fs, root = open_output(target.output)
    table = load_table_or_none(open_catalog(target.iceberg, fs, root), (target.iceberg.namespace, target.table_of(topic)))
    cursors = table_cursors(table, target.pipeline, topic) if table is not None else {}
    return cursor_report(topic, expected, highs, cursors)


#: the formats a keyed table's audit decodes (a registry format needs the registry's client settings)
AUDITED_FORMATS = ("json", "debezium-json")
_METADATA = ("_topic", "_partition", "_offset", "_timestamp", "_key", "_headers")


def audit_payload(table_columns: pa.Schema) -> pa.Schema:
    """The row schema a keyed table's audit decodes its topic with: the table's columns but the
    metadata ones, all nullable as the source decodes them (a tombstone's payload is null but for
    its key fields, which come from the record key)."""
    return pa.schema([field.with_nullable(True) for field in table_columns if field.name not in _METADATA])


def keyed_audit(kafka: KafkaClientConfig, topic: str, target: LakeTarget, record_format: str,
                timeout: float = 120.0) -> UpsertAudit | None:
    """The audit of ``topic``'s table in ``target`` when it is keyed (identifier fields), else None:
    the topic decoded as ``record_format`` with the table's key columns and payload columns (the
    table's schema stands for the pinned JSON schema). Raises :class:`VerifyError`."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    assert target.iceberg is not None
    fs, root = open_output(target.output)
    table = load_table_or_none(open_catalog(target.iceberg, fs, root), (target.iceberg.namespace, target.table_of(topic)))
    if table is None or not table.schema().identifier_field_ids:
        return None
    schema = table.schema()
    keys = [schema.find_column_name(field_id) or "" for field_id in schema.identifier_field_ids]
    if record_format not in AUDITED_FORMATS:
        raise VerifyError(f"table {'.'.join(table.name())} is keyed by {','.join(keys)}: its audit replays the "
                          f"topic as {' or '.join(AUDITED_FORMATS)}, not {record_format}")
    payload = audit_payload(schema_to_pyarrow(schema, include_field_ids=False))
    properties = {"topic": topic, "group.id": "laminar-verify", "format": record_format,
                  "upsert-keys": ",".join(keys), "include-metadata": "_topic,_partition,_offset"}
    try:
        config = KafkaSourceConfig.from_properties(properties, kafka)
    except ConfigurationError as exc:
        raise VerifyError(f"cannot replay {topic} as {record_format}: {exc}", cause=exc) from exc
    changes = read_changes(kafka, topic, source_decode(config, payload), timeout)
    return compare_state(topic, changes, table_state(table, keys), keys)
