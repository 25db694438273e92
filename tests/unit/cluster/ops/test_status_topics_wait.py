"""`status` without `--topic` shows the pipeline's pinned topics; where its control state and
settings come from (file, environment, flags); `--wait` until caught up (no server, no clock); the
live view of every verdict."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from laminar_kafka.cli import main as cli
from laminar_kafka.cli.main import status_target
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.lake.pins import pin_name
from laminar_kafka.cluster.ops import status
from laminar_kafka.cluster.ops.health import Health, HealthCode, assess, unreachable
from laminar_kafka.cluster.ops.status import PartitionStatus, PipelineStatus
from laminar_kafka.cluster.ops.status_kafka import _selected, status_topics
from laminar_kafka.cluster.ops.status_wait import caught_up, wait_caught_up
from laminar_kafka.cluster.ops.status_watch import Observation, render_rich
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.local.store import LocalStore
from laminar_kafka.coordinator.values import Member
from laminar_kafka.kafka_source.config.topics import TopicSelector
from tests.unit.cluster.ops.test_status_health import part
from tests.unit.cluster.ops.test_status_health import status as observed
from tests.unit.cluster.ops.test_status_store import CONFIG
from tests.unit.coordinator.partitions import PARTITIONS, SOURCE, TOPIC, commit_first_epoch

# -- which topics ----------------------------------------------------------------------------------


def test_the_topics_asked_for_win_over_the_pinned_ones() -> None:
    assert status_topics(("a", "b"), "orders", "p") == ("a", "b")
    assert status_topics((), "a,b", "p") == ("a", "b")
    assert status_topics((), "re:orders-.*", "p") == ("re:orders-.*",)
    with pytest.raises(UsageError, match="pipeline 'p' has no pinned topics yet .*--topic"):
        status_topics((), None, "p")


def test_a_pattern_selects_the_matching_topics_but_internal_ones() -> None:
    available = ["orders-eu", "__consumer_offsets", "orders-us", "payments"]
    assert _selected(TopicSelector.parse("re:orders-.*"), available) == ["orders-eu", "orders-us"]
    assert _selected(TopicSelector.parse("re:.*"), available) == ["orders-eu", "orders-us", "payments"]
    assert _selected(TopicSelector.parse("b,a"), available) == ["b", "a"]  # names as given, checked by Kafka


def test_the_control_view_carries_the_pinned_topic_setting(tmp_path: Path) -> None:
    store = MemoryStore()
    commit_first_epoch(store, CONFIG, Member(1, "b1"))
    assert status._control_view(store).topics_pin is None
    store.pin_setting(pin_name("topic"), "orders")
    assert status._control_view(store).topics_pin == "orders"
    writer = LocalStore(tmp_path)
    writer.recover()
    commit_first_epoch(writer, CONFIG, Member(1, "b1"))
    writer.pin_setting(pin_name("topic"), "re:ord.*")
    assert status._read_state_dir(str(tmp_path)).topics_pin == "re:ord.*"


def test_collect_status_without_topics_reads_the_pinned_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = LocalStore(tmp_path)
    writer.recover()
    commit_first_epoch(writer, CONFIG, Member(1, "b1"), offset=5)
    asked: list[tuple[str, ...]] = []

    def read_kafka(kafka: object, topics: tuple[str, ...], timeout: float) -> dict[tuple[str, int], int]:
        asked.append(tuple(topics))
        return {(TOPIC, p): 9 for p in PARTITIONS}

    monkeypatch.setattr(status, "read_kafka", read_kafka)

    def collect() -> PipelineStatus:
        return status.collect_status(topics=(), zk=None, state_dir=str(tmp_path), pipeline="s",
                                     source_identity=SOURCE, bootstrap="localhost:9092")

    with pytest.raises(UsageError, match="no pinned topics"):
        collect()
    writer.pin_setting(pin_name("topic"), TOPIC)
    assert collect().last_epoch == 1 and asked == [(TOPIC,)]


# -- where the pipeline is ---------------------------------------------------------------------------


def test_the_control_target_comes_from_file_then_environment_then_flags() -> None:
    none = {"zk": None, "state-dir": None, "pipeline": None}
    assert status_target(none, {"LAMINAR_ZK": "z:2181"}, {}) == ("z:2181", None, "default")
    assert status_target(none, {"LAMINAR_ZK": "z:2181", "LAMINAR_PIPELINE": "orders"}, {"pipeline": "x"}) == \
        ("z:2181", None, "orders")
    assert status_target({**none, "zk": "f:1"}, {"LAMINAR_ZK": "z:2181"}, {"zk": "c:1"}) == ("f:1", None, "default")
    assert status_target(none, {}, {"zk": "c:1", "pipeline": "p"}) == ("c:1", None, "p")
    # ZooKeeper mode with node-id auto has a state directory too: the hosts win, unless the flag says
    assert status_target(none, {"LAMINAR_ZK": "z:1", "LAMINAR_STATE_DIR": "/s"}, {}) == ("z:1", None, "default")
    assert status_target({**none, "state-dir": "/e"}, {"LAMINAR_ZK": "z:1"}, {}) == (None, "/e", "default")
    assert status_target(none, {}, {"state_dir": "/e"}) == (None, "/e", "default")
    with pytest.raises(UsageError, match="--zk, LAMINAR_ZK"):
        status_target(none, {"LAMINAR_PIPELINE": "p"}, {})


def test_status_as_the_readme_prints_it_reads_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, object] = {}

    def collect(**kwargs: object) -> PipelineStatus:
        seen.update(kwargs)
        return observed()

    monkeypatch.setattr("laminar_kafka.cluster.ops.status.collect_status", collect)
    monkeypatch.setenv("LAMINAR_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("LAMINAR_ZK", "127.0.0.1:2")
    monkeypatch.delenv("LAMINAR_STATE_DIR", raising=False)
    assert cli.main(["status", "--pipeline", "orders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["health"]["code"] == 0
    assert seen["zk"] == "127.0.0.1:2" and seen["state_dir"] is None and seen["pipeline"] == "orders"
    assert seen["topics"] == ()


# -- --wait ----------------------------------------------------------------------------------------


class Clock:
    """A clock that the sleeps advance."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_caught_up_is_healthy_with_every_partition_at_its_high_watermark() -> None:
    def check(*partitions: PartitionStatus, **kwargs: object) -> bool:
        state = observed(partitions=partitions, **kwargs)  # type: ignore[arg-type]
        return caught_up(state, assess(state))

    assert check(part("t:0", 10, 10), part("t:1", 0, 0))
    assert check(part("t:0", 10, 10), part("t:1", None, 0))  # an empty partition read by no epoch yet
    assert not check(part("t:0", 10, 10), part("t:1", None, 3))
    assert not check(part("t:0", 9, 10))
    assert not check()  # no partition: nothing shows it caught up
    assert not check(part("t:0", 10, 10), leader=None)  # degraded


