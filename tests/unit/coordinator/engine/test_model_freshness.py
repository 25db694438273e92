"""The epoch timer with a freshness target: no clock, an epoch opens when a node asked for one after
the latest epoch, and never while none asks (pure: :func:`next_step` on views)."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.model import epoch_asked, next_step, next_wakeup_ms
from laminar_kafka.coordinator.engine.steps import StepKind, View
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import Member
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, AssignmentSnapshot

TARGET = CoordinatorConfig(pipeline="f", checkpoint_interval=2.0, freshness_target=1.0, vnode_count=4)
CLOCK = replace(TARGET, freshness_target=0.0)


def control(last_epoch: int, last_commit_ms: int = 0, owners: tuple[int, ...] = (1, 1, 1, 1)) -> ControlState:
    snapshot = AssignmentSnapshot.initial(4).next(1, owners)
    return ControlState(snapshot=snapshot, boots=((1, "b"),) if 1 in owners else (), last_commit_ms=last_commit_ms,
                        leader_token=1, last_epoch=last_epoch, manifest_epoch=last_epoch)


def view(state: ControlState, now_ms: int, wanted_after: int) -> View:
    members = {1: Member(1, "b", "e")} if state.snapshot.nodes() else {}
    return View(state, members, now_ms, epoch_wanted_after=wanted_after)


def test_with_a_target_an_ask_after_the_latest_epoch_opens_the_next_at_once() -> None:
    step = next_step(view(control(7, last_commit_ms=1_000), now_ms=1_001, wanted_after=7), TARGET, 1)
    assert step is not None and step.kind is StepKind.OPEN_EPOCH and step.control.open_epoch == 8


def test_with_a_target_no_epoch_opens_without_an_ask_however_long_it_has_been() -> None:
    assert next_step(view(control(7), now_ms=10**9, wanted_after=6), TARGET, 1) is None  # an older ask is spent
    assert next_step(view(control(7), now_ms=10**9, wanted_after=0), TARGET, 1) is None
    assert next_wakeup_ms(control(7), TARGET) is None  # no timer: only an ask (an input) wakes the leader


def test_without_a_target_the_clock_still_opens_epochs_and_an_ask_does_not_hurry_it() -> None:
    assert next_step(view(control(7, last_commit_ms=1_000), now_ms=2_000, wanted_after=7), CLOCK, 1) is None
    step = next_step(view(control(7, last_commit_ms=1_000), now_ms=3_000, wanted_after=0), CLOCK, 1)
    assert step is not None and step.kind is StepKind.OPEN_EPOCH
    assert next_wakeup_ms(control(7, last_commit_ms=1_000), CLOCK) == 3_000


def test_an_ask_opens_no_epoch_while_no_vnode_is_owned() -> None:
    assert next_step(view(control(7, owners=(UNASSIGNED,) * 4), now_ms=5, wanted_after=7), TARGET, 1) is None


@given(last=st.integers(0, 1_000), wanted=st.integers(0, 1_000), now=st.integers(0, 10**7),
       committed=st.integers(0, 10**7))
def test_with_a_target_an_epoch_opens_exactly_when_asked_after_the_latest(
    last: int, wanted: int, now: int, committed: int,
) -> None:
    step = next_step(view(control(last, last_commit_ms=committed), now, wanted), TARGET, 1)
    assert (step is not None) == epoch_asked(control(last), wanted) == (wanted >= last)
    if step is not None:
        assert step.kind is StepKind.OPEN_EPOCH and step.control.open_epoch == last + 1
