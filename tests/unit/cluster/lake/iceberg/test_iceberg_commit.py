"""IcebergOutput.publish: one Iceberg commit per committed epoch and table, exactly once."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import ServerError

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput, committed_epoch, epoch_property
from laminar_kafka.cluster.lake.iceberg.partitions import partition_spec_of
from laminar_kafka.cluster.lake.iceberg.retries import RetryPolicy
from laminar_kafka.cluster.lake.iceberg.tables import (
    data_file_count,
    iceberg_schema_of,
    load_table_or_none,
    read_offsets,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import IcebergSettings, TableLocation
from laminar_kafka.coordinator.errors import CoordinatorUnavailable
from tests.unit.cluster.iceberg_fakes import DAY_1, DAY_2, Lake, offsets_of, rows


def epochs_of_snapshots(output: IcebergOutput, topic: str = "orders") -> list[str]:
    table = output.table(topic)
    return [snapshot.summary["laminar.epoch"] for snapshot in table.snapshots()
            if snapshot.summary and "laminar.epoch" in snapshot.summary.additional_properties]


def test_an_epoch_with_files_of_two_nodes_is_one_commit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(0, 5)), node=1)
    lake.stage(1, rows("orders", 1, range(0, 3)), node=2)
    rejected = lake.stage(1, rows("orders", 0, [99]), directory="_rejected")
    output = lake.output()
    with caplog.at_level(logging.DEBUG):
        assert lake.publish(output, 1) == 1
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 1
    assert table.properties[epoch_property("pipe")] == "1"
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["laminar.pipeline"] == "pipe" and snapshot.summary["laminar.epoch"] == "1"
    assert len(table.snapshots()) == 1
    assert offsets_of(read_offsets(table)) == sorted(
        [("orders", 0, o) for o in range(5)] + [("orders", 1, o) for o in range(3)])
    assert data_file_count(table) == 2
    assert table.location() == f"{lake.root}/orders"
    assert (tmp_path / "out" / "orders" / "metadata").is_dir()
    assert (tmp_path / "out" / rejected.removeprefix("_staging/")).exists()  # published, in no table
    assert not any("dictionary type" in record.getMessage() for record in caplog.records)


@dataclass
class Heard:
    """A CommitListener that remembers what it heard, by table (durations are checked, then dropped)."""

    commits: list[str] = field(default_factory=list)
    lost_races: list[str] = field(default_factory=list)
    no_ops: list[str] = field(default_factory=list)

    def committed(self, table: str, seconds: float) -> None:
        assert 0 <= seconds < 60
        self.commits.append(table)

    def lost_race(self, table: str) -> None:
        self.lost_races.append(table)

    def found_done(self, table: str) -> None:
        self.no_ops.append(table)


def test_publishing_again_from_any_node_commits_nothing(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(3)))
    heard_first, heard_second = Heard(), Heard()
    first, second = lake.output(commit_listener=heard_first), lake.output(commit_listener=heard_second)
    assert lake.publish(first, 1) == 1
    assert lake.publish(first, 1) == 0  # known done: the catalog is not even asked
    assert lake.publish(second, 1) == 0
    assert heard_first == Heard(commits=["pipe.orders"])
    assert heard_second == Heard(no_ops=["pipe.orders"])  # the other node's no-op
    table = first.table("orders")
    assert len(table.snapshots()) == 1
    assert len(read_offsets(table)) == 3


def test_a_later_epoch_first_commits_the_earlier_ones_in_order(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lake = Lake(tmp_path)
    for epoch in (1, 2, 4, 5):
        lake.stage(epoch, rows("orders", 0, range(epoch * 10, epoch * 10 + 2)))
    lake.manifests[3] = ()  # epoch 3 holds no file of the table
    del lake.manifests[4]  # ... and manifest 4 was collected: skipped with a warning
    output = lake.output()
    with caplog.at_level(logging.WARNING):
        assert lake.publish(output, 5) == 3
    assert epochs_of_snapshots(output) == ["1", "2", "5"]
    assert "manifest of epoch 4 is unknown" in caplog.text
    assert lake.publish(output, 1) == 0 and lake.publish(output, 2) == 0


def test_a_manifest_the_coordinator_cannot_read_now_is_not_skipped(tmp_path: Path) -> None:
    """Unreadable (the coordinator's session expired) is not gone: the catch-up stops, commits
    nothing past the gap, and a later publish commits every epoch in order."""
    lake = Lake(tmp_path)
    for epoch in (1, 2, 3):
        lake.stage(epoch, rows("orders", 0, [epoch]))
    output = lake.output()

    def session_expired(epoch: int) -> tuple[str, ...] | None:
        if epoch == 2:
            raise CoordinatorUnavailable("manifest 2 cannot be read now")
        return lake.manifest_outputs(epoch)

    with pytest.raises(CoordinatorUnavailable):
        output.publish(3, lake.manifests[3], session_expired, 1)
    table = load_table_or_none(output.catalog, output.identifier("orders"))
    assert table is None or committed_epoch(table, "pipe") < 2
    assert lake.publish(output, 3) >= 2
    assert epochs_of_snapshots(output) == ["1", "2", "3"]


def test_oldest_epoch_bounds_the_catch_up(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    for epoch in (1, 2, 3):
        lake.stage(epoch, rows("orders", 0, [epoch]))
    output = lake.output()
    assert lake.publish(output, 3, oldest_epoch=3) == 1
    assert epochs_of_snapshots(output) == ["3"]


@pytest.mark.parametrize("created_elsewhere", [False, True])
def test_a_commit_that_loses_the_race_retries_and_adds_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, created_elsewhere: bool,
) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(4)))
    if created_elsewhere:  # without commit.retry.num-retries=0: pyiceberg would re-add the files
        catalog = lake.output().catalog
        catalog.create_namespace("pipe")
        schema = iceberg_schema_of(rows("orders", 0, [0]).schema)
        catalog.create_table(("pipe", "orders"), schema=schema, location=f"{lake.root}/orders",
                             partition_spec=partition_spec_of(lake.partitioning, schema))
    lake.publish(lake.output(), 1)
    lake.stage(2, rows("orders", 0, range(4, 8)), node=1)
    lake.stage(2, rows("orders", 1, range(0, 2)), node=2)
    heard_slow, heard_fast = Heard(), Heard()
    slow, fast = lake.output(commit_listener=heard_slow), lake.output(commit_listener=heard_fast)
    original = IcebergOutput._commit_epoch
    raced: list[int] = []

    def commit_after_the_other_node(self, table, topic, epoch, files):  # type: ignore[no-untyped-def]
        if self is slow and not raced:
            raced.append(lake.publish(fast, 2))  # the other node commits epoch 2 first
        return original(self, table, topic, epoch, files)

    monkeypatch.setattr(IcebergOutput, "_commit_epoch", commit_after_the_other_node)
    assert lake.publish(slow, 2) == 0  # its commit failed, the retry saw epoch 2 committed
    assert raced == [1]
    assert heard_slow == Heard(lost_races=["pipe.orders"], no_ops=["pipe.orders"])
    assert heard_fast == Heard(commits=["pipe.orders"])
    table = slow.table("orders")
    assert epochs_of_snapshots(slow) == ["1", "2"]
    assert offsets_of(read_offsets(table)) == sorted(
        [("orders", 0, o) for o in range(8)] + [("orders", 1, o) for o in range(2)])


@pytest.mark.parametrize("landed", [False, True])
def test_a_catalog_connection_lost_during_a_commit_is_retried_and_adds_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, landed: bool,
) -> None:
    """The REST catalog restarted or reset mid-commit (the chaos campaign's catalog-restart and
    catalog-unreachable: the node used to exit on requests' ConnectionError): the commit is retried;
    when it had landed and only its answer was lost, the reload finds the epoch and adds nothing."""
    import requests

    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(5)))
    heard = Heard()
    output = lake.output(commit_listener=heard)
    original = IcebergOutput._commit_epoch
    dropped: list[int] = []

    def drop_the_answer(self, table, topic, epoch, files):  # type: ignore[no-untyped-def]
        if not dropped:
            dropped.append(epoch)
            if landed:
                original(self, table, topic, epoch, files)
            raise requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected(...))")
        return original(self, table, topic, epoch, files)

    monkeypatch.setattr(IcebergOutput, "_commit_epoch", drop_the_answer)
    with caplog.at_level(logging.WARNING):
        assert lake.publish(output, 1) == (0 if landed else 1)
    assert dropped == [1]
    assert "iceberg catalog unavailable while publishing epoch 1 into pipe.orders" in caplog.text
    assert epochs_of_snapshots(output) == ["1"]
    assert offsets_of(read_offsets(output.table("orders"))) == [("orders", 0, o) for o in range(5)]
    assert heard.lost_races == [], "an unreachable catalog is no lost race"
    assert heard.no_ops == (["pipe.orders"] if landed else [])  # the retry found its own commit


def test_a_catalog_unreachable_past_the_deadline_is_one_sink_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyiceberg.exceptions import ServerError

    from laminar_kafka.cluster.lake.iceberg.retries import RetryPolicy

    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(2)))
    output = lake.output()
    output.retry = RetryPolicy(attempts=3, deadline_s=5.0, base_delay_s=0.001, max_delay_s=0.01)

    def unavailable(self, table, topic, epoch, files):  # type: ignore[no-untyped-def]
        raise ServerError("UncheckedSQLException: Unknown failure")

    monkeypatch.setattr(IcebergOutput, "_commit_epoch", unavailable)
    with pytest.raises(SinkError, match=r"iceberg commit of epoch 1 into pipe.orders kept failing after 3 attempt"):
        lake.publish(output, 1)


def test_a_first_commit_into_a_table_created_elsewhere_adds_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table created by someone else (a catalog that places tables itself needs one) lacks
    commit.retry.num-retries=0: a node's first commit sets it in a property-only commit, whose answer
    is the table as it is now. When another node committed the epoch meanwhile, the node must see it
    there and add nothing (found by three nodes on SeaweedFS's catalog)."""
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(4)), node=1)
    lake.stage(1, rows("orders", 1, range(2)), node=2)
    catalog = lake.output().catalog
    catalog.create_namespace("pipe")
    schema = iceberg_schema_of(rows("orders", 0, [0]).schema)
    catalog.create_table(("pipe", "orders"), schema=schema, location=f"{lake.root}/orders",
                         partition_spec=partition_spec_of(lake.partitioning, schema))
    slow, fast = lake.output(), lake.output()
    original = IcebergOutput._commit_epoch
    raced: list[int] = []

    def commit_after_the_other_node(self, table, topic, epoch, files):  # type: ignore[no-untyped-def]
        if self is slow and not raced:  # `table` was loaded before the other node's commit
            raced.append(lake.publish(fast, 1))
        return original(self, table, topic, epoch, files)

    monkeypatch.setattr(IcebergOutput, "_commit_epoch", commit_after_the_other_node)
    assert lake.publish(slow, 1) == 0
    assert raced == [1]
    assert epochs_of_snapshots(slow) == ["1"]
    assert offsets_of(read_offsets(slow.table("orders"))) == sorted(
        [("orders", 0, o) for o in range(4)] + [("orders", 1, o) for o in range(2)])


