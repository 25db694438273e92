"""The exactly-once Parquet sink on a real S3-compatible server (SeaweedFS on loopback, `s3_server`).

S3 has no rename: pyarrow's ``move`` is a copy then a delete. These tests drive the public sink
functions (ParquetSink, publish, recover, list_published, final_path) against the server and check,
at every step, that readers (``list_published`` and ``pyarrow.dataset`` skipping ``_`` prefixes)
see exactly the published files: never a staged, open or half-moved one, never a duplicate. They
use only the relative paths the sink returns, so they hold for any output layout. The last test
runs a real embedded node (`laminar-kafka run --output s3://...`) on the session's Kafka, SIGKILLs
and restarts it, and audits the output exact.
"""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.sink import (
    STAGING_DIR,
    ParquetSink,
    final_path,
    list_published,
    open_output,
    publish,
    recover,
)
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from laminar_kafka.devstack.processes import REPO_ROOT, free_port, node_environment
from laminar_kafka.devstack.topics import create_topic
from tests.conftest import KafkaHandle
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact
from tests.s3_fixtures import TEST_BUCKET

pytestmark = pytest.mark.integration

TOPIC = "s3.events"
#: two UTC days, so a layout partitioned by day writes more than one directory
DAYS_MS = (
    int(datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp() * 1000),
    int(datetime(2026, 3, 2, 12, tzinfo=timezone.utc).timestamp() * 1000),
)


def batch(start: int, count: int, partition: int = 0) -> pa.RecordBatch:
    """Rows shaped like the runtime's: a value and the Kafka metadata columns, spread over two days."""
    offsets = range(start, start + count)
    return pa.record_batch({
        "value": pa.array([b"v%d" % offset for offset in offsets], pa.binary()),
        "_topic": pa.array([TOPIC] * count, pa.dictionary(pa.int32(), pa.string())),
        "_partition": pa.array([partition] * count, pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array([DAYS_MS[offset % 2] for offset in offsets], pa.timestamp("ms")),
    })


def unique_prefix(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:10]}"


def sink_on(server: SeaweedServer, prefix: str, boot_id: str = "b00t", node_id: int = 1, **kwargs: int) -> ParquetSink:
    return ParquetSink(server.uri(TEST_BUCKET, prefix), node_id=node_id, boot_id=boot_id, **kwargs)


def full_paths(root: str, relatives: Iterable[str]) -> list[str]:
    return sorted(f"{root}/{relative}" for relative in relatives)


def staged_objects(fs: pafs.FileSystem, root: str) -> list[str]:
    """Every object under the staging directory (directory markers excluded)."""
    selector = pafs.FileSelector(f"{root}/{STAGING_DIR}", recursive=True, allow_not_found=True)
    return sorted(info.path for info in fs.get_file_info(selector) if info.type == pafs.FileType.File)


def reader_view(fs: pafs.FileSystem, root: str) -> tuple[list[str], list[str], list[int]]:
    """(list_published, the files pyarrow.dataset reads, the offsets it reads) of the output."""
    published = list_published(fs, root)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        return published, [], []
    dataset = ds.dataset(root, filesystem=fs, format="parquet", ignore_prefixes=["_", "."])
    if not dataset.files:
        return published, [], []
    offsets = dataset.to_table(columns=["_offset"]).column("_offset").to_pylist()
    return published, sorted(dataset.files), sorted(offsets)


def assert_readers_see(fs: pafs.FileSystem, root: str, expected_files: list[str], expected_offsets: Iterable[int]) -> None:
    published, dataset_files, offsets = reader_view(fs, root)
    assert published == sorted(expected_files)
    assert dataset_files == sorted(expected_files)
    assert offsets == sorted(expected_offsets)  # every row once: no partial, no duplicate file


def test_write_seal_publish_and_read_back_on_s3(s3_server: SeaweedServer) -> None:
    prefix = unique_prefix("publish")
    sink = sink_on(s3_server, prefix, row_group_rows=40)
    sink.check_writable()
    fs, root = sink.fs, sink.root
    assert staged_objects(fs, root) == []  # the probe is gone

    sink.write(batch(0, 100))
    sink.flush()
    assert_readers_see(fs, root, [], [])  # open files are invisible
    sealed = sink.seal(1)
    assert sealed and all(relative.startswith(f"{STAGING_DIR}/") for relative in sealed)
    assert staged_objects(fs, root) == full_paths(root, sealed)
    assert_readers_see(fs, root, [], [])  # sealed, not yet published

    finals = full_paths(root, (final_path(relative) for relative in sealed))
    assert publish(fs, root, sealed) == len(sealed)
    assert_readers_see(fs, root, finals, range(100))
    assert staged_objects(fs, root) == []

    assert publish(fs, root, sealed) == 0  # idempotent: already published, nothing moves or doubles
    assert_readers_see(fs, root, finals, range(100))

    # the environment (AWS_ENDPOINT_URL...) alone resolves a plain s3:// URI to the same server
    env_fs, env_root = open_output(f"s3://{TEST_BUCKET}/{prefix}")
    assert env_root == root
    assert_readers_see(env_fs, env_root, finals, range(100))


