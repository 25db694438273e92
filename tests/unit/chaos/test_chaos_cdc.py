"""The CDC chaos campaign's pure parts (``laminar-kafka chaos --pipeline cdc``): the plans of its
kinds (laminar_kafka.chaos.cdc.plan), the change events of its producer
(laminar_kafka.chaos.cdc.producer.ChangeGenerator), the final-state model and the audit's comparison
(laminar_kafka.chaos.cdc.model), its table (laminar_kafka.chaos.cdc.report). No server, no clock."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from laminar_kafka.chaos.campaign import CampaignConfig
from laminar_kafka.chaos.cdc.audit import acked_by_key
from laminar_kafka.chaos.cdc.model import Change, compare, decode_change, final_state
from laminar_kafka.chaos.cdc.pipelines import node_flags
from laminar_kafka.chaos.cdc.producer import CDC_NODE_FLAGS, Burst, ChangeGenerator
from laminar_kafka.chaos.cdc.report import format_cdc_table
from laminar_kafka.chaos.faults import FAULTS
from laminar_kafka.chaos.kinds import ALL_KINDS, CDC_KINDS, KINDS, PIPELINES, SPECS, kinds_of_lake, parse_kinds
from laminar_kafka.chaos.plan import EVERY_KIND_WITHIN, MIN_LIVE, live_counts, plan_run, primaries_per_run
from laminar_kafka.chaos.report import FaultResult, RunResult
from laminar_kafka.cluster.lake.settings import TableFormat

CDC = kinds_of_lake("local", "cdc")


# --------------------------------------------------------------------------------------------------
# Kinds and plans


def test_cdc_kinds_only_in_the_cdc_pipeline() -> None:
    assert PIPELINES == ("append", "cdc")
    assert set(CDC_KINDS) == {"kill-committer", "compact-during-upserts", "hot-keys", "move-hot-partition"}
    assert CDC == CDC_KINDS + KINDS, "the cdc kinds come first in the cdc round-robin"
    assert not set(CDC_KINDS) & set(kinds_of_lake("local")) and not set(CDC_KINDS) & set(kinds_of_lake("s3-rest"))
    assert all(SPECS[k].cdc for k in CDC_KINDS) and not any(SPECS[k].cdc for k in KINDS)
    assert all(not SPECS[k].heavy and not SPECS[k].services for k in CDC_KINDS)
    assert set(FAULTS) == set(ALL_KINDS)
    kinds = {e.kind for s in range(60) for e in plan_run(s, 40.0).events}
    assert not kinds & set(CDC_KINDS), "the default campaign never draws a cdc kind"
    with pytest.raises(ValueError, match="local lake"):
        kinds_of_lake("s3-rest", "cdc")
    with pytest.raises(ValueError, match="unknown pipeline"):
        kinds_of_lake("local", "merge")


def test_parse_kinds_knows_the_pipeline() -> None:
    assert parse_kinds("hot-keys,node-kill", CDC) == ("hot-keys", "node-kill")
    with pytest.raises(ValueError, match="needs --pipeline cdc"):
        parse_kinds("hot-keys", kinds_of_lake("local"))
    with pytest.raises(ValueError, match="did you mean 'hot-keys'"):
        parse_kinds("hot-key", CDC)


def test_cdc_plans_are_deterministic_and_draw_every_kind() -> None:
    assert [plan_run(s, 40.0, CDC).to_json() for s in range(10)] == [plan_run(s, 40.0, CDC).to_json() for s in range(10)]
    assert primaries_per_run(1, len(CDC)) == 2
    first_two = {k for s in range(2) for k in plan_run(s, 40.0, CDC).kinds[:2]}
    assert first_two == set(CDC_KINDS), "two seeds draw every cdc kind"
    for start in (0, 7, 100):
        plans = [plan_run(s, 40.0, CDC) for s in range(start, start + EVERY_KIND_WITHIN)]
        assert {e.kind for p in plans for e in p.events} == set(CDC)


def test_cdc_events_params_targets_and_membership() -> None:
    seen: dict[str, int] = {}
    for seed in range(120):
        plan = plan_run(seed, 40.0, CDC, epoch_s=1.0)
        assert min(live_counts(plan.events, plan.node_count), default=MIN_LIVE) >= MIN_LIVE
        assert max(live_counts(plan.events, plan.node_count), default=0) <= plan.node_count + 1
        for event in plan.events:
            if event.kind not in CDC_KINDS:
                continue
            seen[event.kind] = seen.get(event.kind, 0) + 1
            if event.kind == "kill-committer":
                assert event.target == "node:committer" and event.hold_s == 0.0
                assert 0.0 <= event.number("delay_s", -1) <= 0.4 and isinstance(event.param("restart"), bool)
            elif event.kind == "compact-during-upserts":
                assert event.target == "table:any" and 1 <= event.number("passes") <= 3
            elif event.kind == "hot-keys":
                assert event.target == "keys" and 1 <= event.number("keys") <= 8
                assert 0.5 <= event.number("share") <= 0.9 and 5.0 <= event.hold_s <= 12.0
            else:
                assert event.target == "partition:any" and 5 <= event.number("keys") <= 20
                assert 1.5 <= event.number("lead_s") <= 3.0 and 3.0 <= event.hold_s <= 6.0
    assert set(seen) == set(CDC_KINDS)
    # at the floor, a move's leaver is followed by a join and a killed committer is restarted
    at_floor = 0
    for seed in range(60):
        plan = plan_run(seed, 40.0, CDC, node_count=2)
        before = [plan.node_count, *live_counts(plan.events, plan.node_count)]
        for event, live in zip(plan.events, before, strict=False):
            if live == MIN_LIVE and event.kind in ("move-hot-partition", "kill-committer"):
                at_floor += 1
                assert event.flag("rejoin" if event.kind == "move-hot-partition" else "restart")
    assert at_floor > 5


def test_campaign_config_and_node_flags_of_the_cdc_pipeline() -> None:
    config = CampaignConfig(pipeline="cdc", kinds=CDC, table_format=TableFormat.ICEBERG)
    assert config.plan(0).kinds[:2] == CDC[:2]
    with pytest.raises(ValueError, match="Iceberg"):
        CampaignConfig(pipeline="cdc", kinds=CDC)
    with pytest.raises(ValueError, match="do not apply"):
        CampaignConfig(kinds=("hot-keys",))
    assert node_flags("cdc") == list(CDC_NODE_FLAGS) == ["--format", "debezium-json", "--json-schema",
                                                         "id:int64,seq:int64,val:string", "--upsert-keys", "id"]
    assert node_flags("append") == []


# --------------------------------------------------------------------------------------------------
# The change events


def _records(gen: ChangeGenerator, topic: str, partitions: int, count: int) -> list[tuple[int, int, bytes, bytes | None]]:
    """(partition, offset, key, value) as the producer would write them, round-robin."""
    offsets = [0] * partitions
    out = []
    for n in range(count):
        partition = n % partitions
        key, value = gen.next(topic, partition, n)
        out.append((partition, offsets[partition], key, value))
        offsets[partition] += 1
    return out


def test_change_events_keep_each_key_in_its_partition_and_follow_deletes_by_tombstones() -> None:
    gen = ChangeGenerator(keys_per_partition=5, seed=3, delete_ratio=0.3)
    records = _records(gen, "t", 3, 600)
    assert [r[:2] for r in records] == [r[:2] for r in _records(ChangeGenerator(5, seed=3, delete_ratio=0.3), "t", 3, 600)]
    state: dict[int, bool] = {}
    previous: dict[int, tuple[int, bytes, bytes | None]] = {}
    for partition, _offset, key, value in records:
        ident = json.loads(key)["id"]
        assert gen.partition_of(ident) == partition and ident in gen.keys_of(partition)
        last = previous.get(partition)
        if value is None:  # a tombstone follows its delete, the partition's record before it
            assert last is not None and last[1] == key and json.loads(last[2] or b"{}")["op"] == "d"
        else:
            envelope = json.loads(value)
            op = envelope["op"]
            assert op in ("c", "r", "u", "d") and envelope["source"]["table"] == "t"
            exists = state.get(ident, False)
            assert (op in ("c", "r")) == (not exists)
            if op == "d":
                assert envelope["after"] is None and envelope["before"]["id"] == ident
            else:
                assert envelope["after"]["id"] == ident and set(envelope["after"]) == {"id", "seq", "val"}
                assert (envelope["before"] is None) == (op in ("c", "r"))
            state[ident] = op != "d"
        previous[partition] = (partition, key, value)
    assert gen.ops["d"] > 10 and gen.ops["tombstone"] >= gen.ops["d"] - 3 and gen.ops["u"] > 100


def test_a_burst_gives_hot_keys_their_share() -> None:
    gen = ChangeGenerator(keys_per_partition=100, seed=1)
    gen.burst(Burst((("t", 7), ("t", 150)), share=0.8))
    keys = [json.loads(k)["id"] for _p, _o, k, v in _records(gen, "t", 2, 2000) if v is not None]
    hot = sum(1 for k in keys if k in (7, 150))
    assert 0.7 * len(keys) < hot < 0.9 * len(keys)
    gen.burst(Burst((("other", 7),), share=1.0))  # another topic's key: no share here
    keys = [json.loads(k)["id"] for _p, _o, k, v in _records(gen, "t", 2, 1000) if v is not None]
    assert sum(1 for k in keys if k == 7) < 50


# --------------------------------------------------------------------------------------------------
# The final-state model


def _row(key: int, seq: int, partition: int, offset: int) -> dict[str, object]:
    return {"id": key, "seq": seq, "val": f"k{key}-s{seq}", "_partition": partition, "_offset": offset}


def _change(key: int, partition: int, offset: int, op: str = "u") -> Change:
    return Change(key, partition, offset, op, None if op in ("d", "tombstone") else
                  {"id": key, "seq": offset * 10 + partition, "val": f"k{key}-s{offset * 10 + partition}"})


def test_decode_change_of_every_op() -> None:
    key = b'{"id":4}'
    after = {"id": 4, "seq": 9, "val": "k4-s9"}
    for op in ("c", "r", "u"):
        change = decode_change(key, json.dumps({"before": None, "after": after, "op": op}).encode(), 1, 5)
        assert change == Change(4, 1, 5, op, after) and not change.deletes
    assert decode_change(key, json.dumps({"before": after, "after": None, "op": "d"}).encode(), 1, 6).deletes
    assert decode_change(key, None, 1, 7) == Change(4, 1, 7, "tombstone")
    for bad_key, value, reason in ((None, b"{}", "without a key"), (b'{"k":1}', None, "no integer"),
                                   (key, b'{"op":"x"}', "not a change event"), (key, b'{"op":"u"}', "without")):
        with pytest.raises(ValueError, match=reason):
            decode_change(bad_key, value, 0, 0)


def test_final_state_is_the_last_change_by_offset() -> None:
    changes = [_change(1, 0, 0, "c"), _change(1, 0, 3, "u"), _change(2, 1, 0, "c"), _change(2, 1, 1, "d"),
               _change(2, 1, 2, "tombstone"), _change(3, 1, 3, "c"), _change(3, 1, 4, "d"), _change(3, 1, 5, "c")]
    final = final_state(reversed(changes))  # the input order does not matter, the offsets do
    assert final[1].offset == 3 and not final[1].deletes
    assert final[2].deletes and final[2].op == "tombstone"
    assert final[3].offset == 5 and final[3].op == "c", "deleted, then created again"
    with pytest.raises(ValueError, match="key 1 changed in partitions 0 and 2"):
        final_state([*changes, _change(1, 2, 9)])


def test_generated_topic_replays_to_the_generators_view() -> None:
    gen = ChangeGenerator(keys_per_partition=20, seed=5, delete_ratio=0.25)
    final = final_state(decode_change(k, v, p, o) for p, o, k, v in _records(gen, "t", 4, 3000))
    live = {key: change.after for key, change in final.items() if not change.deletes}
    assert live == {key: row for (topic, key), row in gen._rows.items() if topic == "t"}
    assert 0 < len(live) < 80


# --------------------------------------------------------------------------------------------------
# The audit's comparison


FINAL = final_state([_change(1, 0, 0, "c"), _change(1, 0, 2, "u"), _change(2, 0, 1, "c"), _change(2, 0, 3, "d"),
                     _change(3, 1, 0, "r"), _change(4, 1, 1, "c")])
EXACT = [_row(1, 20, 0, 2), _row(3, 1, 1, 0), _row(4, 11, 1, 1)]


def test_an_exact_table() -> None:
    found = compare(FINAL, EXACT, {1: 2, 2: 3, 3: 0, 4: 1})
    assert found.exact and found.keys == 3 and found.rows == 3 and found.evidence == ()


def test_every_kind_of_evidence() -> None:
    cases: list[tuple[list[dict[str, object]], dict[int, int], str, str]] = [
        ([EXACT[0], EXACT[1]], {}, "missing", "1 key(s) missing, first [4]"),
        ([*EXACT, _row(2, 10, 0, 1)], {}, "undeleted", "1 key(s) undeleted, first [2]"),
        ([_row(1, 0, 0, 0), EXACT[1], EXACT[2]], {}, "stale", "1 key(s) stale, first [1]"),
        ([{**EXACT[0], "val": "other"}, EXACT[1], EXACT[2]], {}, "stale", "stale"),
        ([*EXACT, EXACT[0], EXACT[0]], {}, "duplicated", "1 key(s) duplicated, first [1]"),
        ([*EXACT, _row(99, 1, 0, 0)], {}, "unexpected", "1 key(s) unexpected, first [99]"),
        ([_row(1, 0, 0, 0), EXACT[1], EXACT[2]], {1: 2}, "acked_lost", "acknowledged change lost, first [1]"),
        ([EXACT[0], EXACT[1]], {4: 1}, "acked_lost", "acknowledged change at offset 1"),
    ]
    for rows, acked, field, line in cases:
        found = compare(FINAL, rows, acked, label="t pyiceberg")
        assert not found.exact and getattr(found, field) >= 1, field
        assert any(line in e and e.startswith("t pyiceberg: ") for e in found.evidence), (field, found.evidence)
        others = {"missing", "undeleted", "stale", "duplicated", "unexpected", "acked_lost"} - {field}
        assert field != "duplicated" or found.duplicated == 2, "every row past a key's first"
        if field != "acked_lost":
            assert all(getattr(found, other) == 0 for other in others if other != "acked_lost"), (field, found)


def test_an_acknowledged_change_superseded_or_deleted_later_is_not_lost() -> None:
    assert compare(FINAL, EXACT, {1: 0, 2: 1, 4: 1}).exact  # key 1 shows a later change, key 2 deleted later
    assert compare(FINAL, EXACT, {2: 3}).exact  # the acknowledged change is the delete


def test_acknowledged_offsets_map_to_keys_through_the_topic() -> None:
    changes = [_change(1, 0, 0, "c"), _change(2, 0, 1, "c"), _change(1, 0, 2, "u"), _change(3, 1, 0, "c")]
    producer = cast(Any, SimpleNamespace(acked={"t:0": [0, 1, 2, 7], "t:1": [0]}))
    acked, absent, lines = acked_by_key(changes, producer, "t", 2)
    assert acked == {1: 2, 2: 1, 3: 0}
    assert absent == 1 and lines == ["t:0: 1 acknowledged record(s) not in the topic, first [7]"]


# --------------------------------------------------------------------------------------------------
# The table


def test_cdc_table() -> None:
    ok = RunResult(seed=0, kinds=("hot-keys", "node-kill"), records=5000, keys=1800, audited=True, caught_up=True,
                   faults=[FaultResult("hot-keys", "keys", 2.0, recovery_s=1.5),
                           FaultResult("node-kill", "node:any", 9.0, recovery_s=4.25)])
    bad = RunResult(seed=1, kinds=("kill-committer",), records=4000, keys=1700, stale=3, undeleted=1, audited=True,
                    caught_up=True, faults=[FaultResult("kill-committer", "node:committer", 3.0, injected_at_s=3.1)])
    assert ok.ok and not bad.exact
    lines = format_cdc_table([ok, bad], CDC, recovery_timeout_s=90.0).splitlines()
    assert lines[0].split() == ["kind", "runs", "faults", "changes", "keys", "missing", "undeleted", "stale",
                                "duplicated", "failed", "worst", "recovery", "s"]
    assert [line.split()[0] for line in lines[2:5]] == ["kill-committer", "hot-keys", "node-kill"], "the kinds' order"
    assert lines[2].split() == ["kill-committer", "1", "1", "4000", "1700", "0", "1", "3", "0", "1", ">90", "(1x)"]
    assert lines[3].split() == ["hot-keys", "1", "1", "5000", "1800", "0", "0", "0", "0", "0", "1.5"]
    assert lines[-1].split() == ["all", "2", "3", "9000", "3500", "0", "1", "3", "0", "1", ">90", "(1x)"]


def test_cli_refuses_a_cdc_campaign_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    from laminar_kafka.cli.main import main

    assert main(["chaos", "--seeds", "1", "--kinds", "hot-keys"]) == 2
    assert "needs --pipeline cdc" in capsys.readouterr().err
    assert main(["chaos", "--seeds", "1", "--pipeline", "cdc", "--lake", "s3-rest"]) == 2
    assert "local lake" in capsys.readouterr().err
    assert main(["chaos", "--seeds", "1", "--pipeline", "cdc", "--table-format", "parquet"]) == 2
    assert "upserts into Iceberg tables" in capsys.readouterr().err
    assert main(["chaos", "--seeds", "1", "--pipeline", "cdc", "--keys", "3"]) == 2
    assert "--keys >= --partitions" in capsys.readouterr().err


def test_both_readers_read_the_table_the_audit_compares(tmp_path: Path) -> None:
    """The audit's readers on a local Iceberg table (SQLite catalog, no server): pyiceberg and DuckDB
    give the same rows, and the comparison sees a key a table lost."""
    import pyarrow as pa

    from laminar_kafka.chaos.cdc.audit import duckdb_rows, table_rows
    from laminar_kafka.chaos.lake import local_lake
    from laminar_kafka.cluster.lake.settings import table_name_of

    lake = local_lake(tmp_path, tmp_path / "output", TableFormat.ICEBERG, "chaos-x-s0")
    assert table_rows(lake, "chaos-x-s0.t0") == ([], None), "no table yet"
    catalog = lake.catalog()
    namespace = lake.iceberg_settings().namespace
    catalog.create_namespace_if_not_exists(namespace)
    rows = pa.Table.from_pylist(EXACT, schema=pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("val", pa.string()),
                                                         ("_partition", pa.int32()), ("_offset", pa.int64())]))
    table = catalog.create_table((namespace, table_name_of("chaos-x-s0.t0")), rows.schema)
    table.append(rows)
    read, metadata = table_rows(lake, "chaos-x-s0.t0")
    assert metadata is not None and sorted(read, key=lambda r: int(cast(int, r["id"]))) == EXACT
    assert sorted(duckdb_rows(metadata), key=lambda r: int(r["id"])) == EXACT
    assert compare(FINAL, read).exact
    table.delete("id == 4")
    read, metadata = table_rows(lake, "chaos-x-s0.t0")
    assert metadata is not None
    assert compare(FINAL, read).missing == 1 and compare(FINAL, duckdb_rows(metadata)).missing == 1