def test_files_already_published_before_a_crash_are_committed(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    staged = lake.stage(1, rows("orders", 0, range(3)))
    from tests.unit.cluster.iceberg_fakes import layout_publish

    layout_publish(lake.fs, lake.root, [staged])  # renamed, then the node died before the commit
    output = lake.output()
    assert lake.publish(output, 1) == 1
    assert len(read_offsets(output.table("orders"))) == 3


def test_topics_land_in_their_own_tables(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(2)), topic="orders")
    lake.stage(1, rows("pay.ments", 0, range(3)), topic="pay.ments")
    output = lake.output()
    assert lake.publish(output, 1) == 2
    assert output.identifier("pay.ments") == ("pipe", "pay_ments")
    assert len(read_offsets(output.table("pay.ments"))) == 3
    assert output.table("pay.ments").location() == f"{lake.root}/pay.ments"


def test_new_columns_and_wider_types_evolve_the_table(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, [0], n=pa.array([1], pa.int32())))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, rows("orders", 0, [1], n=pa.array([2**40], pa.int64()), note=pa.array(["new"])))
    assert lake.publish(output, 2) == 1
    table = output.table("orders")
    assert str(table.schema().find_field("n").field_type) == "long"
    assert str(table.schema().find_field("note").field_type) == "string"
    data = table.scan(selected_fields=("_offset", "n", "note")).to_arrow().sort_by("_offset").to_pylist()
    assert data == [{"_offset": 0, "n": 1, "note": None}, {"_offset": 1, "n": 2**40, "note": "new"}]