def test_recover_publishes_listed_and_deletes_unlisted_on_s3(s3_server: SeaweedServer) -> None:
    prefix = unique_prefix("recover")
    listed_sink = sink_on(s3_server, prefix, boot_id="listed", node_id=1)
    unlisted_sink = sink_on(s3_server, prefix, boot_id="unlisted", node_id=2)
    later_sink = sink_on(s3_server, prefix, boot_id="later", node_id=3)
    listed_sink.write(batch(0, 60))
    unlisted_sink.write(batch(1000, 30, partition=1))
    later_sink.write(batch(2000, 20, partition=2))
    listed = listed_sink.seal(1)
    unlisted = unlisted_sink.seal(1)  # its epoch committed without it: a zombie's output
    later = later_sink.seal(2)  # epoch 2 is not committed yet: kept for its manifest
    fs, root = listed_sink.fs, listed_sink.root
    manifests = {1: listed}

    report = recover(fs, root, latest_epoch=1, manifest_outputs=manifests.get, live_boots=set())
    assert (report.published, report.deleted, report.kept) == (len(listed), len(unlisted), len(later))
    assert_readers_see(fs, root, full_paths(root, (final_path(r) for r in listed)), range(60))
    assert staged_objects(fs, root) == full_paths(root, later)

    again = recover(fs, root, latest_epoch=1, manifest_outputs=manifests.get, live_boots=set())
    assert (again.published, again.deleted) == (0, 0)
    assert_readers_see(fs, root, full_paths(root, (final_path(r) for r in listed)), range(60))


#: a node's sink in a child process: write and seal epoch 1, start epoch 2's file, die before publish
_KILLED_NODE = """
import json, os, sys
import pyarrow as pa
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from tests.integration.cluster.test_s3_sink import batch
sink = ParquetSink(sys.argv[1], node_id=7, boot_id=sys.argv[2], row_group_rows=25)
sink.write(batch(0, 100))
sealed = sink.seal(1)
sink.write(batch(100, 60))
sink.flush()  # rows of the next epoch in an open staged file, never closed
print(json.dumps(sealed), flush=True)
os._exit(9)  # a SIGKILL-like death: no close, no publish, no cleanup
"""


def test_node_killed_between_staging_and_publishing_on_s3(s3_server: SeaweedServer) -> None:
    prefix = unique_prefix("killed")
    uri = s3_server.uri(TEST_BUCKET, prefix)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_NODE, uri, "dead-boot"], cwd=REPO_ROOT, env=node_environment(),
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 9, child.stderr
    sealed = tuple(json.loads(child.stdout.strip().splitlines()[-1]))
    assert sealed
    fs, root = open_output(uri)
    assert set(full_paths(root, sealed)) <= set(staged_objects(fs, root))
    assert_readers_see(fs, root, [], [])  # the dead node published nothing, and its open file is unseen

    manifests = {1: sealed}  # epoch 1's manifest was durable: its files must land, once
    report = recover(fs, root, latest_epoch=1, manifest_outputs=manifests.get, live_boots=set())
    assert report.published == len(sealed)
    finals = full_paths(root, (final_path(relative) for relative in sealed))
    assert_readers_see(fs, root, finals, range(100))
    assert staged_objects(fs, root) == []  # sealed ones published, the dead boot's open file gone

    again = recover(fs, root, latest_epoch=1, manifest_outputs=manifests.get, live_boots=set())
    assert (again.published, again.deleted) == (0, 0)
    assert_readers_see(fs, root, finals, range(100))


