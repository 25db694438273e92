"""The Iceberg tables' epoch records (laminar_kafka.cluster.lake.iceberg.records through IcebergOutput.read_facts / seal):
each epoch commit carries its topic's LakeRecord in the snapshot summary; a rolled-back table is
seen as such until a reseed seals it. Embedded SQLite catalog under tmp_path, no server."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput, committed_epoch
from laminar_kafka.cluster.lake.iceberg.records import latest_record, seed_property
from laminar_kafka.cluster.lake.reconcile import Action, ControlFacts, LakeFacts, OnLakeBehind, reconcile
from laminar_kafka.cluster.lake.record import RECORD_SUMMARY_KEY, LakeRecord
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.coordinator.values import Manifest
from tests.unit.cluster.iceberg_fakes import Lake, rows

PIPE = "pipe"
IDS = {"orders": "id-orders", "pay.ments": "id-payments"}


def cursors_of(epoch: int) -> dict[str, dict[str, int]]:
    """The manifest cursors of ``epoch`` (both topics, every epoch)."""
    return {"s": {"orders:0": 100 + epoch, "orders:1": 200 + epoch, "pay.ments:0": 300 + epoch}}


def record_of(epoch: int) -> LakeRecord:
    return LakeRecord(PIPE, epoch, 7, cursors_of(epoch), IDS, ("ignored.parquet",))


def with_records(lake: Lake) -> IcebergOutput:
    output = lake.output(record_of=record_of)
    return output


def publish(lake: Lake, epochs: range | list[int], *, topics: tuple[str, ...] = ("orders",),
            output: IcebergOutput | None = None) -> IcebergOutput:
    output = output or with_records(lake)
    for epoch in epochs:
        for topic in topics:
            lake.stage(epoch, rows(topic, 0, [epoch]), topic=topic)
        lake.publish(output, epoch)
    return output


def test_each_commit_carries_its_topics_record(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2], topics=("orders", "pay.ments"))
    for topic in ("orders", "pay.ments"):
        snapshot = output.table(topic).current_snapshot()
        assert snapshot is not None and snapshot.summary is not None
        stored = LakeRecord.from_json(snapshot.summary[RECORD_SUMMARY_KEY], "summary")
        assert stored == record_of(2).only_topic(topic)
        assert stored.files == () and set(stored.topic_ids) == {topic}
        assert snapshot.summary["laminar.epoch"] == "2" and snapshot.summary["laminar.pipeline"] == PIPE
    assert set(json.loads(output.table("orders").current_snapshot().summary[RECORD_SUMMARY_KEY])["cursors"]["s"]) \
        == {"orders:0", "orders:1"}


def test_read_facts_returns_the_latest_epochs_cursors_of_that_topic_only(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2, 3])
    facts = output.read_facts(PIPE, ["orders"])
    assert facts == LakeFacts(
        epoch=3, high_epoch=3, cursors={"s": {"orders:0": 103, "orders:1": 203}}, topic_ids={"orders": "id-orders"},
        dense=False, rolled_back_from=0, has_records=True, has_data=True, where="iceberg tables pipe.orders@3",
    )
    assert lake.output().read_facts(PIPE, ["orders"]) == facts  # another node reads the same


def test_read_facts_merges_each_topics_own_latest_record(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2], topics=("orders", "pay.ments"))
    publish(lake, [3, 4], output=output)  # epochs 3 and 4 hold rows of orders only
    facts = output.read_facts(PIPE, ["orders", "pay.ments"])
    assert facts.epoch == 4 and facts.high_epoch == 4 and facts.rolled_back_from == 0
    assert facts.cursors == {"s": {"orders:0": 104, "orders:1": 204, "pay.ments:0": 302}}
    assert facts.topic_ids == IDS and not facts.dense
    assert "pipe.orders@4" in facts.where and "pipe.pay_ments@2" in facts.where
    control = ControlFacts(Manifest(4, 7, cursors_of(4)), Manifest(0, 0, {}), 4)
    assert reconcile(PIPE, control, facts, IDS, OnLakeBehind.FAIL).action is Action.CONTINUE


def test_tables_that_do_not_exist_show_nothing(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    facts = lake.output().read_facts(PIPE, ["orders"])
    assert facts == LakeFacts(dense=False, where="iceberg tables (no record)")
    assert reconcile(PIPE, ControlFacts(None), facts, {}, OnLakeBehind.FAIL).action is Action.START_FRESH


def test_commits_without_records_have_data_and_no_records(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    publish(lake, [1, 2], output=lake.output())  # record_of unset: a version before records
    facts = lake.output().read_facts(PIPE, ["orders"])
    assert facts.has_data and not facts.has_records and facts.epoch == 0 and facts.rolled_back_from == 0
    assert facts.high_epoch == 2  # the committed epoch is known from the table property
    table = lake.output().table("orders")
    assert latest_record(table, PIPE) == (2, None)


def test_another_pipelines_table(tmp_path: Path) -> None:
    other = Lake(tmp_path, pipeline="billing", settings=IcebergSettings(namespace=PIPE))
    publish(other, [1])
    facts = Lake(tmp_path).output().read_facts(PIPE, ["orders"])
    assert facts.other_pipelines == ("billing",) and facts.has_records
    decision = reconcile(PIPE, ControlFacts(None), facts, {}, OnLakeBehind.REWIND)
    assert decision.action is Action.REFUSE and "'billing'" in decision.reason and "'pipe'" in decision.reason


def test_a_snapshot_of_another_operation_is_skipped(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2])
    table = output.table("orders")
    extra = f"{lake.root}/orders/dt=2026-01-01/maintenance.parquet"  # e.g. a maintenance job's snapshot on top
    pq.write_table(rows("orders", 0, [999]), extra)
    with table.transaction() as transaction:
        transaction.add_files([extra], check_duplicate_files=False)
    table = output.table("orders")
    summary = table.current_snapshot().summary
    assert summary is not None and "laminar.epoch" not in summary.additional_properties
    epoch, record = latest_record(table, PIPE)
    assert epoch == 2 and record == record_of(2).only_topic("orders")
    facts = output.read_facts(PIPE, ["orders"])
    assert facts.epoch == 2 and facts.rolled_back_from == 0


def roll_back(output: IcebergOutput, to_epoch: int, how: str) -> None:
    table = output.table("orders")
    target = next(s.snapshot_id for s in table.snapshots()
                  if s.summary is not None and s.summary.get("laminar.epoch") == str(to_epoch))
    with table.manage_snapshots() as manage:
        if how == "rollback_to_snapshot":
            manage.rollback_to_snapshot(target)
        else:
            manage.set_current_snapshot(target)


@pytest.mark.parametrize("how", ["rollback_to_snapshot", "set_current_snapshot"])
def test_a_rolled_back_table_reports_the_last_committed_epoch_until_sealed(tmp_path: Path, how: str) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2, 3, 4])
    roll_back(output, 2, how)
    table = output.table("orders")
    assert committed_epoch(table, PIPE) == 4  # the property does not roll back
    facts = lake.output().read_facts(PIPE, ["orders"])
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from) == (2, 4, 4)
    assert facts.cursors == {"s": {"orders:0": 102, "orders:1": 202}} and facts.has_records

    control = ControlFacts(Manifest(4, 7, cursors_of(4)), Manifest(0, 0, {"s": {"orders:0": 0, "orders:1": 0,
                                                                                  "pay.ments:0": 0}}), 4)
    refused = reconcile(PIPE, control, facts, IDS, OnLakeBehind.FAIL)
    assert refused.action is Action.REFUSE and "recorded epoch 4" in refused.reason
    decision = reconcile(PIPE, control, facts, IDS, OnLakeBehind.REWIND)
    assert decision.action is Action.RESEED and decision.seed is not None
    seed = decision.seed
    assert seed.epoch == 5
    assert seed.cursors == {"s": {"orders:0": 102, "orders:1": 202, "pay.ments:0": 0}}

    node = lake.output(record_of=record_of)  # the restarted node seals the lake after rebasing its control state
    node.seal(LakeRecord(PIPE, seed.epoch, seed.assignment_version, seed.cursors, IDS), facts.epoch)
    node.seal(LakeRecord(PIPE, seed.epoch, seed.assignment_version, seed.cursors, IDS), facts.epoch)  # idempotent
    table = node.table("orders")
    assert table.properties[seed_property(PIPE)] == "5" and committed_epoch(table, PIPE) == 5
    assert table.current_snapshot().summary.get("laminar.epoch") == "2"  # the data is as it was
    sealed = node.read_facts(PIPE, ["orders"])
    assert (sealed.epoch, sealed.high_epoch, sealed.rolled_back_from) == (2, 5, 0)
    after_seed = ControlFacts(seed, seed, 0)
    assert reconcile(PIPE, after_seed, sealed, IDS, OnLakeBehind.FAIL).action is Action.CONTINUE

    # epochs continue after the seed: 5 and below commit nothing, 6 commits
    lake.stage(5, rows("orders", 0, [55]))
    assert lake.publish(node, 5, oldest_epoch=5) == 0
    lake.stage(6, rows("orders", 0, [66]))
    assert lake.publish(node, 6, oldest_epoch=6) == 1
    table = node.table("orders")
    assert committed_epoch(table, PIPE) == 6 and table.current_snapshot().summary["laminar.epoch"] == "6"
    facts = lake.output().read_facts(PIPE, ["orders"])
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from) == (6, 6, 0)
    assert facts.cursors == {"s": {"orders:0": 106, "orders:1": 206}}


def test_seal_skips_tables_the_pipeline_never_committed_into(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = publish(lake, [1])
    other = Lake(tmp_path, pipeline="billing", settings=IcebergSettings(namespace=PIPE))
    publish(other, [1], topics=("pay.ments",))
    output.seal(LakeRecord(PIPE, 9, 0, {"s": {"orders:0": 1, "pay.ments:0": 1, "absent:0": 1}}, {}), 1)
    assert committed_epoch(output.table("orders"), PIPE) == 9
    payments = output.table("pay.ments")
    assert seed_property(PIPE) not in payments.properties and committed_epoch(payments, PIPE) == 0
    assert committed_epoch(payments, "billing") == 1
    assert output.read_facts(PIPE, ["absent"]) == LakeFacts(dense=False, where="iceberg tables (no record)")


def test_a_rollback_below_an_earlier_seed_is_seen_again(tmp_path: Path) -> None:
    """After a seal at 5 and commits 6, 7: a new rollback to 6 reports epoch 7 lost."""
    lake = Lake(tmp_path)
    output = publish(lake, [1, 2])
    roll_back(output, 1, "rollback_to_snapshot")
    output = lake.output(record_of=record_of)
    output.seal(LakeRecord(PIPE, 5, 0, cursors_of(1), IDS), 1)
    publish(lake, [6, 7], output=output)
    roll_back(output, 6, "set_current_snapshot")
    facts = lake.output().read_facts(PIPE, ["orders"])
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from) == (6, 7, 7)