def _required(table: pa.Table) -> pa.Table:
    """``table`` with every field, nested ones too, required (as a registry schema's fields are)."""
    def required(field: pa.Field) -> pa.Field:
        if pa.types.is_struct(field.type):
            field = field.with_type(pa.struct([required(child) for child in field.type]))
        return field.with_nullable(False)
    return table.cast(pa.schema([required(f) for f in table.schema]))


def test_a_new_required_field_is_added_as_an_optional_column(tmp_path: Path) -> None:
    """A registry schema's new field with a default is required in the files; Iceberg can only add
    an optional column (the rows already committed have no value): the table takes it as optional."""
    lake = Lake(tmp_path)
    customer = pa.array([{"name": "a"}], pa.struct([("name", pa.string())]))
    lake.stage(1, _required(rows("orders", 0, [0], customer=customer)))
    output = lake.output()
    lake.publish(output, 1)
    evolved = pa.array([{"name": "b", "tier": 2}], pa.struct([("name", pa.string()), ("tier", pa.int64())]))
    lake.stage(2, _required(rows("orders", 0, [1], customer=evolved, channel=pa.array(["app"]))))
    assert lake.publish(output, 2) == 1
    schema = output.table("orders").schema()
    assert schema.find_field("channel").optional and schema.find_field("customer.tier").optional
    assert schema.find_field("customer.name").required and schema.find_field("_offset").required
    data = output.table("orders").scan(selected_fields=("_offset", "channel", "customer")).to_arrow()
    assert data.sort_by("_offset").to_pylist() == [
        {"_offset": 0, "channel": None, "customer": {"name": "a", "tier": None}},
        {"_offset": 1, "channel": "app", "customer": {"name": "b", "tier": 2}},
    ]


