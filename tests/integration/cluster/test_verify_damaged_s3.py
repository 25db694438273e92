"""`verify`'s scan of a lake on S3 (SeaweedFS on loopback, `s3_server`) holding a truncated object:
the report names the object and what is wrong, and is not OK (exit 1 in `verify`); the objects of a
sound lake read as before. The lake is landed by the sink itself; no Kafka (the topic's offsets are
given)."""
from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published, publish
from laminar_kafka.cluster.ops.verify import audit, read_output
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from tests.s3_fixtures import TEST_BUCKET

pytestmark = pytest.mark.integration

TOPIC = "orders"


def rows(offsets: range) -> pa.RecordBatch:
    return pa.record_batch({
        "value": pa.array([b"v%d" % o for o in offsets], pa.binary()),
        "_topic": pa.array([TOPIC] * len(offsets), pa.dictionary(pa.int32(), pa.string())),
        "_partition": pa.array([0] * len(offsets), pa.int32()),
        "_offset": pa.array(list(offsets), pa.int64()),
        "_timestamp": pa.array([1_700_000_000_000] * len(offsets), pa.timestamp("ms")),
    })


def test_a_truncated_object_on_s3_is_named_by_the_audit(s3_server: SeaweedServer) -> None:
    sink = ParquetSink(s3_server.uri(TEST_BUCKET, f"damaged-{uuid.uuid4().hex[:10]}"), node_id=1, boot_id="b00t")
    fs, root = sink.fs, sink.root
    for epoch, offsets in ((1, range(0, 50)), (2, range(50, 100))):
        sink.write(rows(offsets))
        publish(fs, root, sink.seal(epoch))
    expected, highs = {0: np.arange(100)}, {0: 100}
    assert audit(TOPIC, expected, highs, read_output(fs, root, TOPIC)).ok

    damaged = list_published(fs, root)[1]
    with fs.open_input_file(damaged) as handle:
        data = handle.read()
    with fs.open_output_stream(damaged) as out:  # an object cut short (a partial upload, a bad copy)
        out.write(data[: len(data) // 2])

    scan = read_output(fs, root, TOPIC)
    assert [d.path for d in scan.damaged] == [damaged]
    assert scan.damaged[0].problem == (f"not a readable Parquet file ({len(data) // 2} bytes): Parquet magic bytes not "
                                       "found in footer. Either the file is corrupted or this is not a parquet file.")
    report = audit(TOPIC, expected, highs, scan)
    assert not report.ok and report.missing == 50 and scan.files == 1
    assert f"damaged file {damaged}: not a readable Parquet file" in report.table()