def test_interrupted_copy_move_is_finished_without_duplicates_on_s3(s3_server: SeaweedServer) -> None:
    prefix = unique_prefix("copy-move")
    sink = sink_on(s3_server, prefix, row_group_rows=20, max_file_bytes=1)  # a file per row group
    sink.write(batch(0, 80))
    sealed = sink.seal(1)
    assert len(sealed) >= 2
    fs, root = sink.fs, sink.root
    interrupted, *rest = sealed
    # S3's move is copy + delete: a node died after the copy of the first file, before the delete
    fs.copy_file(f"{root}/{interrupted}", f"{root}/{final_path(interrupted)}")
    interrupted_rows = pq.read_table(f"{root}/{interrupted}", filesystem=fs).column("_offset").to_pylist()
    assert_readers_see(fs, root, [f"{root}/{final_path(interrupted)}"], interrupted_rows)  # whole, once

    assert publish(fs, root, sealed) == len(rest)  # the copied one is not moved again
    finals = full_paths(root, (final_path(relative) for relative in sealed))
    assert_readers_see(fs, root, finals, range(80))
    assert staged_objects(fs, root) == []  # the stale staged copy was deleted

    assert publish(fs, root, sealed) == 0
    assert_readers_see(fs, root, finals, range(80))


def one_line_sink_error(sink: ParquetSink, server: SeaweedServer) -> str:
    with pytest.raises(SinkError) as raised:
        sink.check_writable()
    message = str(raised.value)
    assert "\n" not in message and message.strip() == message
    assert server.secret_access_key not in message
    return message


def test_unreachable_endpoint_fails_check_writable_in_one_line(s3_server: SeaweedServer) -> None:
    closed_port = free_port()  # nothing listens there
    uri = f"s3://{TEST_BUCKET}/unreachable?endpoint_override=127.0.0.1:{closed_port}&scheme=http&region=us-east-1"
    message = one_line_sink_error(ParquetSink(uri, node_id=1, boot_id="b"), s3_server)
    assert f"127.0.0.1:{closed_port}" in message or "connect" in message.lower()


def test_missing_bucket_fails_check_writable_in_one_line(s3_server: SeaweedServer) -> None:
    bucket = f"missing-{uuid.uuid4().hex[:12]}"
    message = one_line_sink_error(ParquetSink(s3_server.uri(bucket, "lake"), node_id=1, boot_id="b"), s3_server)
    assert bucket in message
    listing = pafs.FileSystem.from_uri(s3_server.uri(TEST_BUCKET))[0].get_file_info(pafs.FileSelector(""))
    assert bucket not in {info.base_name for info in listing}  # nothing was created


@dataclass
class S3Pipeline(Pipeline):
    """A pipeline whose nodes land into ``s3_output`` (resolved through the exported AWS_* environment)."""

    s3_output: str = ""

    @property
    def output(self) -> str:
        return self.s3_output


def test_embedded_node_lands_on_s3_exactly_once_across_a_kill(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    name = unique("s3-node")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    output = f"s3://{TEST_BUCKET}/{name}"  # no query: the node finds the server through AWS_ENDPOINT_URL
    pipeline = S3Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path,
                          s3_output=output)
    fs, root = open_output(output)
    state = ("--state-dir", str(tmp_path / "state"))  # embedded mode keeps its manifests on local disk
    try:
        node = pipeline.launch(1, *state)
        pipeline.produce(rate=1500)
        pipeline.wait_until(lambda: len(list_published(fs, root)) >= 3, 90, "files published on S3")
        node.kill()  # SIGKILL, wherever it is: writing, sealed, or half way through publishing
        node = pipeline.launch(1, *state)
        pipeline.wait_until(lambda: len(list_published(fs, root)) >= 6, 90, "files published after the restart")
        assert_exact(pipeline.finish(), pipeline)
        node.terminate()  # a planned leave must exit, not block on an S3 stream at interpreter exit
        assert node.wait(60) == 0, node.log_text()[-3000:]
        assert "Traceback" not in node.log_text()
    finally:
        pipeline.stop_all()


def test_embedded_node_on_s3_whose_local_state_dir_is_lost_resumes_from_the_lake(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    """The documented S3 set-up keeps the state directory on local disk, which a container restart
    wipes: the node resumes from the lake's records on S3 instead of landing everything again."""
    import shutil

    from laminar_kafka.devstack.producers import produce

    name = unique("s3-lost")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    output = f"s3://{TEST_BUCKET}/{name}"
    pipeline = S3Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path,
                          s3_output=output)
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        produce(kafka.bootstrap, name, [b"before-%d" % i for i in range(2000)])
        node = pipeline.launch(1, *state)
        assert pipeline.finish().ok
        node.terminate()
        assert node.wait(60) == 0, node.log_text()[-3000:]
        shutil.rmtree(tmp_path / "state")
        produce(kafka.bootstrap, name, [b"after-%d" % i for i in range(2000)])
        node = pipeline.launch(1, *state)
        assert_exact(pipeline.finish(), pipeline)
        assert "no control state for pipeline" in node.log_text(), node.log_text()[-3000:]
    finally:
        pipeline.stop_all()