def test_a_file_the_table_cannot_take_commits_nothing(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, [0], amount=pa.array(["12.5"])))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, rows("orders", 0, [1]), node=1)
    lake.stage(2, rows("orders", 0, [2], amount=pa.array([12], pa.int64())), node=2)
    with pytest.raises(SinkError, match=r"pipe\.orders .*column amount is string .* but long"):
        lake.publish(output, 2)
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 1
    assert len(table.snapshots()) == 1


@pytest.mark.parametrize(("granularity", "partitions"), [
    (PartitionSpec.parse("day"), {"_timestamp_day"}),
    (PartitionSpec.parse("hour"), {"_timestamp_hour"}),
    (PartitionSpec(), set()),
])
def test_partition_spec_follows_the_granularity(tmp_path: Path, granularity: PartitionSpec,
                                                partitions: set[str]) -> None:
    lake = Lake(tmp_path, partitioning=granularity)
    lake.stage(1, rows("orders", 0, [0, 1], when=DAY_1))
    lake.stage(1, rows("orders", 0, [2], when=DAY_2))
    lake.stage(1, rows("orders", 0, [3], when=None))
    output = lake.output()
    lake.publish(output, 1)
    table = output.table("orders")
    assert {field.name for field in table.spec().fields} == partitions
    files = list(table.scan().plan_files())
    assert len(files) == 3
    if granularity == PartitionSpec.parse("day"):
        days = sorted((task.file.partition[0] for task in files), key=lambda d: (d is None, d))
        assert days == [20454, 20455, None]
    assert len(read_offsets(table)) == 4


