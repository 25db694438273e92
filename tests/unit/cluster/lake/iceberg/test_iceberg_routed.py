"""Iceberg tables routed by a table-template: tables made on first use (once, under racing nodes),
epochs committed in order across tables, whole records naming the epoch's tables, and facts that
are exact or refuse a reseed. Embedded SQLite catalog under tmp_path, no server."""
from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput, committed_epoch
from laminar_kafka.cluster.lake.iceberg.records import latest_record, seed_property
from laminar_kafka.cluster.lake.reconcile import Action, ControlFacts, OnLakeBehind, reconcile
from laminar_kafka.cluster.lake.record import LakeRecord
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.coordinator.values import Manifest
from tests.unit.cluster.iceberg_fakes import FAST_RETRY, Lake, layout_final_path, layout_publish, offsets_of, rows

PIPE = "pipe"
IDS = {"orders": "id-orders"}


def record_of(epoch: int) -> LakeRecord:
    return LakeRecord(PIPE, epoch, 3, {"s": {"orders:0": 100 + epoch, "orders:1": 200 + epoch}}, IDS, ("x.parquet",))


def routed_lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path, pipeline=PIPE, settings=IcebergSettings(namespace=PIPE, routed=True))


def output(lake: Lake, *, failing: str = "") -> IcebergOutput:
    """A node's output; ``failing``: publishing a file whose path holds it fails (a node stopping there)."""
    def publish_files(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
        staged = list(staged)
        if failing and any(failing in path for path in staged):
            raise SinkError(f"stopped before {failing}")
        return layout_publish(fs, root, staged)

    return IcebergOutput(lake.settings, lake.partitioning, PIPE, lake.root, lake.fs, lake.root,
                         final_path_of=layout_final_path, publish_files=publish_files, retry=FAST_RETRY,
                         record_of=record_of)


def stage(lake: Lake, epoch: int, table: str, offsets: list[int]) -> None:
    lake.stage(epoch, rows("orders", 0, offsets), directory=f"{table}/dt=2026-01-01")


def facts_decision(node: IcebergOutput, control: Manifest | None = None):  # type: ignore[no-untyped-def]
    facts = node.read_facts(PIPE, ["orders"])
    return facts, reconcile(PIPE, ControlFacts(control), facts, IDS, OnLakeBehind.REWIND)


def test_tables_made_on_first_use_each_commit_records_the_whole_epoch(tmp_path: Path) -> None:
    lake = routed_lake(tmp_path)
    node = output(lake)
    node.check(["orders"], None)
    assert node.catalog.list_tables(PIPE) == []  # no table per topic
    stage(lake, 1, "ev_eu", [0, 2])
    stage(lake, 1, "ev_us", [1])
    stage(lake, 2, "ev_us", [3])
    assert lake.publish(node, 1) == 2 and lake.publish(node, 2) == 1
    eu, us = node.table("ev_eu"), node.table("ev_us")
    assert offsets_of(eu.scan().to_arrow()) == [("orders", 0, 0), ("orders", 0, 2)]
    assert offsets_of(us.scan().to_arrow()) == [("orders", 0, 1), ("orders", 0, 3)]
    assert latest_record(eu, PIPE) == (1, record_of(1).routed(("ev_eu", "ev_us")))
    assert latest_record(us, PIPE) == (2, record_of(2).routed(("ev_us",)))
    facts, decision = facts_decision(node)
    assert facts.epoch == 2 and facts.cursors == record_of(2).cursors and facts.partial == ""
    assert decision.action is Action.RESEED and decision.seed is not None
    assert decision.seed.cursors == record_of(2).cursors


def test_epochs_land_in_order_across_tables(tmp_path: Path) -> None:
    """Epoch 1 fills ev_b only, epoch 2 ev_a only: ev_a never shows epoch 2 while ev_b lacks epoch 1,
    whatever the tables' names' order."""
    lake = routed_lake(tmp_path)
    stage(lake, 1, "ev_b", [0])
    stage(lake, 2, "ev_a", [1])
    with pytest.raises(SinkError, match="stopped before ev_b"):
        lake.publish(output(lake, failing="ev_b"), 2)
    node = output(lake)
    assert node.read_facts(PIPE, ["orders"]).has_records is False  # nothing landed, not even epoch 1
    assert lake.publish(node, 2) == 2
    assert latest_record(node.table("ev_a"), PIPE)[0] == 2 and latest_record(node.table("ev_b"), PIPE)[0] == 1


def test_an_epoch_in_some_tables_only_refuses_a_reseed_and_is_finished_by_the_control_state(tmp_path: Path) -> None:
    lake = routed_lake(tmp_path)
    stage(lake, 1, "ev_eu", [0])
    stage(lake, 2, "ev_eu", [1])
    stage(lake, 2, "ev_us", [2])
    lake.publish(output(lake), 1)
    with pytest.raises(SinkError):
        lake.publish(output(lake, failing="ev_us"), 2)
    node = output(lake)
    facts, decision = facts_decision(node)
    assert facts.partial == f"epoch 2 landed in table(s) ev_eu of namespace {PIPE} but not in ev_us"
    assert decision.action is Action.REFUSE
    assert decision.reason.startswith(f"pipeline {PIPE!r} cannot resume from its lake exactly: epoch 2 landed")
    assert "restore the control state, or roll those tables back" in decision.reason and "\n" not in decision.reason
    control = Manifest(epoch=2, assignment_version=3, cursors=record_of(2).cursors)
    assert facts_decision(node, control)[1].action is Action.CONTINUE  # the control state finishes it
    lake.publish(node, 2)
    facts, decision = facts_decision(node)
    assert facts.partial == "" and facts.epoch == 2 and decision.action is Action.RESEED


def test_seal_accepts_every_routed_table(tmp_path: Path) -> None:
    lake = routed_lake(tmp_path)
    stage(lake, 1, "ev_eu", [0])
    stage(lake, 1, "ev_us", [1])
    node = output(lake)
    lake.publish(node, 1)
    node.seal(record_of(9), 1)
    for name in ("ev_eu", "ev_us"):
        table = node.table(name)
        assert table.properties[seed_property(PIPE)] == "9" and committed_epoch(table, PIPE) == 9


def test_another_pipelines_routed_tables(tmp_path: Path) -> None:
    lake = routed_lake(tmp_path)
    stage(lake, 1, "ev_eu", [0])
    lake.publish(output(lake), 1)
    other = IcebergOutput(lake.settings, lake.partitioning, "other", lake.root, lake.fs, lake.root)
    assert other.read_facts("other", ["orders"]).other_pipelines == (PIPE,)


def test_two_nodes_racing_create_each_table_once_and_land_rows_once(tmp_path: Path) -> None:
    lake = routed_lake(tmp_path)
    names = [f"t{i}" for i in range(6)]
    for i, name in enumerate(names):
        stage(lake, 1, name, [i])
    nodes = [output(lake), output(lake)]
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def run(node: IcebergOutput) -> None:
        start.wait()
        try:
            lake.publish(node, 1)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(i[1] for i in nodes[0].catalog.list_tables(PIPE)) == names
    for i, name in enumerate(names):
        assert offsets_of(nodes[0].table(name).scan().to_arrow()) == [("orders", 0, i)]
