"""The dev stack's Kafka Connect worker (`laminar_kafka.devstack.jvm.connect`) with Apache Iceberg's
sink lands a topic into an Iceberg table through the REST catalog exactly: every (partition, offset)
of the topic once, with its value, in the columns a raw-format node lands. This is the piece
``bench/bench_connect.py`` compares our node with."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from laminar_kafka.devstack.jvm.connect import create_sink_table, new_connect_worker, start_iceberg_sink
from laminar_kafka.devstack.jvm.connect_config import IcebergSinkSettings
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests import support
from tests.conftest import KafkaHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RECORDS = 3_000
PARTITIONS = 4


def test_connect_worker_lands_a_topic_into_iceberg_exactly(kafka: KafkaHandle, rest_catalog: str,
                                                           unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("connect.src")
    namespace = unique("connect_ns").replace("-", "_")
    table = f"{namespace}.events"
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    values = [b"connect-%06d" % index for index in range(RECORDS)]
    support.produce(kafka.bootstrap, topic, values)
    create_sink_table(rest_catalog, table, (tmp_path / "events").as_uri())

    worker = new_connect_worker(tmp_path, kafka.bootstrap, group_id=unique("connect"))
    worker.start(timeout=120.0)
    try:
        start_iceberg_sink(worker, "iceberg-sink", IcebergSinkSettings(
            topic=topic, table=table, catalog_uri=rest_catalog, control_topic=unique("connect-control"),
            commit_interval_ms=1_000))
        catalog = RestCatalog("test", uri=rest_catalog)

        def landed() -> int:
            snapshot = catalog.load_table((namespace, "events")).current_snapshot()
            summary = snapshot.summary if snapshot is not None else None
            return int(summary.additional_properties.get("total-records", 0)) if summary is not None else 0

        wait_until(lambda: landed() >= RECORDS, 60, f"the sink committing {RECORDS} rows", interval=0.5)
        assert worker.task_states("iceberg-sink") == ["RUNNING"]
    finally:
        worker.stop()

    rows = catalog.load_table((namespace, "events")).scan().to_arrow()
    assert rows.num_rows == RECORDS
    assert set(rows.column("_topic").to_pylist()) == {topic}
    coordinates = Counter(zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(), strict=True))
    expected = {(partition, offset) for partition, end in support.high_watermarks(kafka.bootstrap, topic).items()
                for offset in range(end)}
    assert set(coordinates) == expected and max(coordinates.values()) == 1
    assert sorted(rows.column("value").to_pylist()) == values
    assert rows.column("_timestamp").null_count == 0
    assert not list((tmp_path / "events").rglob("*.crc"))
