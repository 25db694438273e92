"""reconcile(): the pure start-up decision between the control state and the lake (docs/settings.md).

Every row of the module docstring's table, the edges of "behind" (publishing trails the manifest,
dense and non-dense lakes, rolled-back epochs, lakes written before records existed), the seed's
epoch and cursors, and a property test over random facts."""
from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.lake.reconcile import (
    Action,
    ControlFacts,
    LakeFacts,
    OnLakeBehind,
    Reconciliation,
    reconcile,
)
from laminar_kafka.coordinator.codec import Cursors
from laminar_kafka.coordinator.values import Manifest, check_seed_manifest

P = "pipe"
REWIND, FAIL = OnLakeBehind.REWIND, OnLakeBehind.FAIL
START = Manifest(0, 0, {"s": {"t:0": 0, "t:1": 0, "t:2": 0}})


def control(epoch: int, cursors: Cursors, *, published_through: int | None = None,
            pinned: Manifest | None = START, version: int = 3) -> ControlFacts:
    """The control state at ``epoch`` (published into the lake through ``epoch`` unless told)."""
    latest = Manifest(epoch, version, {s: dict(c) for s, c in cursors.items()},
                      outputs=(f"o-{epoch}",) if epoch else (), acked_by=((1, "b"),) if epoch else ())
    return ControlFacts(latest, pinned, epoch if published_through is None else published_through)


def lake(epoch: int = 0, cursors: Cursors | None = None, *, high: int | None = None, **kwargs: object) -> LakeFacts:
    """A lake holding records of this pipeline through ``epoch`` (dense, with rows) unless told."""
    values: dict[str, object] = {
        "epoch": epoch, "high_epoch": epoch if high is None else high, "cursors": cursors or {},
        "has_records": True, "has_data": True, "dense": True, "where": f"record epoch-{epoch}",
    }
    values.update(kwargs)
    return LakeFacts(**values)  # type: ignore[arg-type]


def decide(control_facts: ControlFacts | None, lake_facts: LakeFacts, topic_ids: Mapping[str, str] | None = None,
           on_lake_behind: OnLakeBehind = REWIND) -> Reconciliation:
    facts = control_facts if control_facts is not None else ControlFacts(None)
    return reconcile(P, facts, lake_facts, topic_ids or {}, on_lake_behind)


def reseed(decision: Reconciliation) -> Manifest:
    """The seed of a RESEED decision, checked to be a valid seed manifest."""
    assert decision.action is Action.RESEED, decision
    assert decision.seed is not None and decision.reason
    check_seed_manifest(decision.seed)
    assert decision.seed.outputs == () and decision.seed.acked_by == () and decision.seed.assignment_version == 0
    return decision.seed


# ---- the module docstring's table, row by row ---------------------------------------------------------

CURSORS = {"s": {"t:0": 10, "t:1": 20, "t:2": 30}}

TABLE = [
    # (id, control, lake, kafka topic ids, on-lake-behind, action)
    ("another pipeline", control(5, CURSORS), lake(5, CURSORS, other_pipelines=("other",)), {}, REWIND, Action.REFUSE),
    ("topic id differs", control(5, CURSORS), lake(5, CURSORS, topic_ids={"t": "id-1"}), {"t": "id-2"}, REWIND,
     Action.REFUSE),
    ("the lake lost epochs between kept ones", control(5, CURSORS), lake(3, CURSORS, hole="epoch 4 gone, 5 kept"), {},
     REWIND, Action.REFUSE),
    ("no control, empty lake", None, LakeFacts(), {}, REWIND, Action.START_FRESH),
    ("no control, lake has epochs", None, lake(5, CURSORS), {}, REWIND, Action.RESEED),
    ("control and lake agree", control(5, CURSORS), lake(5, CURSORS), {}, REWIND, Action.CONTINUE),
    ("control behind the lake", control(5, CURSORS), lake(7, {"s": {"t:0": 40}}), {}, FAIL, Action.RESEED),
    ("lake behind, rewind", control(5, CURSORS), lake(3, {"s": {"t:0": 4}}), {}, REWIND, Action.RESEED),
    ("lake behind, fail", control(5, CURSORS), lake(3, {"s": {"t:0": 4}}), {}, FAIL, Action.REFUSE),
]


