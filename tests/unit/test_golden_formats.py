"""What the 0.1.0 release wrote stays readable: a source checkpoint, a manifest as ZooKeeper (or the
state directory) stores it, full and as a delta, and the lake's epoch record (``tests/golden/``).

Each golden file was written by the release's own encoders; decoding it must give the values below
and encoding those values again must give the same bytes.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.record import LakeRecord
from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import CheckpointError
from laminar_kafka.coordinator.manifest_delta import decode_stored, encode_stored
from laminar_kafka.coordinator.values import Manifest
from laminar_kafka.kafka_source.checkpoint import KAFKA_CURSORS
from laminar_kafka.redis_source.checkpoint import redis_cursors

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CURSORS_5 = {"orders_source": {"orders.v1:0": 42, "orders.v1:1": 7}, "payments_source": {"payments:3": 0}}
CURSORS_6 = {"orders_source": {"orders.v1:0": 50, "orders.v1:1": 7}, "payments_source": {"payments:3": 0}}
BASE = Manifest(5, 12, CURSORS_5, ("staged/a.parquet",), ((1, "boot-a"), (2, "boot-b")))
NEXT = Manifest(6, 12, CURSORS_6, ("staged/b.parquet",), ((1, "boot-a"),))


def _golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_a_kafka_checkpoint_of_the_release_decodes_and_encodes_the_same() -> None:
    raw = _golden("kafka_checkpoint_v1.json")
    checkpoint = SourceCheckpoint.from_bytes(raw)
    assert checkpoint.connector == "kafka"
    assert checkpoint.assignment_version == 12
    assert checkpoint.partitions() == {("orders.v1", 0): 42, ("orders.v1", 1): 7, ("payments", 3): 0}
    assert checkpoint.to_bytes() == raw
    assert KAFKA_CURSORS.decode(raw) == checkpoint == KAFKA_CURSORS.stamp(checkpoint.partitions(), 12)


def test_a_redis_checkpoint_the_release_stamped_kafka_is_read_as_redis_and_new_ones_name_redis_streams() -> None:
    raw = _golden("redis_checkpoint_named_kafka_v1.json")
    events = redis_cursors("events")  # the stream family the golden checkpoint's keys name
    checkpoint = events.decode(raw)
    assert checkpoint.connector == "kafka"
    assert checkpoint.partitions() == {("events", 0): 1733443200000 << 20, ("events", 1): 5}
    assert checkpoint.to_bytes() == raw
    with pytest.raises(CheckpointError, match="only when all its keys are that stream's"):
        redis_cursors("orders").decode(raw)  # a Redis source of another family does not take it
    renamed = events.stamp(checkpoint.partitions(), checkpoint.assignment_version)
    assert renamed.connector == "redis-streams" and renamed.offsets == checkpoint.offsets
    with pytest.raises(CheckpointError, match="belongs to connector 'redis-streams', not 'kafka'"):
        KAFKA_CURSORS.decode(renamed.to_bytes())  # a Redis checkpoint never resumes a Kafka source


def test_a_full_manifest_as_stored_decodes_and_encodes_the_same() -> None:
    raw = _golden("manifest_full_v1.json")
    manifest, full = decode_stored(raw, lambda epoch: _unexpected_base(epoch))
    assert full and manifest == BASE
    assert Manifest.from_json(raw) == BASE
    assert encode_stored(BASE, None, 8).data == raw


def test_a_delta_manifest_as_stored_decodes_over_its_base_and_encodes_the_same() -> None:
    raw = _golden("manifest_delta_v1.json")
    bases = {5: Manifest.from_json(_golden("manifest_full_v1.json"))}
    manifest, full = decode_stored(raw, bases.__getitem__)
    assert not full and manifest == NEXT
    assert encode_stored(NEXT, BASE, 8).data == raw


def test_the_lake_record_decodes_and_encodes_the_same() -> None:
    raw = _golden("lake_record_v1.json")
    record = LakeRecord.from_json(raw, "golden record")
    assert (record.pipeline, record.epoch, record.assignment_version) == ("orders_pipeline", 6, 12)
    assert record.cursors == CURSORS_6
    assert record.files == ("orders/dt=2026-12-06/part-0.parquet",)
    assert record.to_json() == raw


def _unexpected_base(epoch: int) -> Manifest:
    raise AssertionError(f"a full manifest asked for base {epoch}")