def test_the_sinks_own_layout_and_publish(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from laminar_kafka.cluster.lake.staged_names import OutputStream, StagedName

    lake = Lake(tmp_path)
    staged_rows = StagedName(1, 1, "b", 1, directory="orders/dt=2026-01-01").staged_path()
    staged_rejected = StagedName(1, 1, "b", 2, OutputStream.REJECTED).staged_path()
    for relative, table in ((staged_rows, rows("orders", 0, range(4))), (staged_rejected, rows("orders", 0, [9]))):
        (tmp_path / "out" / relative).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "out" / relative)
    output = IcebergOutput(lake.settings, lake.partitioning, "pipe", lake.root, lake.fs, lake.root)  # the defaults
    assert output.publish(1, (staged_rows, staged_rejected), {}.get, 1) == 1
    table = output.table("orders")
    assert [task.file.file_path for task in table.scan().plan_files()] == [
        f"{lake.root}/orders/dt=2026-01-01/epoch-0000000001.node-1.boot-b.seq-00000001.parquet"]
    assert len(read_offsets(table)) == 4
    assert (tmp_path / "out" / "_rejected" / "epoch-0000000001.node-1.boot-b.seq-00000002.parquet").exists()
    assert not (tmp_path / "out" / staged_rejected).exists()  # published as a plain file, in no table


def test_an_epoch_without_files_still_finishes_an_earlier_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import laminar_kafka.cluster.lake.iceberg.commit as iceberg_commit

    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(2)))
    lake.stage(2, rows("orders", 0, range(2, 4)))  # manifest 2 is durable, its Iceberg commit never ran
    lake.manifests[3] = ()
    first = lake.output()
    lake.publish(first, 1)
    restarted = lake.output()
    restarted.check(["orders"], None)
    assert lake.publish(restarted, 3) == 1  # epoch 3 holds no rows, yet epoch 2 lands
    assert epochs_of_snapshots(restarted) == ["1", "2"]
    loads: list[object] = []
    original = iceberg_commit.load_table_or_none
    monkeypatch.setattr(iceberg_commit, "load_table_or_none", lambda *a: loads.append(a) or original(*a))
    lake.manifests[4] = ()
    assert lake.publish(restarted, 4) == 0
    assert loads == []  # nothing pending: the catalog is not asked
    lake.stage(5, rows("orders", 0, [4]))
    assert lake.publish(restarted, 5) == 1 and len(loads) == 1


def test_a_timestamp_past_year_9999_in_a_payload_column_is_one_clear_sink_error(tmp_path: Path) -> None:
    """pyiceberg reads timestamp statistics as datetime; the source rejects such a _timestamp, but a
    payload column may hold one: the commit fails with a SinkError naming the cause, not a traceback."""
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(2), seen_at=pa.array([253_402_300_800_000] * 2, pa.timestamp("ms"))))
    with pytest.raises(SinkError, match=r"iceberg table pipe\.orders: OverflowError.*outside years 1-9999"):
        lake.publish(lake.output(), 1)


def test_a_table_the_catalog_places_keeps_the_lakes_data_files(tmp_path: Path) -> None:
    """``table-location=catalog``: the node creates the table without a location (the SQL catalog
    puts it in its warehouse, ``<warehouse>/<namespace>/<table>``); the data files stay the lake's."""
    lake = Lake(tmp_path, settings=IcebergSettings(namespace="pipe", table_location=TableLocation.CATALOG))
    lake.stage(1, rows("orders", 0, range(3)))
    lake.stage(2, rows("orders", 1, range(2)))
    output = lake.output()
    assert lake.publish(output, 2) == 2
    table = output.table("orders")
    assert table.location() == f"{lake.root}/pipe/orders"
    assert all(task.file.file_path.startswith(f"{lake.root}/orders/dt=") for task in table.scan().plan_files())
    assert offsets_of(read_offsets(table)) == sorted([("orders", 0, o) for o in range(3)] + [("orders", 1, o) for o in range(2)])


