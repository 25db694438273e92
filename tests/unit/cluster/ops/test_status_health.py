"""`status` health: every rule of laminar_kafka.cluster.ops.health.assess, the rates, and the exit codes of the command
(collect_status replaced, no servers)."""
from __future__ import annotations

import io
import json
import threading
from dataclasses import replace

import pytest

from laminar_kafka.cli import main as cli
from laminar_kafka.cluster.errors import ClusterError, UsageError
from laminar_kafka.cluster.ops.health import Health, HealthCode, assess, partition_rates, unreachable
from laminar_kafka.cluster.ops.status import NodeStatus, PartitionStatus, PipelineStatus, build_status
from laminar_kafka.cluster.ops.status_watch import Watcher, render_text, watch
from laminar_kafka.coordinator.values import Manifest, Member
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot

NOW = 1_700_000_000.0


def node(node_id: int, *, live: bool = True, leader: bool = False, vnodes: int = 4) -> NodeStatus:
    return NodeStatus(node_id, f"boot-{node_id}" if live else "", live, leader, False, vnodes, ())


def part(name: str, durable: int | None, high: int, owner: int = 1) -> PartitionStatus:
    return PartitionStatus(name, owner, 0, durable, high)


def status(
    *,
    nodes: tuple[NodeStatus, ...] = (node(1, leader=True), node(2)),
    leader: int | None = 1,
    partitions: tuple[PartitionStatus, ...] = (part("t:0", 10, 10), part("t:1", 5, 5)),
    round_info: dict[str, object] | None = None,
    observed_at: float = NOW,
    manifest_age: float | None = 1.0,
) -> PipelineStatus:
    return PipelineStatus(
        pipeline="p", assignment_version=3, leader=leader, last_epoch=7, nodes=nodes, partitions=partitions,
        round=round_info, observed_at=observed_at,
        manifest_written_at=None if manifest_age is None else observed_at - manifest_age,
    )


def test_a_caught_up_pipeline_with_every_owner_live_and_a_leader_is_healthy() -> None:
    health = assess(status())
    assert health == Health(HealthCode.HEALTHY, ())
    assert health.to_json() == {"code": 0, "state": "healthy", "reasons": []}
    assert health.lines() == "health: healthy"


def test_an_owner_without_a_live_session_is_a_missing_member() -> None:
    health = assess(status(nodes=(node(1, leader=True), node(2, live=False, vnodes=128))))
    assert health.code is HealthCode.DEGRADED
    assert health.reasons == ("member missing: node 2 owns 128 vnodes but has no live session",)


def test_a_gone_node_that_owns_nothing_any_more_is_not_missing() -> None:
    assert assess(status(nodes=(node(1, leader=True), node(2, live=False, vnodes=0)))).code is HealthCode.HEALTHY


def test_no_leader_is_degraded() -> None:
    health = assess(status(leader=None, nodes=(node(1), node(2))))
    assert health.code is HealthCode.DEGRADED and health.reasons == ("no leader: no node holds the leader election",)


@pytest.mark.parametrize(("overdue", "code"), [(-30.0, 0), (0.0, 0), (4.9, 0), (6.0, 1), (600.0, 1)])
def test_a_round_past_its_deadline_plus_grace_is_stuck(overdue: float, code: int) -> None:
    round_info = {"drain_id": {}, "deadline_ms": int((NOW - overdue) * 1000), "participants": [1, 2]}
    health = assess(status(round_info=round_info), round_grace=5.0)
    assert int(health.code) == code
    if code:
        assert health.reasons[0].startswith("round stuck: the running round is")


def test_a_round_without_a_readable_deadline_is_not_judged() -> None:
    assert assess(status(round_info={"deadline_ms": "soon"})).code is HealthCode.HEALTHY


@pytest.mark.parametrize(("lag", "age", "code"), [
    (0, 3600.0, 0),    # nothing waits: an old manifest is an idle pipeline
    (50, 5.0, 0),      # records wait but an epoch committed recently
    (50, 10.0, 0),     # exactly at the limit
    (50, 10.5, 1),     # records wait and nothing became durable for longer than the limit
    (50, None, 0),     # no manifest time known: cannot tell from one observation
])
def test_durable_lag_with_a_stale_manifest_is_degraded(lag: int, age: float | None, code: int) -> None:
    observed = status(partitions=(part("t:0", 100, 100 + lag), part("t:1", 5, 5)), manifest_age=age)
    health = assess(observed, stale_after=10.0)
    assert int(health.code) == code
    if code:
        assert health.reasons == (f"durable lag growing: {lag} records wait and no epoch was committed for 10 s "
                                  "(limit 10 s)",)