@pytest.mark.parametrize("name, control_facts, lake_facts, topic_ids, on_lake_behind, action", TABLE,
                         ids=[row[0] for row in TABLE])
def test_every_row_of_the_table(name: str, control_facts: ControlFacts | None, lake_facts: LakeFacts,
                                topic_ids: dict[str, str], on_lake_behind: OnLakeBehind, action: Action) -> None:
    decision = decide(control_facts, lake_facts, topic_ids, on_lake_behind)
    assert decision.action is action, decision
    if action is Action.RESEED:
        reseed(decision)
    else:
        assert decision.seed is None
    if action is Action.REFUSE:
        assert decision.reason and "\n" not in decision.reason  # one line


# ---- refusals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("control_facts", [None, control(5, CURSORS)])
@pytest.mark.parametrize("on_lake_behind", list(OnLakeBehind))
def test_another_pipelines_lake_is_refused_naming_both(control_facts: ControlFacts | None,
                                                       on_lake_behind: OnLakeBehind) -> None:
    facts = LakeFacts(other_pipelines=("billing",), has_records=True,
                      where="record _laminar/epochs/epoch-0000000009.json")
    decision = decide(control_facts, facts, {}, on_lake_behind)
    assert decision.action is Action.REFUSE and decision.seed is None
    assert "'billing'" in decision.reason and f"'{P}'" in decision.reason
    assert "epoch-0000000009.json" in decision.reason


def test_another_pipeline_is_refused_before_a_topic_id_conflict() -> None:
    facts = lake(5, CURSORS, other_pipelines=("billing",), topic_ids={"t": "old"})
    decision = decide(control(5, CURSORS), facts, {"t": "new"})
    assert decision.action is Action.REFUSE and "'billing'" in decision.reason


@pytest.mark.parametrize("control_facts", [None, control(5, CURSORS)])
def test_a_re_created_topic_is_refused_naming_the_topic_and_both_ids(control_facts: ControlFacts | None) -> None:
    facts = lake(5, CURSORS, topic_ids={"orders": "AAAA-lake", "t": "same"})
    decision = decide(control_facts, facts, {"orders": "BBBB-kafka", "t": "same"}, REWIND)
    assert decision.action is Action.REFUSE and decision.seed is None
    assert "'orders'" in decision.reason and "AAAA-lake" in decision.reason and "BBBB-kafka" in decision.reason
    assert "'t'" not in decision.reason


@pytest.mark.parametrize("control_facts", [None, control(5, CURSORS)])
@pytest.mark.parametrize("on_lake_behind", list(OnLakeBehind))
def test_a_lake_with_a_hole_is_refused_with_its_reason(control_facts: ControlFacts | None,
                                                       on_lake_behind: OnLakeBehind) -> None:
    why = "epoch 4's files are gone but epoch 5's are there (t/x.parquet)"
    decision = decide(control_facts, lake(3, CURSORS, high=5, rolled_back_from=5, hole=why), {}, on_lake_behind)
    assert decision.action is Action.REFUSE and decision.seed is None
    assert why in decision.reason and f"'{P}'" in decision.reason and "\n" not in decision.reason


def test_a_hole_is_refused_after_another_pipeline_and_before_a_topic_id_conflict() -> None:
    facts = lake(5, CURSORS, other_pipelines=("billing",), hole="lost")
    assert "'billing'" in decide(control(5, CURSORS), facts).reason
    facts = lake(5, CURSORS, topic_ids={"t": "old"}, hole="epoch 4 lost")
    assert "epoch 4 lost" in decide(control(5, CURSORS), facts, {"t": "new"}).reason


def test_topic_ids_known_on_one_side_only_or_equal_do_not_conflict() -> None:
    facts = lake(5, CURSORS, topic_ids={"t": "x", "only-in-lake": "y"})
    assert decide(control(5, CURSORS), facts, {"t": "x", "only-in-kafka": "z"}).action is Action.CONTINUE


# ---- no control state --------------------------------------------------------------------------------


@pytest.mark.parametrize("facts", [LakeFacts(), LakeFacts(dense=False)], ids=["empty", "empty-iceberg"])
def test_no_control_and_an_empty_lake_starts_fresh(facts: LakeFacts) -> None:
    for on_lake_behind in OnLakeBehind:
        assert decide(None, facts, {"t": "id"}, on_lake_behind) == Reconciliation(Action.START_FRESH)


