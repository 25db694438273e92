"""Iceberg output under crashes: every node SIGKILLed after an epoch's manifest became durable and
before its Iceberg commit landed; the restarted nodes finish that commit and the table is exact.

The window is made real, not simulated: the test holds the embedded SQLite catalog's write lock
(``BEGIN EXCLUSIVE``), so every node's Iceberg commit waits on it while the coordinator has already
written the manifest. Then every node is killed, the lock released, and the nodes restarted.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch, epoch_property
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.waiting import wait_until
from tests.integration.cluster.harness import Pipeline, assert_exact

pytestmark = [pytest.mark.faults, pytest.mark.timeout(200)]


def _committed(pipeline: Pipeline) -> int:
    lake = pipeline.lake
    assert lake.iceberg is not None
    fs, root = open_output(pipeline.output)
    table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(pipeline.topic)))
    return 0 if table is None else committed_epoch(table, pipeline.pipeline)


def _committed_under_lock(lock: sqlite3.Connection, pipeline: Pipeline) -> int:
    """:func:`_committed` read through the connection that holds the catalog's write lock (the
    catalog row's metadata file, as pyiceberg's SQL catalog stores it)."""
    lake = pipeline.lake
    assert lake.iceberg is not None
    row = lock.execute(
        "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
        (lake.iceberg.namespace, lake.table_of(pipeline.topic)),
    ).fetchone()
    assert row is not None, "the table exists once three epochs are in it"
    metadata = json.loads(Path(row[0].removeprefix("file://")).read_text())
    return int(metadata["properties"].get(epoch_property(pipeline.pipeline), "0"))


WINDOW_ATTEMPTS = 5


def _window_opens(pipeline: Pipeline, in_table: int, timeout: float = 10.0) -> bool:
    """Whether a manifest newer than the table's epoch exists within ``timeout`` (the commit lock held)."""
    try:
        wait_until(lambda: pipeline.status().last_epoch > in_table, timeout,
                   "a manifest written while the Iceberg commit is blocked")
    except WaitTimeout:
        return False
    return True


def test_nodes_killed_between_manifest_and_iceberg_commit(iceberg_pipeline: Pipeline) -> None:
    pipeline = iceberg_pipeline
    pipeline.produce(1000)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_spread(2)
    pipeline.wait_until(lambda: _committed(pipeline) >= 3, 60, "three epochs in the Iceberg table")

    catalog = Path(pipeline.output) / "_catalog" / "catalog.db"
    durable = 0
    for attempt in range(1, WINDOW_ATTEMPTS + 1):
        lock = sqlite3.connect(catalog, timeout=10, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # every Iceberg commit (and table load) now waits for us
        try:
            # read under the lock, so no commit lands after it: a node may be inside the commit of the
            # latest manifest already (then the window is open at once), or the next manifest opens it
            in_table = _committed_under_lock(lock, pipeline)
            if _window_opens(pipeline, in_table):
                durable = pipeline.status().last_epoch
                for node in pipeline.nodes.values():
                    node.kill()
                break
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        # The lock came while a node was still loading the table for the epoch another node had just
        # committed (each node commits the whole epoch; the later one finds it done, after a table
        # load the lock blocks): no node can ack the next epoch, so no manifest can open the window.
        # Let that load finish and try again once the table moved on.
        pipeline.wait_until(lambda in_table=in_table: _committed(pipeline) > in_table, 60, f"the table moving on (attempt {attempt})")
    assert durable, f"no manifest got ahead of the blocked Iceberg commit in {WINDOW_ATTEMPTS} attempts"
    assert _committed(pipeline) < durable, "the kill came after the Iceberg commit: the window was missed"

    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_until(lambda: _committed(pipeline) >= durable, 60, "recovery committing the durable epoch")
    report = pipeline.finish()
    assert_exact(report, pipeline)