def test_durable_lag_growing_between_two_observations_is_degraded() -> None:
    before = status(partitions=(part("t:0", 100, 120), part("t:1", 50, 50)), observed_at=NOW - 12, manifest_age=None)
    grown = status(partitions=(part("t:0", 100, 180), part("t:1", 50, 50)), manifest_age=None)
    health = assess(grown, before, stale_after=10.0)
    assert health.code is HealthCode.DEGRADED
    assert health.reasons == ("durable lag growing on 1 partition(s) (t:0): new records, no durable progress in 12 s",)


def test_durable_progress_or_no_new_records_or_a_short_window_is_not_growing() -> None:
    before = status(partitions=(part("t:0", 100, 120),), observed_at=NOW - 12, manifest_age=None)
    progressing = status(partitions=(part("t:0", 130, 180),), manifest_age=None)
    idle = status(partitions=(part("t:0", 100, 120),), manifest_age=None)
    assert assess(progressing, before, stale_after=10.0).code is HealthCode.HEALTHY
    assert assess(idle, before, stale_after=10.0).code is HealthCode.HEALTHY
    recent = replace(before, observed_at=NOW - 3)  # within one epoch's time: cannot tell a stall yet
    assert assess(status(partitions=(part("t:0", 100, 180),), manifest_age=None), recent,
                  stale_after=10.0).code is HealthCode.HEALTHY


def test_every_finding_is_reported() -> None:
    observed = status(nodes=(node(2, live=False),), leader=None, partitions=(part("t:0", 0, 9),), manifest_age=60.0,
                      round_info={"deadline_ms": int((NOW - 60) * 1000)})
    reasons = assess(observed).reasons
    assert [r.split(":")[0] for r in reasons] == ["member missing", "no leader", "round stuck", "durable lag growing"]


def test_unreachable_is_code_3_with_its_reason() -> None:
    """3, UNKNOWN as monitoring probes read it: 2 is argparse's (every command's) usage error."""
    health = unreachable("cannot reach Kafka at h:9092 within 10s")
    assert health.code is HealthCode.UNREACHABLE and int(health.code) == 3
    assert health.to_json() == {"code": 3, "state": "unreachable", "reasons": ["cannot reach Kafka at h:9092 within 10s"]}
    assert 2 not in {int(code) for code in HealthCode}


def test_rates_are_durable_cursor_advance_per_second() -> None:
    before = status(partitions=(part("t:0", 100, 500), part("t:1", None, 5)), observed_at=NOW - 4)
    after = status(partitions=(part("t:0", 300, 500), part("t:1", 5, 5), part("t:2", 0, 0)))
    assert partition_rates(after, before) == {"t:0": 50.0}
    assert partition_rates(after, None) == {} and partition_rates(after, after) == {}


def test_build_status_carries_the_observation_and_manifest_times() -> None:
    snapshot = AssignmentSnapshot.initial(4).next(1, [1, 1, 2, 2])
    manifest = Manifest(epoch=5, assignment_version=1, cursors={"kafka": {"t:0": 3}})
    built = build_status(pipeline="p", source_identity="kafka", members=[Member(1, "b1")], leader=1,
                         snapshot=snapshot, manifest=manifest, high_watermarks={("t", 0): 9},
                         observed_at=NOW, manifest_written_at=NOW - 30)
    assert built.manifest_age == 30 and built.total_durable_lag == 6
    assert {n.node_id: n.live for n in built.nodes} == {1: True, 2: False}
    health = assess(built)
    assert health.code is HealthCode.DEGRADED and len(health.reasons) == 2  # node 2 missing, lag with an old manifest
    assert built.to_json()["manifest_written_at"] == NOW - 30 and "30 s ago" in built.table()


# -- the watch loop ------------------------------------------------------------------------------