def test_a_node_whose_turn_it_is_not_commits_only_up_to_the_epoch_before(tmp_path: Path) -> None:
    """Taking turns: node A has epoch 2's turn, node B (``tables_through=1``) commits epoch 1 only,
    which its committer had not (it died first, say): B catches it up one epoch late. A commits 2 in
    its turn, B 3 in its own; A, through 2, has nothing left to do: no race, each epoch one commit."""
    lake = Lake(tmp_path)
    for epoch in (1, 2, 3):
        lake.stage(epoch, rows("orders", 0, [epoch]))
    heard_a, heard_b = Heard(), Heard()
    a, b = lake.output(commit_listener=heard_a), lake.output(commit_listener=heard_b)
    assert b.publish(2, lake.manifests[2], lake.manifest_outputs, 1, tables_through=1) == 1
    assert epochs_of_snapshots(b) == ["1"]
    assert a.publish(2, lake.manifests[2], lake.manifest_outputs, 1) == 1  # its turn: epoch 2
    assert b.publish(3, lake.manifests[3], lake.manifest_outputs, 1) == 1  # its turn: epoch 3
    assert a.publish(3, lake.manifests[3], lake.manifest_outputs, 1, tables_through=2) == 0  # knows 2 is in
    assert epochs_of_snapshots(a) == ["1", "2", "3"]
    assert heard_a == Heard(commits=["pipe.orders"])
    assert heard_b == Heard(commits=["pipe.orders", "pipe.orders"])
    assert offsets_of(read_offsets(a.table("orders"))) == [("orders", 0, 1), ("orders", 0, 2), ("orders", 0, 3)]


def test_tables_through_before_the_first_epoch_commits_nothing(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, [1]))
    output = lake.output()
    assert output.publish(1, lake.manifests[1], lake.manifest_outputs, 1, tables_through=0) == 0
    assert load_table_or_none(output.catalog, output.identifier("orders")) is None


def _two_epochs_one_published(tmp_path: Path) -> tuple[Lake, IcebergOutput]:
    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, range(4)))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, rows("orders", 0, range(4, 8)), node=1)
    lake.stage(2, rows("orders", 1, range(2)), node=2)
    return lake, output


EXACT_AFTER_TWO = sorted([("orders", 0, o) for o in range(8)] + [("orders", 1, o) for o in range(2)])


@pytest.mark.parametrize("away", [
    requests.exceptions.ConnectionError("HTTPConnectionPool(host='catalog', port=8181): Connection refused"),
    requests.exceptions.ReadTimeout("read timed out"),
    ServerError("503 Service Unavailable"),
], ids=["refused", "timeout", "5xx"])
def test_a_catalog_restarting_during_a_publish_is_ridden_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, away: Exception,
) -> None:
    """Found by the production compose: a REST catalog restarting for a few seconds made every node
    crash with a traceback (requests' ConnectionError went through the commit loop); they ride it out now."""
    import laminar_kafka.cluster.lake.iceberg.commit as iceberg_commit

    lake, output = _two_epochs_one_published(tmp_path)
    failures = [away, away, away]
    original = iceberg_commit.load_table_or_none

    def restarting(*args):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return original(*args)

    monkeypatch.setattr(iceberg_commit, "load_table_or_none", restarting)
    with caplog.at_level(logging.WARNING, logger="laminar_kafka.cluster.lake.iceberg.commit"):
        assert lake.publish(output, 2) == 1
    assert failures == []
    assert epochs_of_snapshots(output) == ["1", "2"]
    assert offsets_of(read_offsets(output.table("orders"))) == EXACT_AFTER_TWO
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "catalog unavailable while publishing epoch 2" in warnings[0], warnings


