"""`status --wait --output`: caught up only once the lake shows the last committed epoch (the nodes
publish an epoch's files after they hear it committed; ``verify`` reads the lake)."""
from __future__ import annotations

from dataclasses import replace

from laminar_kafka.cluster.ops.health import HealthCode, assess
from laminar_kafka.cluster.ops.lake_state import LakeState
from laminar_kafka.cluster.ops.status import PipelineStatus
from laminar_kafka.cluster.ops.status_wait import caught_up, lake_behind, not_caught_up, wait_caught_up
from tests.unit.cluster.ops.test_status_health import part
from tests.unit.cluster.ops.test_status_health import status as observed
from tests.unit.cluster.ops.test_status_topics_wait import Clock


def with_lake(epoch: int, **kwargs: object) -> PipelineStatus:
    """A healthy observation at the last committed epoch 7, the lake read at ``epoch``."""
    return replace(observed(**kwargs), lake=LakeState(epoch, "the lake's commit log"))  # type: ignore[arg-type]


def test_the_lake_must_hold_the_last_committed_epoch() -> None:
    assert observed().last_epoch == 7
    assert caught_up(observed(), assess(observed()))  # the lake not read: the manifest decides alone
    for epoch, expected in ((6, False), (0, False), (7, True), (8, True)):
        state = with_lake(epoch)
        assert assess(state).code is HealthCode.HEALTHY
        assert lake_behind(state) is not expected
        assert caught_up(state, assess(state)) is expected, epoch


def test_a_lake_behind_is_the_reason_when_every_record_is_durable() -> None:
    assert not_caught_up(with_lake(6), 30).reasons == (
        "not caught up after 30 s: the lake's latest epoch is 6, the last committed 7 (not yet published)",)
    lagging = with_lake(6, partitions=(part("t:0", 4, 10),))
    assert not_caught_up(lagging, 30).reasons == ("not caught up after 30 s: 6 records on 1 partition(s) not yet durable",)


def test_wait_goes_on_until_the_lake_shows_the_epoch() -> None:
    clock = Clock()
    answers = [with_lake(6), with_lake(6), with_lake(7)]
    final, health = wait_caught_up(lambda: answers.pop(0), timeout=60, interval=2, clock=clock, sleep=clock.sleep)
    assert health.code is HealthCode.HEALTHY and final is not None and final.lake is not None and final.lake.epoch == 7
    assert clock.slept == [2, 2] and not answers


def test_wait_times_out_degraded_while_the_lake_stays_behind() -> None:
    clock = Clock()
    final, health = wait_caught_up(lambda: with_lake(6), timeout=4, interval=2, clock=clock, sleep=clock.sleep)
    assert health.code is HealthCode.DEGRADED and final is not None
    assert health.reasons == ("not caught up after 4 s: the lake's latest epoch is 6, the last committed 7 "
                              "(not yet published)",)