class Clock:
    """Observations 6 s apart: lag grows on t:0 while its durable cursor stays."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self) -> PipelineStatus:
        self.calls += 1
        if self.calls == self.fail_at:
            raise UsageError("cannot reach ZooKeeper at zk:2181 within 10s")
        return status(partitions=(part("t:0", 100, 100 + 50 * self.calls),), observed_at=NOW + 6 * self.calls,
                      manifest_age=None)


def test_the_watcher_judges_growth_against_an_observation_old_enough() -> None:
    watcher = Watcher(Clock(), stale_after=10.0)
    codes = [int(watcher.step().health.code) for _ in range(3)]
    assert codes == [0, 0, 1]  # 6 s apart: only the third has a baseline 12 s old


def test_watch_prints_one_json_line_per_observation_and_exits_with_the_last_code() -> None:
    out = io.StringIO()
    code = watch(Clock(fail_at=2), interval=0.01, as_json=True, stale_after=10.0, out=out, live=False,
                 max_observations=3)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    # the third is judged against the first (12 s older: the failed read in between is no baseline)
    assert [line["health"]["code"] for line in lines] == [0, 3, 1]
    assert lines[1]["health"]["reasons"] == ["cannot reach ZooKeeper at zk:2181 within 10s"]
    assert lines[2]["rates"] == {"t:0": 0.0} and lines[0]["pipeline"] == "p" and "pipeline" not in lines[1]
    assert code == 1


def test_watch_without_a_terminal_prints_a_table_per_interval_until_stopped() -> None:
    out = io.StringIO()
    stop = threading.Event()
    clock = Clock()

    def observe() -> PipelineStatus:
        if clock.calls == 3:
            stop.set()
        return clock()

    code = watch(observe, interval=0.01, as_json=False, stale_after=10.0, out=out, live=False, stop=stop)
    text = out.getvalue()
    assert text.count("== ") == 4 and text.count("records/s") == 4
    assert "health: degraded" in text and "durable lag growing on 1 partition(s) (t:0)" in text
    assert code == 1


def test_watch_live_renders_with_rich() -> None:
    pytest.importorskip("rich")
    out = io.StringIO()
    assert watch(Clock(), interval=0.01, as_json=False, out=out, live=True, max_observations=2) == 0
    assert "t:0" in out.getvalue() and "health: healthy" in out.getvalue()


def test_render_text_of_an_unreachable_observation() -> None:
    from laminar_kafka.cluster.ops.status_watch import Observation

    assert "health: unreachable\n  - down" in render_text(Observation(None, unreachable("down"), {}))


def test_watch_rejects_a_non_positive_interval() -> None:
    with pytest.raises(UsageError, match="--interval"):
        watch(Clock(), interval=0, as_json=True, out=io.StringIO(), live=False)


# -- the command's exit codes ----------------------------------------------------------------------


STATUS_ARGS = ["status", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--zk", "127.0.0.1:2"]


@pytest.mark.parametrize(("observed", "code"), [
    (status(), 0),
    (status(leader=None), 1),
    (status(nodes=(node(1, leader=True), node(2, live=False))), 1),
])
def test_status_exits_0_healthy_1_degraded(observed: PipelineStatus, code: int, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("laminar_kafka.cluster.ops.status.collect_status", lambda **kwargs: observed)
    assert cli.main([*STATUS_ARGS, "--json"]) == code
    body = json.loads(capsys.readouterr().out)
    assert body["health"]["code"] == code and body["pipeline"] == "p"
    assert cli.main(STATUS_ARGS) == code
    assert f"health: {['healthy', 'degraded'][code]}" in capsys.readouterr().out


@pytest.mark.parametrize("error", [UsageError("cannot reach Kafka at 127.0.0.1:1 within 10s"),
                                   ClusterError("high watermark of t:0 unavailable: timed out")])
def test_status_exits_3_when_a_server_cannot_be_read(error: Exception, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def fail(**kwargs: object) -> PipelineStatus:
        raise error

    monkeypatch.setattr("laminar_kafka.cluster.ops.status.collect_status", fail)
    assert cli.main(STATUS_ARGS) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(error).split(":")[0] in err


def test_status_usage_errors_stay_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong flag, or no ZooKeeper hosts nor state directory from any source, is a usage error."""
    for name in ("LAMINAR_ZK", "LAMINAR_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main([*STATUS_ARGS, "--no-such-flag"]) == 2
    assert cli.main(["status", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--zk, LAMINAR_ZK" in capsys.readouterr().err


def test_status_passes_zookeeper_credentials_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, object] = {}

    def collect(**kwargs: object) -> PipelineStatus:
        seen.update(kwargs)
        return status()

    monkeypatch.setattr("laminar_kafka.cluster.ops.status.collect_status", collect)
    monkeypatch.setenv("LAMINAR_ZK_AUTH", "laminar:s3cret-pw")
    assert cli.main(STATUS_ARGS) == 0
    credentials = seen["credentials"]
    assert credentials is not None and credentials.kazoo_auth_data() == [("digest", "laminar:s3cret-pw")]  # type: ignore[attr-defined]
    assert "s3cret-pw" not in capsys.readouterr().out


def test_a_nodes_partitions_show_as_runs_per_topic() -> None:
    from laminar_kafka.cluster.ops.status import partition_ranges

    assert partition_ranges([f"orders:{p}" for p in range(1000)]) == "orders:0-999"
    assert partition_ranges(["b.x:0", "orders:9", "orders:3", "orders:0", "orders:1", "orders:2", "orders:5",
                             "orders:7", "orders:8", "a-b:c:2"]) == "a-b:c:2 b.x:0 orders:0-3,5,7-9"
    assert partition_ranges([]) == ""
    scattered = [f"orders:{p}" for p in range(0, 1000, 3)]
    assert partition_ranges(scattered, 100) == partition_ranges(scattered)[:partition_ranges(scattered).rfind(
        ",", 0, 100)] + ",... (--json lists all)"
    assert len(partition_ranges(scattered, 100)) <= 100 + len(",... (--json lists all)")
    assert partition_ranges(["orders:1", "orders:2"], 100) == "orders:1-2"