@pytest.mark.parametrize("facts", [LakeFacts(has_data=True), LakeFacts(has_data=True, dense=False)],
                         ids=["parquet", "iceberg"])
def test_no_control_and_rows_without_records_are_refused(facts: LakeFacts) -> None:
    """Rows landed before records existed (or by another tool): where they end is unknown, and
    starting over would land them twice."""
    for on_lake_behind in OnLakeBehind:
        decision = decide(None, facts, {"t": "id"}, on_lake_behind)
        assert decision.action is Action.REFUSE and "holds rows but no record" in decision.reason


@pytest.mark.parametrize("epoch, high, rolled_back_from, expected", [
    (5, 5, 0, 6),
    (5, 9, 0, 10),  # a later record whose files are gone still numbered epoch 9
    (5, 5, 12, 13),
    (5, 9, 12, 13),
    (0, 0, 4, 5),  # every record lost its files
])
def test_no_control_reseeds_from_the_lake_above_every_epoch_either_side(
        epoch: int, high: int, rolled_back_from: int, expected: int) -> None:
    cursors = {"s": {"t:0": 11, "t:7": 3}, "s2": {"u:0": 9}}
    facts = lake(epoch, cursors, high=high, rolled_back_from=rolled_back_from, dense=epoch % 2 == 0)
    for on_lake_behind in OnLakeBehind:
        decision = decide(None, facts, {}, on_lake_behind)
        seed = reseed(decision)
        assert seed.epoch == expected
        assert seed.epoch > max(facts.epoch, facts.high_epoch, facts.rolled_back_from)
        assert seed.cursors == cursors
        assert f"'{P}'" in decision.reason and f"epoch {epoch}" in decision.reason
        assert "3 partition cursor(s)" in decision.reason


def test_the_seed_does_not_share_the_lakes_cursor_dicts() -> None:
    cursors = {"s": {"t:0": 1}}
    seed = reseed(decide(None, lake(2, cursors)))
    assert seed.cursors == cursors and seed.cursors["s"] is not cursors["s"]


# ---- control and lake agree ------------------------------------------------------------------------


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("on_lake_behind", list(OnLakeBehind))
def test_control_equal_to_the_lake_continues(dense: bool, on_lake_behind: OnLakeBehind) -> None:
    decision = decide(control(5, CURSORS), lake(5, CURSORS, dense=dense), {}, on_lake_behind)
    assert decision == Reconciliation(Action.CONTINUE)


def test_publishing_trails_the_manifest_the_lake_at_published_through_continues() -> None:
    """The control state moved on (epoch 7) after the adapter published epoch 5: not a lake behind."""
    facts = lake(5, {"s": {"t:0": 8}})
    decision = decide(control(7, CURSORS, published_through=5), facts, {}, FAIL)
    assert decision.action is Action.CONTINUE


def test_the_pinned_start_with_nothing_published_continues() -> None:
    """Epoch 0 (the pinned start): nothing published, a dense lake with no record is not behind."""
    facts = LakeFacts(dense=True)
    assert decide(ControlFacts(START, START, 0), facts, {}, FAIL).action is Action.CONTINUE


def test_the_lake_below_control_in_every_partition_at_the_same_epoch_continues() -> None:
    assert decide(control(5, CURSORS), lake(5, {"s": {"t:0": 1, "t:1": 20}}), {}, FAIL).action is Action.CONTINUE


# ---- control behind the lake (advance) ------------------------------------------------------------


@pytest.mark.parametrize("on_lake_behind", list(OnLakeBehind))
@pytest.mark.parametrize("dense", [True, False])
def test_a_later_lake_epoch_advances_with_the_lakes_cursors_over_the_controls(
        on_lake_behind: OnLakeBehind, dense: bool) -> None:
    facts = lake(9, {"s": {"t:0": 50, "t:1": 60}}, high=11, dense=dense)
    decision = decide(control(5, CURSORS), facts, {}, on_lake_behind)
    seed = reseed(decision)
    assert seed.epoch == 12  # above the lake's highest recorded epoch
    assert seed.cursors == {"s": {"t:0": 50, "t:1": 60, "t:2": 30}}
    assert "behind the lake" in decision.reason and "epoch 9" in decision.reason


