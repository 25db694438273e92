"""`status --wait --output`: caught up only once the lake holds every durable record (the nodes
publish an epoch's files after they hear it committed; ``verify`` reads the lake). The lake's cursors
are compared, not its epoch number: an Iceberg table records only the epochs that brought it rows."""
from __future__ import annotations

from dataclasses import replace

from laminar_kafka.cluster.ops.health import HealthCode, assess
from laminar_kafka.cluster.ops.lake_state import LakeState
from laminar_kafka.cluster.ops.status import PipelineStatus
from laminar_kafka.cluster.ops.status_wait import caught_up, lake_behind, not_caught_up, wait_caught_up
from tests.unit.cluster.ops.test_status_health import part
from tests.unit.cluster.ops.test_status_health import status as observed
from tests.unit.cluster.ops.test_status_topics_wait import Clock

#: the default observation's durable cursors: t:0 at 10, t:1 at 5 (both at their high watermark)
DURABLE = {"t:0": 10, "t:1": 5}


def with_lake(cursors: dict[str, int], epoch: int = 7, **kwargs: object) -> PipelineStatus:
    """A healthy observation (last committed epoch 7), the lake read with ``cursors`` at ``epoch``."""
    return replace(observed(**kwargs), lake=LakeState(epoch, "the lake's record", cursors))  # type: ignore[arg-type]


def test_the_lake_must_hold_every_durable_record() -> None:
    assert caught_up(observed(), assess(observed()))  # the lake not read: the control state decides alone
    cases = [
        (DURABLE, True),
        ({"t:0": 10, "t:1": 6}, True),  # ahead (a later epoch published since): fine
        ({"t:0": 10, "t:1": 4}, False),
        ({"t:0": 10}, False),  # t:1's records not in the lake at all
        ({}, False),
    ]
    for cursors, expected in cases:
        state = with_lake(cursors)
        assert assess(state).code is HealthCode.HEALTHY
        assert (lake_behind(state) == ()) is expected
        assert caught_up(state, assess(state)) is expected, cursors


def test_an_older_lake_epoch_with_every_record_is_caught_up() -> None:
    """Iceberg: idle epochs commit no table, so the lake's epoch trails the manifest's for good."""
    state = with_lake(DURABLE, epoch=3)
    assert caught_up(state, assess(state))


def test_an_empty_partition_needs_no_lake_cursor() -> None:
    state = with_lake({"t:0": 10}, partitions=(part("t:0", 10, 10), part("t:1", None, 0)))
    assert caught_up(state, assess(state))


def test_records_not_in_the_lake_are_the_reason_when_every_record_is_durable() -> None:
    assert not_caught_up(with_lake({"t:0": 10, "t:1": 2}, epoch=6), 30).reasons == (
        "not caught up after 30 s: 3 durable records on 1 partition(s) not yet in the lake (its latest epoch 6, "
        "the last committed 7)",)
    lagging = with_lake({}, partitions=(part("t:0", 4, 10),))
    assert not_caught_up(lagging, 30).reasons == ("not caught up after 30 s: 6 records on 1 partition(s) not yet durable",)


def test_wait_goes_on_until_the_lake_shows_the_records() -> None:
    clock = Clock()
    answers = [with_lake({"t:0": 7, "t:1": 5}, epoch=6), with_lake({"t:0": 7, "t:1": 5}, epoch=6),
               with_lake(DURABLE)]
    final, health = wait_caught_up(lambda: answers.pop(0), timeout=60, interval=2, clock=clock, sleep=clock.sleep)
    assert health.code is HealthCode.HEALTHY and final is not None and final.lake is not None
    assert final.lake.cursors == DURABLE and clock.slept == [2, 2] and not answers


def test_wait_times_out_degraded_while_the_lake_stays_behind() -> None:
    clock = Clock()
    final, health = wait_caught_up(lambda: with_lake({"t:0": 10}, epoch=6), timeout=4, interval=2, clock=clock,
                                   sleep=clock.sleep)
    assert health.code is HealthCode.DEGRADED and final is not None
    assert health.reasons == ("not caught up after 4 s: 5 durable records on 1 partition(s) not yet in the lake "
                              "(its latest epoch 6, the last committed 7)",)
