"""The audit of a keyed table: its rows against the topic's final state per key, and how far its
epoch record trails the topic."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.record import LakeRecord
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat
from laminar_kafka.cluster.ops.verify_upsert import (
    audit_payload,
    compare_state,
    cursor_report,
    keyed_audit,
    table_cursors,
    table_state,
)
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.records import Records
from tests.unit.cluster.iceberg_fakes import Lake
from tests.unit.cluster.iceberg_fakes import rows as lake_rows
from tests.unit.cluster.lake.iceberg.test_upsert_commit import changes, keyed_lake, stage


def topic_changes() -> pa.Table:
    """Partition 0: 1 created, 2 created, 1 updated, 3 created then deleted; partition 1: 7 created."""
    return pa.concat_tables([changes(0, [0, 1, 2, 3, 4], [1, 2, 1, 3, 3], ["c", "c", "u", "c", "d"]),
                             changes(1, [0], [7], ["r"])])


def rows(*entries: tuple[int, int, int]) -> pa.Table:
    """Table rows ``(id, partition, offset)``."""
    return pa.table({"id": pa.array([e[0] for e in entries], pa.int64()),
                     "_partition": pa.array([e[1] for e in entries], pa.int32()),
                     "_offset": pa.array([e[2] for e in entries], pa.int64())})


def test_the_exact_final_state_is_ok() -> None:
    report = compare_state("t", topic_changes(), rows((1, 0, 2), (2, 0, 1), (7, 1, 0)), ["id"])
    assert report.ok and (report.keys, report.rows) == (3, 3)
    assert "3 key(s) in the topic's final state, 3 row(s) in the table" in report.line() and report.line().endswith("OK")


def test_every_kind_of_difference_is_counted_and_shown() -> None:
    table = rows((1, 0, 0), (2, 0, 1), (2, 0, 1), (3, 0, 3))  # 1 stale, 2 twice, 3 not deleted, 7 missing
    report = compare_state("t", topic_changes(), table, ["id"])
    assert not report.ok
    assert (report.missing, report.extra, report.duplicated, report.stale) == (1, 1, 1, 1)
    text = report.line()
    assert "missing: id=7 (last change at partition 1 offset 0)" in text
    assert "extra: id=3 (row from partition 0 offset 3)" in text
    assert "stale: id=1 (row from offset 0, last change at 2)" in text
    assert report.to_json()["ok"] is False


def test_a_row_from_the_right_offset_of_another_partition_is_stale() -> None:
    report = compare_state("t", topic_changes(), rows((1, 1, 2), (2, 0, 1), (7, 1, 0)), ["id"])
    assert report.stale == 1 and not report.ok


def test_a_topic_with_a_key_in_two_partitions_is_a_finding() -> None:
    conflicting = pa.concat_tables([changes(0, [0], [1], ["c"]), changes(1, [0], [1], ["c"])])
    report = compare_state("t", conflicting, rows((1, 0, 0)), ["id"])
    assert not report.ok and "Kafka partitions 0 and 1" in report.conflict


def test_the_cursor_report_counts_an_offset_once_the_record_passed_it() -> None:
    expected = {0: np.array([0, 1, 2, 3, 4]), 1: np.array([0, 1])}
    report = cursor_report("t", expected, {0: 5, 1: 2}, {0: 3, 1: 2})
    assert report.missing == 2 and report.partitions[0].first_missing == (3, 4) and not report.ok
    assert cursor_report("t", expected, {0: 5, 1: 2}, {0: 5, 1: 2}).ok
    assert cursor_report("t", expected, {0: 6, 1: 2}, {0: 6, 1: 2}).ok  # past a transaction marker too


def test_table_cursors_and_state_come_from_the_table(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, topic_changes())
    record = LakeRecord("pipe", 1, 1, {"kafka": {"orders:0": 5, "orders:1": 1, "other:0": 9}}, {}, ())
    output = lake.output(record_of=lambda epoch: record)
    lake.publish(output, 1)
    table = output.table("orders")
    assert table_cursors(table, "pipe", "orders") == {0: 5, 1: 1}
    assert table_cursors(table, "another", "orders") == {}
    assert compare_state("orders", topic_changes(), table_state(table, ["id"]), ["id"]).ok


def test_keyed_audit_is_for_keyed_tables_and_json_formats(tmp_path: Path) -> None:
    kafka = KafkaClientConfig("127.0.0.1:1")  # never reached: both answers come before the topic is read
    lake = keyed_lake(tmp_path)
    stage(lake, 1, topic_changes())
    lake.publish(lake.output(), 1)
    target = LakeTarget(lake.root, TableFormat.ICEBERG, "pipe", IcebergSettings(namespace="pipe"))
    with pytest.raises(VerifyError, match="table pipe.orders is keyed by id: its audit replays the topic as json or "
                                          "debezium-json, not avro"):
        keyed_audit(kafka, "orders", target, "avro")
    plain = Lake(tmp_path / "plain")
    plain.stage(1, lake_rows("orders", 0, [0, 1]))
    plain.publish(plain.output(), 1)
    assert keyed_audit(kafka, "orders", LakeTarget(plain.root, TableFormat.ICEBERG, "pipe",
                                                   IcebergSettings(namespace="pipe")), "json") is None


def test_the_audit_decodes_a_tombstone_with_the_tables_columns() -> None:
    table_columns = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.large_string()),
                               pa.field("_partition", pa.int32()), pa.field("_offset", pa.int64())])
    payload = audit_payload(table_columns)
    assert payload.names == ["id", "name"] and all(field.nullable for field in payload)
    config = KafkaSourceConfig.from_properties({"topic": "t", "group.id": "g", "format": "json", "upsert-keys": "id",
                                                "include-metadata": "_topic,_partition,_offset"},
                                               KafkaClientConfig("127.0.0.1:1"))
    records = Records(partitions=[0, 0], offsets=[0, 1], values=[b'{"id": 1, "name": "a"}', None], topics="t",
                      timestamps=[0, 0], keys=[b"1", b"1"])
    built = BatchBuilder(config, json_schema=payload).build(records)
    assert not built.bad
    assert built.batch.select(["id", "_op"]).to_pylist() == [{"id": 1, "_op": "u"}, {"id": 1, "_op": "d"}]
