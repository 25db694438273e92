"""The chaos campaign's pure parts: the seeded schedule (laminar_kafka.chaos.plan), the per-kind table
(laminar_kafka.chaos.report) and the evidence of a violation (laminar_kafka.chaos.evidence, on a small local
output). No server, no clock."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.chaos.kinds import CDC_KINDS
from laminar_kafka.chaos.plan import (
    ALL_KINDS,
    EVERY_KIND_WITHIN,
    KINDS,
    LAKE_KINDS,
    LAKES,
    MAX_EVENTS,
    MIN_GAP_S,
    MIN_LIVE,
    MISCONFIGURED_SETTINGS,
    SPECS,
    FaultEvent,
    kinds_of_lake,
    live_counts,
    parse_kinds,
    plan_faults,
    plan_run,
    primaries_per_run,
)
from laminar_kafka.chaos.report import FaultResult, RunResult, campaign_json, format_table, summarize

_NODE_TARGETS = {"node:any", "node:leader", "node:donor", "node:recipient", "node:new", "node:all", "nodes"}
#: the state faults, laminar_kafka.chaos.faults_state
STATE_KINDS = ("zk-subtree-lost", "zk-ensemble-replaced", "zk-rollback", "lake-rollback", "misconfigured-node")


def test_same_arguments_same_plan() -> None:
    for seed in range(40):
        assert plan_run(seed, 40.0) == plan_run(seed, 40.0)
        assert plan_faults(seed, 40.0, node_count=4) == list(plan_run(seed, 40.0, node_count=4).events)


def test_different_seeds_differ() -> None:
    assert len({plan_run(seed, 40.0).events for seed in range(20)}) == 20


def test_twenty_consecutive_seeds_draw_every_kind() -> None:
    """`make chaos SEEDS=20` (kinds_per_run 1, the CLI's default) draws every kind as a primary: with
    more kinds than seeds, a run takes ceil(kinds / 20) primaries."""
    assert EVERY_KIND_WITHIN == 20 and len(KINDS) == 26 and set(STATE_KINDS) <= set(KINDS)
    assert primaries_per_run(1, len(KINDS)) == 2
    for start in (0, 1, 7, 13, 100):
        plans = [plan_run(seed, 40.0) for seed in range(start, start + 20)]
        primaries = {k for p in plans for k in p.kinds[:2]}
        assert primaries == set(KINDS), set(KINDS) - primaries
        drawn = {e.kind for p in plans for e in p.events}
        assert drawn == set(KINDS), set(KINDS) - drawn


def test_primaries_per_run_floor() -> None:
    assert primaries_per_run(1, 20) == 1 and primaries_per_run(1, 21) == 2 and primaries_per_run(1, 41) == 3
    assert primaries_per_run(3, 25) == 3, "kinds_per_run above the floor is kept"
    assert primaries_per_run(0, 5) == 1 and primaries_per_run(9, 5) == 5
    # every kind within ceil(kinds / per_run) <= 20 consecutive seeds, for any kind count
    for count in (1, 5, 20, 21, 25):
        names = KINDS[:count]
        per_run = primaries_per_run(1, len(names))
        window = -(-len(names) // per_run)
        assert window <= EVERY_KIND_WITHIN
        for start in (0, 3):
            seen = {k for s in range(start, start + window) for k in plan_run(s, 10.0, names, max_extras=0).kinds}
            assert seen == set(names)


def test_state_kinds_params_and_targets() -> None:
    """Each state kind is planned with its seeded parameters; both variants of the binary ones occur."""
    seen: dict[str, set[object]] = {k: set() for k in STATE_KINDS}
    for seed in range(80):
        for event in plan_run(seed, 60.0, STATE_KINDS, max_extras=0).events:
            assert event.hold_s == 0.0, "a state fault runs its whole procedure at injection"
            if event.kind == "zk-subtree-lost":
                assert event.target == "zk:subtree"
                seen[event.kind].add(event.param("while"))
            elif event.kind == "zk-ensemble-replaced":
                assert event.target == "zk:all" and 0.5 <= event.number("down_s") <= 3.0
                seen[event.kind].add(True)
            elif event.kind == "zk-rollback":
                assert event.target == "zk:all" and 2 <= event.number("epochs") <= 6
                seen[event.kind].add(int(event.number("epochs")))
            elif event.kind == "lake-rollback":
                assert event.target == "output" and event.number("epochs") in (1, 2)
                seen[event.kind].add(event.flag("records"))
            else:
                assert event.target == "node:new" and event.param("setting") in MISCONFIGURED_SETTINGS
                seen[event.kind].add(event.param("setting"))
    assert seen["zk-subtree-lost"] == {"running", "stopped"}
    assert seen["lake-rollback"] == {True, False}, "records are deleted in about half the events"
    assert seen["misconfigured-node"] == set(MISCONFIGURED_SETTINGS)
    assert len(seen["zk-rollback"]) > 1 and seen["zk-ensemble-replaced"]


def test_state_kinds_need_the_plain_stack_and_keep_membership() -> None:
    for kind in STATE_KINDS:
        plan = plan_run(0, 60.0, (kind,), max_extras=0)
        assert (plan.brokers, plan.zk_servers, plan.network, plan.output_mount) == (1, 1, False, False)
        assert not SPECS[kind].topology
        assert live_counts(plan.events, 3) == [3] * len(plan.events)


def test_every_requested_kind_is_drawn_round_robin() -> None:
    kinds = ("zombie", "new-topic", "net-zk", "leave", "join")
    plans = [plan_run(seed, 20.0, kinds, kinds_per_run=2, max_extras=0) for seed in range(3)]
    assert {e.kind for p in plans for e in p.events} == set(kinds)
    assert all(e.kind in kinds for p in plans for e in p.events)
    assert plans[0].kinds[:2] == ("zombie", "new-topic") and plans[1].kinds[:2] == ("net-zk", "leave")


def test_extras_never_need_a_heavier_stack_than_the_primaries() -> None:
    per_run = primaries_per_run(1, len(KINDS))
    for seed in range(200):
        plan = plan_run(seed, 40.0)
        primaries = [SPECS[KINDS[(seed * per_run + j) % len(KINDS)]] for j in range(per_run)]
        assert list(plan.kinds[:per_run]) == [p.name for p in primaries]
        assert plan.brokers == max(p.brokers for p in primaries)
        assert plan.zk_servers == max(p.zk_servers for p in primaries)
        assert plan.network == any(p.network for p in primaries)


def test_stack_shape_follows_the_kinds() -> None:
    broker = plan_run(0, 20.0, ("broker-kill",), max_extras=0)
    assert (broker.brokers, broker.zk_servers, broker.network) == (3, 1, False)
    quorum = plan_run(0, 20.0, ("zk-quorum-loss",), max_extras=0)
    assert (quorum.brokers, quorum.zk_servers) == (1, 3)
    growth = plan_run(0, 20.0, ("new-topic",), max_extras=0)
    assert growth.pattern and not growth.transactional and not growth.output_mount
    assert plan_run(0, 20.0, ("transactions",), max_extras=0).transactional
    assert plan_run(0, 20.0, ("output-full",), max_extras=0).output_mount
    plain = plan_run(0, 20.0, ("node-kill",), max_extras=0)
    assert (plain.brokers, plain.zk_servers, plain.pattern, plain.network) == (1, 1, False, False)


def _check_spacing(events: tuple[FaultEvent, ...]) -> None:
    for earlier, later in zip(events, events[1:], strict=False):
        end = earlier.at_s + earlier.hold_s + SPECS[earlier.kind].budget_s
        assert end + MIN_GAP_S <= later.at_s + 1e-9, (earlier, later)
    assert all(e.at_s > 0 and e.hold_s >= 0 for e in events)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    duration=st.floats(5.0, 300.0),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=len(KINDS), unique=True),
    nodes=st.integers(2, 5),
    per_run=st.integers(1, 4),
)
def test_faults_never_overlap_and_membership_stays_survivable(
    seed: int, duration: float, kinds: list[str], nodes: int, per_run: int
) -> None:
    plan = plan_run(seed, duration, kinds, nodes, kinds_per_run=per_run)
    assert plan.events, "a run has at least one fault"
    assert len(plan.events) <= max(MAX_EVENTS, per_run + 2)
    _check_spacing(plan.events)
    counts = live_counts(plan.events, nodes)
    assert all(MIN_LIVE <= c <= nodes + 1 for c in counts), counts
    for event in plan.events:
        assert event.kind in kinds
        if event.kind in ("zombie",):
            assert event.hold_s > plan.session_timeout_s, "a zombie outlives its session"
        if event.kind == "zk-quorum-loss":
            first, second = event.target.split(":")[1].split(",")
            assert first != second, "quorum loss takes two different servers"
        if event.kind == "net-zk":
            expires = event.param("expires")
            assert (event.hold_s > plan.session_timeout_s) == expires


def test_kills_keep_at_least_one_survivor_even_with_two_nodes() -> None:
    for seed in range(100):
        plan = plan_run(seed, 120.0, ("node-kill", "kill-leader", "kill-donor", "kill-recipient", "leave", "churn"), 2)
        assert all(c >= MIN_LIVE for c in live_counts(plan.events, 2))


def test_node_faults_only_in_node_roles_and_server_faults_name_servers() -> None:
    for seed in range(60):
        for event in plan_run(seed, 60.0).events:
            family = event.target.split(":")[0]
            if event.kind in ("broker-kill", "broker-freeze"):
                assert family == "broker"
            elif event.kind.startswith("zk-"):
                assert family == "zk"
            elif event.kind in ("add-partitions", "new-topic"):
                assert family == "topic"
            elif event.kind.startswith("output-") or event.kind == "lake-rollback":
                assert event.target == "output"
            elif event.kind == "transactions":
                assert event.target == "producer"
            else:
                assert event.target in _NODE_TARGETS, event


def test_plan_json_round_trips_through_json() -> None:
    plan = plan_run(3, 40.0, node_count=4)
    data = json.loads(json.dumps(plan.to_json()))
    assert data["seed"] == 3 and data["node_count"] == 4
    assert [e["kind"] for e in data["events"]] == [e.kind for e in plan.events]


def test_parse_kinds() -> None:
    assert parse_kinds(None) == KINDS
    assert parse_kinds("zombie, join,zombie") == ("zombie", "join")
    with pytest.raises(ValueError, match="did you mean 'zombie'"):
        parse_kinds("zombi")
    with pytest.raises(ValueError):
        plan_run(0, 10.0, ("nope",))
    with pytest.raises(ValueError):
        plan_run(0, 10.0, KINDS, node_count=1)


# -- the table ------------------------------------------------------------------------------------


def _run(seed: int, kinds: tuple[str, ...], recoveries: list[float | None], **fields: object) -> RunResult:
    result = RunResult(seed=seed, kinds=kinds, audited=True, caught_up=True, records=1000,
                       **fields)  # type: ignore[arg-type]
    for kind, recovery in zip(kinds, recoveries, strict=True):
        result.faults.append(FaultResult(kind=kind, target="node:any", planned_at_s=1.0, injected_at_s=1.5,
                                         recovery_s=recovery))
    return result


def test_summarize_counts_a_run_in_each_of_its_kinds() -> None:
    runs = [
        _run(0, ("node-kill",), [4.5]),
        _run(1, ("zombie", "node-kill"), [9.25, 6.0], duplicated=3),
        _run(2, ("zombie",), [None]),
    ]
    rows = {row.kind: row for row in summarize(runs, KINDS)}
    assert list(rows) == ["node-kill", "zombie", "all"]
    assert (rows["node-kill"].runs, rows["node-kill"].faults, rows["node-kill"].records) == (2, 2, 2000)
    assert rows["node-kill"].worst_recovery_s == 6.0 and rows["node-kill"].duplicated == 3
    assert rows["node-kill"].failed == 1
    assert rows["zombie"].unrecovered == 1 and rows["zombie"].worst_recovery_s == 9.25
    assert (rows["all"].runs, rows["all"].faults, rows["all"].records, rows["all"].failed) == (3, 4, 3000, 1)


def test_format_table() -> None:
    runs = [_run(0, ("node-kill",), [4.5]), _run(1, ("zombie",), [None], missing=7)]
    text = format_table(summarize(runs, KINDS), recovery_timeout_s=90)
    lines = text.splitlines()
    assert lines[0].split() == ["kind", "runs", "faults", "records", "missing", "duplicated", "failed", "worst",
                                "recovery", "s"]
    assert lines[2].split() == ["node-kill", "1", "1", "1000", "0", "0", "0", "4.5"]
    assert lines[3].split() == ["zombie", "1", "1", "1000", "7", "0", "1", ">90", "(1x)"]
    assert lines[5].split() == ["all", "2", "2", "2000", "7", "0", "1", ">90", "(1x)"]
    assert len({len(lines[0]), len(lines[1])}) == 1


def test_format_table_widens_for_long_kind_names() -> None:
    runs = [_run(0, ("zk-ensemble-replaced", "node-kill"), [3.0, 4.5])]
    lines = format_table(summarize(runs, KINDS)).splitlines()
    assert lines[2].startswith("node-kill ") and lines[3].startswith("zk-ensemble-replaced ")
    columns = {line.index(" 1 ") for line in lines[2:4]}
    assert len(columns) == 1, "the counts stay in one column"
    assert lines[0].index("runs") < min(columns) + 3


def test_run_verdicts_and_json() -> None:
    good = _run(0, ("join",), [2.0])
    assert good.exact and good.ok
    assert not _run(1, ("join",), [2.0], acked_lost=1).exact
    assert not _run(2, ("join",), [2.0], aborted_in_output=1).exact
    assert _run(3, ("join",), [2.0], error="boom").exact and not _run(3, ("join",), [2.0], error="boom").ok
    not_caught = _run(4, ("join",), [2.0])
    not_caught.caught_up = False
    assert not not_caught.ok
    never_audited = RunResult(seed=5, kinds=("join",))
    assert not never_audited.exact
    data = json.loads(json.dumps(campaign_json([good, not_caught], summarize([good, not_caught]), 12.34)))
    assert data["ok"] is False and data["seeds"] == [0, 4] and data["elapsed_s"] == 12.3
    assert data["kinds"]["join"]["runs"] == 2 and data["runs"][0]["exact"] is True


# -- the evidence of a violation ---------------------------------------------------------------------


def test_evidence_names_the_files_around_a_gap_and_a_duplicate(tmp_path: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from laminar_kafka.chaos.evidence import describe
    from laminar_kafka.cluster.ops.verify import audit, read_output

    def write(name: str, offsets: list[int]) -> None:
        pq.write_table(pa.table({"_topic": ["t"] * len(offsets), "_partition": [0] * len(offsets),
                                 "_offset": pa.array(offsets, pa.int64())}), tmp_path / name)

    write("epoch-0000000001.node-1.boot-a.seq-00000001.parquet", [0, 1, 2, 3])
    write("epoch-0000000002.node-2.boot-b.seq-00000001.parquet", [3, 4])  # 3 again: a duplicate
    write("epoch-0000000003.node-2.boot-b.seq-00000002.parquet", [7, 8])  # 5 and 6 missing
    fs, root = pafs.LocalFileSystem(), str(tmp_path)
    report = audit("t", {0: np.arange(9)}, {0: 9}, read_output(fs, root, "t"))
    assert report.missing == 2 and report.duplicated == 1
    lines = describe(fs, root, "t", report)
    text = "\n".join(lines)
    assert "t:0: 2 missing, first [5, 6]; offset 4 is in " \
           "['epoch-0000000002.node-2.boot-b.seq-00000001.parquet']" in text
    assert "next present offset 7 is in ['epoch-0000000003.node-2.boot-b.seq-00000002.parquet']" in text
    assert "t:0: 1 duplicated, first [3]" in text and "epoch-0000000001.node-1.boot-a" in text


# -- the deployment shape's kinds (--lake s3-rest) ----------------------------------------------------

#: sha256 of the default campaign's plans (kinds and events of seeds 0-39, 40 s): the lake kinds left them
#: as they were; the broker-freeze kind (2026-12-05, a default kind) changed them on purpose. The
#: default campaign (`make chaos SEEDS=20`) must keep drawing exactly these until a kind is added to it.
DEFAULT_PLANS_SHA256 = "02070d1327b2782ba81633a5219928e71cf3e09d0e7cac8f326830a99aeaf067"


def test_the_default_campaign_plans_what_it_planned_before_the_lake_kinds() -> None:
    import hashlib

    blob = json.dumps([[list(p.kinds), [e.to_json() for e in p.events]] for p in (plan_run(s, 40.0) for s in range(40))],
                      sort_keys=True)
    assert hashlib.sha256(blob.encode()).hexdigest() == DEFAULT_PLANS_SHA256
    assert kinds_of_lake("local") == KINDS and not set(LAKE_KINDS) & set(KINDS)
    assert all(not plan_run(s, 40.0).services for s in range(40))


def test_lake_kinds_of_each_lake() -> None:
    s3 = kinds_of_lake("s3-rest")
    assert LAKES == ("local", "s3-rest") and ALL_KINDS == KINDS + LAKE_KINDS + CDC_KINDS
    assert set(LAKE_KINDS) == {"store-restart", "store-unreachable", "catalog-restart", "catalog-unreachable",
                               "catalog-slow"}
    assert set(s3) == (set(KINDS) - {"output-readonly", "output-full"}) | set(LAKE_KINDS)
    assert s3[-len(LAKE_KINDS):] == LAKE_KINDS, "the lake kinds come last in the round-robin"
    for kind in LAKE_KINDS:
        spec = SPECS[kind]
        assert spec.services and not spec.heavy and not spec.topology and not spec.output_mount
        assert spec.budget_s >= 8.0 and spec.summary
    assert not any(SPECS[k].services for k in KINDS)
    with pytest.raises(ValueError, match="unknown lake"):
        kinds_of_lake("hdfs")


def test_twenty_consecutive_seeds_draw_every_kind_of_the_s3_lake() -> None:
    kinds = kinds_of_lake("s3-rest")
    per_run = primaries_per_run(1, len(kinds))
    assert per_run == 2
    for start in (0, 1, 5, 20, 101):
        plans = [plan_run(seed, 40.0, kinds) for seed in range(start, start + EVERY_KIND_WITHIN)]
        assert {k for p in plans for k in p.kinds[:per_run]} == set(kinds)
        drawn = {e.kind for p in plans for e in p.events}
        assert drawn == set(kinds), set(kinds) - drawn


def test_lake_kinds_params_targets_and_holds() -> None:
    """Each lake kind with its seeded parameters; both variants of every binary one occur; an
    unreachable object store outlasts an epoch (and 3 s) whatever the epoch interval."""
    seen: dict[str, set[object]] = {k: set() for k in LAKE_KINDS}
    for epoch_s in (0.5, 1.0, 2.0):
        for seed in range(60):
            plan = plan_run(seed, 60.0, LAKE_KINDS, max_extras=0, epoch_s=epoch_s)
            assert plan.services and (plan.brokers, plan.zk_servers, plan.network) == (1, 1, False)
            assert live_counts(plan.events, 3) == [3] * len(plan.events)
            for event in plan.events:
                if event.kind in ("store-restart", "catalog-restart"):
                    assert event.target == ("store" if event.kind == "store-restart" else "catalog")
                    assert event.hold_s == 0.0 and 0.0 <= event.number("down_s", -1) <= 3.0
                    seen[event.kind].add(event.param("signal"))
                elif event.kind == "store-unreachable":
                    assert event.target == "store"
                    assert event.hold_s >= max(3.0, 3.0 * epoch_s) > epoch_s
                    assert event.hold_s <= max(3.0, 3.0 * epoch_s) + 5.0 * epoch_s + 0.01
                    seen[event.kind].add(event.param("mode"))
                elif event.kind == "catalog-unreachable":
                    assert event.target == "catalog" and 2.0 <= event.hold_s <= 10.0
                    seen[event.kind].add(event.param("mode"))
                else:
                    assert event.target == "catalog" and 4.0 <= event.hold_s <= 10.0
                    assert event.param("latency_ms") in (100, 250, 500, 1000)
                    seen[event.kind].add(event.param("latency_ms"))
    assert seen["store-restart"] == seen["catalog-restart"] == {"kill", "term"}
    assert seen["store-unreachable"] == seen["catalog-unreachable"] == {"blackhole", "reset"}
    assert seen["catalog-slow"] == {100, 250, 500, 1000}


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    duration=st.floats(5.0, 300.0),
    kinds=st.lists(st.sampled_from(kinds_of_lake("s3-rest")), min_size=1, max_size=10, unique=True),
    nodes=st.integers(2, 5),
    epoch_s=st.floats(0.2, 5.0),
)
def test_s3_lake_faults_never_overlap_and_membership_stays_survivable(
    seed: int, duration: float, kinds: list[str], nodes: int, epoch_s: float
) -> None:
    plan = plan_run(seed, duration, kinds, nodes, epoch_s=epoch_s)
    assert plan.events and len(plan.events) <= MAX_EVENTS
    _check_spacing(plan.events)
    assert all(MIN_LIVE <= c <= nodes + 1 for c in live_counts(plan.events, nodes))
    assert all(e.kind in kinds for e in plan.events)
    assert plan.services == any(SPECS[k].services for k in plan.kinds)
    assert json.loads(json.dumps(plan.to_json()))["services"] == plan.services


def test_parse_kinds_knows_the_lake() -> None:
    s3 = kinds_of_lake("s3-rest")
    assert parse_kinds(None, s3) == s3
    assert parse_kinds("catalog-slow,zombie", s3) == ("catalog-slow", "zombie")
    with pytest.raises(ValueError, match="needs --lake s3-rest"):
        parse_kinds("store-restart")
    with pytest.raises(ValueError, match="needs --lake local"):
        parse_kinds("output-full", s3)
    with pytest.raises(ValueError, match="did you mean 'catalog-slow'"):
        parse_kinds("catalog-slwo", s3)
    with pytest.raises(ValueError):
        plan_run(0, 10.0, LAKE_KINDS, epoch_s=0.0)