def test_wait_returns_at_the_first_caught_up_observation_and_waits_through_failures() -> None:
    clock = Clock()
    answers: list[PipelineStatus | Exception] = [
        UsageError("pipeline 'p' does not exist in ZooKeeper"),  # the nodes not started yet
        observed(partitions=(part("t:0", 4, 10),)),
        observed(partitions=(part("t:0", 10, 10),)),
    ]

    def observe() -> PipelineStatus:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    final, health = wait_caught_up(observe, timeout=60, interval=2, clock=clock, sleep=clock.sleep)
    assert health.code is HealthCode.HEALTHY and final is not None and final.total_durable_lag == 0
    assert clock.slept == [2, 2] and not answers


@pytest.mark.parametrize(("answer", "code", "reason"), [
    (observed(partitions=(part("t:0", 4, 10),)), HealthCode.DEGRADED, "not caught up after 10 s: 6 records on 1 "
                                                                      "partition(s) not yet durable"),
    (observed(leader=None), HealthCode.DEGRADED, "no leader: no node holds the leader election"),
    (UsageError("cannot reach Kafka at h:1 within 10s"), HealthCode.UNREACHABLE, "cannot reach Kafka at h:1 within 10s"),
])
def test_wait_ends_at_its_timeout_with_the_last_verdict(answer: PipelineStatus | Exception, code: HealthCode,
                                                        reason: str) -> None:
    clock = Clock()

    def observe() -> PipelineStatus:
        if isinstance(answer, Exception):
            raise answer
        return answer

    final, health = wait_caught_up(observe, timeout=10, interval=3, clock=clock, sleep=clock.sleep)
    assert health.code is code and health.reasons[0] == reason and clock.now == 10
    assert clock.slept == [3, 3, 3, 1]  # the last sleep ends at the deadline
    assert (final is None) == isinstance(answer, Exception)


def test_status_wait_exits_with_the_verdict(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("laminar_kafka.cluster.ops.status.collect_status", lambda **kwargs: observed())
    argv = ["status", "--bootstrap", "127.0.0.1:1", "--zk", "127.0.0.1:2"]
    assert cli.main([*argv, "--wait", "5"]) == 0
    assert "health: healthy" in capsys.readouterr().out
    assert cli.main([*argv, "--wait", "5", "--watch"]) == 2
    assert cli.main([*argv, "--wait", "-1"]) == 2


# -- the live view shows every verdict ---------------------------------------------------------------


@pytest.mark.parametrize("health", [Health(HealthCode.HEALTHY), Health(HealthCode.DEGRADED, ("no leader",)),
                                    unreachable("cannot reach Kafka at h:1 within 10s")], ids=lambda h: h.state)
def test_the_live_view_renders_every_verdict(health: Health) -> None:
    from rich.console import Console

    screen = io.StringIO()
    shown = None if health.code is HealthCode.UNREACHABLE else observed()
    Console(file=screen, width=140, color_system=None).print(render_rich(Observation(shown, health, {})))
    assert f"health: {health.state}" in screen.getvalue()
    assert all(reason in screen.getvalue() for reason in health.reasons)