@pytest.mark.parametrize("landed", [False, True])
def test_an_object_store_failing_a_read_during_a_commit_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, landed: bool,
) -> None:
    """Found by CI's lake chaos (store-restart): a pooled connection to the restarted store failed
    pyiceberg's read of a data file's footer inside the commit (an OSError, "curlCode: 56"), and the
    node exited with a traceback. The commit is retried; one whose answer was lost adds nothing twice."""
    import laminar_kafka.cluster.lake.iceberg.commit as iceberg_commit

    lake, output = _two_epochs_one_published(tmp_path)
    original = iceberg_commit.append_data_files
    failed: list[int] = []

    def store_blip(transaction, paths, summary):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(1)
            if not landed:
                raise OSError("When getting information for key 'x.parquet' in bucket 'lake': AWS Error "
                              "NETWORK_CONNECTION during HeadObject operation: curlCode: 56")
        original(transaction, paths, summary)

    monkeypatch.setattr(iceberg_commit, "append_data_files", store_blip)
    with caplog.at_level(logging.WARNING, logger="laminar_kafka.cluster.lake.iceberg.commit"):
        assert lake.publish(output, 2) == 1
    assert failed == [1]
    assert epochs_of_snapshots(output) == ["1", "2"]
    assert offsets_of(read_offsets(output.table("orders"))) == EXACT_AFTER_TWO
    if not landed:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "object store unavailable while publishing epoch 2" in warnings[0], warnings


def test_a_missing_data_file_during_a_commit_is_one_sink_error_not_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import laminar_kafka.cluster.lake.iceberg.commit as iceberg_commit

    lake, output = _two_epochs_one_published(tmp_path)
    calls: list[int] = []

    def gone(transaction, paths, summary):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise FileNotFoundError(paths[0])

    monkeypatch.setattr(iceberg_commit, "append_data_files", gone)
    with pytest.raises(SinkError, match=r"cannot add epoch 2's files to iceberg table pipe\.orders"):
        lake.publish(output, 2)
    assert calls == [1]


def test_a_catalog_away_past_the_retry_policy_is_one_sink_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import laminar_kafka.cluster.lake.iceberg.commit as iceberg_commit

    lake, output = _two_epochs_one_published(tmp_path)
    output.retry = RetryPolicy(attempts=3, deadline_s=10.0, base_delay_s=0.001, max_delay_s=0.001)

    def gone(*args):  # type: ignore[no-untyped-def]
        raise requests.exceptions.ConnectionError("Connection refused")

    monkeypatch.setattr(iceberg_commit, "load_table_or_none", gone)
    with pytest.raises(SinkError, match=r"epoch 2 into pipe\.orders kept failing after 3 attempt\(s\).*ConnectionError"):
        lake.publish(output, 2)
    monkeypatch.undo()
    assert epochs_of_snapshots(output) == ["1"]  # nothing half done: the next publish lands it
    assert lake.publish(output, 2) == 1


def test_a_spec_evolved_under_the_pipeline_stops_the_commit_instead_of_mislabelling_files(tmp_path: Path) -> None:
    """An operator adds a partition field while the pipeline runs: the next epoch's files were split
    by the pipeline's spec, so under the new one a file's rows may span partitions and its first row
    would label it wrongly (readers pruning by it would miss rows). The commit stops, naming both."""
    from pyiceberg.transforms import IdentityTransform

    lake = Lake(tmp_path)
    lake.stage(1, rows("orders", 0, [0, 1], when=DAY_1))
    output = lake.output()
    lake.publish(output, 1)
    with output.table("orders").update_spec() as update:
        update.add_field("_partition", IdentityTransform(), "by_partition")
    lake.stage(2, rows("orders", 0, [2], when=DAY_1))
    with pytest.raises(SinkError, match=r"cannot add epoch 2's files: iceberg table pipe\.orders is partitioned by "
                                        r"day\(_timestamp\), identity\(_partition\), but setting partition-by is day"):
        lake.publish(output, 2)
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 1 and len(read_offsets(table)) == 2
