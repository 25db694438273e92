"""The audit of a CDC chaos run (:func:`audit_cdc`): every topic's Iceberg table must be exactly the
final state of every key, computed from the topic itself.

For each topic: the topic is replayed (a read_committed consumer, up to the high watermarks) into
its change events, and :func:`laminar_kafka.chaos.cdc.model.final_state` gives the last change of
every key; the table is read as users read it, with pyiceberg (its current snapshot through the
run's catalog; read again for up to :data:`GRACE_S` while it is not yet exact, for an epoch whose
commit lands late) and once with DuckDB (``iceberg_scan`` of the same metadata file, the extensions
loaded from their PyPI wheels, nothing downloaded). :func:`laminar_kafka.chaos.cdc.model.compare`
counts keys missing, undeleted, stale, duplicated and unexpected; the producer's view adds the keys
whose last acknowledged change the table does not show (and acknowledged offsets absent from the
topic). A reader that disagrees adds its own counts and evidence, so the run fails either way.
"""
from __future__ import annotations

import importlib.resources
import time
from collections.abc import Mapping
from typing import Any

from laminar_kafka.chaos.cdc.model import COMPARED, CdcComparison, Change, compare, decode_change, final_state
from laminar_kafka.chaos.lake import RunLake
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.report import RunResult
from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.cluster.lake.settings import table_name_of
from laminar_kafka.coordinator.codec import format_partition_key

__all__ = ["GRACE_S", "acked_by_key", "audit_cdc", "duckdb_rows", "read_changes", "table_rows"]

#: how long the audit reads a table again while it is not the final state (a commit landing late)
GRACE_S = 30.0
#: the key field (the nodes run with ``--upsert-keys id``)
KEY_FIELD = "id"


def read_changes(bootstrap: str, topic: str, timeout: float = 120.0) -> list[Change]:
    """Every change event of ``topic`` a read_committed consumer sees up to the high watermarks
    taken now. Raises ChaosError when the topic cannot be read in ``timeout`` or holds a record that
    is not a change event of the CDC producer."""
    from confluent_kafka import TopicPartition

    from laminar_kafka.kafka_source.clients import client_config, make_consumer

    consumer = make_consumer(client_config(bootstrap), "laminar-chaos-cdc-audit",
                             {"isolation.level": "read_committed", "enable.partition.eof": False, "log_level": 0})
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if info is None or info.error is not None:
            raise ChaosError(f"topic {topic} cannot be read")
        bounds = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in info.partitions}
        pending = {p for p, (low, high) in bounds.items() if high > low}
        consumer.assign([TopicPartition(topic, p, bounds[p][0]) for p in pending])
        changes: list[Change] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise ChaosError(f"reading {topic} did not finish within {timeout:.0f}s")
            for message in consumer.consume(num_messages=10000, timeout=0.5):
                if message.error() is not None:
                    raise ChaosError(f"error reading {topic}: {message.error()}")
                try:
                    changes.append(decode_change(message.key(), message.value(), int(message.partition() or 0),
                                                 int(message.offset() or 0), KEY_FIELD))
                except ValueError as exc:
                    raise ChaosError(f"{topic}: {exc}") from exc
            for position in consumer.position([TopicPartition(topic, p) for p in pending]):
                if position.offset >= bounds[position.partition][1]:
                    pending.discard(position.partition)
        return changes
    finally:
        consumer.close()


def acked_by_key(changes: list[Change], producer: ChaosProducer, topic: str,
                  partitions: int) -> tuple[dict[int, int], int, list[str]]:
    """key -> offset of its last acknowledged change; how many acknowledged offsets the topic does
    not hold, and an evidence line per partition with some."""
    key_at = {(c.partition, c.offset): c.key for c in changes}
    acked: dict[int, int] = {}
    absent: list[str] = []
    count = 0
    for partition in range(partitions):
        offsets = producer.acked.get(format_partition_key(topic, partition), [])
        lost = [o for o in offsets if (partition, o) not in key_at]
        if lost:
            count += len(lost)
            absent.append(f"{topic}:{partition}: {len(lost)} acknowledged record(s) not in the topic, first {lost[:5]}")
        for offset in offsets:
            key = key_at.get((partition, offset))
            if key is not None and offset > acked.get(key, -1):
                acked[key] = offset
    return acked, count, absent