@pytest.mark.parametrize("cursors, partition", [
    ({"s": {"t:1": 21}}, "t:1"),
    ({"s": {"t:9": 0}}, "t:9"),  # a partition the control state does not know at all
])
def test_a_partition_further_on_in_the_lake_advances(cursors: dict[str, dict[str, int]], partition: str) -> None:
    decision = decide(control(5, CURSORS), lake(5, cursors), {}, FAIL)
    seed = reseed(decision)
    assert seed.epoch == 6
    assert seed.cursors == {"s": {**CURSORS["s"], **cursors["s"]}}
    assert partition in decision.reason


def test_advancing_takes_the_lake_cursor_even_where_it_is_lower() -> None:
    """The lake at a later epoch is the truth: its cursor wins over a control cursor that is higher."""
    seed = reseed(decide(control(5, CURSORS), lake(8, {"s": {"t:0": 2}}), {}, REWIND))
    assert seed.cursors == {"s": {"t:0": 2, "t:1": 20, "t:2": 30}} and seed.epoch == 9


# ---- the lake behind control -------------------------------------------------------------------------


@pytest.mark.parametrize("facts, why", [
    (lake(3, {"s": {"t:0": 4}}), "shows epoch 3"),  # dense: latest complete epoch below published_through
    (lake(3, {"s": {"t:0": 4}}, high=5, rolled_back_from=5), "recorded epoch 5"),  # dense, files lost
    (lake(3, {"s": {"t:0": 4}}, high=5, rolled_back_from=5, dense=False), "recorded epoch 5"),  # iceberg rollback
    (lake(0, {}, rolled_back_from=5, dense=False), "recorded epoch 5"),  # iceberg: every commit rolled back
    (LakeFacts(dense=True), "holds no epoch"),  # dense, no record and no rows: the lake was emptied
], ids=["dense-below", "dense-rolled-back", "iceberg-rolled-back", "iceberg-all-rolled-back", "dense-emptied"])
def test_a_lake_behind_control_refuses_with_fail(facts: LakeFacts, why: str) -> None:
    decision = decide(control(5, CURSORS), facts, {}, FAIL)
    assert decision.action is Action.REFUSE and decision.seed is None
    assert "on-lake-behind" in decision.reason and why in decision.reason and f"'{P}'" in decision.reason
    assert "\n" not in decision.reason


@pytest.mark.parametrize("facts, epoch", [
    (lake(3, {"s": {"t:0": 4}}), 6),
    (lake(3, {"s": {"t:0": 4}}, high=5, rolled_back_from=5), 6),
    (lake(3, {"s": {"t:0": 4}}, high=7, rolled_back_from=7, dense=False), 8),
    (LakeFacts(dense=True), 6),
], ids=["dense-below", "dense-rolled-back", "iceberg-rolled-back", "dense-emptied"])
def test_a_lake_behind_control_rewinds_with_rewind(facts: LakeFacts, epoch: int) -> None:
    decision = decide(control(5, CURSORS), facts, {}, REWIND)
    seed = reseed(decision)
    assert seed.epoch == epoch
    lake_known = facts.cursors.get("s", {})
    assert seed.cursors == {"s": {"t:0": 0, "t:1": 0, "t:2": 0, **lake_known}}
    assert "rewinding" in decision.reason


def test_rewind_cursors_are_the_lakes_else_the_pinned_starts_else_absent() -> None:
    latest = {"s": {"t:0": 50, "t:1": 60, "t:2": 70, "t:3": 80}}
    pinned = Manifest(0, 0, {"s": {"t:0": 1, "t:1": 5}})
    facts = lake(2, {"s": {"t:0": 30}})
    seed = reseed(decide(control(6, latest, pinned=pinned), facts, {}, REWIND))
    # t:0 from the lake, t:1 from the pinned start, t:2 and t:3 absent (their first offset)
    assert seed.cursors == {"s": {"t:0": 30, "t:1": 5}}
    assert seed.epoch == 7


def test_rewind_keeps_a_lake_partition_the_control_does_not_know() -> None:
    seed = reseed(decide(control(6, CURSORS), lake(2, {"s": {"t:5": 7}}), {}, REWIND))
    assert seed.cursors == {"s": {"t:0": 0, "t:1": 0, "t:2": 0, "t:5": 7}}


