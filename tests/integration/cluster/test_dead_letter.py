"""The bad-record policy end to end: `laminar-kafka run --format json --on-bad-record skip` lands the
good records as typed rows and the bad ones under `<output>/_rejected/` (raw bytes and the error),
exactly once, across a SIGKILL and a restart; `verify` accounts for the rejected offsets."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published, open_output
from laminar_kafka.devstack.producers import produce
from tests.integration.cluster.harness import Pipeline, assert_exact

#: small row groups: staged files (rows and rejected) are on disk, open or sealed, when the node is killed
FLAGS = ("--format", "json", "--json-schema", "id:int64,name:string", "--on-bad-record", "skip",
         "--max-error-rate", "0.1", "--row-group-rows", "8")
CHUNKS = 12
PER_CHUNK = 400


def value(index: int) -> bytes:
    """Every 37th record is bad: alternately not JSON, and JSON whose ``id`` is not an integer."""
    if index % 37 == 5:
        return b"{not json %d" % index if index % 2 else b'{"id":"x%d","name":"bad"}' % index
    return b'{"id":%d,"name":"n%d"}' % (index, index)


class ChunkProducer(threading.Thread):
    """Produces ``CHUNKS`` chunks of ``PER_CHUNK`` records, one chunk per ``gap`` seconds."""

    def __init__(self, bootstrap: str, topic: str, gap: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.gap = bootstrap, topic, gap
        self.chunks_done = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            for chunk in range(CHUNKS):
                produce(self.bootstrap, self.topic, [value(i) for i in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)])
                self.chunks_done += 1
                if self._halt.wait(self.gap):
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def published(output: str, directory: str = "") -> list[str]:
    fs, root = open_output(output)
    return list_published(fs, f"{root}/{directory}" if directory else root)


def test_bad_records_land_in_rejected_exactly_once_across_a_kill(embedded: Pipeline, tmp_path: Path) -> None:
    producer = ChunkProducer(embedded.bootstrap, embedded.topic, gap=0.4)
    producer.start()
    embedded.wait_until(lambda: producer.chunks_done >= 1, 60, "first chunk produced")
    node = embedded.launch(1, *FLAGS)
    embedded.wait_until(lambda: published(embedded.output, REJECTED_DIR) and producer.chunks_done >= 4, 60,
                        "a published rejected file while producing")
    assert producer.is_alive(), "the producer finished before the kill: the kill would not be mid-run"
    node.kill()  # mid-run: staged files may be sealed and acked but not yet published
    embedded.launch(1, *FLAGS)
    producer.join(60)
    assert not producer.is_alive() and producer.error is None, producer.error

    report = embedded.finish()
    assert_exact(report, embedded)
    total = CHUNKS * PER_CHUNK
    bad = {value(i) for i in range(total) if i % 37 == 5}
    assert report.rejected == len(bad) and report.rows == total - len(bad)

    rows = pa.concat_tables([pq.read_table(f) for f in published(embedded.output)])
    assert rows.schema.field("id").type == pa.int64() and rows.schema.field("name").type == pa.string()
    assert sorted(rows["id"].to_pylist()) == [i for i in range(total) if i % 37 != 5]
    rejected = pa.concat_tables([pq.read_table(f) for f in published(embedded.output, REJECTED_DIR)])
    assert rejected.num_rows == len(bad)  # verify also proved no (partition, offset) twice
    assert set(rejected["value"].to_pylist()) == bad
    assert all(rejected["error"].to_pylist()) and set(rejected["_topic"].to_pylist()) == {embedded.topic}

    verify = subprocess.run(
        [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--output", embedded.output, "--bootstrap", embedded.bootstrap,
         "--topic", embedded.topic, "--json"], capture_output=True, text=True, timeout=120,
    )
    assert verify.returncode == 0, verify.stderr
    body = json.loads(verify.stdout)
    assert body["ok"] and body["rejected"] == len(bad) and body["missing"] == 0
    embedded.nodes[1].terminate()
    assert embedded.nodes[1].wait(30) == 0