def table_rows(lake: RunLake, topic: str) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of ``topic``'s table (the compared columns) through pyiceberg, and its metadata
    file; ([], None) when the table does not exist yet."""
    from pyiceberg.exceptions import NoSuchTableError

    identifier = (lake.iceberg_settings().namespace, table_name_of(topic))
    try:
        table = lake.catalog().load_table(identifier)
    except NoSuchTableError:
        return [], None
    columns = [KEY_FIELD, *COMPARED]
    return table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist(), table.metadata_location


def _extension(name: str) -> str:
    """The ``<name>.duckdb_extension`` file the ``duckdb-extension-<name>`` wheel ships for the
    installed DuckDB (the test extra). Raises ChaosError when it is not installed."""
    import duckdb

    try:
        root = importlib.resources.files(f"duckdb_extension_{name}")
    except ModuleNotFoundError as exc:
        raise ChaosError(f"the CDC audit reads with DuckDB: pip install duckdb-extension-{name}") from exc
    return str(root / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension")


def duckdb_rows(metadata_location: str) -> list[dict[str, Any]]:
    """The compared columns of the table whose current metadata file is ``metadata_location``, read
    by DuckDB's ``iceberg_scan`` on a connection that neither downloads nor auto-loads extensions."""
    import duckdb

    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for name in ("avro", "iceberg"):
            connection.execute(f"LOAD '{_extension(name)}'")
        location = metadata_location.removeprefix("file://")
        columns = ", ".join([KEY_FIELD, *COMPARED])
        result = connection.execute(f"SELECT {columns} FROM iceberg_scan(?)", [location])
        names = [column[0] for column in result.description]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    finally:
        connection.close()


def _add(result: RunResult, found: CdcComparison) -> None:
    result.missing += found.missing
    result.undeleted += found.undeleted
    result.stale += found.stale
    result.duplicated += found.duplicated
    result.unexpected += found.unexpected
    result.acked_lost += found.acked_lost
    result.evidence += list(found.evidence)


def audit_cdc(result: RunResult, partitions: Mapping[str, int], producer: ChaosProducer, lake: RunLake,
              bootstrap: str) -> None:
    """The CDC audit of every topic (``partitions``: topic -> partition count; see the module
    docstring); fills ``result`` (``records``: change events, ``keys``: live keys, the counts, the
    evidence, ``audited``). Raises when the lake or Kafka cannot be read (a run error, not a verdict)."""
    result.records = result.keys = result.missing = result.duplicated = result.unexpected = 0
    result.undeleted = result.stale = result.acked_lost = result.order_violations = result.aborted_in_output = 0
    deadline = time.monotonic() + GRACE_S
    for topic in sorted(partitions):
        changes = read_changes(bootstrap, topic)
        try:
            final = final_state(changes)
        except ValueError as exc:
            raise ChaosError(f"{topic}: {exc}") from exc
        acked, absent_count, absent = acked_by_key(changes, producer, topic, partitions[topic])
        while True:
            rows, metadata = table_rows(lake, topic)
            found = compare(final, rows, acked, key_field=KEY_FIELD, label=f"{topic} pyiceberg")
            if found.exact or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        result.records += len(changes)
        result.keys += found.keys
        _add(result, found)
        if absent:
            result.acked_lost += absent_count
            result.evidence += absent
        if metadata is not None:
            by_duckdb = compare(final, duckdb_rows(metadata), acked, key_field=KEY_FIELD, label=f"{topic} duckdb")
            if not by_duckdb.exact:
                _add(result, by_duckdb)
    result.audited = True