def test_a_rollback_wins_over_a_lake_partition_ahead() -> None:
    """Rolled back and ahead in one partition: the lake is behind (rewind), never advanced past it."""
    facts = lake(4, {"s": {"t:0": 99}}, high=6, rolled_back_from=6)
    decision = decide(control(5, CURSORS), facts, {}, FAIL)
    assert decision.action is Action.REFUSE and "on-lake-behind" in decision.reason


@pytest.mark.parametrize("dense", [True, False])
def test_a_lake_without_records_but_with_rows_continues(dense: bool) -> None:
    """An upgrade: rows landed by a version that wrote no records; nothing to compare with."""
    facts = LakeFacts(has_records=False, has_data=True, dense=dense)
    assert decide(control(5, CURSORS), facts, {}, FAIL).action is Action.CONTINUE


def test_an_iceberg_lake_below_published_through_without_rollback_continues() -> None:
    """A table is committed only in epochs with rows: an older epoch and lower cursors are normal."""
    facts = lake(3, {"s": {"t:0": 4, "t:1": 2}}, dense=False)
    assert decide(control(5, CURSORS), facts, {}, FAIL).action is Action.CONTINUE
    empty = LakeFacts(dense=False, has_data=False)
    assert decide(control(5, CURSORS), empty, {}, FAIL).action is Action.CONTINUE


def test_an_older_lost_epoch_below_the_latest_complete_one_is_not_behind() -> None:
    facts = lake(5, CURSORS, high=5, rolled_back_from=3)
    assert decide(control(5, CURSORS), facts, {}, FAIL).action is Action.CONTINUE


# ---- known defects: the decision raises instead of deciding (see the report) --------------------------


def test_rewind_without_a_pinned_start_leaves_the_unknown_partitions_absent() -> None:
    """ControlFacts.pinned_start defaults to None (lake_reconcile passes None when manifest 0 cannot
    be read, e.g. a partly deleted subtree): the seed then holds the lake's cursors only."""
    seed = reseed(decide(control(6, CURSORS, pinned=None), lake(2, {"s": {"t:0": 4}}), {}, REWIND))
    assert seed.cursors == {"s": {"t:0": 4}}


def test_a_lake_source_the_control_does_not_hold_is_ahead() -> None:
    seed = reseed(decide(control(5, CURSORS), lake(5, {**CURSORS, "s2": {"u:0": 3}}), {}, REWIND))
    assert seed.cursors == {**CURSORS, "s2": {"u:0": 3}}


def test_advancing_to_a_lake_source_the_control_does_not_hold() -> None:
    seed = reseed(decide(control(5, CURSORS), lake(7, {"s2": {"u:0": 3}}), {}, REWIND))
    assert seed.cursors == {**CURSORS, "s2": {"u:0": 3}}


# ---- properties over random facts ------------------------------------------------------------------------

SOURCE = "s"
KEYS = [f"t:{p}" for p in range(4)] + ["u:0", "u:1"]
offsets = st.integers(0, 100)
partition_cursors = st.dictionaries(st.sampled_from(KEYS), offsets, max_size=len(KEYS))
epochs = st.integers(0, 40)


@st.composite
def control_facts(draw: st.DrawFn) -> ControlFacts:
    """A control state holding the source identity (the tests above cover sources on one side only)."""
    if draw(st.booleans()):
        return ControlFacts(None)
    epoch = draw(epochs)
    latest = Manifest(epoch, draw(st.integers(0, 5)), {SOURCE: draw(partition_cursors)})
    pinned = Manifest(0, 0, {SOURCE: draw(partition_cursors)})
    return ControlFacts(latest, pinned, draw(st.integers(0, epoch)))


@st.composite
def lake_facts(draw: st.DrawFn) -> LakeFacts:
    epoch = draw(epochs)
    return LakeFacts(
        epoch=epoch,
        high_epoch=epoch + draw(st.integers(0, 10)),
        cursors=draw(st.one_of(st.just({}), partition_cursors.map(lambda c: {SOURCE: c}))),
        topic_ids=draw(st.dictionaries(st.sampled_from(["t", "u"]), st.sampled_from(["id-1", "id-2"]))),
        other_pipelines=draw(st.sampled_from([(), (), (), ("other",)])),
        dense=draw(st.booleans()),
        rolled_back_from=draw(st.one_of(st.just(0), st.integers(0, 60))),
        has_records=draw(st.booleans()),
        has_data=draw(st.booleans()),
        hole=draw(st.sampled_from(["", "", "", "", "epoch 3 lost, 4 kept"])),
        where="somewhere",
    )


kafka_ids = st.dictionaries(st.sampled_from(["t", "u"]), st.sampled_from(["id-1", "id-2"]))


@settings(max_examples=400, deadline=None)
@given(control_facts(), lake_facts(), kafka_ids, st.sampled_from(list(OnLakeBehind)))
def test_properties_of_every_decision(control_facts: ControlFacts, lake_facts: LakeFacts,
                                      topic_ids: dict[str, str], on_lake_behind: OnLakeBehind) -> None:
    decision = reconcile(P, control_facts, lake_facts, topic_ids, on_lake_behind)
    assert decision == reconcile(P, control_facts, lake_facts, topic_ids, on_lake_behind)  # deterministic
    latest = control_facts.latest
    conflict = any(lake_facts.topic_ids[t] != topic_ids[t] for t in set(lake_facts.topic_ids) & set(topic_ids))
    if lake_facts.other_pipelines or conflict or lake_facts.hole:
        assert decision.action is Action.REFUSE
        return
    if latest is None:
        if lake_facts.has_records:
            assert decision.action is Action.RESEED
        else:
            assert decision.action is (Action.REFUSE if lake_facts.has_data else Action.START_FRESH)
            if decision.action is Action.REFUSE:  # rows without a record of where they end
                return
    if decision.action is Action.REFUSE:  # only the setting refuses once ids and pipeline agree
        assert on_lake_behind is FAIL and latest is not None and "on-lake-behind" in decision.reason
    if decision.action is Action.CONTINUE:  # never continue from a control state behind the lake
        assert latest is not None and lake_facts.epoch <= latest.epoch
        for source, cursors in lake_facts.cursors.items():
            for key, offset in cursors.items():
                assert offset <= latest.cursors[source].get(key, -1)
    if decision.action is Action.RESEED:
        seed = reseed(decision)
        used = max(latest.epoch if latest is not None else 0, lake_facts.epoch, lake_facts.high_epoch,
                   lake_facts.rolled_back_from)
        assert seed.epoch == used + 1
        for source, cursors in lake_facts.cursors.items():
            for key, offset in cursors.items():
                assert seed.cursors[source][key] == offset  # never below (nor above) the lake
        if latest is not None:  # every partition the seed holds was known to one side
            known = set(latest.cursors[SOURCE]) | set(lake_facts.cursors.get(SOURCE, {}))
            assert set(seed.cursors.get(SOURCE, {})) <= known
    else:
        assert decision.seed is None


def test_a_reseed_from_a_partly_landed_epoch_is_refused_and_continuing_is_not() -> None:
    partial = "epoch 7 landed in table(s) a of namespace p but not in b"
    lake = LakeFacts(epoch=7, high_epoch=7, cursors={"kafka": {"t:0": 70}}, dense=False, has_records=True,
                     has_data=True, partial=partial)
    lost = reconcile("p", ControlFacts(None), lake, {}, OnLakeBehind.REWIND)
    assert lost.action is Action.REFUSE and lost.seed is None
    assert lost.reason.startswith(f"pipeline 'p' cannot resume from its lake exactly: {partial} (")
    agreeing = Manifest(epoch=7, assignment_version=1, cursors={"kafka": {"t:0": 70}})
    assert reconcile("p", ControlFacts(agreeing, None, 7), lake, {}, OnLakeBehind.REWIND).action is Action.CONTINUE
    behind = Manifest(epoch=5, assignment_version=1, cursors={"kafka": {"t:0": 50}})
    assert reconcile("p", ControlFacts(behind, None, 5), lake, {}, OnLakeBehind.REWIND).action is Action.REFUSE
    whole = LakeFacts(epoch=7, high_epoch=7, cursors={"kafka": {"t:0": 70}}, dense=False, has_records=True)
    assert reconcile("p", ControlFacts(None), whole, {}, OnLakeBehind.REWIND).action is Action.RESEED
